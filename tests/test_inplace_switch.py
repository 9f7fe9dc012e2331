"""recover --in-place's switch with a hard-linked backup: files known by identity (inode, size, mtime), not
by hashing them whole; killed at each point it still has its ways back and forward, a file written since
the recovery still stops a rollback, a file rewritten with its own bytes is left alone, and a backup on
another filesystem is copied and checked by sha256."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.pipeline.recover.journal import STAGING
from jobs.pipeline.runtime.tasks import SparkRunner

from tests.conftest import REPO
from tests.recovery_helpers import CONF, assert_matches_recovered, tree, writable_copy

CASE = "v5-unclean-torn-11"
APPLY = """
import json, sys
from pathlib import Path
from jobs.pipeline.recover import inplace
from jobs.pipeline.recover.journal import STAGING
store, backup, rendered, deleted = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
staging = store / STAGING
inplace.apply(store, staging, backup, inplace.build_ops(store, staging, rendered, deleted, hashed=False), {})
"""


@pytest.fixture(scope="module")
def staged(spark, golden, tmp_path_factory):
    """CASE's in-place output staged once: (store copy, staging copy, rendered paths, deleted paths)."""
    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.recover import inplace
    from jobs.pipeline.recover.gather import plan_recovery
    from jobs.pipeline.recover.write import plan_output, write_output
    from storage_format.settings import load_settings

    root = tmp_path_factory.mktemp("switch")
    store = writable_copy(golden / CASE, root / "store")
    plan = plan_recovery(SparkRunner(spark.sparkContext), Location(str(store)), load_settings(CONF), Location(str(root / "work")),
                         split_size=0, quiet=True)
    staging = inplace.prepare_staging(store)
    output = plan_output(plan, with_copies=False)
    names = write_output(SparkRunner(spark.sparkContext), plan, output, Location(str(staging)), True)
    shutil.move(str(staging), root / "staging")
    return store, root / "staging", output.rendered + [f"index/{n}" for n in names], output.deleted


def fresh(staged, tmp: Path) -> Path:
    """A new copy of the store with the staging area in it (new inodes: ops are built for this copy)."""
    store, staging, _, _ = staged
    s = tmp / "store"
    shutil.copytree(store, s)
    shutil.copytree(staging, s / ".reput-recover.staging")
    return s


def ops_for(staged, store: Path, hashed: bool = False):
    from jobs.pipeline.recover import inplace

    return inplace.build_ops(store, store / STAGING, staged[2], staged[3], hashed=hashed)


def test_linked_switch_records_identities_and_hashes_nothing(staged, tmp_path, monkeypatch):
    """Ops built for a hard-linked backup carry fingerprints (before/after) and no sha256, and no file is
    hashed on the way; the applied store equals the broker's recovery."""
    from jobs.pipeline.recover import inplace, op_state

    store = fresh(staged, tmp_path)
    hashed = []
    real = inplace.sha256_file
    for module in (inplace, op_state):  # every module of the switch that hashes files
        monkeypatch.setattr(module, "sha256_file", lambda p: hashed.append(p) or real(p))
    ops = ops_for(staged, store)
    assert {o.op for o in ops} == {"create", "replace", "delete"}
    for o in ops:
        assert o.old_sha256 is None and o.new_sha256 is None
        assert (o.old_file is None) == (o.op == "create") and (o.new_file is None) == (o.op == "delete")
    manifest = inplace.apply(store, store / STAGING, tmp_path / "backup", ops, {})
    assert hashed == [] and manifest["backup"]["hard_linked"] > 0 and manifest["backup"]["copied"] == 0
    assert_matches_recovered(store, CASE)


def test_a_file_rewritten_with_its_own_bytes_is_left_alone(staged, tmp_path):
    """A staged file equal byte for byte to the store's is no operation (with or without hashes)."""
    store = fresh(staged, tmp_path)
    replaced = [o.path for o in ops_for(staged, store) if o.op == "replace"]
    assert replaced == ["checkpoint", "abort.bak"]
    shutil.copyfile(store / replaced[0], store / ".reput-recover.staging" / replaced[0])
    for hashed in (False, True):
        paths = [o.path for o in ops_for(staged, store, hashed)]
        assert replaced[0] not in paths and set(replaced[1:]) <= set(paths)


def _apply_until(store: Path, backup: Path, staged, point: str) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO), REPUT_CRASH_AT=point)
    proc = subprocess.run([sys.executable, "-c", APPLY, str(store), str(backup), json.dumps(staged[2]),
                           json.dumps(staged[3])], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    return proc.returncode


@pytest.mark.parametrize("point,way", [("backed-up", None), ("journaled", "rollback"), ("op-2", "resume"),
                                       ("op-3", "rollback"), ("applied", "resume"), ("applied", "rollback")])
def test_killed_linked_switch_has_a_way_back_and_forward(staged, tmp_path, point, way):
    """SIGKILL at each point of a fingerprint-only switch: before the journal the store is untouched; after
    it, --resume gives the broker's recovery and --rollback the crashed input, byte for byte."""
    store = fresh(staged, tmp_path)
    backup = tmp_path / "backup"
    old = {k: v for k, v in tree(store).items() if not k.startswith(".reput")}
    assert _apply_until(store, backup, staged, point) == -signal.SIGKILL
    if way is None:
        assert not (store / ".reput-recover.journal").exists()
        assert {k: v for k, v in tree(store).items() if not k.startswith(".reput")} == old
        return
    proc = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), f"--{way}",
                           "--backup-dir", str(backup)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (store / ".reput-recover.journal").exists() and not (store / ".reput-recover.staging").exists()
    if way == "resume":
        assert_matches_recovered(store, CASE)
    else:
        assert tree(store) == old


def test_rollback_refuses_a_file_written_since_and_repeats_safely(staged, tmp_path):
    """After the switch a file the broker wrote into (same size, new bytes) stops the rollback, naming it;
    once it is put back, rollback restores the input, and a second rollback finds nothing to undo."""
    from jobs.pipeline.recover import inplace
    from jobs.pipeline.runtime.failure import JobError

    store = fresh(staged, tmp_path)
    backup = tmp_path / "backup"
    old = {k: v for k, v in tree(store).items() if not k.startswith(".reput")}
    ops = ops_for(staged, store)
    inplace.apply(store, store / STAGING, backup, ops, {})
    target = store / "checkpoint"
    assert any(o.op == "replace" and o.path == "checkpoint" for o in ops)
    with open(target, "r+b") as f:  # a broker started since writes its checkpoint in place
        f.write(b"\x01" * 8)
    with pytest.raises(JobError, match="changed since the recovery") as refused:
        inplace.rollback(store, backup)
    assert str(target.relative_to(store)) in str(refused.value)
    shutil.copyfile(backup / "checkpoint", tmp_path / "x")  # not the recovered file: the original, by its bytes
    os.replace(tmp_path / "x", target)
    inplace.rollback(store, backup)
    assert tree(store) == old
    inplace.rollback(store, backup)
    assert tree(store) == old


def test_backup_on_another_filesystem_is_copied_and_checked_by_sha256(staged, tmp_path, monkeypatch):
    """Where DIR is on another filesystem the backup is copied and each copy checked by sha256 (hashes taken
    then, for ops built for links); rollback restores from the copies."""
    from jobs.pipeline.recover import inplace

    store = fresh(staged, tmp_path)
    backup = tmp_path / "backup"
    old = {k: v for k, v in tree(store).items() if not k.startswith(".reput")}
    monkeypatch.setattr(inplace, "same_filesystem", lambda *_: False)
    manifest = inplace.apply(store, store / STAGING, backup, ops_for(staged, store), {})
    assert manifest["backup"]["copied"] > 0 and manifest["backup"]["hard_linked"] == 0
    for o in manifest["ops"]:
        if o["op"] != "create":
            assert o["old_sha256"] == tree(backup)[o["path"]]
            assert os.stat(backup / o["path"]).st_ino != int(o["old_file"].split(":")[0])
    assert_matches_recovered(store, CASE)
    inplace.rollback(store, backup)
    assert tree(store) == old
