"""Side by side with the broker: RocketMQ 4.9.8's own rebuild (a compiled oracle build, see
../shared/oracle/) and `jobs.rebuild` as whole processes, interleaved in one run, with the ratios.

Each pair runs reput then the broker (or the other way round on odd pairs), each on a store whose
commitlog/ holds hard links to the bench store's segments, with the page cache warmed; the other load
on the machine is measured per run. The first pair's outputs are compared file by file.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.pipeline.io.file_id import sha256_file

from .compare import compare_stores
from .cpu import CpuWatch
from .report import progress
from .stages import warm_page_cache

JAVA_OPENS = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
              "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED"]
BROKER_FIGURES = ("load_s", "dispatch_s", "flush_s", "end_to_end_s", "process_wall_s")
REPUT_FIGURES = ("decode_s", "build_s", "total_s", "process_wall_s")


class BrokerRunError(RuntimeError):
    """The broker build, or a reput job timed beside it, could not run the bench store."""


@dataclass
class SideBySide:
    """Every run of both, their medians and the ratios reput / broker."""

    broker: list[dict] = field(default_factory=list)
    reput: list[dict] = field(default_factory=list)
    identical: bool | None = None
    outputs: str = "not compared"  # the comparison's one-line summary

    def medians(self, runs: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
        return {k: round(statistics.median(r[k] for r in runs), 3) for k in keys if runs and all(k in r for r in runs)}

    def ratios(self) -> dict[str, float]:
        b, r = self.medians(self.broker, BROKER_FIGURES), self.medians(self.reput, REPUT_FIGURES)
        out = {}
        if "process_wall_s" in b and "process_wall_s" in r:
            out["whole_process"] = round(r["process_wall_s"] / b["process_wall_s"], 3)
        if "end_to_end_s" in b and "total_s" in r:
            out["after_start_up_vs_load_dispatch_flush"] = round(r["total_s"] / b["end_to_end_s"], 3)
        return out

    def to_dict(self) -> dict:
        return {"broker_runs": self.broker, "reput_runs": self.reput, "outputs_identical": self.identical,
                "outputs": self.outputs,
                "broker_median_s": self.medians(self.broker, BROKER_FIGURES),
                "reput_median_s": self.medians(self.reput, REPUT_FIGURES), "ratios_reput_over_broker": self.ratios()}


def _linked_store(store: Path, work: Path) -> Path:
    """A fresh store dir for the broker whose commitlog/ holds hard links to the bench segments."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "commitlog").mkdir(parents=True)
    for seg in sorted((store / "commitlog").iterdir()):
        os.link(seg, work / "commitlog" / seg.name)
    return work


def kit_classpath(build: Path) -> str:
    """An oracle build's classpath.txt with relative entries made absolute: build.sh writes them relative to
    the directory it ran in (the build's parent, e.g. `build-plain/classes`), not to where the bench runs."""
    try:
        entries = (build / "classpath.txt").read_text().strip().split(":")
    except OSError as e:
        raise BrokerRunError(f"{build}: no oracle build here ({e.strerror}: classpath.txt)") from None
    out = []
    for entry in entries:
        path = Path(entry)
        if not path.is_absolute():
            path = next((c for c in (build.parent / entry, build / entry, Path.cwd() / entry) if c.exists()),
                        build.parent / entry)
        out.append(str(path))
    return ":".join(out)


def kit_cwd(build: Path) -> Path:
    """The directory an oracle build's relative classpath entries resolve against (the kit's shell scripts
    `cat` classpath.txt as it is, so they must run there): the build's parent (build.sh writes
    `build-plain/classes`), the build itself, or else the current directory."""
    try:
        first = (build / "classpath.txt").read_text().strip().split(":")[0]
    except OSError as e:
        raise BrokerRunError(f"{build}: no oracle build here ({e.strerror}: classpath.txt)") from None
    if Path(first).is_absolute():
        return build.resolve()
    return next((c.resolve() for c in (build.parent, build) if (c / first).exists()), Path.cwd())


def _raise_open_files() -> None:
    """Soft open-file limit up to the hard one, as the kit's scripts do: 4.9.8 keeps one open channel per
    consume-queue file (an LMQ store has thousands)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_broker(build: Path, store: Path, work: Path) -> dict:
    """One timed broker rebuild: RebuildTimer's JSON figures plus the process wall time."""
    classpath = kit_classpath(build)
    _linked_store(store, work)
    env = dict(os.environ, ROCKETMQ_LOG=str(work) + ".log")
    cmd = ["java", "-Xms1g", "-Xmx1g", *JAVA_OPENS, "-Duser.timezone=UTC", "-Drocketmq.client.logUseSlf4j=true",
           "-cp", classpath, "RebuildTimer", str(work), str(store / "broker.conf")]
    with CpuWatch() as cpu:
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=_raise_open_files)
        wall = time.monotonic() - t0
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
    if done.returncode != 0 or line is None:
        raise BrokerRunError(f"broker run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    figures = {k: v for k, v in json.loads(line).items() if isinstance(v, (int, float))}
    figures["process_wall_s"] = round(wall, 3)
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    return figures


def run_job(job: str, store: Path, out: Path | None, master: str, split_size: int, extra: tuple[str, ...] = ()) -> dict:
    """One timed `python -m jobs.<job>` whole process of `store` into `out` (None: no --out, e.g. recover
    --in-place given in `extra`; plus `extra` flags): its report's timings, the process wall time and the other
    processes' load during it."""
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", f"jobs.{job}", "--store", str(store), "--broker-config", str(store / "broker.conf"),
           *(["--out", str(out)] if out is not None else []), "--master", master, "--split-size", str(split_size),
           "--json", *extra]
    with CpuWatch() as cpu:
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t0
    if done.returncode != 0:
        raise BrokerRunError(f"jobs.{job} failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    report = json.loads(done.stdout)
    figures = {k: v for k, v in report.get("timings", {}).items() if isinstance(v, (int, float))}
    figures["process_wall_s"] = round(wall, 3)
    if isinstance(report.get("plan"), dict) and "new_log_bytes" in report["plan"]:  # convert: its new commit log
        figures["new_log_bytes"] = report["plan"]["new_log_bytes"]
    engine = report.get("engine") or {}
    figures["engine"] = f"{engine.get('name', 'spark')} ({engine.get('reason', 'a job without --engine')})"
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    return figures


def engines(runs: list[dict]) -> list[str]:
    """The engines the runs' reports name (with why), each once, in order."""
    return list(dict.fromkeys(r["engine"] for r in runs if r.get("engine")))


def run_reput(store: Path, out: Path, master: str, split_size: int) -> dict:
    """One timed `python -m jobs.rebuild` whole process (run_job)."""
    return run_job("rebuild", store, out, master, split_size)


def _digests(root: Path) -> tuple[dict[str, str], list[str]]:
    """sha256 of every consume-queue file by path, and of the index files in name order (the broker
    names index files by its clock, so they are compared by content in order)."""
    cq = {p.relative_to(root).as_posix(): sha256_file(p)
          for p in sorted((root / "consumequeue").rglob("*")) if p.is_file()}
    return cq, [sha256_file(p) for p in sorted((root / "index").iterdir()) if p.is_file()]


def side_by_side(build: Path, store: Path, root: Path, pairs: int, master: str, split_size: int,
                 label: str = "side by side") -> SideBySide:
    """`pairs` interleaved runs of both (alternating which goes first), progress with an ETA."""
    result = SideBySide()
    started = time.monotonic()
    total = 2 * pairs
    for i in range(pairs):
        order = ("reput", "broker") if i % 2 == 0 else ("broker", "reput")
        for j, who in enumerate(order):
            done = 2 * i + j
            progress(f"{label} ({who})", done, total, started)
            warm_page_cache(store)
            if who == "broker":
                result.broker.append(run_broker(build, store, root / "broker-store"))
            else:
                result.reput.append(run_reput(store, root / "reput-out", master, split_size))
        if i == 0:
            comparison = compare_stores(root / "broker-store", root / "reput-out", ("consumequeue", "index"))
            result.identical, result.outputs = comparison.identical, comparison.summary()
    shutil.rmtree(root / "broker-store", ignore_errors=True)
    shutil.rmtree(root / "reput-out", ignore_errors=True)
    return result


def table(s: SideBySide, title: str = "side by side with RocketMQ 4.9.8") -> str:
    """The printed comparison: medians of each figure, the ratios and the other load."""
    b, r = s.medians(s.broker, BROKER_FIGURES), s.medians(s.reput, REPUT_FIGURES)
    load = [x["other_load_cores"] for x in s.broker + s.reput if x.get("other_load_cores") is not None]
    lines = [f"{title} ({len(s.broker)} interleaved pairs, medians; outputs {s.outputs}; "
             f"other load {min(load, default=0):.2f}-{max(load, default=0):.2f} cores)"]
    for k in BROKER_FIGURES:
        if k in b:
            lines.append(f"  broker {k:<34}{b[k]:>9.2f}")
    lines += [f"  jobs.rebuild engine: {e}" for e in engines(s.reput)]
    for k in REPUT_FIGURES:
        if k in r:
            lines.append(f"  jobs.rebuild {k:<28}{r[k]:>9.2f}")
    for k, v in s.ratios().items():
        lines.append(f"  ratio reput/broker {k:<22}{v:>9.2f}")
    return "\n".join(lines)
