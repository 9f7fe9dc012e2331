"""A running broker is recognised by its lock, taken here by another process exactly as the broker takes
it (an exclusive fcntl lock on byte 0 of STORE/lock): recover refuses, the read-only jobs say so once,
and verify counts the undispatched tail apart from its findings."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tests.helpers import run_job_lines


def test_lock_is_seen_without_taking_it(locked, tmp_path):
    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.io.live_broker import broker_lock

    store = locked("unclean-11")
    lock = broker_lock(Location(str(store)))
    assert lock.running and lock.holder_pid > 0 and lock.path == str(store / "lock")
    free = tmp_path / "free"
    shutil.copytree(GOLDEN / "unclean-11", free)
    assert not broker_lock(Location(str(free))).running  # an unlocked lock file (a stopped broker)


@pytest.mark.parametrize("case", ["unclean-11", "dledger-unclean-11"])
def test_recover_refuses_a_running_broker_in_every_mode(no_spark, locked, tmp_path, capsys, case):
    store = locked(case)
    conf = ["--broker-config", str(store / "broker.conf")]
    for mode in (["--dry-run"], ["--out", str(tmp_path / "out")], ["--in-place", "--backup-dir", str(tmp_path / "b")],
                 ["--in-place", "--backup-dir", str(tmp_path / "b"), "--force"], ["--resume"],
                 ["--rollback", "--backup-dir", str(tmp_path / "b")]):
        code, err = run_job_lines("recover", ["--store", str(store)] + conf + mode, capsys)
        assert code == 2 and len(err) == 1, (mode, err)
        assert err[0].startswith(f"reput recover: error: {store / 'lock'} is locked by process ") and \
            "a broker is running on this store; stop it first" in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "b").exists()


def test_recover_dry_run_with_force_states_the_broker_first(spark, locked, tmp_path, capsys):
    from jobs.recover import main

    store = locked("unclean-11")
    assert main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--dry-run", "--force",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    plan = json.loads(out)
    assert next(iter(plan)) == "broker_running" and plan["broker_running"].startswith(f"{store / 'lock'} is locked")
    assert err.count("a broker is running on this store") == 1


def _undispatch_tail(store: Path, records: int) -> int:
    """Zero the consume-queue units of the last `records` records in commit-log order, as if the broker had
    not dispatched them yet; returns the first undispatched offset."""
    files = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())
    phys = sorted(phy for f in files for phy, size, _ in struct.iter_unpack(">qiq", f.read_bytes())
                  if 0 < size < 0x7FFFFFFF)
    cut = phys[-records]
    for f in files:
        data = bytearray(f.read_bytes())
        for i in range(0, len(data), 20):
            phy, size = struct.unpack_from(">qi", data, i)
            if 0 < size < 0x7FFFFFFF and phy >= cut:
                data[i:i + 20] = bytes(20)
        f.write_bytes(bytes(data))
    shutil.rmtree(store / "index")
    return cut


def test_verify_counts_the_undispatched_tail_apart_while_a_broker_runs(spark, locked, tmp_path, capsys):
    from jobs.verify import main

    store = locked("clean-small-11")
    cut = _undispatch_tail(store, 10)
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--only", "consumequeue",
            "--json", "--work-dir", str(tmp_path)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["findings_total"] == 0 and report["in_flight"] == {"consumequeue.missing_entry": 10}
    assert report["in_flight_from"] == cut_end(store, cut) and report["in_flight_from"] <= cut
    assert err.count("a broker is running on this store") == 1

    unlocked = tmp_path / "copy"
    shutil.copytree(store, unlocked, ignore=shutil.ignore_patterns("lock"))
    assert main(["--store", str(unlocked)] + argv[2:]) == 1  # without a broker the same gap is a finding
    report = json.loads(capsys.readouterr().out)
    assert report["finding_counts"] == {"consumequeue.missing_entry": 10} and report["in_flight"] == {}


def cut_end(store: Path, cut: int) -> int:
    """One past the last record still in any consume queue (the dispatch position the files show)."""
    ends = [phy + size for f in (store / "consumequeue").rglob("*") if f.is_file()
            for phy, size, _ in struct.iter_unpack(">qiq", f.read_bytes()) if 0 < size < 0x7FFFFFFF]
    return max(ends)


def test_read_only_jobs_say_once_that_a_broker_runs(spark, locked, capsys):
    from jobs.inspect import main

    store = locked("clean-small-11")
    assert main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"reput inspect: warning: {store / 'lock'} is locked by process") == 1
    assert "in flight" in err
