"""Scale-out measured, not only modelled (issue 32 item 6): `jobs.rebuild` of the bench store submitted with
spark-submit (conf/spark-defaults.conf, the packaged code and environment: `make package`) to a standalone
cluster on 127.0.0.1 whose one worker has 1 core, and to one whose worker has 2: both clusters up side by side,
the submits alternating. Per stage (decode, build, the job after start-up, the whole process) the measured
speed-up of 2 cores over 1 beside the model's prediction from the 1-core runs: what a stage spends outside its
tasks stays, its tasks' time spreads over the cores, never below its longest task (`predict`)."""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from .loopback import cluster_env, loopback_cluster, submit_argv
from .report import progress

REPO = Path(__file__).resolve().parent.parent
PACKAGE = (REPO / "dist" / "reput.zip", REPO / "dist" / "reput-env.tar.gz")
CORES = (1, 2)

# stage -> (its wall time in the rebuild report's timings, the sum of its tasks' times, its longest task)
STAGES = {"decode": ("decode_s", ("decode_task_s",), "longest_decode_task_s"),
          "build": ("build_s", ("consumequeue_task_s", "index_task_s"),
                    ("longest_consumequeue_task_s", "longest_index_task_s"))}


@dataclass
class ScaleOutRuns:
    """Every submit's whole-process wall time and report timings, per worker core count."""

    store: str
    records: int
    runs: dict[int, list[dict]] = field(default_factory=lambda: {c: [] for c in CORES})

    def median(self, cores: int, key: str) -> float:
        return statistics.median(r[key] for r in self.runs[cores])

    def to_dict(self) -> dict:
        return {"store": self.store, "records": self.records, "runs": {str(c): r for c, r in self.runs.items()},
                "speedups": speedups(self)}


def _longest(timings: dict, keys) -> float:
    return max(timings.get(k, 0.0) for k in ((keys,) if isinstance(keys, str) else keys))


def predict(timings: dict, wall: float, cores: int) -> dict[str, float]:
    """The model's time per stage at `cores` from one 1-core run: the stage's time outside its tasks stays, its
    tasks' time is divided by the cores but not below its longest task; the job's rest (planning, publishing)
    and the process's start-up stay."""
    out = {}
    for stage, (wall_key, task_keys, longest_keys) in STAGES.items():
        tasks = sum(timings.get(k, 0.0) for k in task_keys)
        outside = max(timings[wall_key] - tasks, 0.0)
        out[stage] = outside + max(_longest(timings, longest_keys), tasks / cores)
    rest = timings["total_s"] - sum(timings[w] for w, _, _ in STAGES.values())
    out["job"] = sum(out[s] for s in STAGES) + rest
    out["process"] = out["job"] + wall - timings["total_s"]
    return out


def speedups(runs: ScaleOutRuns) -> dict[str, dict[str, float]]:
    """Per stage: the medians at 1 and 2 cores, the measured speed-up and the model's (from each 1-core run's
    prediction for 2 cores, their median)."""
    keys = {"decode": "decode_s", "build": "build_s", "job": "total_s", "process": "wall_s"}
    out = {}
    for stage, key in keys.items():
        one, two = runs.median(1, key), runs.median(2, key)
        model = statistics.median(r[key] / predict(r, r["wall_s"], 2)[stage] for r in runs.runs[1])
        out[stage] = {"1_core_s": round(one, 3), "2_cores_s": round(two, 3),
                      "measured": round(one / two, 2) if two else None, "model": round(model, 2)}
    return out


def submit_rebuild(url: str, store: Path, out: Path, split_size: int) -> dict:
    """One spark-submit of jobs.rebuild to the cluster at `url`: the report's timings plus the process's wall."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    done = subprocess.run(submit_argv(url, "rebuild", "--store", str(store), "--broker-config",
                                      str(store / "broker.conf"), "--out", str(out), "--split-size", str(split_size),
                                      "--json", "--quiet"),
                          cwd=REPO, env=cluster_env(), capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"spark-submit jobs/rebuild.py exited {done.returncode}: {done.stderr.strip()[-600:]}")
    report = json.loads(done.stdout)
    shutil.rmtree(out, ignore_errors=True)
    return {**report["timings"], "wall_s": round(wall, 3), "records": report["message_records"]}


def side_by_side(store: Path, root: Path, rounds: int, split_size: int, records: int) -> ScaleOutRuns:
    """`rounds` submits to each cluster, alternating which goes first."""
    missing = [p for p in PACKAGE if not p.exists()]
    if missing:
        raise RuntimeError(f"{missing[0]} is missing: run `make package` first (the cluster's executors run the "
                           f"packaged code and environment)")
    runs = ScaleOutRuns(str(store), records)
    with ExitStack() as stack:
        urls = {}
        for cores in CORES:
            where = root / f"scaleout-{cores}core"
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            urls[cores] = stack.enter_context(loopback_cluster(where, cores, memory="4g"))[0]
        started, done = time.monotonic(), 0
        for i in range(rounds):
            for cores in (CORES if i % 2 == 0 else CORES[::-1]):
                progress(f"scale-out ({cores} worker core{'s' if cores > 1 else ''})", done, rounds * len(CORES),
                         started)
                run = submit_rebuild(urls[cores], store, root / "scaleout-out", split_size)
                if run["records"] != records:
                    raise RuntimeError(f"the rebuild on {cores} core(s) read {run['records']} records, not {records}")
                runs.runs[cores].append(run)
                done += 1
    return runs


def table(runs: ScaleOutRuns) -> str:
    """The speed-ups, measured and modelled, one row per stage."""
    lines = [f"Scale-out on the loopback cluster: jobs.rebuild by spark-submit, one worker of 1 core against one of 2 "
             f"({runs.records:,} records; medians of {len(runs.runs[1])} runs each, alternating)",
             "| stage | 1 core | 2 cores | speed-up measured | model's prediction |", "| --- | ---: | ---: | ---: | ---: |"]
    for stage, s in speedups(runs).items():
        lines.append(f"| {stage} | {s['1_core_s']:.2f} s | {s['2_cores_s']:.2f} s | {s['measured']:.2f}x | "
                     f"{s['model']:.2f}x |")
    lines.append("model: a stage's time outside its tasks stays; its tasks' time is divided by the cores, never below "
                 "its longest task (bench/scaleout.py predict)")
    return "\n".join(lines)
