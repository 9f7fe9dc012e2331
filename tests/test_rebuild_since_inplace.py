"""rebuild --since OUT1 --in-place: OUT1 itself brought up to the grown store, equal to the golden files, through
recover's in-place switch: only the changed files staged, a backup, a journal; killed mid-switch, `recover --resume`
finishes it and `recover --rollback` restores OUT1 byte for byte; a run while the journal is there is refused."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import GOLDEN, REPO
from tests.hostile import tree_digest
from tests.rebuild_helpers import consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes, index_hashes
from tests.test_hostile import run_job
from tests.test_rebuild_since import grown, report

CASE = "clean-small-11"


def in_place(store, out1, backup, **env) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.rebuild", "--store", str(store), "--broker-config",
           str(GOLDEN / CASE / "broker.conf"), "--since", str(out1), "--in-place", "--backup-dir", str(backup),
           "--engine", "local", "--quiet", "--json"]
    return subprocess.run(cmd, cwd=REPO, env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)


def recover(out1, *way: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(out1), *way], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_in_place_equals_the_golden_store_and_rolls_back(spark, tmp_path):
    """In place: OUT1's consume queues sha256-equal the golden files, its index the golden index, its report says
    where it is built to; the backup holds what changed; --rollback gives OUT1 back byte for byte."""
    out1, store = grown(CASE, tmp_path, 0.5)
    before = tree_digest(out1)
    done = in_place(store, out1, tmp_path / "backup")
    assert done.returncode == 0, done.stderr
    assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
    assert index_hashes(out1) == golden_index_hashes(CASE)
    r = report(out1)
    assert r["in_place"]["backup_dir"] == str(tmp_path / "backup")
    assert r["since"]["built_to_before"] < r["built_to"]["offset"]
    assert json.loads(done.stdout)["in_place"]["operations"] > 0
    assert not [p for p in os.listdir(out1) if p.startswith(".reput")]
    recover(out1, "--rollback", "--backup-dir", str(tmp_path / "backup"))
    assert tree_digest(out1) == before


def test_killed_mid_switch_resumes_and_a_second_run_is_refused(spark, tmp_path, capfd):
    """SIGKILL after the second file operation: the journal is there, a new --in-place run refuses naming recover's
    --resume and --rollback; --resume finishes the switch (golden files)."""
    out1, store = grown(CASE, tmp_path, 0.5)
    killed = in_place(store, out1, tmp_path / "backup", REPUT_CRASH_AT="op-2")
    assert killed.returncode == -signal.SIGKILL
    code, _, err = run_job("rebuild", ["--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"),
                                       "--since", str(out1), "--in-place", "--backup-dir", str(tmp_path / "b2")], capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput rebuild: error:")]
    assert code == 2 and len(lines) == 1 and "--resume" in lines[0] and "--rollback" in lines[0], err[-1500:]
    recover(out1, "--resume")
    assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
    assert index_hashes(out1) == golden_index_hashes(CASE)


def _fill_then_quiet(keys: list[int], max_index_num: int, quiet: int) -> int | None:
    """The first record that fills an index file (maxIndexNum - 1 keys: the count starts at 1) and is followed by
    `quiet` records without keys; None when the store has none."""
    total = 0
    for r, n in enumerate(keys):
        total += n
        if total and total % (max_index_num - 1) == 0 and n and not any(keys[r + 1:r + 1 + quiet]) \
                and r + quiet < len(keys):
            return r
    return None


def test_a_quiet_night_renames_the_trailing_empty_index_file_in_place(spark, tmp_path):
    """OUT1 ends in an empty index file (a file filled, then a record without keys rolled a new one); tonight's
    records bring no key, so that file is named anew by the last record's store time, as a full rebuild names it:
    --in-place switches it in under the new name and the old name is gone (the backup keeps it); OUT1 then equals
    a full rebuild of tonight's store, file for file."""
    import dataclasses

    from jobs.rebuild import main as rebuild_main
    from storegen.synth import StoreSpec, write_bench_store
    from tests.golden_walk import records_in

    spec = StoreSpec(messages=3000, segment_size=1 << 20, consume_queue_file_size=6000, max_hash_slot_num=16,
                     max_index_num=40, key_mix=(0.6, 0.4), uniq_share=0.0)
    write_bench_store(tmp_path / "all", spec, progress=False)
    keys = [len([k for k in r.properties.get("KEYS", "").split(" ") if k]) for r in records_in(tmp_path / "all")]
    fill = _fill_then_quiet(keys, spec.max_index_num, 3)
    assert fill is not None, "the seed gives no filled index file followed by 3 records without keys"
    nights = {"s1": fill + 2, "s2": fill + 4}  # last night: the roll's empty file; tonight: 2 more, no key
    for name, n in nights.items():
        write_bench_store(tmp_path / name, dataclasses.replace(spec, messages=n), progress=False)

    def run(store: str, out: str, *extra: str) -> int:
        return rebuild_main(["--store", str(tmp_path / store), "--broker-config", str(tmp_path / store / "broker.conf"),
                             "--out", str(tmp_path / out), "--json", *extra])
    assert run("s1", "out1") == 0 and run("s2", "full") == 0
    before = sorted(p.name for p in (tmp_path / "out1/index").iterdir())
    after = sorted(p.name for p in (tmp_path / "full/index").iterdir())
    assert len(before) == len(after) > 1 and before[:-1] == after[:-1] and before[-1] != after[-1], (before, after)
    assert rebuild_main(["--store", str(tmp_path / "s2"), "--broker-config", str(tmp_path / "s2/broker.conf"),
                         "--since", str(tmp_path / "out1"), "--in-place", "--backup-dir", str(tmp_path / "backup"),
                         "--json"]) == 0
    got, full = tree_digest(tmp_path / "out1"), tree_digest(tmp_path / "full")
    got.pop("reput-report.json"), full.pop("reput-report.json")
    assert got == full
    assert any(p.name == before[-1] for p in (tmp_path / "backup").rglob("*")), "the old name kept in the backup"
