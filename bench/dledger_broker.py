"""Side by side with the broker on a DLedger store: RocketMQ 4.9.8's `DLedgerCommitLog` (on DLedger 0.3.1.2)
rebuilding the store from its data files, `jobs.rebuild` of the same store, and `jobs.rebuild` of the plain
store holding the same messages, interleaved in one run, with the ratios.

The broker side is the DLedger oracle kit's `DledgerGolden reopen` (../shared/oracle/dledger/), called from the
kit's build as bench.broker calls RebuildTimer: a fresh work store holding copies of the data files only (no
consume queues, index, checkpoint, DLedger index or checkpoint: the broker rebuilds them all, as in the golden
case dledger-rebuild-headless-11), synced before the run. The kit prints one JSON event per line (to our pipe,
stamped on arrival here); `reopen_figures` turns them into figures timed like RebuildTimer's.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .broker import JAVA_OPENS, REPUT_FIGURES, BrokerRunError, _digests, kit_classpath, run_reput
from .cpu import CpuWatch
from .report import progress
from .stages import warm_page_cache

KIT_MAIN = "DledgerGolden"
DLEDGER_PORT = 40911  # the kit's one-member group listens here (dLegerPeers of the bench store)
SHUTDOWN_SLEEP_S = 1.0  # DefaultMessageStore.shutdown() sleeps this long before it stops anything
SETTLE_POLL_S = 0.1  # the kit's waitSettled polls every 100 ms and returns after 15 quiet polls
RUN_TIMEOUT_S = 900
BROKER_FIGURES = ("jvm_start_s", "load_s", "dispatch_s", "flush_s", "end_to_end_s", "process_wall_s")
INFO_FIGURES = ("leader_elected_s", "settle_wait_s", "shutdown_s", "exit_s", "process_wall_raw_s")


@dataclass
class DledgerSideBySide:
    """Every run of the three, their medians and the ratios."""

    broker: list[dict] = field(default_factory=list)
    reput: list[dict] = field(default_factory=list)  # jobs.rebuild of the DLedger store
    plain: list[dict] = field(default_factory=list)  # jobs.rebuild of the plain store, same messages
    identical: bool | None = None
    compared: dict = field(default_factory=dict)

    @staticmethod
    def medians(runs: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
        """The median of each figure every run has."""
        return {k: round(statistics.median(r[k] for r in runs), 3) for k in keys if runs and all(k in r for r in runs)}

    def ratios(self) -> dict[str, float]:
        """reput / broker on the DLedger store (whole process; after start-up against load + dispatch + flush)
        and jobs.rebuild on the DLedger store / on the plain store (medians, and the median per-pair ratio)."""
        b = self.medians(self.broker, BROKER_FIGURES)
        r, p = self.medians(self.reput, REPUT_FIGURES), self.medians(self.plain, REPUT_FIGURES)
        out = {}
        if "process_wall_s" in b and "process_wall_s" in r:
            out["reput_over_broker_whole_process"] = round(r["process_wall_s"] / b["process_wall_s"], 3)
        if "end_to_end_s" in b and "total_s" in r:
            out["reput_after_start_up_over_broker_load_dispatch_flush"] = round(r["total_s"] / b["end_to_end_s"], 3)
        for key, name in (("total_s", "after_start_up"), ("process_wall_s", "whole_process")):
            if key in r and key in p:
                out[f"dledger_over_plain_{name}"] = round(r[key] / p[key], 3)
                pairs = [x[key] / y[key] for x, y in zip(self.reput, self.plain)]
                out[f"dledger_over_plain_{name}_median_of_pairs"] = round(statistics.median(pairs), 3)
        return out

    def to_dict(self) -> dict:
        """JSON form: every run, the medians, the ratios, what the output comparison covered."""
        return {"broker_runs": self.broker, "reput_dledger_runs": self.reput, "reput_plain_runs": self.plain,
                "outputs_identical": self.identical, "outputs_compared": self.compared,
                "broker_median_s": self.medians(self.broker, BROKER_FIGURES + INFO_FIGURES),
                "reput_dledger_median_s": self.medians(self.reput, REPUT_FIGURES),
                "reput_plain_median_s": self.medians(self.plain, REPUT_FIGURES), "ratios": self.ratios()}


def _event(events: list[tuple[float, dict]], name: str, role: str | None = None) -> tuple[float, dict]:
    """The first event of that name (and role), with its arrival time; a clear error when the kit never sent it."""
    for at, ev in events:
        if ev.get("event") == name and (role is None or ev.get("role") == role):
            return at, ev
    raise BrokerRunError(f"the kit's reopen sent no {name!r} event{f' for role {role}' if role else ''} "
                         f"(events: {[e.get('event') for _, e in events]})")


def reopen_figures(events: list[tuple[float, dict]], launched: float, exited: float) -> dict:
    """Figures (seconds) from the kit's `reopen` events, each stamped with its arrival time (epoch seconds, the
    clock the kit's own `now`/`at` fields use), and the process's launch and exit times.

    load_s = constructor + load() (the kit's load_ms: DLedger recovery of every data file, DLedger index rebuilt);
    dispatch_s = from start() until the role-change handler saw the leader's log committed and dispatch caught up
    (`changed_to_master`: it polls every 100 ms, so the figure runs 0-0.1 s late, plus recoverTopicQueueTable);
    it includes the leader election and the commit, without which a DLedger broker dispatches nothing.
    The kit then waits for 15 quiet 100 ms polls (waitSettled): that idle window (settle_wait_s, >= 1.4 s) is
    not the broker's work and is taken out of process_wall_s (raw figure kept). flush_s = shutdown() less its
    fixed 1 s sleep (the consume queues' last flush, the checkpoint; 4.9.8 msyncs an index file only once it is
    full, so unlike RebuildTimer's flush_s no index msync); end_to_end_s = load + dispatch + flush, as
    RebuildTimer's. Nothing may be appended to the log during the run (a due delay message delivered by the
    schedule service would be): checked, an error otherwise."""
    opened_at, opened = _event(events, "store_open")
    if not opened.get("dledger"):
        raise BrokerRunError("the kit opened the store in plain mode (enableDLegerCommitLog not true in its config)")
    _, settled = _event(events, "settled")
    if any(ev.get("event") == "settle_timeout" for _, ev in events):
        raise BrokerRunError("the kit's reopen timed out waiting to settle (dispatch never caught up in 90 s)")
    elected = _event(events, "role_change", "LEADER")[1]["at"] / 1e3
    master = _event(events, "changed_to_master")[1]["at"] / 1e3
    settled_at = _event(events, "settled")[0]
    shutdown_at = _event(events, "shutdown")[0]
    start_begin = opened["now"] / 1e3 - opened["start_ms"] / 1e3  # store.start() called
    constructed = start_begin - opened["load_ms"] / 1e3  # the kit's t0: before the store's constructor
    written = settled["dledger"]["writePos"] - opened["dledger_after_load"]["writePos"]
    if written or settled["maxPhy"] != settled["dledger"]["writePos"]:
        raise BrokerRunError(f"the broker wrote {written} bytes to the DLedger log during reopen (maxPhy "
                             f"{settled['maxPhy']}, writePos {settled['dledger']['writePos']}): due delay messages "
                             f"delivered? its output would not be the store's rebuild")
    settle_wait = settled_at - master
    shutdown = shutdown_at - settled_at
    load, dispatch = opened["load_ms"] / 1e3, master - start_begin
    flush = max(shutdown - SHUTDOWN_SLEEP_S, 0.0)
    raw = exited - launched
    figures = {"jvm_start_s": constructed - launched, "load_s": load, "dispatch_s": dispatch, "flush_s": flush,
               "end_to_end_s": load + dispatch + flush, "process_wall_s": raw - settle_wait,
               "leader_elected_s": elected - start_begin, "settle_wait_s": settle_wait, "shutdown_s": shutdown,
               "exit_s": exited - shutdown_at, "process_wall_raw_s": raw}
    figures = {k: round(v, 3) for k, v in figures.items()}
    figures["max_phy_offset"] = settled["maxPhy"]
    figures["entries"] = settled["dledger"]["ledgerEndIndex"] - settled["dledger"]["ledgerBeginIndex"] + 1
    return figures


def parse_event_line(line: bytes | str) -> dict | None:
    """One JSON event of the kit, or None for any other line."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        ev = json.loads(text)
    except json.JSONDecodeError:
        return None
    return ev if isinstance(ev, dict) and "event" in ev else None


def _port_free(port: int) -> bool:
    """Whether the kit's DLedger port can be bound (another kit run holding it would make ours fail)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def data_only_copy(store: Path, work: Path) -> Path:
    """A fresh work store holding copies of the DLedger data files only, synced (the broker may write to its
    data files, so they are copied, never linked; the sync keeps their write-back out of the timed run)."""
    shutil.rmtree(work, ignore_errors=True)
    homes = sorted(d for d in store.glob("dledger-*") if (d / "data").is_dir())
    if len(homes) != 1:
        raise BrokerRunError(f"{store}: expected one dledger-<id>/data/ directory, found {len(homes)}")
    data = work / homes[0].name / "data"
    data.mkdir(parents=True)
    for f in sorted((homes[0] / "data").iterdir()):
        shutil.copyfile(f, data / f.name)
        fd = os.open(data / f.name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return work


def run_dledger_broker(build: Path, store: Path, work: Path) -> dict:
    """One timed broker rebuild of the DLedger store: the kit's `reopen` on a data-only copy."""
    if not _port_free(DLEDGER_PORT):
        raise BrokerRunError(f"port {DLEDGER_PORT} is in use (another DLedger kit run?); the kit's one-member "
                             f"group needs it")
    data_only_copy(store, work)
    log = Path(str(work) + ".stderr")
    env = dict(os.environ, ROCKETMQ_LOG=str(work) + ".log", LC_ALL="C.UTF-8")
    cmd = ["java", "-Xms1g", "-Xmx1g", *JAVA_OPENS, "-Duser.timezone=UTC", "-Dsun.jnu.encoding=UTF-8",
           "-Dfile.encoding=UTF-8", "-Drocketmq.client.logUseSlf4j=true", "-cp", kit_classpath(build), KIT_MAIN,
           "reopen", str(work), str(store / "broker.conf"), "0", "0", "/dev/stdout"]
    events: list[tuple[float, dict]] = []
    with CpuWatch() as cpu, open(log, "wb") as err:
        launched = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            for line in iter(proc.stdout.readline, b""):
                ev = parse_event_line(line)
                if ev is not None:
                    events.append((time.time(), ev))
                if time.monotonic() > deadline:
                    raise BrokerRunError(f"the kit's reopen ran longer than {RUN_TIMEOUT_S} s")
            code = proc.wait()
            exited = time.time()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
    if code != 0:
        tail = log.read_text(errors="replace").strip()[-400:]
        raise BrokerRunError(f"the kit's reopen failed (exit {code}): {tail}")
    figures = reopen_figures(events, launched, exited)
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    return figures


def side_by_side(build: Path, store: Path, plain_store: Path, root: Path, pairs: int, master: str,
                 split_size: int) -> DledgerSideBySide:
    """`pairs` interleaved rounds of the broker and jobs.rebuild on the DLedger store and jobs.rebuild on the
    plain store (orders alternate: reput DLedger, reput plain, broker / broker, reput plain, reput DLedger),
    each after warming the page cache; the first round's outputs compared file by file."""
    result = DledgerSideBySide()
    started = time.monotonic()
    total = 3 * pairs
    for i in range(pairs):
        order = ("reput", "plain", "broker") if i % 2 == 0 else ("broker", "plain", "reput")
        for j, who in enumerate(order):
            progress(f"DLedger side by side ({who})", 3 * i + j, total, started)
            if who == "broker":
                result.broker.append(run_dledger_broker(build, store, root / "dledger-broker-store"))
            elif who == "reput":
                warm_page_cache(store)
                result.reput.append(run_reput(store, root / "dledger-reput-out", master, split_size))
            else:
                warm_page_cache(plain_store)
                result.plain.append(run_reput(plain_store, root / "plain-reput-out", master, split_size))
        if i == 0:
            ours, theirs = _digests(root / "dledger-reput-out"), _digests(root / "dledger-broker-store")
            result.identical = ours == theirs
            result.compared = {"consume_queue_files": len(theirs[0]), "index_files": len(theirs[1]),
                               "not_compared": "the broker's checkpoint, DLedger index and DLedger checkpoint "
                                               "(jobs.rebuild writes none of them)"}
    for d in ("dledger-broker-store", "dledger-reput-out", "plain-reput-out"):
        shutil.rmtree(root / d, ignore_errors=True)
    return result


def table(s: DledgerSideBySide) -> str:
    """The printed comparison: medians of each figure, the ratios and the other load."""
    b = s.medians(s.broker, BROKER_FIGURES + INFO_FIGURES)
    r, p = s.medians(s.reput, REPUT_FIGURES), s.medians(s.plain, REPUT_FIGURES)
    load = [x["other_load_cores"] for x in s.broker + s.reput + s.plain if x.get("other_load_cores") is not None]
    outcome = "byte-identical" if s.identical else "DIFFER" if s.identical is False else "not compared"
    lines = [f"DLedger store side by side with RocketMQ 4.9.8 DLedgerCommitLog ({len(s.broker)} interleaved rounds, "
             f"medians; outputs {outcome}"
             + (f": {s.compared['consume_queue_files']} consume-queue files, {s.compared['index_files']} index "
                f"file(s)" if s.compared else "")
             + f"; other load {min(load, default=0):.2f}-{max(load, default=0):.2f} cores)"]
    labels = {"process_wall_s": "process_wall_s (less settle wait)", "end_to_end_s": "end_to_end_s (load+disp+flush)"}
    rows = [(f"broker {labels.get(k, k)}", b[k]) for k in BROKER_FIGURES + INFO_FIGURES if k in b]
    rows += [(f"{name} {k}", m[k]) for name, m in (("jobs.rebuild DLedger", r), ("jobs.rebuild plain", p))
             for k in REPUT_FIGURES if k in m]
    rows += [(f"ratio {k}", v) for k, v in s.ratios().items()]
    lines += [f"  {label:<64}{value:>8.2f}" for label, value in rows]
    lines.append("issue 20's targets: reput_over_broker_whole_process <= 0.6 and dledger_over_plain <= 1.15")
    lines.append("broker dispatch_s runs from start() to the kit's changed_to_master (100 ms polls: 0-0.1 s late; "
                 "election and commit included); settle_wait_s (the kit's 15 quiet polls) is left out of "
                 "process_wall_s; flush_s = shutdown() less its fixed 1 s sleep")
    return "\n".join(lines)
