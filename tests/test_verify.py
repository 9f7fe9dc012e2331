"""jobs.verify: every consistent golden store passes; the torn stores and copies with injected faults
fail with findings that name the file, the entry and the field."""
from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pytest

from jobs.pipeline.runtime.cli import run_main
from jobs.verify import main as verify_main
from tests.conftest import GOLDEN, REPO, case_params, expected_scan, golden_cases, manifest, restored_copy
from tests.helpers import file_tree_digest, run_verify

# Stores a recovery produced (`*-recovered`, or reopened: manifest `recovered_from`) index one record twice;
# verify reports that (see test_reopened_store_differs_only_in_recreated_index_files).
CONSISTENT = [c for c in golden_cases() if "recovered" not in c and "recovered_from" not in manifest(c)
              and manifest(c)["oracle_self_check"]["byte_exact_match"]]
REOPENED = [c for c in golden_cases() if "recovered_from" in manifest(c) and "recovered" not in c]
TORN = [c for c in golden_cases() if c.endswith("unclean-torn-11")]
BASE = "clean-small-11"
SLOTS, ENTRIES = 64, 256  # the small profile's maxHashSlotNum / maxIndexNum


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A private copy of clean-small-11 to break."""
    dest = tmp_path / "store"
    shutil.copytree(GOLDEN / BASE, dest)
    return dest


def kinds(report: dict) -> dict[str, int]:
    return report["finding_counts"]


@pytest.mark.parametrize("case", case_params(CONSISTENT))
def test_consistent_golden_stores_exit_0(case, spark, golden, tmp_path, capsys):
    """Clean, headless-rebuilt and crashed-but-untorn stores: every file is what the commit log implies.
    Nothing is written into the store, and the work directory is removed."""
    dledger = case.startswith("dledger-")
    store = restored_copy(case, tmp_path / "store") if dledger else GOLDEN / case
    code, report = run_verify(store, tmp_path)
    assert code == 0, report["findings"][:5]
    assert report["status"] == "consistent" and report["findings_total"] == 0
    m = manifest(case)
    files = m["files"]
    assert report["consumequeue_files_checked"] == sum(1 for f in files if f.startswith("consumequeue/"))
    assert report["index_files_checked"] == report["index_files_expected"] == len(m["index_files"])
    assert report["commitlog"]["max_physical_offset"] == expected_scan(case)["max_physical_offset"]
    if dledger:  # every entry's DLedger index unit compared, under the reading a one-member group implies
        assert report["dledger_index_units_checked"] == m["dledger_scan"]["entries"]
        assert report["dledger"]["reading_checked"] == "surviving"
        assert report["dledger"]["entries_past_committed_index"] == 0
    assert not (tmp_path / "work").exists()  # --work-dir made for the run: gone with its work directory
    assert "CONSISTENT: every checked file" in capsys.readouterr().out


def test_verify_writes_nothing_into_the_store(spark, store, tmp_path, capsys):
    before = file_tree_digest(store)
    code, _ = run_verify(store, tmp_path)
    assert code == 0 and file_tree_digest(store) == before
    out = capsys.readouterr().out
    assert "CONSISTENT" in out


@pytest.mark.parametrize("case", TORN)
def test_torn_store_reports_the_torn_record(case, spark, golden, tmp_path):
    """The consume-queue entry and the index entries of the torn record point past the commit log's valid
    end; nothing else is reported, and the index file is the one the manifest's oracle names."""
    m = manifest(case)
    torn = m["torn"]
    code, report = run_verify(GOLDEN / case, tmp_path)
    assert code == 1
    found = report["findings"]
    cq = [d for d in found if d["artifact"] == "consumequeue"]
    assert len(cq) == 1 and cq[0]["kind"] == "extra_entry" and cq[0]["points_at"] == "past_end"
    assert cq[0]["queue"] == f"{torn['torn_record_topic']}/{torn['torn_record_queue']}"
    assert cq[0]["entry"] == torn["torn_record_queueOffset"]
    assert cq[0]["found"]["phyOffset"] == torn["torn_record_offset"]
    assert cq[0]["found"]["size"] == torn["torn_record_size"]
    cq_problem = next(p for p in m["oracle_self_check"]["problems"] if p.startswith("CQ mismatch"))
    assert cq[0]["path"] in cq_problem
    index_name = re.search(r"index mismatch #\d+ (\d{17})", " ".join(m["oracle_self_check"]["problems"])).group(1)
    ix = [d for d in found if d["artifact"] == "index"]
    assert {d["path"] for d in ix} == {f"index/{index_name}"}
    extra = [d for d in ix if d["kind"] == "extra_entry"]
    assert extra and all(d["found"]["phyOffset"] == torn["torn_record_offset"] and d["points_at"] == "past_end"
                         for d in extra)
    assert {d["field"] for d in ix if d["kind"] == "header_differs"} >= {"endPhyOffset", "indexCount"}
    assert set(kinds(report)) <= {"commitlog.invalid_tail", "consumequeue.extra_entry", "index.extra_entry",
                                  "index.header_differs", "index.slot_differs"}
    tail = [d for d in found if d["artifact"] == "commitlog"]
    assert len(tail) == 1 and tail[0]["commitlog_offset"] == torn["torn_record_offset"]
    assert tail[0]["path"].endswith("/commitlog/" + f"{torn['torn_record_offset'] - tail[0]['byte_offset']:020d}")


def test_flipped_byte_in_a_consume_queue_entry(spark, store, tmp_path):
    rel = "consumequeue/TopicTest/0/00000000000000002000"
    path = store / rel
    data = bytearray(path.read_bytes())
    entry = 7
    (phy,) = struct.unpack_from(">q", data, entry * 20)
    data[entry * 20 + 6] ^= 0x10  # a byte inside phyOffset
    path.write_bytes(data)
    code, report = run_verify(store, tmp_path)
    assert code == 1 and kinds(report) == {"consumequeue.entry_differs": 1}
    d = report["findings"][0]
    assert d["path"] == rel and d["entry"] == 100 + entry and d["byte_offset"] == entry * 20
    assert d["fields"] == ["phyOffset"] and d["expected"]["phyOffset"] == phy
    assert d["found"]["phyOffset"] == phy ^ (0x10 << 8)
    assert d["points_at"] == "not_a_record"


def test_deleted_consume_queue_file(spark, store, tmp_path, capsys):
    rel = "consumequeue/TopicTest/1/00000000000000002000"
    entries = sum(1 for phy, size, _ in struct.iter_unpack(">qiq", (store / rel).read_bytes()) if size)
    (store / rel).unlink()
    code, report = run_verify(store, tmp_path)
    assert code == 1 and kinds(report) == {"consumequeue.missing_file": 1}
    d = report["findings"][0]
    assert d["path"] == rel and d["entry"] == 100 and d["entries"] == entries
    assert rel in capsys.readouterr().out


def _index_names(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "index").iterdir())


def test_truncated_index_file(spark, store, tmp_path):
    name = _index_names(store)[3]
    path = store / "index" / name
    keep = 40 + SLOTS * 4 + 200 * 20  # entries 200.. are cut off
    data = path.read_bytes()
    (count,) = struct.unpack_from(">i", data, 36)
    path.write_bytes(data[:keep])
    code, report = run_verify(store, tmp_path)
    assert code == 1
    rel = f"index/{name}"
    assert {d["path"] for d in report["findings"]} == {rel}
    size = next(d for d in report["findings"] if d["kind"] == "wrong_size")
    assert size["found"] == keep and size["expected"] == len(data) and "position 200" in size["detail"]
    missing = sorted(d["position"] for d in report["findings"] if d["kind"] == "missing_entry")
    assert missing[0] == 200 and report["per_file"][rel]["missing_entry"] == count - 200


def test_zeroed_index_slot(spark, store, tmp_path):
    """The slot's whole chain becomes unreachable: the slot, every entry of the chain (unreachable) and
    every key in it (not found) are named."""
    name = _index_names(store)[5]
    path = store / "index" / name
    data = bytearray(path.read_bytes())
    slot = next(s for s in range(SLOTS) if struct.unpack_from(">i", data, 40 + 4 * s)[0] > 0)
    (pos,) = struct.unpack_from(">i", data, 40 + 4 * slot)
    chain = []
    while pos > 0:
        chain.append(pos)
        (pos,) = struct.unpack_from(">i", data, 40 + SLOTS * 4 + pos * 20 + 16)
    struct.pack_into(">i", data, 40 + 4 * slot, 0)
    path.write_bytes(data)
    code, report = run_verify(store, tmp_path)
    assert code == 1
    rel = f"index/{name}"
    found = report["findings"]
    assert {d["path"] for d in found} == {rel}
    s = [d for d in found if d["kind"] == "slot_differs"]
    assert len(s) == 1 and s[0]["slot"] == slot and s[0]["found"] == 0 and s[0]["expected"] == chain[0]
    assert s[0]["byte_offset"] == 40 + 4 * slot
    assert sorted(d["position"] for d in found if d["kind"] == "key_not_found") == sorted(chain)
    assert sorted(d["position"] for d in found if d["kind"] == "broken_chain") == sorted(chain)


def test_deleted_index_file_is_named_and_the_rest_still_pair(spark, store, tmp_path):
    """Files are paired by their headers, so a missing middle file does not shift the comparison."""
    names = _index_names(store)
    (store / "index" / names[10]).unlink()
    code, report = run_verify(store, tmp_path)
    assert code == 1 and kinds(report) == {"index.missing_file": 1}
    d = report["findings"][0]
    assert d["file_number"] == 10 and names[9] in d["detail"]
    assert report["index_files_checked"] == len(names) - 1


def test_consume_queue_tail_extra_entry_and_stale_bytes(spark, store, tmp_path):
    """Past a queue's logical end: a unit the broker would read is an extra entry (here pointing past
    the commit log's end); non-zero bytes after the broker's stopping point are stale bytes."""
    qdir = store / "consumequeue" / "TopicTest" / "0"
    last = sorted(qdir.iterdir())[-1]
    data = bytearray(last.read_bytes())
    used = next(i for i, (p, s, t) in enumerate(struct.iter_unpack(">qiq", data)) if s == 0)
    struct.pack_into(">qiq", data, used * 20, 10**9, 300, 0)
    struct.pack_into(">qiq", data, (used + 3) * 20, 5, 5, 5)
    last.write_bytes(data)
    code, report = run_verify(store, tmp_path)
    assert code == 1
    assert kinds(report) == {"consumequeue.extra_entry": 1, "consumequeue.stale_bytes": 1}
    start = int(last.name) // 20
    extra = next(d for d in report["findings"] if d["kind"] == "extra_entry")
    assert extra["entry"] == start + used and extra["points_at"] == "past_end"
    stale = next(d for d in report["findings"] if d["kind"] == "stale_bytes")
    assert stale["entry"] == start + used + 3 and stale["units"] == 1


def test_cannot_run_exit_2(spark, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as e:
        run_main("verify", verify_main, ["--store", str(tmp_path / "empty")])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:  # the report may not go into the store
        run_main("verify", verify_main, ["--store", str(GOLDEN / BASE), "--report", str(GOLDEN / BASE / "r.json")])
    assert e.value.code == 2


def test_index_alignment_pairs_by_header():
    """Pure pairing: a disk file whose name sorts out of place is paired with the expected file it holds
    and reported out of order; an unknown file is extra; nothing shifts the other pairs."""
    from jobs.pipeline.verify.findings import Findings
    from jobs.pipeline.verify.index_files import align_index_files
    from storage_format.index_file import IndexHeader

    exp = [(i, IndexHeader(1000 * i, 1000 * i + 999, 100 * i, 100 * i + 99, 3, 256)) for i in range(5)]
    junk = IndexHeader(7, 7, 7, 7, 1, 2)
    disk = [("a0", exp[0][1]), ("a1", exp[2][1]), ("a2", exp[1][1]), ("a3", exp[3][1]), ("a4", junk),
            ("a5", exp[4][1])]
    found = Findings()
    pairs = align_index_files(exp, disk, found)
    assert pairs == {0: "a0", 1: "a2", 2: "a1", 3: "a3", 4: "a5"}
    assert found.counts["index.extra_file"] == 1 and found.counts["index.missing_file"] == 0
    assert {d["path"] for d in found.details if d["kind"] == "extra_file"} == {"index/a4"}
    assert {d["path"] for d in found.details if d["kind"] == "out_of_order"} >= {"index/a2"}


@pytest.mark.parametrize("case", REOPENED)
def test_reopened_store_differs_only_in_recreated_index_files(case, spark, tmp_path):
    """A store the broker's abnormal recovery reopened: every consume-queue file is what dispatch up to the
    confirm offset implies; the only findings are in the index files the recovery re-created."""
    code, rep = run_verify(GOLDEN / case, tmp_path)
    kept = set(manifest(case)["oracle_self_check"]["details"]["index_files_kept"])
    assert code == 1 and rep["findings"]
    assert {f["artifact"] for f in rep["findings"]} == {"index"}
    assert all(f["path"].split("/")[-1] not in kept for f in rep["findings"])
    assert rep["dispatch"]["confirm_offset"] == manifest(case)["checkpoint"]["confirmPhyOffset"]


def test_finding_kinds_are_one_registry():
    """Every kind the verify code reports is registered for its artifact, every registered kind is
    reported somewhere, docs/jobs.md's table is the registry's, and an unregistered kind is refused."""
    from jobs.pipeline.verify.findings import KINDS, Findings, detail_order, docs_table

    reported = set()
    for path in (REPO / "jobs").rglob("*.py"):
        text = path.read_text()
        reported |= set(re.findall(r'\.add\("([a-z_]+)", "([a-z_]+)"', text))
        arts = re.findall(r'\bart = (?:ARTIFACT = )?"([a-z_]+)"', text)  # a compare function's artifact, one per module
        assert len(set(arts)) <= 1, path
        reported |= {(arts[0], k) for k in re.findall(r'\.add\(art, "([a-z_]+)"', text)}
    registered = {(a, k.name) for k in KINDS.values() for a in k.artifacts}
    assert reported == registered
    assert docs_table() in (REPO / "docs" / "jobs.md").read_text()
    found = Findings()
    with pytest.raises(ValueError, match="not registered"):
        found.add("index", "no_such_kind", "index/x")
    with pytest.raises(ValueError, match="not registered for consumequeue"):
        found.add("consumequeue", "broken_chain", "consumequeue/t/0/x")
    assert not found.fails()
    for name, k in KINDS.items():
        found.add(k.artifacts[0], name, f"{k.artifacts[0]}/f")
    assert found.fails() and len(sorted(found.details, key=detail_order)) == len(KINDS)


def test_a_multi_dispatch_entry_points_at_its_record(golden):
    """A `%LMQ%` queue's unit points at a record of another topic and queue: the record's INNER_MULTI_DISPATCH /
    INNER_MULTI_QUEUE_OFFSET name the unit's queue and offset, so it is that queue's record (as dump says), and
    the same unit at another offset is not."""
    from jobs.pipeline.verify.pointer import PointerCheck
    from storage_format.scan_plan import Segment

    case = "lmq-clean-small-11"
    paths = sorted((golden / case / "commitlog").iterdir())
    check = PointerCheck(tuple(Segment(int(p.name), p.stat().st_size, str(p)) for p in paths),
                         manifest(case)["commitlog_scan"]["max_physical_offset"])
    queue = golden / case / "consumequeue" / "%LMQ%alerts" / "0" / "00000000000000000000"
    phy, size, _ = struct.unpack_from(">qiq", queue.read_bytes(), 10 * 20)
    assert check.classify(phy, size, ("%LMQ%alerts", 0, 10)) == "record"
    assert check.classify(phy, size, ("%LMQ%alerts", 0, 11)) == "record_other_position"
    assert check.classify(phy, size, ("%LMQ%other", 0, 10)) == "record_other_position"


def test_pointer_check_names_what_an_offset_holds(golden):
    """PointerCheck.classify on a golden store, without Spark: offsets of real records (by the test's own
    reader), a BLANK, bytes inside a record, a record of another size or queue position, filler, and
    offsets outside the valid log."""
    from jobs.pipeline.verify.pointer import PointerCheck
    from storage_format.scan_plan import Segment
    from tests import golden_walk

    paths = sorted((golden / BASE / "commitlog").iterdir())
    segments = tuple(Segment(int(p.name), p.stat().st_size, str(p)) for p in paths)
    records = golden_walk.records(BASE)
    end = manifest(BASE)["commitlog_scan"]["max_physical_offset"]
    check = PointerCheck(segments, end)
    record = records[len(records) // 2]
    phy = record.physical_offset
    seg = max(p for p in paths if int(p.name) <= phy)
    size, _, _, qid, _, qo = struct.unpack_from(">iIiiiq", seg.read_bytes(), phy - int(seg.name))  # FORMAT.md
    topic = record.topic.decode()
    assert check.classify(phy, size, (topic, qid, qo)) == "record"
    assert check.classify(phy, size + 1) == "record_size_mismatch"
    assert check.classify(phy, size, (topic, qid, qo + 1)) == "record_other_position"
    assert check.classify(phy, size, (topic + "X", qid, qo)) == "record_other_position"
    assert check.classify(phy + 1) == "not_a_record"
    assert check.classify(records[0].physical_offset) == "record"
    last_in_first = max(r.physical_offset for r in records if r.physical_offset < int(paths[1].name))
    blank_at = last_in_first + struct.unpack_from(">i", paths[0].read_bytes(), last_in_first - segments[0].start)[0]
    assert check.classify(blank_at) == "blank"
    assert check.classify(0, 0x7FFFFFFF) == "filler"
    assert check.classify(end) == "past_end" and check.classify(-1) == "before_start"


@pytest.mark.parametrize("thing", ["directory", "fifo"])
def test_directory_or_fifo_in_place_of_a_consume_queue_file(thing, spark, store, tmp_path):
    """Only regular files are read: a directory or a FIFO (which would block a reader forever) where a
    consume-queue or index file belongs is a finding, named as what it is."""
    import os
    import signal

    rel = "consumequeue/TopicTest/1/00000000000000002000"
    index = sorted((store / "index").iterdir())[3]
    for path in (store / rel, index):
        path.unlink()
        path.mkdir() if thing == "directory" else os.mkfifo(path)
    what = "a directory" if thing == "directory" else "a FIFO"

    def hang(*_):
        raise TimeoutError("verify hangs on a FIFO")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(600)
    try:
        code, report = run_verify(store, tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert code == 1
    found = {(d["kind"], d["path"]): d for d in report["findings"]}
    assert found[("missing_file", rel)]["detail"].startswith(f"{what} in place of the file")
    assert found[("unexpected_file", rel)]["detail"].startswith(f"{what}, not a regular file: the broker does not start")
    assert found[("unexpected_file", f"index/{index.name}")]["detail"] == f"{what}, not a regular file"
    assert any(kind == "missing_file" and path.startswith("index/(expected file") for kind, path in found)


def test_names_the_broker_would_mis_handle_are_findings_with_its_consequence(spark, store, tmp_path):
    """Names in consumequeue/<t>/<q>/, consumequeue/<t>/ and index/ that the broker would not take as written
    are findings saying what the broker does with them (RocketMQ 4.9.8 loadConsumeQueue, MappedFileQueue.load,
    IndexService.load)."""
    queue = store / "consumequeue" / "TopicTest" / "1"
    shutil.copyfile(queue / "00000000000000002000", queue / "00000000000000002000.bak")
    shutil.copyfile(queue / "00000000000000002000", queue / "000000000000000002000")
    (store / "consumequeue" / "TopicTest" / "01").mkdir()
    (store / "consumequeue" / "TopicTest" / "q1").mkdir()
    (store / "index" / "notes.txt").write_text("x")
    code, report = run_verify(store, tmp_path)
    assert code == 1
    found = {d["path"]: d["detail"] for d in report["findings"] if d["kind"] == "unexpected_file"}
    assert "Long.parseLong" in found["consumequeue/TopicTest/1/00000000000000002000.bak"]
    assert "the broker does not start" in found["consumequeue/TopicTest/1/00000000000000002000.bak"]
    assert "second file for offset 2000" in found["consumequeue/TopicTest/1/000000000000000002000"]
    assert "reads queue 1 from consumequeue/TopicTest/1/ instead" in found["consumequeue/TopicTest/01"]
    assert "the broker skips it (Integer.parseInt throws)" in found["consumequeue/TopicTest/q1"]
    assert "the broker skips it" in found["index/notes.txt"]



def test_every_finding_shape_has_a_console_line():
    """describe() never fails on a finding that lacks `expected` or `found` (a DLedger index unit past the last
    entry has neither)."""
    from jobs.verify import describe

    for kind in ("extra_entry", "missing_entry", "slot_differs", "entry_differs", "header_differs"):
        for extra in ({}, {"field": "pos"}, {"fields": ["phy"]}, {"expected": 1}, {"found": 2}):
            line = describe({"kind": kind, "path": "dledger-n0/index/00000000000000000000", "entry": 7, **extra})
            assert line.strip().startswith("dledger-n0/index/00000000000000000000 entry 7") and kind in line


def test_a_sparse_consume_queue_file_is_proven_equal_from_its_head(tmp_path):
    """A file reput (or a broker on a sparse filesystem) left with a hole after its last unit is proven equal by
    reading up to the next block only; a byte anywhere else, a wrong head or a file without a hole leaves it to the
    full comparison (which reads every byte)."""
    from jobs.pipeline.io.fs import location
    from jobs.pipeline.verify.cq import _equal_up_to_a_hole

    size, expected = 6_000_000, bytes(range(1, 201)) * 3  # 600 bytes: 30 units
    path = tmp_path / "00000000000000000000"

    def write(at_tail: bytes = b"", head: bytes = expected, sparse: bool = True) -> bool:
        with open(path, "wb") as f:
            f.write(head)
            if sparse:
                f.truncate(size)
            else:
                f.write(bytes(size - len(head)))
            if at_tail:
                f.seek(size - 100_000)
                f.write(at_tail)
        return _equal_up_to_a_hole(location(str(path)), expected, size)

    assert write()
    assert not write(at_tail=b"\x01")  # stale bytes far past the last unit: a data block, not a hole
    assert not write(head=expected[:-1] + b"\x00")  # a unit differs
    assert not write(sparse=False)  # zeros written out: no hole to prove it by, the full comparison decides
    assert not _equal_up_to_a_hole(location(str(path)), expected, size + 20)  # the wrong size


def test_a_damaged_record_of_the_log_is_told_on_the_console_with_its_place():
    """A commit-log finding carries its place in its own words (file, byte offset, queue, offsets): the console line
    gives them, not the bare path and kind."""
    from jobs.pipeline.verify.text import describe

    message = ("the record at /s/commitlog/00000000000000262144 at byte offset 195955 (commit-log offset 458099) has "
               "queueOffset 49 where TopicTest/1's next offset is 50")
    line = describe({"artifact": "commitlog", "kind": "out_of_step_queue_offset", "path": "/s/commitlog/0262144",
                     "byte_offset": 195955, "commitlog_offset": 458099, "queue": "TopicTest/1", "queue_offset": 49,
                     "next_offset": 50, "message": message})
    assert line == f"  out_of_step_queue_offset: {message}"
    tail = describe({"artifact": "commitlog", "kind": "invalid_tail", "path": "/s/commitlog/01835008",
                     "byte_offset": 217158, "commitlog_offset": 2052166, "reason": "size_mismatch", "message": "..."})
    assert tail == "  /s/commitlog/01835008 (byte 217158): invalid_tail: size_mismatch"
