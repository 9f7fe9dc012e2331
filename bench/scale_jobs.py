"""The scale comparison (issue 32 item 2): stores written by storegen with small bodies (16-64 B: the message
count, not the bytes, is the load) at several sizes and queue counts; `jobs.rebuild`, `jobs.verify` of its output
and, with DLedger twins, `jobs.convert`, each as a whole process with the operator's defaults, the stores in a
different order each round. Per run: the wall time, the rate after start-up (messages / the report's `total_s`)
and the peak resident memory (VmHWM) of each kind of process: the driver's Python, its JVM, the largest Python
worker (`ProcessPeaks`). Printed: the medians per store and job, and the largest store's rate and peaks against
the smallest's (the issue's targets: rate >= 0.8x, every peak <= 1.5x)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from storegen.synth import StoreSpec

from .memory import PROC, _children_map, _is_python, _status_kib
from .report import progress
from .stages import verify_view
from .stores import ensure_store

REPO = Path(__file__).resolve().parent.parent
DEFAULT_STORES = "4000000:8:8,16000000:100:120,64000000:100:120"  # messages:topics:queues per topic
BODY = (16, 64)
KINDS = ("driver", "jvm", "worker")
RATE_TARGET, PEAK_TARGET = 0.8, 1.5


def parse_stores(text: str) -> list[tuple[int, int, int]]:
    """`messages:topics:queues,...` as (messages, topics, queues per topic), smallest first."""
    out = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) != 3 or not all(f.isdigit() and int(f) > 0 for f in fields):
            raise ValueError(f"--scale-stores: {part!r} is not messages:topics:queues (e.g. 16000000:100:120)")
        out.append(tuple(int(f) for f in fields))
    return sorted(out)


def stores(text: str, spec: StoreSpec, root: Path, convert_up_to: int, regenerate: bool) -> list[ScaleStore]:
    """The stores `text` names (parse_stores), shaped from the bench's `spec` with small bodies, and the DLedger
    twins of those of up to `convert_up_to` messages; written first where missing (untimed)."""
    out = []
    for messages, topics, queues in parse_stores(text):
        shape = dataclasses.replace(spec, messages=messages, topics=topics, queues=queues, body_min=BODY[0],
                                    body_max=BODY[1], dledger=False, lmq_share=0.0, transaction_share=0.0)
        twin = ensure_store(root, dataclasses.replace(shape, dledger=True), regenerate) \
            if messages <= convert_up_to else None
        out.append(ScaleStore(ensure_store(root, shape, regenerate), twin, messages, topics * queues))
    return out


class ProcessPeaks:
    """Context manager: the highest VmHWM (MiB) of each kind of process below `pid` (itself the driver), polled
    every `interval` s: a process's VmHWM keeps its own peak, the poll only has to see it before it exits."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.peaks = dict.fromkeys(KINDS, 0)
        self.fds = dict.fromkeys(KINDS, 0)  # the most descriptors one process of the kind held open at a poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ProcessPeaks":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def poll(self) -> None:
        for pid in _tree(self.pid):
            kind = "driver" if pid == self.pid else _kind(pid)
            mib = _hwm_mib(pid)
            if kind and mib:
                self.peaks[kind] = max(self.peaks[kind], mib)
                self.fds[kind] = max(self.fds[kind], _fd_count(pid))


def _tree(root: int) -> list[int]:
    """`root` and every process below it."""
    children = _children_map()
    todo, found = [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _kind(pid: int) -> str | None:
    try:
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return "jvm" if os.path.basename(cmdline.split(b"\0", 1)[0]) == b"java" else "worker" if _is_python(cmdline) \
        else None


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return 0


def _hwm_mib(pid: int) -> int:
    return (_status_kib(pid, "VmHWM") or 0) // 1024


def run_job(job: str, argv: list[str]) -> dict:
    """`python -m jobs.<job> ARGV --json --quiet` as a whole process: wall, the report's total_s and records, and
    the peak per kind of process."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", f"jobs.{job}", *argv, "--json", "--quiet"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ProcessPeaks(proc.pid) as watch:
        stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"jobs.{job} exited {proc.returncode}: {stderr.strip()[-600:]}")
    report = json.loads(stdout)
    if report.get("status", "consistent") != "consistent":
        raise RuntimeError(f"jobs.{job}: {report['status']}, {report.get('findings_total')} findings")
    total = (report.get("timings") or {}).get("total_s", report.get("seconds"))  # verify: `seconds`
    records = report.get("message_records") or (report.get("commitlog") or {}).get("message_records")
    return {"wall_s": round(wall, 3), "total_s": total, "records": records,
            "bytes_decoded": (report.get("since") or {}).get("bytes_decoded", report.get("bytes_read")),
            **{f"{k}_peak_mib": v for k, v in watch.peaks.items()}, **{f"{k}_fds": v for k, v in watch.fds.items()}}


@dataclass(frozen=True)
class ScaleStore:
    """A store of the comparison: its plain path, its DLedger twin's (None: no convert), what it holds."""

    path: Path
    twin: Path | None
    records: int
    queues: int


@dataclass
class ScaleJobRuns:
    """Every run per (store records, job)."""

    stores: list[ScaleStore]
    runs: dict[str, list[dict]] = field(default_factory=dict)

    def add(self, store: ScaleStore, job: str, run: dict) -> None:
        self.runs.setdefault(f"{store.records}/{job}", []).append(run)

    def medians(self, store: ScaleStore, job: str) -> dict | None:
        runs = self.runs.get(f"{store.records}/{job}")
        if not runs:
            return None
        out = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "total_s")}
        out["rate"] = statistics.median(store.records / r["total_s"] for r in runs)
        out.update({f"{k}_peak_mib": max(r[f"{k}_peak_mib"] for r in runs) for k in KINDS})
        return out

    def ratios(self, job: str) -> dict | None:
        """The median rate and peaks of the largest store the job ran on over the smallest's (None: fewer than
        two stores)."""
        ran = [m for m in (self.medians(s, job) for s in self.stores) if m is not None]
        if len(ran) < 2:
            return None
        small, large = ran[0], ran[-1]
        out = {"rate": round(large["rate"] / small["rate"], 2)}
        out.update({k: round(large[f"{k}_peak_mib"] / small[f"{k}_peak_mib"], 2) for k in KINDS
                    if small[f"{k}_peak_mib"] and large[f"{k}_peak_mib"]})
        return out

    def to_dict(self) -> dict:
        return {"stores": [{"path": str(s.path), "twin": str(s.twin) if s.twin else None, "records": s.records,
                            "queues": s.queues} for s in self.stores],
                "runs": self.runs, "ratios_largest_over_smallest": {j: self.ratios(j) for j in JOBS}}


JOBS = ("rebuild", "verify", "convert")


def _checked(store: ScaleStore, job: str, run: dict) -> dict:
    if run["records"] != store.records:
        raise RuntimeError(f"jobs.{job} of {store.path} read {run['records']} records, not {store.records}")
    return run


def _round(store: ScaleStore, root: Path, split_size: int, runs: ScaleJobRuns) -> None:
    """rebuild, verify of its output and convert of the twin, for one store."""
    out, view = root / "scale-rebuilt", root / "scale-verify-store"
    shutil.rmtree(out, ignore_errors=True)
    conf = ["--broker-config", str(store.path / "broker.conf"), "--split-size", str(split_size)]
    runs.add(store, "rebuild", _checked(store, "rebuild", run_job("rebuild", ["--store", str(store.path),
                                                                             "--out", str(out), *conf])))
    verify_view(store.path, out, view)
    runs.add(store, "verify", _checked(store, "verify", run_job("verify", ["--store", str(view),
                                                                          "--work-dir", str(root), *conf])))
    shutil.rmtree(view, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    if store.twin is not None:
        twin_conf = ["--broker-config", str(store.twin / "broker.conf"), "--split-size", str(split_size)]
        runs.add(store, "convert", _checked(store, "convert", run_job("convert", ["--store", str(store.twin),
                                                                                 "--out", str(out), *twin_conf])))
        shutil.rmtree(out, ignore_errors=True)


def side_by_side(stores: list[ScaleStore], root: Path, rounds: int, split_size: int) -> ScaleJobRuns:
    """`rounds` rounds over the stores, the order reversed every other round."""
    runs = ScaleJobRuns(stores)
    started = time.monotonic()
    for i in range(rounds):
        for j, store in enumerate(stores if i % 2 == 0 else stores[::-1]):
            progress(f"scale ({store.records:,} messages, {store.queues:,} queues)", i * len(stores) + j,
                     rounds * len(stores), started)
            _round(store, root, split_size, runs)
    return runs


def table(runs: ScaleJobRuns) -> str:
    """Medians per store and job, then the ratios against the targets."""
    lines = [f"Scale: whole processes with the operator's defaults, {BODY[0]}-{BODY[1]} B bodies; medians of "
             f"{max((len(r) for r in runs.runs.values()), default=0)} rounds (the stores' order alternating); rate = "
             f"messages / the report's total_s; peaks = the highest VmHWM of each kind of process",
             "| store | job | wall | after start-up | rate | driver peak | JVM peak | worker peak |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for store in runs.stores:
        for job in JOBS:
            m = runs.medians(store, job)
            if m is not None:
                lines.append(f"| {store.records / 1e6:g} M / {store.queues:,} queues | {job} | {m['wall_s']:.1f} s | "
                             f"{m['total_s']:.1f} s | {m['rate'] / 1e6:.2f} M/s | "
                             + " | ".join(f"{m[f'{k}_peak_mib']} MB" if m[f"{k}_peak_mib"] else "- (none)"
                                          for k in KINDS) + " |")
    for job in JOBS:
        r = runs.ratios(job)
        if r is not None:
            peaks = ", ".join(f"{k} {r[k]:.2f}x" for k in KINDS if k in r)
            ok = r["rate"] >= RATE_TARGET and all(r[k] <= PEAK_TARGET for k in KINDS if k in r)
            lines.append(f"{job}: largest / smallest store it ran on: rate {r['rate']:.2f}x (target >= {RATE_TARGET}), peaks "
                         f"{peaks} (target <= {PEAK_TARGET}x): {'within' if ok else 'OUTSIDE'} the targets")
    return "\n".join(lines)
