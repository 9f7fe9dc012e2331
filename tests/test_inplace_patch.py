"""recover --in-place patches the files it changes in a few ranges (kept consume-queue files with re-dispatched
units, an index file keys are appended to) instead of staging them whole: the store equals recover --out's, only
the changed ranges are staged and backed up (each side packed in one file), and killed at each point (a patch written part-way included) the
switch still has its ways back and forward; a patched file written since the switch stops a rollback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from storage_format.consume_queue import CQ_DTYPE

from tests.conftest import REPO
from tests.recovery_helpers import CONF, assert_matches_recovered, tree, writable_copy

CASE = "unclean-11"


def lagging_store(golden: Path, dst: Path) -> Path:
    """unclean-11 with consume queues behind the commit log inside kept files (a lost tail of units in two
    queues): recovery re-dispatches them into the files it keeps, i.e. patches them."""
    store = writable_copy(golden / CASE, dst)
    cq = store / "consumequeue"
    tt0 = cq / "TopicTest" / "0" / "00000000000000002000"
    data = bytearray(tt0.read_bytes())
    data[1400:] = bytes(len(data) - 1400)
    tt0.write_bytes(bytes(data))
    pe1 = cq / "Pay-Events" / "1" / "00000000000000002000"
    units = np.frombuffer(pe1.read_bytes(), dtype=CQ_DTYPE).copy()
    n = int(np.flatnonzero(units["size"] == 0)[0])
    units[n - 5:n] = 0
    pe1.write_bytes(units.tobytes())
    return store


def recovered_view(root: Path) -> dict:
    """What recovery decides: consume queues, commit log, checkpoint by path, index files by content in name
    order (new ones are named by the clock), no abort."""
    t = tree(root)
    view = {k: v for k, v in t.items() if k.startswith(("consumequeue/", "commitlog/")) or k == "checkpoint"}
    view["index"] = [t[k] for k in sorted(k for k in t if k.startswith("index/"))]
    view["abort"] = (root / "abort").exists()
    return view


def cli(store: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if crash_at:
        env["REPUT_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config",
                           str(CONF), "--master", "local[1]", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def expected(golden, tmp_path_factory) -> dict:
    """recover --out of the lagging store: what the in-place switch must leave."""
    root = tmp_path_factory.mktemp("patch-out")
    store = lagging_store(golden, root / "store")
    done = cli(store, "--out", str(root / "out"), "--json")
    assert done.returncode == 0, done.stderr
    return recovered_view(root / "out")


def ops_of(backup: Path) -> list[dict]:
    return json.loads((backup / "reput-backup.json").read_text())["ops"]


@pytest.mark.parametrize("chunk_pages", [4096, 2, 1])
def test_changed_ranges_are_whole_pages_merged_with_a_short_tail(monkeypatch, chunk_pages) -> None:
    """Also when the comparison's chunks cut between merged pages."""
    from jobs.pipeline.recover import patches
    from jobs.pipeline.recover.patches import PAGE, changed_ranges

    monkeypatch.setattr(patches, "COMPARE_PAGES", chunk_pages)

    old = bytes(5 * PAGE + 100)
    new = bytearray(old)
    new[10] = 1  # page 0
    new[PAGE + 5] = 2  # page 1: merged with page 0
    new[3 * PAGE] = 3  # page 3 alone
    new[5 * PAGE + 99] = 4  # the short tail
    assert changed_ranges(old, bytes(new)) == ((0, 2 * PAGE), (3 * PAGE, PAGE), (5 * PAGE, 100))
    new[4 * PAGE] = 5  # page 4 joins page 3 and the tail
    assert changed_ranges(old, bytes(new)) == ((0, 2 * PAGE), (3 * PAGE, 2 * PAGE + 100))
    assert changed_ranges(old, old) == ()
    with pytest.raises(ValueError):
        changed_ranges(old, old[:-1])


def test_patched_switch_equals_out_and_stages_and_backs_up_only_the_ranges(golden, tmp_path, expected):
    """Kept consume-queue files are patched (same inode, size), each op naming its ranges; the backup holds the
    ranges' old bytes and nothing else for them; the store equals recover --out's; rollback restores it all."""
    store = lagging_store(golden, tmp_path / "store")
    old = tree(store)
    inodes = {k: os.stat(store / k).st_ino for k in old}
    backup = tmp_path / "backup"
    done = cli(store, "--in-place", "--backup-dir", str(backup), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    patches = [o for o in ops_of(backup) if o["op"] == "patch"]
    paths = {o["path"] for o in patches}
    assert {"consumequeue/TopicTest/0/00000000000000002000", "consumequeue/Pay-Events/1/00000000000000002000"} <= paths
    assert report["in_place"]["backup"]["patched"] == len(patches) > 0
    packed = sum(sum(n for _, n in o["ranges"]) for o in patches)
    assert report["in_place"]["backup"]["patched_bytes"] == packed == (backup / "reput-patches.old").stat().st_size
    for o in patches:
        size = sum(n for _, n in o["ranges"])
        assert size < os.stat(store / o["path"]).st_size  # a part of the file, not all of it
        assert not (backup / o["path"]).exists()  # packed with the others
        assert os.stat(store / o["path"]).st_ino == inodes[o["path"]]
    assert recovered_view(store) == expected
    assert not (store / ".reput-recover.staging").exists() and not (store / ".reput-recover.journal").exists()
    back = cli(store, "--rollback", "--backup-dir", str(backup))
    assert back.returncode == 0, back.stderr
    assert tree(store) == old


def _patch_op_number(backup: Path) -> int:
    """1-based position of the first patch among the switch's operations."""
    return next(i for i, o in enumerate(ops_of(backup), 1) if o["op"] == "patch")


@pytest.mark.parametrize("point,way", [("staged", None), ("backed-up", None), ("journaled", "rollback"),
                                       ("patch", "resume"), ("patch", "rollback"), ("applied", "rollback")])
def test_killed_patched_switch_has_a_way_back_and_forward(golden, tmp_path, expected, point, way):
    """SIGKILL at each point: before the journal the store is untouched; after it --resume leaves recover
    --out's store and --rollback the crashed input, byte for byte."""
    store = lagging_store(golden, tmp_path / "store")
    old = tree(store)
    backup = tmp_path / "backup"
    if point == "patch":  # right after the first patch was written
        probe = lagging_store(golden, tmp_path / "probe")
        assert cli(probe, "--in-place", "--backup-dir", str(tmp_path / "probe-backup")).returncode == 0
        point = f"op-{_patch_op_number(tmp_path / 'probe-backup')}"
    killed = cli(store, "--in-place", "--backup-dir", str(backup), crash_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if way is None:
        assert not (store / ".reput-recover.journal").exists()
        assert {k: v for k, v in tree(store).items() if not k.startswith(".reput")} == old
        return
    done = cli(store, f"--{way}", "--backup-dir", str(backup))
    assert done.returncode == 0, done.stderr
    assert not (store / ".reput-recover.journal").exists() and not (store / ".reput-recover.staging").exists()
    if way == "resume":
        assert recovered_view(store) == expected
    else:
        assert tree(store) == old


@pytest.mark.parametrize("way", ["resume", "rollback"])
def test_a_patch_written_part_way_is_finished_or_undone(golden, tmp_path, expected, way):
    """Killed while a patch was being written (its first page new, the rest old, the modification time not yet
    set): resume finishes it, rollback restores the old bytes; a page holding neither stops the rollback."""
    from jobs.pipeline.recover import inplace
    from jobs.pipeline.recover.journal import Op
    from jobs.pipeline.recover.op_state import patch_state
    from jobs.pipeline.recover.patches import PAGE, staged_new

    store = lagging_store(golden, tmp_path / "store")
    old = tree(store)
    backup = tmp_path / "backup"
    assert cli(store, "--in-place", "--backup-dir", str(backup), crash_at="journaled").returncode == -signal.SIGKILL
    op = next(Op(**o) for o in ops_of(backup) if o["op"] == "patch")
    new = staged_new(store / op.path, op)
    at, n = op.ranges[0]
    with open(store / op.path, "r+b") as f:  # a torn write: the first page of the range only
        f.seek(at)
        f.write(new[:min(n, PAGE)])
    assert patch_state(store / op.path, op, backup, interrupted=True) in ("torn", "new")
    if way == "rollback":
        with open(store / op.path, "r+b") as f:
            f.seek(at)
            f.write(b"\xff" * 4)  # neither old nor new
        with pytest.raises(Exception, match="changed since the recovery"):
            inplace.rollback(store, backup)
        with open(store / op.path, "r+b") as f:
            f.seek(at)
            f.write(new[:4])
    done = cli(store, f"--{way}", "--backup-dir", str(backup))
    assert done.returncode == 0, done.stderr
    if way == "resume":
        assert recovered_view(store) == expected
    else:
        assert tree(store) == old


def test_rollback_refuses_a_patched_file_written_since_the_switch(golden, tmp_path):
    """After the switch, a unit a broker appends to a patched file (outside the patched ranges) stops the
    rollback with exit 2 and a one-line error naming the file; the store is left as it is."""
    store = lagging_store(golden, tmp_path / "store")
    backup = tmp_path / "backup"
    done = cli(store, "--in-place", "--backup-dir", str(backup))
    assert done.returncode == 0 and "2 files patched in place (the old bytes of their changed ranges saved)" in \
        done.stdout, done.stdout
    op = next(o for o in ops_of(backup) if o["op"] == "patch")
    target = store / op["path"]
    end = max(a + n for a, n in op["ranges"])
    with open(target, "r+b") as f:  # the broker appends a unit after the recovered ones
        f.seek(end)
        f.write(b"\x01" * 20)
    before = tree(store)
    back = cli(store, "--rollback", "--backup-dir", str(backup))
    assert back.returncode == 2 and "changed since the recovery" in back.stderr and op["path"] in back.stderr
    assert "Traceback" not in back.stderr and len(back.stderr.strip().splitlines()) == 1
    assert tree(store) == before


def test_an_index_file_rewritten_at_its_size_is_patched_in_its_changed_pages(tmp_path):
    """An index file recovery appends keys to (rendered whole, same size) becomes a patch of the pages that
    differ (header, slots, entries), applied over the same inode; the checkpoint stays a whole-file
    replacement; rollback restores the old bytes and the old modification time."""
    from jobs.pipeline.recover import inplace
    from jobs.pipeline.recover.journal import PATCHES_OLD, STAGING
    from jobs.pipeline.recover.patches import PAGE, split_patches, stage_patches
    from jobs.pipeline.recover.write import RecoveryOutput

    store = tmp_path / "store"
    (store / "index").mkdir(parents=True)
    old = os.urandom(40 * PAGE + 123)
    new = bytearray(old)
    new[0:40] = bytes(40)  # header
    new[17 * PAGE + 5] ^= 0xFF  # a hash slot
    new[-100:] = os.urandom(100)  # appended entries in the short last page
    (store / "index" / "20261126000000000").write_bytes(old)
    (store / "checkpoint").write_bytes(b"\0" * 4096)
    output = RecoveryOutput(render_bytes={"index/20261126000000000": bytes(new), "checkpoint": b"\1" * 4096})
    patches, rest = split_patches(output, store)
    patches = list(patches)  # rendered when taken
    assert list(rest.render_bytes) == ["checkpoint"] and output.render_bytes.keys() == {"index/20261126000000000",
                                                                                          "checkpoint"}
    (p,) = patches
    assert p.ranges == ((0, PAGE), (17 * PAGE, PAGE), (40 * PAGE, 123))
    target = store / "index" / "20261126000000000"
    before = os.stat(target)
    staging = inplace.prepare_staging(store)
    (staging / "checkpoint").write_bytes(b"\1" * 4096)
    ops = inplace.build_ops(store, staging, ["checkpoint"], [], hashed=False,
                            patched=stage_patches(store, staging, patches))
    assert [o.op for o in ops] == ["patch", "replace"]
    backup = tmp_path / "backup"
    manifest = inplace.apply(store, staging, backup, ops, {})
    assert target.read_bytes() == bytes(new) and os.stat(target).st_ino == before.st_ino
    assert manifest["backup"]["patched_bytes"] == 2 * PAGE + 123
    assert (backup / PATCHES_OLD).stat().st_size == 2 * PAGE + 123
    assert not (store / STAGING).exists()
    inplace.rollback(store, backup)
    assert target.read_bytes() == old and os.stat(target).st_mtime_ns == before.st_mtime_ns
    assert (store / "checkpoint").read_bytes() == b"\0" * 4096


@pytest.mark.parametrize("case", ["lmq-unclean-11", "v5-lmq-unclean-11", "v5-controller-unclean-11"])
def test_golden_crashes_recovered_in_place_with_patches_equal_the_brokers(golden, tmp_path, case):
    """Golden crashes whose recovery re-dispatches into kept consume-queue files (LMQ queues, 5.x controller
    mode): in place, those files are patched, and the store equals RocketMQ's own recovery byte for byte."""
    store = writable_copy(golden / case, tmp_path / "store")
    done = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config",
                           str(golden / case / "broker.conf"), "--in-place", "--backup-dir", str(tmp_path / "bk"),
                           "--master", "local[1]", "--json"], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["in_place"]["backup"]["patched"] > 0
    assert_matches_recovered(store, case)
