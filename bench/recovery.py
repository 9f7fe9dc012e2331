"""Recovery side by side with the broker: RocketMQ 4.9.8's own crash recovery and `jobs.recover --out`
of the same crashed store, as whole processes, interleaved, outputs compared byte for byte.

The crashed store is made the way the oracle kit makes it (`../shared/oracle/sidebyside/make_crash.py`:
consume queues and index written by 4.9.8 itself from a commit log cut ~4 MB short, an `abort`, a lagging
checkpoint and a torn last record), next to the bench store (`ROOT/crash-<store>`, its sealed segments
hard links into the bench store: nothing writes them) and reused while those links still point at the
bench store's segments. The broker's recovery is the kit's `run_broker_store.sh` (a fresh copy of
everything but the sealed segments, synced, then RebuildTimer: `load_s` is the recovery, `dispatch_s`
what start() still dispatches, `flush_s` the msync); reput's is `python -m jobs.recover --out` and/or
`--in-place` (`--recover-mode`): each in-place run recovers a fresh full copy of the crashed store (copied
untimed, never hard-linked: the switch rewrites and deletes the store's files, and the crashed store shares
inodes with the bench store), its backup directory checked to exist. The kit's scripts run from the directory
the build's relative classpath entries resolve against.

Page cache (`cold`): warm runs read every file of the store they work on once before each timed run; cold runs
fsync and evict every file of the store the run reads (POSIX_FADV_DONTNEED, no root needed), as after a
reboot. The broker's cold run is the kit's method done here (the same links and copies, synced, evicted,
then the same java command timed), since the kit's script copies the store it times (leaving it cached).
"""
from __future__ import annotations

import json
import os
import shutil
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .broker import JAVA_OPENS, BrokerRunError, _raise_open_files, engines, kit_cwd, run_job
from .compare import StoreComparison, compare_stores
from .cpu import CpuWatch
from .report import progress

DEFAULT_KIT = Path(__file__).resolve().parents[1].parent / "shared" / "oracle"  # ../shared/oracle of the repo
BROKER_FIGURES = ("load_s", "dispatch_s", "flush_s", "end_to_end_s", "process_wall_s")
REPUT_FIGURES = ("validate_s", "consumequeue_plan_s", "index_plan_s", "write_s", "total_s", "process_wall_s")
IN_PLACE_FIGURES = ("validate_s", "consumequeue_plan_s", "index_plan_s", "write_s", "switch_s", "total_s",
                    "process_wall_s")
OUT, IN_PLACE, BOTH = "out", "in-place", "both"
RECOVER_MODES = (OUT, IN_PLACE, BOTH)  # --recover-mode: which jobs.recover runs beside the broker
# what the kit's run_broker_store.sh leaves out of its copy of the store
KIT_SKIPPED = {"commitlog", "broker.conf", "bench-store.json", "expected.json", "lock"}
# a broker run that has not ended by then is stopped (its whole process group): one seen hanging in start(),
# its HA service unable to bind port 10912 while another developer's broker held it
BROKER_TIMEOUT_S = 600.0


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


def evict(root: Path) -> int:
    """Drop every file under root (or root itself, a file) from the page cache: fsync (so no page stays dirty),
    then POSIX_FADV_DONTNEED; the next read comes from the disk, as after a reboot. Files only read, never
    written (fsync of a clean file writes nothing). Returns the files evicted."""
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(files)


def warm_store(root: Path) -> None:
    """Read every file of a store once, holes included (the consume queues' zero tails too, which the queue
    load reads): a store copied just before its run starts as warm as one read by earlier runs."""
    block = bytearray(1 << 20)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(block):
                pass


def _durable_copy(src: Path, dst: Path) -> None:
    """src copied to a new dst, data extents only (holes stay holes), mode and times kept, fsynced."""
    from jobs.pipeline.io.copy import copy_range

    copy_range(str(src), str(dst))
    shutil.copystat(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fresh_copy(crashed: Path, dest: Path) -> Path:
    """A full, independent copy of the crashed store for one --in-place run (never hard links: the switch
    replaces, truncates and deletes the store's files, and the crashed store's sealed segments are the bench
    store's inodes); fsynced, so its write-back does not run inside the timed run."""
    shutil.rmtree(dest, ignore_errors=True)
    for dirpath, _, names in os.walk(crashed):
        here = dest / Path(dirpath).relative_to(crashed)
        here.mkdir(parents=True, exist_ok=True)
        for name in names:
            _durable_copy(Path(dirpath) / name, here / name)
    return dest


def kit_prepare(crashed: Path, work: Path) -> Path:
    """What run_broker_store.sh does before it times the broker: WORK with hard links to every segment but the
    last, a copy of the last one and of every other entry (not broker.conf, bench-store.json, expected.json,
    lock); synced (here: each file written fsynced, instead of the script's global `sync`)."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "commitlog").mkdir(parents=True)
    segs = sorted((crashed / "commitlog").iterdir())
    for seg in segs[:-1]:
        os.link(seg, work / "commitlog" / seg.name)
    if segs:
        _durable_copy(segs[-1], work / "commitlog" / segs[-1].name)
    for entry in sorted(crashed.iterdir()):
        if entry.name in KIT_SKIPPED:
            continue
        if entry.is_dir():
            for dirpath, _, names in os.walk(entry):
                here = work / Path(dirpath).relative_to(crashed)
                here.mkdir(parents=True, exist_ok=True)
                shutil.copystat(dirpath, here)
                for name in names:
                    _durable_copy(Path(dirpath) / name, here / name)
        else:
            _durable_copy(entry, work / entry.name)
    return work


def run_bounded(cmd: list[str], timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with the output captured, in a process group of its own that is killed whole (the kit's
    script and the java it starts) when it has not ended after `timeout` seconds (BROKER_TIMEOUT_S):
    BrokerRunError then."""
    timeout = BROKER_TIMEOUT_S if timeout is None else timeout
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BrokerRunError(f"{' '.join(cmd[:2])}...: no end after {timeout:.0f} s, stopped (another broker on "
                                 f"this machine holding its HA port 10912?)") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _broker_cold(build: Path, crashed: Path, work: Path) -> subprocess.CompletedProcess:
    """The kit's method with the page cache evicted between the copy and the timed java run; the output as the
    script prints it (RebuildTimer's JSON line, then `process_wall_s`)."""
    from .broker import kit_classpath

    kit_prepare(crashed, work)
    evict(work)  # the linked segments are the crashed store's inodes: evicted with it
    log = Path(str(work) + ".log")
    log.unlink(missing_ok=True)
    cmd = ["java", *shlex.split(os.environ.get("JAVA_OPTS") or "-Xms1g -Xmx1g"), *JAVA_OPENS, "-Duser.timezone=UTC",
           "-Drocketmq.client.logUseSlf4j=true", "-cp", kit_classpath(build), "RebuildTimer", str(work),
           str(crashed / "broker.conf")]
    t0 = time.monotonic()
    done = run_bounded(cmd, cwd=kit_cwd(build), preexec_fn=_raise_open_files, env=dict(os.environ, ROCKETMQ_LOG=str(log)))
    wall = time.monotonic() - t0
    done.stdout += f"\n{{\"process_wall_s\": {wall:.3f}}}\n"
    return done


def run_broker_recovery(kit: Path, build: Path, crashed: Path, work: Path, cold: bool = False) -> dict:
    """One timed broker recovery of a fresh copy of the crashed store: the kit's run_broker_store.sh (`cold`:
    its method with the copy's pages evicted before the timed run)."""
    script = kit / "sidebyside" / "run_broker_store.sh"
    cmd = ["bash", str(script), str(crashed), str(work), str(crashed / "broker.conf"), str(build.resolve())]
    with CpuWatch() as cpu:
        if cold:
            done = _broker_cold(build, crashed, work)
        else:
            done = run_bounded(cmd, cwd=kit_cwd(build))
    figures = parse_kit_output(done.stdout)
    if done.returncode != 0 or "end_to_end_s" not in figures or "process_wall_s" not in figures:
        raise BrokerRunError(f"broker recovery failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    if figures.get("commitlog_appended_bytes"):
        raise BrokerRunError(f"the broker appended {figures['commitlog_appended_bytes']} bytes to the commit log "
                             f"while recovering (a due delay message?): not a recovery figure")
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    Path(str(work) + ".log").unlink(missing_ok=True)
    return figures


def run_reput_recovery(crashed: Path, out: Path, master: str, split_size: int, extra: tuple[str, ...] = (),
                       cold: bool = False) -> dict:
    """One timed `python -m jobs.recover --out` whole process (plus `extra` flags, e.g.
    --link-sealed-segments): its report's timings plus the wall time (`cold`: the crashed store evicted first)."""
    if cold:
        shutil.rmtree(out, ignore_errors=True)
        evict(crashed)
    return run_job("recover", crashed, out, master, split_size, tuple(extra))


def run_reput_in_place(crashed: Path, copy: Path, backup: Path, master: str, split_size: int,
                       extra: tuple[str, ...] = (), cold: bool = False) -> dict:
    """One timed `python -m jobs.recover --in-place` whole process on a fresh copy of the crashed store (made
    untimed, then warmed or evicted like the other runs' stores); its report's timings plus the wall time. The
    backup directory the run made must hold its manifest."""
    shutil.rmtree(backup, ignore_errors=True)
    fresh_copy(crashed, copy)
    if cold:
        evict(copy)
    else:
        warm_store(copy)
    figures = run_job("recover", copy, None, master, split_size, ("--in-place", "--backup-dir", str(backup), *extra))
    if not (backup / "reput-backup.json").is_file():
        raise BrokerRunError(f"recover --in-place left no backup manifest in {backup}")
    return figures


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return round(statistics.median(values), 3) if values and len(values) == len(runs) else None


@dataclass
class RecoveryRuns:
    """Every run of both on one crashed store, the comparison of the first round's outputs, the ratios; `reput`
    holds the --out runs, `in_place` the --in-place runs (which of them ran: `mode`)."""

    records: int
    data_bytes: int
    crash: dict = field(default_factory=dict)
    broker: list[dict] = field(default_factory=list)
    reput: list[dict] = field(default_factory=list)
    comparison: StoreComparison | None = None
    recover_args: tuple[str, ...] = ()  # flags given to jobs.recover --out besides --out
    mode: str = OUT
    cold: bool = False  # page cache evicted before each timed run
    in_place: list[dict] = field(default_factory=list)
    comparison_in_place: StoreComparison | None = None

    def medians(self, runs: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
        return {k: m for k in keys if (m := _median(runs, k)) is not None}

    def ratios(self, which: str | None = None) -> dict[str, float]:
        """reput / broker: whole process, and reput after start-up against the broker's load + dispatch +
        flush in the JVM; of the --out runs (`which` "out", the default while there are any) or the
        --in-place runs ("in-place")."""
        which = which or (OUT if self.reput or not self.in_place else IN_PLACE)
        runs = self.reput if which == OUT else self.in_place
        b, r = self.medians(self.broker, BROKER_FIGURES), self.medians(runs, IN_PLACE_FIGURES)
        out = {}
        if b.get("process_wall_s") and "process_wall_s" in r:
            out["whole_process"] = round(r["process_wall_s"] / b["process_wall_s"], 3)
        if b.get("end_to_end_s") and "total_s" in r:
            out["after_start_up"] = round(r["total_s"] / b["end_to_end_s"], 3)
        return out

    def in_place_over_out(self) -> dict[str, float]:
        """--in-place / --out medians (both modes ran): total_s and whole process."""
        a, b = self.medians(self.in_place, IN_PLACE_FIGURES), self.medians(self.reput, REPUT_FIGURES)
        return {k: round(a[k] / b[k], 3) for k in ("total_s", "process_wall_s") if a.get(k) and b.get(k)}

    def to_dict(self) -> dict:
        d = {"records": self.records, "commitlog_bytes": self.data_bytes, "crash": self.crash,
             "recover_mode": self.mode, "page_cache": "cold" if self.cold else "warm",
             "recover_args": list(self.recover_args),
             "broker_runs": self.broker, "reput_runs": self.reput,
             "outputs": None if self.comparison is None else self.comparison.to_dict(),
             "broker_median_s": self.medians(self.broker, BROKER_FIGURES),
             "reput_median_s": self.medians(self.reput, REPUT_FIGURES),
             "ratios_reput_over_broker": self.ratios(OUT) if self.reput else {}}
        if self.in_place:
            d.update({"in_place_runs": self.in_place,
                      "in_place_outputs": None if self.comparison_in_place is None
                      else self.comparison_in_place.to_dict(),
                      "in_place_median_s": self.medians(self.in_place, IN_PLACE_FIGURES),
                      "ratios_in_place_over_broker": self.ratios(IN_PLACE),
                      "in_place_over_out": self.in_place_over_out()})
        return d


def round_order(i: int, mode: str) -> tuple[str, ...]:
    """Who runs in round i: the broker and the chosen reput runs, the order rotated round by round (pairs
    alternate; with both modes each of the three goes first in turn)."""
    who = {OUT: ("reput", "broker"), IN_PLACE: ("in-place", "broker"), BOTH: ("reput", "broker", "in-place")}[mode]
    k = i % len(who)
    return who[k:] + who[:k]


def side_by_side(kit: Path, build: Path, crashed: CrashedStore, root: Path, pairs: int, master: str,
                 split_size: int, recover_args: tuple[str, ...] = (), mode: str = OUT,
                 cold: bool = False) -> RecoveryRuns:
    """`pairs` interleaved rounds of the broker and jobs.recover (--out, --in-place or both: `mode`), each run
    after reading every file of the store it works on (`cold`: after evicting them);
    the first round's outputs compared byte for byte."""
    result = RecoveryRuns(crashed.records, crashed.data_bytes, crashed.crash, recover_args=recover_args, mode=mode,
                          cold=cold)
    work, out = root / "broker-recovered", root / "reput-recovered"
    copy, backup = root / "reput-in-place-store", root / "reput-in-place-backup"
    started, per_round = time.monotonic(), len(round_order(0, mode))
    total = per_round * pairs
    try:
        for i in range(pairs):
            for j, who in enumerate(round_order(i, mode)):
                progress(f"recovery side by side, {crashed.records:,} messages ({who})", per_round * i + j, total,
                         started)
                if not cold and who != "in-place":
                    warm_store(crashed.path)
                if who == "broker":
                    result.broker.append(run_broker_recovery(kit, build, crashed.path, work, cold))
                elif who == "reput":
                    result.reput.append(run_reput_recovery(crashed.path, out, master, split_size, recover_args,
                                                           cold))
                else:
                    result.in_place.append(run_reput_in_place(crashed.path, copy, backup, master, split_size,
                                                              cold=cold))
            if i == 0:
                if mode != IN_PLACE:
                    result.comparison = compare_stores(work, out)
                if mode != OUT:
                    result.comparison_in_place = compare_stores(work, copy)
    finally:
        for d in (work, out, copy, backup):
            shutil.rmtree(d, ignore_errors=True)
        Path(str(work) + ".log").unlink(missing_ok=True)
    return result


def _runs(runs: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.2f}" for r in runs if isinstance(r.get(key), (int, float)))


def table(s: RecoveryRuns) -> str:
    """The printed comparison: the crash, the page cache, medians with every run, the ratios and the other load."""
    b = s.medians(s.broker, BROKER_FIGURES)
    load = [x["other_load_cores"] for x in s.broker + s.reput + s.in_place if x.get("other_load_cores") is not None]
    crash = s.crash
    what = (f"{crash['undispatched_records']:,} records, {crash['undispatched_bytes'] / 1e6:.1f} MB to re-dispatch, "
            f"torn last record {'yes' if crash.get('torn') else 'no'}"
            if isinstance(crash.get("undispatched_records"), int) and isinstance(crash.get("undispatched_bytes"), int)
            else "crash point unknown")
    outputs = []
    for flag, c, ran in (("--out ", s.comparison, s.mode != IN_PLACE), ("--in-place ", s.comparison_in_place,
                                                                         s.mode != OUT)):
        if ran:
            outputs.append(f"{flag if s.mode == BOTH else ''}{'not compared' if c is None else c.summary()}")
    cache = ("cold page cache (every file the run reads evicted before it)" if s.cold
             else "warm page cache (every file of the store read before each run)")
    lines = [f"recovery side by side with RocketMQ 4.9.8: {s.records:,} messages, {s.data_bytes / 1e6:,.1f} MB of "
             f"commit log, crashed by the kit's make_crash.py ({what})",
             f"  {len(s.broker)} interleaved rounds, jobs.recover {'--out and --in-place' if s.mode == BOTH else '--' + s.mode}, "
             f"{cache}; medians [runs in order]",
             f"  outputs {'; '.join(outputs)}; other load {min(load, default=0):.2f}-{max(load, default=0):.2f} cores"]
    for k in BROKER_FIGURES:
        if k in b:
            lines.append(f"  broker {k:<32}{b[k]:>9.2f}  [{_runs(s.broker, k)}]")
    if s.recover_args and s.reput:
        lines.append(f"  jobs.recover run as: --out {' '.join(s.recover_args)}")
    lines += [f"  jobs.recover engine: {e}" for e in engines(s.reput + s.in_place)]
    for flag, runs, keys in (("--out", s.reput, REPUT_FIGURES), ("--in-place", s.in_place, IN_PLACE_FIGURES)):
        r = s.medians(runs, keys)
        for k in keys:
            if k in r:
                lines.append(f"  jobs.recover {flag + ' ' + k:<32}{r[k]:>9.2f}  [{_runs(runs, k)}]")
    for flag, which, runs in (("", OUT, s.reput), (" --in-place", IN_PLACE, s.in_place)):
        if not runs:
            continue
        ratios = s.ratios(which)
        if "whole_process" in ratios:
            lines.append(f"  ratio reput{flag}/broker, whole process{'':<{max(0, 5 - len(flag))}}{ratios['whole_process']:>9.2f}")
        if "after_start_up" in ratios:
            lines.append(f"  ratio reput{flag} after start-up / broker load+dispatch+flush {ratios['after_start_up']:.2f}")
    for k, v in s.in_place_over_out().items():
        lines.append(f"  ratio --in-place/--out {k:<15}{v:>9.2f}")
    for c in (s.comparison, s.comparison_in_place):
        if c is not None:
            lines.extend(f"  note: {n}" for n in c.notes)
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
