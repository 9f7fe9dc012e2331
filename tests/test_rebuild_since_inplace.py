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
