"""inspect, dump and query on copies of the golden RocksDB stores, against their logical dumps (expected-cq.jsonl,
written by an independent reader) and manifests: the database counted, every queue's units dumped, the offset
family and the checkpoints dumped, messages found by unique key through the index with the topics taken from the
database; the input store unchanged after each job; the one-line errors through the jobs' error path."""
from __future__ import annotations

import json
import os
import struct
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from storage_format import rocksdb_cq as rc
from storage_format.record_reader import read_record
from storage_format.scan_plan import Segment
from tests.helpers import run_job
from tests.rocksdb_helpers import DB_CASES, DOUBLE_WRITE, expected_cq, rocks_case, rocks_copy, store_listing


def _manifest(case: str) -> dict:
    return json.loads((rocks_case(case) / "manifest.json").read_text())


def _expected_counts(case: str) -> dict:
    """What inspect must count, derived from the dump alone."""
    dump = expected_cq(case)
    per_queue: dict[str, dict[str, int]] = defaultdict(dict)
    max_of = {(r["topic"], r["queueId"]): r["queueOffset"] for r in dump if r.get("kind") == "max"
              and "checkpointPhyOffset" not in r}
    past = 0
    for r in dump:
        if r["cf"] == rc.DEFAULT_CF:
            q = per_queue[r["topic"]]
            q[str(r["queueId"])] = q.get(str(r["queueId"]), 0) + 1
            limit = max_of.get((r["topic"], r["queueId"]))
            past += limit is not None and r["queueOffset"] > limit
    return {"units": sum(r["cf"] == rc.DEFAULT_CF for r in dump), "max_records": len(max_of),
            "min_records": sum(r.get("kind") == "min" for r in dump), "units_past_max": past,
            "checkpoint": next(r["checkpointPhyOffset"] for r in dump if "checkpointPhyOffset" in r),
            "units_per_topic_queue": dict(per_queue)}


@pytest.mark.parametrize("case", DB_CASES)
def test_inspect_counts_the_database(case, tmp_path, capfd):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    code, out, err = run_job("inspect", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                         "--report", str(tmp_path / "inspect.json")], capfd)
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "inspect.json").read_text())
    assert report["cq_layout"] == {"layout": "rocksdb", "database_dir": "consumequeue", "not_read": []}
    got, want = report["rocksdb"], _expected_counts(case)
    assert {k: got[k] for k in want} == want
    manifest = _manifest(case)
    assert got["units"] == manifest["rocksdb"]["default_cf_keys"] and got["max_records"] == \
        manifest["rocksdb"]["queues_with_max"]
    end = manifest["commitlog_scan"]["max_physical_offset"]
    assert report["max_physical_offset"] == end and got["checkpoint_behind_log_end"] == end - got["checkpoint"]
    assert got["column_families"] == [rc.DEFAULT_CF, rc.OFFSET_CF] and got["unreferenced_files"] == []
    assert f"RocksDB units        {want['units']} in" in out and "RocksDB checkpoint   " in out
    assert store_listing(store) == before


def test_inspect_of_the_double_write_store_reads_the_files_only(tmp_path, capfd):
    store = rocks_copy(DOUBLE_WRITE, tmp_path / DOUBLE_WRITE)
    before = store_listing(store)
    code, out, err = run_job("inspect", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                         "--json"], capfd)
    report = json.loads(out)
    assert code == 0 and report["cq_layout"]["layout"] == "double-write" and "rocksdb" not in report
    assert "8 files are not read" in err
    assert store_listing(store) == before


def _dump(store: Path, capfd, *argv: str) -> list[dict]:
    code, out, err = run_job("dump", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--json",
                                      *argv], capfd)
    assert code == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("case", ["rocksdb-clean-11", "rocksdb-lmq-clean-11"])
def test_dump_of_every_queue_equals_the_golden_units(case, tmp_path, capfd):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    units = [r for r in expected_cq(case) if r["cf"] == rc.DEFAULT_CF]
    by_queue: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in units:
        by_queue[(r["topic"], r["queueId"])].append(r)
    for (topic, queue_id), want in by_queue.items():
        if case == "rocksdb-lmq-clean-11" and not topic.startswith("%LMQ%"):
            continue  # its plain queues are rocksdb-clean-11's kind; its LMQ queues are the point
        rows = _dump(store, capfd, "--topic", topic, "--queue", str(queue_id), "--count", str(len(want) + 5))
        entries = [r for r in rows if r["kind"] == "entry"]
        assert [(e["key"], e["queue_offset"], e["phy_offset"], e["size"], e["tags_code"], e["store_timestamp"])
                for e in entries] == [(w["key"], w["queueOffset"], w["commitLogOffset"], w["size"], w["tagsCode"],
                                       w["storeTimestamp"]) for w in want], (topic, queue_id)
        jumps = sum(b["queueOffset"] != a["queueOffset"] + 1 for a, b in zip(want, want[1:]))  # LMQ: stored offsets
        assert rows[-1]["kind"] == "end" and [r["kind"] for r in rows[:-1]].count("gap") == jumps
        for e in entries:  # every unit points at its record (an LMQ unit at its record in another topic)
            assert e["message"] is not None and e["message"]["total_size"] == e["size"], e
            assert e["message"]["store_timestamp"] == e["store_timestamp"]
            assert e["problem"] is None or topic.startswith("%LMQ%"), e
    assert store_listing(store) == before
    assert any("/" in t for t, _ in by_queue) == (case == "rocksdb-lmq-clean-11")  # a name no file queue could have


def test_dump_from_a_queue_offset_and_the_text_form(tmp_path, capfd):
    store = rocks_copy("rocksdb-cq-deleted-11", tmp_path / "rocksdb-cq-deleted-11")
    for start in (["--from", "0"], []):  # by default too: from where a consumer starts (no "min" record: 0)
        rows = _dump(store, capfd, "--topic", "Pay-Events", "--queue", "2", *start, "--count", "2")
        assert [r["kind"] for r in rows] == ["gap", "entry", "entry"]  # the broker's offset-0 hole
        assert rows[0]["reason"] == "no units for queue offsets 0..0" and rows[1]["queue_offset"] == 1
    code, out, _ = run_job("dump", ["--store", str(store), "--topic", "Pay-Events", "--queue", "2", "--count", "1"],
                           capfd)
    assert code == 0 and out.splitlines()[0] == "gap at queue offset 0: no units for queue offsets 0..0", out
    code, out, _ = run_job("dump", ["--store", str(store), "--topic", "TopicTest", "--queue", "1", "--from", "5",
                                    "--count", "3"], capfd)
    lines = out.splitlines()
    assert code == 0 and [line.split()[:2] for line in lines if line.startswith("queueOffset")] == [
        ["queueOffset", "5"], ["queueOffset", "6"], ["queueOffset", "7"]]
    assert all("RocksDB consumequeue/" in line for line in lines if line.startswith("queueOffset"))


@pytest.mark.parametrize("case", ["rocksdb-clean-11", "rocksdb-unclean-11"])
def test_dump_of_the_offset_family_and_the_checkpoints(case, tmp_path, capfd):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    want = [r for r in expected_cq(case) if r["cf"] == rc.OFFSET_CF]
    rows = _dump(store, capfd, "--queue-offsets")
    assert [r["key"] for r in rows] == [w["key"] for w in want]
    for r, w in zip(rows, want):
        if "checkpointPhyOffset" in w:
            assert r["kind"] == "rocksdb_checkpoint" and r["phy_offset"] == w["checkpointPhyOffset"]
        else:
            assert (r["topic"], r["queue_id"], r["record"], r["phy_offset"], r["queue_offset"]) == (
                w["topic"], w["queueId"], w["kind"], w["commitLogOffset"], w["queueOffset"])
    assert len(_dump(store, capfd, "--queue-offsets", "--count", "3")) == 3
    file_row, db_row = _dump(store, capfd, "--checkpoint")
    longs = struct.unpack(">5q", (store / "checkpoint").read_bytes()[:40])
    assert [file_row[k] for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
                                  "master_flushed_offset", "confirm_phy_offset")] == list(longs)
    point = _manifest(case)["rocksdb"]["checkpoint_topic"]
    assert db_row["phy_offset"] == point and db_row["segment"] == f"{point // (1 << 20) * (1 << 20):020d}"
    assert db_row["byte"] == point % (1 << 20)
    assert store_listing(store) == before


def test_dump_of_the_offset_family_of_a_file_store_is_refused_by_name(tmp_path, capfd):
    store = rocks_copy(DOUBLE_WRITE, tmp_path / DOUBLE_WRITE)
    code, _, err = run_job("dump", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                    "--queue-offsets"], capfd)
    assert code == 2 and "--queue-offsets" in err and "no offset column family" in err


def _uniq_key(store: Path, phy: int) -> str:
    """The UNIQ_KEY of the record at `phy`, read with the byte layer (not through the job under test)."""
    seg_start = phy // (1 << 20) * (1 << 20)
    path = store / "commitlog" / f"{seg_start:020d}"
    data = path.read_bytes()
    got = read_record(Segment(seg_start, len(data), str(path)), lambda at, n: data[at:at + n], phy)
    props = dict(p.split("\x01", 1) for p in got.message.properties.split("\x02") if "\x01" in p)
    return props["UNIQ_KEY"]


@pytest.mark.parametrize("case", ["rocksdb-clean-11", "rocksdb-lmq-clean-11"])
def test_query_by_unique_key_over_the_topics_of_the_database(case, tmp_path, capfd):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    units = [r for r in expected_cq(case) if r["cf"] == rc.DEFAULT_CF and not r["topic"].startswith("%LMQ%")]
    topics = sorted({r["topic"] for r in units if not r["topic"].startswith("%")})
    for unit in units[:: max(1, len(units) // 4)]:
        key = _uniq_key(store, unit["commitLogOffset"])
        code, out, err = run_job("query", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                           "--uniq-key", key, "--json"], capfd)
        result = json.loads(out)
        assert code == 0, err[-3000:]
        assert unit["commitLogOffset"] in [m["physical_offset"] for m in result["messages"]]
        searched = result["query"]["topics_searched"]
        assert set(topics) <= set(searched) and not any(t.startswith("%LMQ%") for t in searched)
        assert result["cq_layout"]["layout"] == "rocksdb"
    assert store_listing(store) == before


@pytest.mark.parametrize("job, argv", [("inspect", []), ("dump", ["--topic", "TopicTest", "--queue", "0"]),
                                       ("query", ["--uniq-key", "00"])])
def test_a_missing_extra_is_one_line_through_the_jobs(job, argv, tmp_path, capfd, monkeypatch):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "rocksdb-clean-11")
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # `import rocksdict` raises ImportError
    code, out, err = run_job(job, ["--store", str(store), "--broker-config", str(store / "broker.conf"), *argv], capfd)
    lines = [line for line in err.splitlines() if line.startswith(f"reput {job}: error:")]
    assert code == 2 and len(lines) == 1 and "reput[rocksdb]" in lines[0], err[-2000:]
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("job, argv", [("inspect", []), ("dump", ["--queue-offsets"])])
def test_a_database_that_cannot_be_opened_is_one_line_naming_the_file(job, argv, tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "rocksdb-clean-11")
    manifest = store / "consumequeue" / (store / "consumequeue" / "CURRENT").read_text().strip()
    os.truncate(manifest, manifest.stat().st_size - 5)
    before = store_listing(store)
    code, _, err = run_job(job, ["--store", str(store), "--broker-config", str(store / "broker.conf"), *argv], capfd)
    lines = [line for line in err.splitlines() if line.startswith(f"reput {job}: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert f"{manifest} at byte offset" in lines[0] and "cut short" in lines[0]
    assert store_listing(store) == before


def test_the_golden_units_are_where_the_tests_look():
    """The selection above is not empty and the LMQ case has a queue whose name holds '/'."""
    counts = Counter(r["topic"] for r in expected_cq("rocksdb-lmq-clean-11") if r["cf"] == rc.DEFAULT_CF)
    assert counts["%LMQ%sensors/floor-2"] > 0 and len(DB_CASES) == 5
