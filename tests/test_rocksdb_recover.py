"""`recover` of a RocksDB consume-queue store (storeType=defaultRocksDB) on copies of the golden crash image: the
commit log, checkpoint and index files as RocketMQ 5.3.3's own recovery left them (`rocksdb-unclean-11-recovered`,
index files by content in name order), `--full-index` whole, the database never written and `abort` kept; and 5.3.3
itself reopening the recovered store dispatches exactly the golden recovered database."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from storage_format.checkpoint import parse_checkpoint
from storage_format.index_file import HEADER_SIZE, IndexHeader
from tests.helpers import run_job
from tests.oracle import KIT, rocks_golden, rocks_problem
from tests.rocksdb_helpers import rocks_case, rocks_copy, store_listing

CRASH, RECOVERED = "rocksdb-unclean-11", "rocksdb-unclean-11-recovered"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _entries(store: Path) -> list[int]:
    """Each index file's entry count (name order; the header counts one more)."""
    return [IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]).index_count - 1
            for p in sorted((store / "index").iterdir())]


def _recover(store: Path, capfd, *argv: str) -> tuple[int, str]:
    code, _, err = run_job("recover", ["--store", str(store), "--broker-config", str(store / "broker.conf"), *argv],
                           capfd)
    return code, err


@pytest.fixture(scope="module")
def recovered(tmp_path_factory) -> dict[str, Path]:
    """The crash image's copy, and its recovery into OUT by the broker's rules and with --full-index."""
    from jobs.recover import main

    tmp = tmp_path_factory.mktemp("rocks-recover")
    store = rocks_copy(CRASH, tmp / "store")
    before = store_listing(store)
    for name, extra in (("out", []), ("full", ["--full-index"])):
        assert main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                     str(tmp / name), "--quiet", *extra]) == 0
    assert store_listing(store) == before  # nothing written into the input store
    return {"store": store, "out": tmp / "out", "full": tmp / "full"}


def test_commit_log_checkpoint_and_index_are_the_brokers_recovery(recovered):
    out, golden = recovered["out"], rocks_case(RECOVERED)
    assert sorted(p.name for p in (out / "commitlog").iterdir()) == sorted(
        p.name for p in (golden / "commitlog").iterdir())  # the empty pre-allocated 4th segment goes
    assert (out / "checkpoint").read_bytes() == (golden / "checkpoint").read_bytes()
    # index files by content in name order (their names are wall-clock creation times)
    assert [_sha(p) for p in sorted((out / "index").iterdir())] == [
        _sha(p) for p in sorted((golden / "index").iterdir())]
    assert sum(_entries(out)) == 6028


def test_the_database_is_copied_verbatim_and_abort_kept(recovered):
    store, out = recovered["store"], recovered["out"]
    db = sorted(p.name for p in (store / "consumequeue").iterdir())
    assert sorted(p.name for p in (out / "consumequeue").iterdir()) == db  # no file consume queue written
    assert all(_sha(out / "consumequeue" / n) == _sha(store / "consumequeue" / n) for n in db)
    assert (out / "abort").read_bytes() == (store / "abort").read_bytes()
    assert (out / "abort.bak").read_bytes() == (store / "abort.bak").read_bytes()
    report = json.loads((out / "reput-recover-report.json").read_text())
    nxt = report["rocksdb"]["next_start"]
    assert report["rocksdb"]["abort_kept"] and report["rocksdb"]["checkpoint"] == 2_123_889
    assert (nxt["rule"], nxt["segment"], nxt["bytes"]) == ("abnormal", "00000000000002097152", 966_089)


def test_full_index_keeps_every_entry_and_the_checkpoint_covers_it(recovered):
    full = recovered["full"]
    assert sum(_entries(full)) == 6134  # where the broker keeps 6,028
    last = sorted((full / "index").iterdir())[-1]
    cp = parse_checkpoint((full / "checkpoint").read_bytes())
    assert cp.index_msg_timestamp == IndexHeader.from_bytes(last.read_bytes()[:HEADER_SIZE]).end_timestamp


def test_verify_of_the_full_index_recovery_is_consistent(recovered, tmp_path, capfd):
    report = tmp_path / "v.json"
    code, _, err = run_job("verify", ["--store", str(recovered["full"]), "--broker-config",
                                      str(recovered["full"] / "broker.conf"), "--report", str(report)], capfd)
    r = json.loads(report.read_text())
    assert code == 0 and r["status"] == "consistent", err[-3000:]
    assert r["rocksdb"]["not_yet_dispatched_units"] == 1350 and r["rocksdb"]["next_start"]["rule"] == "abnormal"


def test_the_dry_run_says_what_the_next_start_re_dispatches(tmp_path, capfd):
    store = rocks_copy(CRASH, tmp_path / "s")
    before = store_listing(store)
    code, err = _recover(store, capfd, "--dry-run", "--json", "--report", str(tmp_path / "plan.json"))
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert code == 0 and plan["consumequeue"]["layout"] == "rocksdb" and not plan["consumequeue"]["written"]
    assert plan["start_segment"]["name"] == "00000000000002097152"
    assert "re-dispatches from commit-log file 00000000000002097152 at its next start" in err
    assert store_listing(store) == before
    from jobs.pipeline.recover.text import plan_lines  # the console's summary: one account of the next start
    after = [line for line in plan_lines(plan) if line.startswith("after the broker starts: ")]
    assert after == ["after the broker starts: " + plan["rocksdb"]["next_start"]["message"]], after
    assert "nothing to re-dispatch" not in after[0]


def test_in_place_leaves_the_database_and_abort(tmp_path, capfd):
    store = rocks_copy(CRASH, tmp_path / "s")
    db_before = {n: v for n, v in store_listing(store).items() if n.startswith("consumequeue")}
    code, err = _recover(store, capfd, "--in-place", "--backup-dir", str(tmp_path / "backup"))
    assert code == 0, err[-3000:]
    assert {n: v for n, v in store_listing(store).items() if n.startswith("consumequeue")} == db_before
    assert (store / "abort").is_file() and not (store / "commitlog" / "00000000000003145728").exists()
    assert [_sha(p) for p in sorted((store / "index").iterdir())] == [
        _sha(p) for p in sorted((rocks_case(RECOVERED) / "index").iterdir())]


def _dump(store: Path, tmp: Path) -> list[str]:
    out = tmp / f"dump-{store.name}.jsonl"
    done = subprocess.run([sys.executable, str(KIT / "rocksdb" / "dump_rocksdb_cq.py"), str(store), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text().splitlines()


@pytest.mark.parametrize("mode", ["out", "full"])
def test_the_broker_reopening_the_recovered_store_dispatches_the_golden_database(mode, recovered, oracle, tmp_path):
    """5.3.3's RocksDBMessageStore on OUT: its abnormal start re-dispatches the database from the start segment, and
    both column families then equal those of its own recovery of the crash image (`-recovered`). Without `abort` a
    normal start would skip the record at the database's checkpoint (4,378 units, not 4,379)."""
    why = rocks_problem(oracle.root, oracle.kit)
    if why:
        pytest.fail(why, pytrace=False)
    broker = tmp_path / "broker-store"
    subprocess.run(["cp", "-a", str(recovered[mode]), str(broker)], check=True)
    entries = _entries(broker)
    rocks_golden(oracle, "reopen", broker, broker / "broker.conf")
    assert _dump(broker, tmp_path) == (rocks_case(RECOVERED) / "expected-cq.jsonl").read_text().splitlines()
    if mode == "full":  # every index file kept; the start indexed the log's last indexed record once more
        assert _entries(broker)[:-1] == entries[:-1] and _entries(broker)[-1] == entries[-1] + 2
