"""What the recover tests share: the golden crashed stores paired with the broker's recovery of them, OUT
compared with that recovery, recover run in this process or held at a test hook and signalled, and the small
consume-queue files of the unit tests."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from storage_format import recovery as R
from storage_format.consume_queue import CQ_DTYPE
from storage_format.settings import BrokerSettings
from tests.conftest import GOLDEN, REPO, golden_cases, manifest, private_temp_env
from tests.helpers import ended, kill_group, start_at_hook, wait_at_hook

# Every golden crashed input with the broker's recovered store beside it: `<case>-recovered`, and the
# controller-mode store that kept `abort` through a graceful shutdown, reopened by the broker.
RECOVERY_PAIRS = {**{c: f"{c}-recovered" for c in golden_cases() if f"{c}-recovered" in golden_cases()},
                  "v5-controller-clean-small-11": "v5-controller-clean-small-11-reopened"}
CONF = GOLDEN / "unclean-11" / "broker.conf"
UNCLEAN_CASE = "unclean-11"

# the unit tests' small layout
SETTINGS = BrokerSettings(mapped_file_size_consume_queue=100, max_index_num=8, max_hash_slot_num=4)
FS = SETTINGS.consume_queue_file_size  # 5 units per consume-queue file


def sha(path: Path) -> str:
    """sha256 of a file, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path, skip: tuple[str, ...] = ("broker.conf", "manifest.json", "reput-recover-report.json",
                                              "reput-files.parquet")) -> dict[str, str]:
    """sha256 of every file under root, by relative path (an OUT's record of its files left out: its mtimes)."""
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file() and p.name not in skip}


def writable_copy(src: Path, dst: Path) -> Path:
    """A copy of a golden store whose files and directories are writable (the golden ones are read-only)."""
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def assert_matches_recovered(out: Path, case: str) -> None:
    """OUT equals the broker's recovery of `case`: commit-log names and sha256, consume-queue paths and
    sha256, index files in name order by sha256, checkpoint sha256, no abort, 5.x abort.bak."""
    files = manifest(RECOVERY_PAIRS[case])["files"]
    for prefix in ("commitlog/", "consumequeue/"):
        expect = {k: v["sha256"] for k, v in files.items() if k.startswith(prefix)}
        got = {k: v for k, v in tree(out).items() if k.startswith(prefix)}
        assert got == expect, f"{case} {prefix}: differs at {sorted(set(got.items()) ^ set(expect.items()))[:3]}"
    dledger = {k: v["sha256"] for k, v in files.items() if k.startswith("dledger-")}
    if dledger:  # DLedger mode: the member's files too (the index at its real length, as the manifest lists it)
        assert {k: v for k, v in tree(out).items() if k.startswith("dledger-")} == dledger
    expect_index = [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]
    assert [sha(p) for p in sorted((out / "index").iterdir())] == expect_index
    assert sha(out / "checkpoint") == files["checkpoint"]["sha256"]
    assert not (out / "abort").exists()
    if "abort.bak" in files:
        assert sha(out / "abort.bak") == files["abort.bak"]["sha256"]
    assert (out / "lock").read_bytes() == b"lock"


def run_recover(*args: str) -> int:
    """jobs.recover's main in this process: its exit status."""
    from jobs.recover import main

    return main(list(args))


def cq_file(units: list[tuple[int, int, int]]) -> bytes:
    """A consume-queue file of the small layout holding (phy, size, tags) units, zeros after them."""
    arr = np.zeros(FS // 20, dtype=CQ_DTYPE)
    for i, (phy, size, tags) in enumerate(units):
        arr[i] = (phy, size, tags)
    return arr.tobytes()


def entries(rows: list[tuple[int, int, int]]) -> R.QueueEntries:
    """(queueOffset, phy, size) rows; tags = phy so units are easy to recognise."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return R.QueueEntries(a[:, 0], a[:, 1], a[:, 2].astype(np.int32), a[:, 1].copy())


def staging_left(parent: Path) -> list[str]:
    """The staging directories a job left in OUT's parent."""
    return [p.name for p in parent.iterdir() if ".reput-staging-" in p.name]


def interrupted_recover_leaves_nothing(tmp_path: Path, hook: str, settle_s: float, sig: int, status: int,
                                       case: str = UNCLEAN_CASE) -> None:
    """recover --out of a copy of `case` held at test hook `hook` (after `settle_s` more), then signalled: exit
    `status` with the one interrupted line and no traceback, OUT absent, no staging left (while paused, the
    staging directory existed), the store unchanged."""
    store = writable_copy(GOLDEN / case, tmp_path / "store")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    parent = tmp_path / "outs"
    parent.mkdir()
    temp = Path(tempfile.mkdtemp(prefix=f"reput-{hook}-"))
    argv = ["--store", str(store), "--broker-config", str(CONF), "--out", str(parent / "out"), "--master", "local[2]"]
    env = dict(os.environ, **private_temp_env(temp), PYTHONPATH=str(REPO))
    try:
        proc = start_at_hook("recover", argv, hook, tmp_path / "paused", env=env, stdout=subprocess.DEVNULL)
        try:
            wait_at_hook(proc, tmp_path / "paused")
            assert staging_left(parent)
            time.sleep(settle_s)
            proc.send_signal(sig)
        except BaseException:
            kill_group(proc)
            raise
        run = ended(proc)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # the job's own temp files went with it (test_signals checks that)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == status, lines[-5:]
    assert lines[-1].startswith("reput recover: interrupted"), lines[-5:]
    assert "Traceback" not in run.stderr
    assert not (parent / "out").exists() and staging_left(parent) == []
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
