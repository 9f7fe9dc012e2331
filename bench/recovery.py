"""Recovery side by side with the broker: RocketMQ 4.9.8's own crash recovery and `jobs.recover --out`
of the same crashed store, as whole processes, interleaved, outputs compared byte for byte.

The crashed store is made the way the oracle kit makes it (`../shared/oracle/sidebyside/make_crash.py`:
consume queues and index written by 4.9.8 itself from a commit log cut ~4 MB short, an `abort`, a lagging
checkpoint and a torn last record), next to the bench store (`ROOT/crash-<store>`, its sealed segments
hard links into the bench store: nothing writes them) and reused while those links still point at the
bench store's segments. The broker's recovery is the kit's `run_broker_store.sh` (a fresh copy of
everything but the sealed segments, synced, then RebuildTimer: `load_s` is the recovery, `dispatch_s`
what start() still dispatches, `flush_s` the msync); reput's is `python -m jobs.recover --out`. The
kit's scripts run from the directory the build's relative classpath entries resolve against.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .broker import BrokerRunError, engines, kit_cwd, run_job
from .compare import StoreComparison, compare_stores
from .cpu import CpuWatch
from .report import progress
from .stages import warm_page_cache

DEFAULT_KIT = Path(__file__).resolve().parents[1].parent / "shared" / "oracle"  # ../shared/oracle of the repo
BROKER_FIGURES = ("load_s", "dispatch_s", "flush_s", "end_to_end_s", "process_wall_s")
REPUT_FIGURES = ("validate_s", "consumequeue_plan_s", "index_plan_s", "write_s", "total_s", "process_wall_s")


@dataclass(frozen=True)
class CrashedStore:
    """A crashed store made from a bench store, and what make_crash.py said about the crash point."""

    path: Path
    source: Path
    records: int
    data_bytes: int
    crash: dict


def parse_kit_output(stdout: str) -> dict:
    """The numbers of the JSON lines a kit script prints (RebuildTimer's, then `process_wall_s`), merged."""
    figures: dict = {}
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                figures.update({k: v for k, v in json.loads(line).items() if isinstance(v, (int, float))})
            except ValueError:
                continue
    return figures


def _links_hold(crashed: Path, store: Path) -> bool:
    """Whether every sealed segment of `crashed` is still a hard link to the bench store's segment."""
    segs = sorted((store / "commitlog").iterdir()) if (store / "commitlog").is_dir() else []
    if not segs or not (crashed / "commitlog").is_dir():
        return False
    for seg in segs[:-1]:
        mine = crashed / "commitlog" / seg.name
        if not mine.exists() or mine.stat().st_ino != seg.stat().st_ino:
            return False
    return (crashed / "commitlog" / segs[-1].name).exists()


KIT_LAG_BYTES = 4 << 20  # make_crash.py's default dispatch lag (--lag-bytes)


def crash_name(store: Path, lag_bytes: int) -> str:
    """The crashed store's directory name: the kit's default lag keeps the plain name, another lag is named."""
    return f"crash-{store.name}" + ("" if lag_bytes == KIT_LAG_BYTES else f"-lag{lag_bytes >> 20}mib")


def crashed_store(kit: Path, build: Path, store: Path, root: Path, records: int, data_bytes: int,
                  lag_bytes: int = KIT_LAG_BYTES) -> CrashedStore:
    """The crashed store made from `store` with the kit's make_crash.py, consume queues and index lagging the
    commit log by ~lag_bytes (reused while it matches)."""
    out = root / crash_name(store, lag_bytes)
    marker = root / f"{out.name}.json"
    if marker.exists() and _links_hold(out, store):
        crash = json.loads(marker.read_text())
    else:
        marker.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        script = kit / "sidebyside" / "make_crash.py"
        if not script.exists():
            raise BrokerRunError(f"{script}: no such file (the oracle kit's make_crash.py; see --oracle-kit)")
        print(f"[bench] making the crashed store {out} with the kit's make_crash.py (a broker rebuild of the "
              f"store cut short; not timed) ...", flush=True)
        done = subprocess.run([sys.executable, str(script), str(store), str(build.resolve()), str(out),
                               "--lag-bytes", str(lag_bytes)],
                              cwd=kit_cwd(build), capture_output=True, text=True)
        line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
        if done.returncode != 0 or line is None:
            shutil.rmtree(out, ignore_errors=True)
            raise BrokerRunError(f"make_crash.py failed (exit {done.returncode}): "
                                 f"{(done.stderr or done.stdout).strip()[-400:]}")
        crash = json.loads(line)
        Path(str(out) + ".lagrun.log").unlink(missing_ok=True)  # the kit's broker log of its rebuild
        marker.write_text(json.dumps(crash))
    _sparse_last_segment(out)
    return CrashedStore(out, store, records, data_bytes, crash)


def _sparse_last_segment(crashed: Path) -> None:
    """The crashed store's last segment sparse past its data again, as a killed broker leaves it (without
    warmMapedFileEnable it maps the file and never writes the tail; make_crash.py's shutil.copyfile fills the
    holes with written zeros). Same bytes; a new file replaces the old name (the source store's inode is left
    alone); done once, named on stdout."""
    from jobs.pipeline.io.copy import copy_range

    segments = sorted((crashed / "commitlog").iterdir())
    if not segments:
        return
    last = segments[-1]
    st = last.stat()
    if st.st_blocks * 512 < st.st_size:  # holes already
        return
    tmp = last.with_name(last.name + ".sparse")
    copy_range(str(last), str(tmp), zero_holes=True)
    os.replace(tmp, last)
    print(f"[bench] {last}: made sparse past its data again, as the broker leaves its last segment "
          f"(make_crash.py's copy wrote the zeros)", flush=True)


def run_broker_recovery(kit: Path, build: Path, crashed: Path, work: Path) -> dict:
    """One timed broker recovery of a fresh copy of the crashed store: the kit's run_broker_store.sh."""
    script = kit / "sidebyside" / "run_broker_store.sh"
    cmd = ["bash", str(script), str(crashed), str(work), str(crashed / "broker.conf"), str(build.resolve())]
    with CpuWatch() as cpu:
        done = subprocess.run(cmd, cwd=kit_cwd(build), capture_output=True, text=True)
    figures = parse_kit_output(done.stdout)
    if done.returncode != 0 or "end_to_end_s" not in figures or "process_wall_s" not in figures:
        raise BrokerRunError(f"broker recovery failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    if figures.get("commitlog_appended_bytes"):
        raise BrokerRunError(f"the broker appended {figures['commitlog_appended_bytes']} bytes to the commit log "
                             f"while recovering (a due delay message?): not a recovery figure")
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    Path(str(work) + ".log").unlink(missing_ok=True)
    return figures


def run_reput_recovery(crashed: Path, out: Path, master: str, split_size: int, extra: tuple[str, ...] = ()) -> dict:
    """One timed `python -m jobs.recover --out` whole process (plus `extra` flags, e.g.
    --link-sealed-segments): its report's timings plus the wall time."""
    return run_job("recover", crashed, out, master, split_size, tuple(extra))


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return round(statistics.median(values), 3) if values and len(values) == len(runs) else None


@dataclass
class RecoveryRuns:
    """Every run of both on one crashed store, the comparison of the first pair's outputs, the ratios."""

    records: int
    data_bytes: int
    crash: dict = field(default_factory=dict)
    broker: list[dict] = field(default_factory=list)
    reput: list[dict] = field(default_factory=list)
    comparison: StoreComparison | None = None
    recover_args: tuple[str, ...] = ()  # flags given to jobs.recover besides --out

    def medians(self, runs: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
        return {k: m for k in keys if (m := _median(runs, k)) is not None}

    def ratios(self) -> dict[str, float]:
        """reput / broker: whole process, and reput after start-up against the broker's load + dispatch +
        flush in the JVM."""
        b, r = self.medians(self.broker, BROKER_FIGURES), self.medians(self.reput, REPUT_FIGURES)
        out = {}
        if b.get("process_wall_s") and "process_wall_s" in r:
            out["whole_process"] = round(r["process_wall_s"] / b["process_wall_s"], 3)
        if b.get("end_to_end_s") and "total_s" in r:
            out["after_start_up"] = round(r["total_s"] / b["end_to_end_s"], 3)
        return out

    def to_dict(self) -> dict:
        return {"records": self.records, "commitlog_bytes": self.data_bytes, "crash": self.crash,
                "recover_args": list(self.recover_args),
                "broker_runs": self.broker, "reput_runs": self.reput,
                "outputs": None if self.comparison is None else self.comparison.to_dict(),
                "broker_median_s": self.medians(self.broker, BROKER_FIGURES),
                "reput_median_s": self.medians(self.reput, REPUT_FIGURES), "ratios_reput_over_broker": self.ratios()}


def side_by_side(kit: Path, build: Path, crashed: CrashedStore, root: Path, pairs: int, master: str,
                 split_size: int, recover_args: tuple[str, ...] = ()) -> RecoveryRuns:
    """`pairs` interleaved runs of both (the order alternates), each after warming the page cache with the
    crashed store's commit log; the first pair's outputs compared byte for byte."""
    result = RecoveryRuns(crashed.records, crashed.data_bytes, crashed.crash, recover_args=recover_args)
    work, out = root / "broker-recovered", root / "reput-recovered"
    started, total = time.monotonic(), 2 * pairs
    try:
        for i in range(pairs):
            for j, who in enumerate(("reput", "broker") if i % 2 == 0 else ("broker", "reput")):
                progress(f"recovery side by side, {crashed.records:,} messages ({who})", 2 * i + j, total, started)
                warm_page_cache(crashed.path)
                if who == "broker":
                    result.broker.append(run_broker_recovery(kit, build, crashed.path, work))
                else:
                    result.reput.append(run_reput_recovery(crashed.path, out, master, split_size, recover_args))
            if i == 0:
                result.comparison = compare_stores(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return result


def _runs(runs: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.2f}" for r in runs if isinstance(r.get(key), (int, float)))


def table(s: RecoveryRuns) -> str:
    """The printed comparison: the crash, medians with every run, the ratios and the other load."""
    b, r = s.medians(s.broker, BROKER_FIGURES), s.medians(s.reput, REPUT_FIGURES)
    load = [x["other_load_cores"] for x in s.broker + s.reput if x.get("other_load_cores") is not None]
    outputs = "not compared" if s.comparison is None else s.comparison.summary()
    crash = s.crash
    what = (f"{crash['undispatched_records']:,} records, {crash['undispatched_bytes'] / 1e6:.1f} MB to re-dispatch, "
            f"torn last record {'yes' if crash.get('torn') else 'no'}"
            if isinstance(crash.get("undispatched_records"), int) and isinstance(crash.get("undispatched_bytes"), int)
            else "crash point unknown")
    lines = [f"recovery side by side with RocketMQ 4.9.8: {s.records:,} messages, {s.data_bytes / 1e6:,.1f} MB of "
             f"commit log, crashed by the kit's make_crash.py ({what})",
             f"  {len(s.broker)} interleaved pairs, medians [runs in order]; outputs {outputs}; other load "
             f"{min(load, default=0):.2f}-{max(load, default=0):.2f} cores"]
    for k in BROKER_FIGURES:
        if k in b:
            lines.append(f"  broker {k:<32}{b[k]:>9.2f}  [{_runs(s.broker, k)}]")
    if s.recover_args:
        lines.append(f"  jobs.recover run as: --out {' '.join(s.recover_args)}")
    lines += [f"  jobs.recover engine: {e}" for e in engines(s.reput)]
    for k in REPUT_FIGURES:
        if k in r:
            lines.append(f"  jobs.recover --out {k:<20}{r[k]:>9.2f}  [{_runs(s.reput, k)}]")
    ratios = s.ratios()
    if "whole_process" in ratios:
        lines.append(f"  ratio reput/broker, whole process     {ratios['whole_process']:>9.2f}")
    if "after_start_up" in ratios:
        lines.append(f"  ratio reput after start-up / broker load+dispatch+flush {ratios['after_start_up']:.2f}")
    if s.comparison is not None:
        lines.extend(f"  note: {n}" for n in s.comparison.notes)
    return "\n".join(lines)


def scale_lines(small: RecoveryRuns, large: RecoveryRuns) -> str:
    """Whether the ratio grew with the store: each ratio of the larger store over the smaller's."""
    a, b = small.ratios(), large.ratios()
    lines = [f"recovery ratio against store size ({small.records:,} -> {large.records:,} messages; "
             f"<= 1.00: the ratio did not grow)"]
    for k in ("whole_process", "after_start_up"):
        if k in a and k in b:
            lines.append(f"  {k:<16} {a[k]:.2f} -> {b[k]:.2f}: x{b[k] / a[k]:.2f}")
    return "\n".join(lines)
