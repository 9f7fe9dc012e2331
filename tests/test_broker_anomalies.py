"""The golden cases RocketMQ 4.9.8 itself wrote for stores out of the ordinary (golden/broker-anomalies/, README
there): queue offsets out of step (plain and DLedger), expiry by the broker's clean service, and a PREPARED record
at the log's tail. Each is compared with the broker's own files: consume queues byte for byte, index files by
content in name order (the broker names them by its wall clock)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from jobs.rebuild import main as rebuild_main
from jobs.verify import main as verify_main
from tests.conftest import GOLDEN, manifest, restored_copy

ANOMALIES = "broker-anomalies"


def anomaly_cases(*prefixes: str) -> list[str]:
    """The subfolder's cases whose names start with one of `prefixes` (a missing folder fails: ground truth)."""
    root = GOLDEN / ANOMALIES
    assert root.is_dir(), f"golden cases missing: {root}"
    return sorted(p.name for p in root.iterdir() if p.name.startswith(prefixes) and (p / "manifest.json").is_file())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def consume_queues(root: Path) -> dict[str, str]:
    """{topic/queueId/file: sha256} of a store's or an OUT's consume queues."""
    base = root / "consumequeue"
    return {p.relative_to(base).as_posix(): _sha(p) for p in sorted(base.rglob("*")) if p.is_file()}


def index_contents(root: Path) -> list[str]:
    """sha256 of the index files in name order."""
    return [_sha(p) for p in sorted((root / "index").iterdir()) if p.is_file()]


def damaged_queue(case: str) -> str:
    """"topic/queueId" of the queue whose offsets the case rewrote (its CASE.txt says so)."""
    text = (GOLDEN / ANOMALIES / case / "CASE.txt").read_text()
    return re.search(r"^queue:? (\S+/\d+)", text, re.M).group(1)


def _rebuild(store: Path, conf: Path, out: Path, *extra: str) -> int:
    return rebuild_main(["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--quiet", *extra])


# -- queue offsets out of step -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", anomaly_cases("q-", "dl-"))
def test_rebuild_of_an_out_of_step_queue_is_the_brokers(case, tmp_path, capfd):
    """The crafted log rebuilt: every consume-queue file the broker's dispatch wrote (the empty one it leaves after a
    full file for `stuck-after-full` included) and its index files; the damaged queue named on stderr."""
    store = restored_copy(f"{ANOMALIES}/{case}", tmp_path / "store")  # DLedger index files back at their length
    out = tmp_path / "out"
    assert _rebuild(store, store / "broker.conf", out) == 0
    queue = damaged_queue(case)
    assert f"{queue}'s next offset" in capfd.readouterr().err
    broker = {k.removeprefix("consumequeue/"): v["sha256"] for k, v in manifest(f"{ANOMALIES}/{case}")["files"].items()
              if k.startswith("consumequeue/")}
    assert consume_queues(out) == broker
    assert index_contents(out) == index_contents(store)
    report = json.loads((out / "reput-report.json").read_text())
    assert report["out_of_step_queues"]["queues"] == [queue]


@pytest.mark.parametrize("case", ["q-stuck-after-full-11", "dl-stuck-after-full-cfg-11"])
def test_the_brokers_empty_file_after_a_full_one_is_there(case, tmp_path):
    """stuck-after-full: the broker's store holds TopicTest/1/00000000000000002000 all zeros (getLastMappedFile made
    it for a repeat it then skipped); reput's rebuild writes it so, and verify counts the broker's store as it is:
    the damaged record is the one finding, the empty file none. (In dl-stuck-after-full-11 without `-cfg` the
    broker's reopen delivered delay messages into that file: its rebuild is compared above.)"""
    store = restored_copy(f"{ANOMALIES}/{case}", tmp_path / "store")
    empty = store / "consumequeue" / "TopicTest" / "1" / "00000000000000002000"
    assert empty.stat().st_size == 2000 and not any(empty.read_bytes())
    assert _rebuild(store, store / "broker.conf", tmp_path / "out", "--only", "consumequeue") == 0
    assert (tmp_path / "out" / "consumequeue" / "TopicTest" / "1" / empty.name).read_bytes() == empty.read_bytes()
    assert verify_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--quiet",
                        "--report", str(tmp_path / "verify.json")]) == 1
    assert json.loads((tmp_path / "verify.json").read_text())["finding_counts"] == {
        "commitlog.out_of_step_queue_offset": 1}


def test_the_empty_file_outlives_expiry_as_the_brokers_clean_service_keeps_it(tmp_path):
    """stuck-after-full's oldest 4 segments expired (every unit of TopicTest/1's first file points below the new min
    offset): rebuild --since deletes that file and keeps the empty one, the queue's last file, as
    MappedFileQueue.deleteExpiredFileByOffset does (every file but the last, by its last unit)."""
    case = f"{ANOMALIES}/q-stuck-after-full-11"
    store = restored_copy(case, tmp_path / "store")
    conf = store / "broker.conf"
    assert _rebuild(store, conf, tmp_path / "out1") == 0
    after = tmp_path / "after"
    (after / "commitlog").mkdir(parents=True)
    for seg in sorted((store / "commitlog").iterdir())[4:]:
        shutil.copyfile(seg, after / "commitlog" / seg.name)
    assert _rebuild(after, conf, tmp_path / "out2", "--since", str(tmp_path / "out1")) == 0
    queue = tmp_path / "out2" / "consumequeue" / "TopicTest" / "1"
    assert [p.name for p in queue.iterdir()] == ["00000000000000002000"]
    assert queue.joinpath("00000000000000002000").read_bytes() == bytes(2000)


# -- expiry: the broker's clean service -------------------------------------------------------------------------

def _expiry_store(case: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(before/ as a store holding its commit log only, after/'s commit log as a store, the broker.conf)."""
    root = GOLDEN / ANOMALIES / case
    before, after = tmp_path / "before", tmp_path / "after"
    for src, dest in ((root / "before", before), (root / "after", after)):
        shutil.copytree(src / "commitlog", dest / "commitlog")
    return before, after, root / "broker.conf"


@pytest.mark.parametrize("case", anomaly_cases("expiry-"))
def test_rebuild_since_after_the_clean_service_is_the_brokers(case, tmp_path):
    """OUT1 = a rebuild of before/ (the broker's before/ files); the store's oldest segments expired by 4.9.8's clean
    service: rebuild --since OUT1 gives after/'s consume queues and index, and so does --in-place on a copy of OUT1."""
    root = GOLDEN / ANOMALIES / case
    before, after, conf = _expiry_store(case, tmp_path)
    out1 = tmp_path / "out1"
    assert _rebuild(before, conf, out1) == 0
    assert consume_queues(out1) == consume_queues(root / "before")
    assert index_contents(out1) == index_contents(root / "before")
    shutil.copytree(out1, tmp_path / "inplace")
    assert _rebuild(after, conf, tmp_path / "out2", "--since", str(out1)) == 0
    report = json.loads((tmp_path / "out2" / "reput-report.json").read_text())
    expired = report["since"]["expired"]
    assert expired["consumequeue_files"] + len(expired["index_files"]) > 0, expired
    assert rebuild_main(["--store", str(after), "--broker-config", str(conf), "--since", str(tmp_path / "inplace"),
                         "--in-place", "--backup-dir", str(tmp_path / "backup"), "--quiet"]) == 0
    for out in (tmp_path / "out2", tmp_path / "inplace"):
        assert consume_queues(out) == consume_queues(root / "after"), out.name
        assert index_contents(out) == index_contents(root / "after"), out.name
