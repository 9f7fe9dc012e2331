"""RocketMQ itself beside reput in the same test (issue 51 item 2): stores made at test time from a golden commit log,
given to RocketMQ 4.9.8's own store code (the oracle build, tests/oracle.py; `make oracle`) and to reput, the files
compared (consume queues byte for byte, index files by content in name order: the broker names them by its wall
clock). Queue offsets out of step, one line a kind (ANOMALIES); 4.9.8's clean service expiring the oldest segments
of such a store, then `rebuild --since`; and the broker's own index-file flake, which a comparison runs again."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import GOLDEN
from tests.oracle import (Oracle, broker_rebuild, consume_queues, deliver_nothing, index_files, lost_index_files,
                          rebuild_timer, run_clean)

BASE = "clean-small-11"  # the golden log every store here is made from (4.9.8, 9 segments, ~3,300 records)
AT_QUEUE_OFFSET = 20  # a record's QUEUEOFFSET field: bytes 20..27, which no CRC covers in 4.9.8

# kind: (the queue, its records' QUEUEOFFSET fields in log order for its n records). The kinds also in
# golden/broker-anomalies/ as q-<kind>-11 are checked against those logs (test_the_kinds_make_the_golden_logs).
ANOMALIES: dict[str, tuple[str, Callable[[int], list[int]]]] = {
    "back-single": ("TopicTest/1", lambda n: [*range(50), 1, *range(51, n)]),
    "back-run": ("TopicTest/1", lambda n: [*range(50), *range(47, n - 3)]),
    "back-after-full": ("TopicTest/1", lambda n: [*range(100), *range(97, n - 3)]),
    "back-cross-file": ("TopicTest/1", lambda n: [*range(150), *range(50, n - 100)]),
    "jump-single": ("TopicTest/1", lambda n: [*range(50), 5000, *range(51, n)]),
    "jump-run": ("TopicTest/1", lambda n: [*range(50), *range(54, n + 4)]),
    "jump-far-run": ("TopicTest/1", lambda n: [*range(50), *range(1050, n + 1000)]),
    "repeat-single": ("TopicTest/1", lambda n: [*range(50), 49, *range(51, n)]),
    "repeat-run": ("TopicTest/1", lambda n: [*range(50), *range(49, n - 1)]),
    "restart-zero": ("TopicTest/1", lambda n: [*range(50), *range(n - 50)]),
    "first-high-then-zero": ("Pay-Events/2", lambda n: [150, *range(n - 1)]),
    "stuck-after-full": ("TopicTest/1", lambda n: [*range(100), *[99] * (n - 100)]),
    "restart-zero-after-full": ("TopicTest/1", lambda n: [*range(100), *range(n - 100)]),
    "repeat-after-full": ("TopicTest/3", lambda n: [*range(100), 99, *range(100, n - 1)]),
    "back-far-single": ("TopicTest/0", lambda n: [*range(150), 10, *range(151, n)]),
}
# make test runs these (each ~4 s: a JVM and reput's rebuild); make test-full the rest
IN_CI = ("stuck-after-full", "first-high-then-zero", "back-cross-file", "jump-far-run", "restart-zero-after-full",
         "repeat-after-full")
FILLER = 2**31 - 1  # a pre-blank unit's size (fillPreBlank)


def queue_records(queue: str) -> list[int]:
    """The commit-log offsets of a queue's records in log order, read from the base case's own consume queue (the
    broker's: every record it dispatched there; filler units left out)."""
    out = []
    for path in sorted((GOLDEN / BASE / "consumequeue" / queue).iterdir()):
        raw = path.read_bytes()
        out += [phy for phy, size, _ in struct.iter_unpack(">qiq", raw) if size not in (0, FILLER)]
    return out


def anomaly_log(kind: str, queue: str | None = None) -> dict[str, bytes]:
    """The base case's commit log with one queue's QUEUEOFFSET fields rewritten as ANOMALIES[kind] says (in
    `queue` instead of the kind's own when given): {segment name: bytes}."""
    own, offsets = ANOMALIES[kind]
    segments = {p.name: bytearray(p.read_bytes()) for p in sorted((GOLDEN / BASE / "commitlog").iterdir())}
    starts = sorted(int(n) for n in segments)
    records = queue_records(queue or own)
    fields = offsets(len(records))
    assert len(fields) == len(records), (kind, len(fields), len(records))
    for phy, value in zip(records, fields):
        start = max(s for s in starts if s <= phy)
        struct.pack_into(">q", segments[f"{start:020d}"], phy - start + AT_QUEUE_OFFSET, value)
    return {name: bytes(data) for name, data in segments.items()}


def write_log(log: dict[str, bytes], store: Path) -> Path:
    (store / "commitlog").mkdir(parents=True)
    for name, data in log.items():
        (store / "commitlog" / name).write_bytes(data)
    return store


def reput(argv: list[str]) -> None:
    """jobs.rebuild in this process on the local engine (a small store)."""
    from jobs.rebuild import main as rebuild_main

    assert rebuild_main([*argv, "--engine", "local", "--quiet", "--json"]) == 0


def index_entries(store: Path) -> int:
    """Index entries in a store's index files (the header's indexCount, at byte 36, counts one unused slot)."""
    return sum(struct.unpack_from(">i", p.read_bytes(), 36)[0] - 1 for p in (store / "index").iterdir())


# -- queue offsets out of step ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [k for k in ANOMALIES if (GOLDEN / "broker-anomalies" / f"q-{k}-11").is_dir()])
def test_the_kinds_make_the_golden_logs(golden, kind):
    """A kind's line gives the commit log the golden case of that kind was crafted as, byte for byte."""
    crafted = GOLDEN / "broker-anomalies" / f"q-{kind}-11" / "commitlog"
    log = anomaly_log(kind)
    assert sorted(log) == sorted(p.name for p in crafted.iterdir())
    for name, data in log.items():
        assert data == (crafted / name).read_bytes(), (kind, name)


@pytest.mark.parametrize("kind", [k if k in IN_CI else pytest.param(k, marks=pytest.mark.full) for k in ANOMALIES])
def test_the_broker_and_reput_rebuild_an_anomaly_store_alike(oracle, golden, kind, tmp_path):
    """The broker's rebuild (RebuildTimer) of the damaged log and reput's give the same consume-queue files, byte
    for byte, and the same index files in name order; reput names the damaged queue in its report."""
    store = write_log(anomaly_log(kind), tmp_path / "store")
    conf = GOLDEN / BASE / "broker.conf"
    figures = broker_rebuild(oracle, store / "commitlog", tmp_path / "broker", conf)
    reput(["--store", str(store), "--broker-config", str(conf), "--out", str(tmp_path / "reput")])
    assert consume_queues(tmp_path / "reput") == consume_queues(tmp_path / "broker")
    assert index_files(tmp_path / "reput") == index_files(tmp_path / "broker")
    assert len(index_files(tmp_path / "broker")) == figures["index_files"] > 1
    report = json.loads((tmp_path / "reput" / "reput-report.json").read_text())
    assert report["out_of_step_queues"]["queues"] == [ANOMALIES[kind][0]]


# -- the broker's own flake: index files named by the wall-clock millisecond --------------------------------------

def test_a_run_that_lost_an_index_file_runs_again(tmp_path, monkeypatch):
    """broker_rebuild runs the broker again while a run's list holds more index files than its directory, returns
    the first run that lost none, and fails when every run lost one."""
    import tests.oracle as oracle_module

    runs: list[int] = []
    lose_until = [3]

    def fake_run(oracle: Oracle, store: Path, conf: Path, log: Path) -> dict:
        runs.append(len(runs) + 1)
        (store / "index").mkdir()
        on_disk = 2 if len(runs) < lose_until[0] else 3
        for i in range(on_disk):
            (store / "index" / f"2026120500000000{i}").write_bytes(b"")
        return {"index_files": 3, "commitlog_appended_bytes": 0}

    monkeypatch.setattr(oracle_module, "rebuild_timer", fake_run)
    write_log({"00000000000000000000": b"log"}, tmp_path / "log")
    args = (Oracle(tmp_path), tmp_path / "log" / "commitlog", tmp_path / "work", tmp_path / "broker.conf")
    assert broker_rebuild(*args)["runs"] == 3 and runs == [1, 2, 3]
    runs.clear()
    lose_until[0] = 10
    with pytest.raises(AssertionError, match="same-millisecond name in 2 runs"):
        broker_rebuild(*args, attempts=2)
    assert runs == [1, 2]


def test_the_rerun_rule_sees_the_brokers_own_flake(oracle, golden, tmp_path):
    """Provoked: index files of 3 entries (maxIndexNum=4) over the base case's first segment, ~290 files made
    within about a second, so names collide. A run counts as having lost files (its list longer than its
    directory) exactly when its index files on disk hold fewer entries than the log has keys (reput's rebuild
    under the same settings counts them), and its directory then has no file more than it says."""
    conf = tmp_path / "tiny.conf"
    conf.write_text((GOLDEN / BASE / "broker.conf").read_text().replace("maxIndexNum=256", "maxIndexNum=4")
                    .replace("maxHashSlotNum=64", "maxHashSlotNum=4"))
    first = GOLDEN / BASE / "commitlog" / f"{0:020d}"
    store = write_log({first.name: first.read_bytes()}, tmp_path / "store")
    deliver_nothing(store)
    reput(["--store", str(store), "--broker-config", str(conf), "--out", str(tmp_path / "reput")])
    keys = index_entries(tmp_path / "reput")
    work = tmp_path / "broker"
    shutil.copytree(store, work)
    figures = rebuild_timer(oracle, work, conf, tmp_path / "broker.log")
    lost = lost_index_files(figures, work)
    assert figures["index_files"] == len(index_files(tmp_path / "reput")) > 200
    assert lost >= 0 and (lost > 0) == (index_entries(work) < keys)


# -- expiry by the broker's own clean service ---------------------------------------------------------------------

@pytest.mark.slow  # ~70 s, nearly all of it waiting: the store's clean task first runs 60 s after its start
def test_expiry_by_the_brokers_clean_service_then_rebuild_since(oracle, golden, tmp_path):
    """stuck-after-full on TopicTest/2 (its offsets 0..99, then 99 for every later record: the broker leaves the
    queue's second consume-queue file created and empty). The broker rebuilds that log (PRE); reput's rebuild of it
    is OUT1 and equals PRE. 4.9.8's clean service on PRE expires the oldest 4 segments (TopicTest/2's 100th record
    lies in segment 3): it deletes the queue's full first file and keeps the empty one. `rebuild --since OUT1` of a
    store holding the expired commit log equals the broker's store after the clean: the empty file kept through
    expiry as the broker keeps it. (TopicTest/2, not the kind's own TopicTest/1, which holds the log's last record:
    skipped, that record would be indexed again at the clean run's start, issue 51's restart re-index.)"""
    expire = 4
    store = write_log(anomaly_log("stuck-after-full", "TopicTest/2"), tmp_path / "store")
    conf = GOLDEN / BASE / "broker.conf"
    pre, out1 = tmp_path / "pre", tmp_path / "out1"
    broker_rebuild(oracle, store / "commitlog", pre, conf)
    reput(["--store", str(store), "--broker-config", str(conf), "--out", str(out1)])
    assert consume_queues(out1) == consume_queues(pre) and index_files(out1) == index_files(pre)
    assert sorted(p.name for p in (pre / "consumequeue" / "TopicTest" / "2").iterdir())[-1] == "00000000000000002000"

    after = tmp_path / "after"
    phases = {p["phase"]: p for p in run_clean(oracle, pre, after, golden / "broker-anomalies" / "expiry-n5-11" /
                                               "broker-clean.conf", expire)}
    segments = sorted(p.name for p in (store / "commitlog").iterdir())
    assert phases["cleaned"]["min_phy"] == int(segments[expire]) and phases["shutdown"]["commitlog_appended_bytes"] == 0
    assert sorted(p.name for p in (after / "commitlog").iterdir()) == segments[expire:]
    kept = list((after / "consumequeue" / "TopicTest" / "2").iterdir())
    assert [p.name for p in kept] == ["00000000000000002000"] and not any(kept[0].read_bytes())

    tonight = tmp_path / "tonight"
    shutil.copytree(after / "commitlog", tonight / "commitlog")
    reput(["--store", str(tonight), "--broker-config", str(conf), "--out", str(tmp_path / "out2"), "--since",
           str(out1)])
    assert consume_queues(tmp_path / "out2") == consume_queues(after)
    assert index_files(tmp_path / "out2") == index_files(after)
    assert len(index_files(after)) < len(index_files(pre))  # the clean deleted index files too


# -- the oracle build itself (make oracle) ------------------------------------------------------------------------

def _fake_setup() -> str:
    """A stand-in for the kit's setup.sh ROOT: every path tests.oracle.NEEDED names (files touched, directories
    made), and a line per run."""
    from tests.oracle import NEEDED

    files = [p for p in NEEDED if "." in p.rsplit("/", 1)[-1]]
    dirs = sorted({p.rsplit("/", 1)[0] for p in files} | {p for p in NEEDED if p not in files})
    return ("#!/usr/bin/env bash\nset -e\n"
            '[ -z "${FAIL_SETUP:-}" ] || { echo "apt-get: permission denied" >&2; exit 100; }\n'
            'cd "$1" 2>/dev/null || mkdir -p "$1" && cd "$1"\n'
            f"mkdir -p {' '.join(dirs)}\ntouch {' '.join(files)}\necho run >> ../setup-runs\n")


FAKE_SETUP = _fake_setup()


def test_make_oracle_builds_once_per_kit(tmp_path, monkeypatch, capsys):
    """ensure() (make oracle) runs the kit's setup.sh when the build is missing or was made from another kit,
    not when its stamp matches; a complete build without a stamp, newer than the kit, is taken as it is; a failed
    setup.sh is one line with its exit status. problem() (the fixture's check) names `make oracle` meanwhile."""
    import os

    from tests.oracle import STAMP, ensure, problem

    kit, root = tmp_path / "kit", tmp_path / "cache" / "reput-oracle"
    kit.mkdir()
    (kit / "setup.sh").write_text(FAKE_SETUP)
    runs = lambda: (tmp_path / "cache" / "setup-runs").read_text().count("run")  # noqa: E731
    assert "no oracle build at" in problem(root, kit) and "`make oracle`" in problem(root, kit)
    assert ensure(root, kit) == 0 and runs() == 1 and problem(root, kit) is None
    assert ensure(root, kit) == 0 and runs() == 1  # the stamp matches: nothing to do
    (kit / "README.md").write_text("a newer kit")
    assert "made from another version" in problem(root, kit)
    assert ensure(root, kit) == 0 and runs() == 2 and problem(root, kit) is None
    (root / STAMP).unlink()  # built by hand with setup.sh: taken when newer than every kit file
    old = (kit / "setup.sh").stat().st_mtime - 100
    for p in kit.iterdir():
        os.utime(p, (old, old))
    assert ensure(root, kit) == 0 and runs() == 2 and (root / STAMP).is_file()
    (root / STAMP).unlink()
    (kit / "README.md").write_text("a kit newer than the build")
    assert "made from another version" in problem(root, kit)  # no stamp, and a kit file newer than the build
    (root / "build" / "classpath.txt").unlink()
    monkeypatch.setenv("FAIL_SETUP", "1")
    capsys.readouterr()
    assert ensure(root, kit) == 100
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"oracle: {kit / 'setup.sh'} {root.resolve()} failed "
                                                               "(exit 100;")
    assert not (root / STAMP).exists() and "no oracle build at" in problem(root, kit)
