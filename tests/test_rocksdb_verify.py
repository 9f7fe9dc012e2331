"""RocksDB consume queues: the dispatch rules (storage_format.rocksdb_dispatch) against every golden case's logical
dump (written by RocketMQ 5.3.3's own RocksDBConsumeQueueStore, read by an independent reader), and `verify` of a
RocksDB store: each golden case's outcome, damage written into a scratch copy's database, nothing written into the
store."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.pipeline.io.fs import Location
from jobs.pipeline.outputs.build import _run_entries, plan_cq
from jobs.pipeline.runtime.local import LocalRunner
from jobs.pipeline.scan.decode import scan_store
from jobs.pipeline.verify.rocksdb_units import _Timestamps
from storage_format import rocksdb_cq as rc
from storage_format import rocksdb_dispatch as rd
from storage_format.cq_layout import ROCKSDB_STORE_TYPE
from storage_format.multi_dispatch import lmq_entries
from storage_format.record import MAGIC_V2
from storage_format.settings import load_settings
from tests.helpers import run_job
from tests.rocksdb_helpers import ALL_CASES, DB_CASES, expected_cq, rocks_case, rocks_copy, store_listing

# ------------------------------------------------------------------------------ the dispatch rules vs the dumps


def derived(case: str, work: Path) -> tuple[dict[bytes, bytes], dict[bytes, bytes], int]:
    """(units, "max" records, checkpoint) the commit log of a golden case implies under RocksDB's rules: key -> value
    bytes, derived from the log alone (the scan's rows, the records' store timestamps)."""
    store = rocks_case(case)
    settings = replace(load_settings(store / "broker.conf"), store_type=ROCKSDB_STORE_TYPE)
    scan = scan_store(LocalRunner(1), Location(str(store)), settings, work=Location(str(work)), quiet=True)
    units, maxes, end = {}, {}, 0
    with _Timestamps(tuple(scan.segments)) as ts:
        for task in plan_cq(scan, settings, Location(str(work)), Location(str(work / "x")), place_all=False):
            for item, rows in zip(task.items, _run_entries(task)):
                topic = item.topic.encode()
                q = rd.queue_units(rows.queue_offset, rows.phy, rows.size, rows.tags)
                stamps = ts(q.phy)
                for i in range(len(q)):
                    units[rc.unit_key(topic, item.queue_id, int(q.queue_offset[i]))] = rc.unit_value(rc.Unit(
                        int(q.phy[i]), int(q.size[i]), int(q.tags[i]), int(stamps[i])))
                if len(rows.phy):
                    maxes[rc.offset_key(topic, rc.MAX_KIND, item.queue_id)] = rc.offset_value(rc.OffsetValue(
                        int(rows.phy[-1]), int(rows.queue_offset[-1])))
                    end = max(end, int((np.asarray(rows.phy) + np.asarray(rows.size)).max()))
    return units, maxes, end


def _dump(case: str) -> tuple[dict[bytes, bytes], dict[bytes, bytes], dict[bytes, bytes], int | None]:
    units, maxes, mins, cp = {}, {}, {}, None
    for r in expected_cq(case):
        key, value = bytes.fromhex(r["key"]), bytes.fromhex(r["value"])
        if r["cf"] == rc.DEFAULT_CF:
            units[key] = value
        elif "checkpointPhyOffset" in r:
            cp = r["checkpointPhyOffset"]
        else:
            (maxes if r["kind"] == "max" else mins)[key] = value
    return units, maxes, mins, cp


@pytest.mark.parametrize("case", ALL_CASES)
def test_units_and_max_records_derived_from_the_log_are_the_brokers(case, tmp_path):
    units, maxes, end = derived(case, tmp_path)
    got_units, got_maxes, mins, cp = _dump(case)
    if case == "rocksdb-unclean-11":  # the crash image holds exactly what was flushed: the records before its checkpoint
        assert cp == 2_123_889 and len(got_units) == 3029 and len(units) == 4379
        units = {k: v for k, v in units.items() if rc.parse_unit_value(v).phy_offset < cp}
        maxes = {}  # the "max" records name each queue's last unit before the checkpoint
        for key, value in sorted(units.items(), key=lambda kv: rc.parse_unit_value(kv[1]).phy_offset):
            k, u = rc.parse_unit_key(key), rc.parse_unit_value(value)
            maxes[rc.offset_key(k.topic, rc.MAX_KIND, k.queue_id)] = rc.offset_value(rc.OffsetValue(u.phy_offset,
                                                                                                   k.queue_offset))
        end = cp
    if case == "rocksdb-cq-deleted-11":  # the broker's own loss: the record at offset 0 never dispatched again
        lost = [k for k, v in units.items() if rc.parse_unit_value(v).phy_offset == 0]
        assert [rc.parse_unit_key(k) for k in lost] == [rc.UnitKey(b"Pay-Events", 2, 0)]
        del units[lost[0]]  # (the restart's dispatch wrote the checkpoint anew: the end of the last record again)
    assert got_units == units
    assert got_maxes == maxes
    assert cp == end
    assert all(rc.parse_offset_value(v).queue_offset >= 0 for v in mins.values())


def test_lmq_rules_differ_from_the_file_queues_as_5_3_3_does():
    """enableLmq gates them (not enableMultiDispatch), a name with '/' gets its unit, `%RETRY%...` last with its
    empty offset item drops the record's LMQ units (split lengths differ), other names keep the record's queueId."""
    rules = rd.rocksdb_lmq_rules(True)
    assert rd.rocksdb_lmq_rules(False) is None and rd.rocksdb_lmq_rules(None) is None
    names = pa.array(["%LMQ%a,%LMQ%sensors/floor-2,plain", "%LMQ%a,%RETRY%ConsumerGroupA", "%LMQ%b"])
    offsets = pa.array(["5,7,9", "6,", "3"])
    topics = pa.array(["T", "T", "%RETRY%g"])
    e = lmq_entries(names, offsets, topics, np.array([4, 4, 4], np.int32), rules)
    assert list(zip(e.record.tolist(), e.queue.to_pylist(), e.queue_id.tolist(), e.queue_offset.tolist())) == [
        (0, "%LMQ%a", 0, 5), (0, "%LMQ%sensors/floor-2", 0, 7), (0, "plain", 4, 9)]
    file_rules = replace(rules, keep_separator_names=False)
    assert "%LMQ%sensors/floor-2" not in lmq_entries(names, offsets, topics, np.array([4, 4, 4], np.int32),
                                                     file_rules).queue.to_pylist()


def test_queue_units_keep_the_last_put_of_a_key_and_the_last_row_as_max():
    q = rd.queue_units(np.array([0, 1, 1, 3]), np.array([10, 20, 30, 40]), np.array([1, 1, 2, 1]),
                       np.array([0, 0, 5, 0]))
    assert q.queue_offset.tolist() == [0, 1, 3] and q.phy.tolist() == [10, 30, 40] and q.tags.tolist() == [0, 5, 0]


def _heads(*pairs):
    return [rd.SegmentHead(start, MAGIC_V2, phy) for start, phy in reversed(pairs)]


def test_the_next_start_re_dispatches_as_recover_normally_and_abnormally_do():
    segs = [0, 100, 200]
    normal = rd.next_start(False, 150, segs, iter(()))
    assert (normal.segment, normal.rule) == (100, rd.NORMAL)
    # the record AT the checkpoint is not dispatched (offset > checkpoint): the offset-0 loss of a deleted database
    assert normal.redispatched(np.array([99, 150, 151, 250])).tolist() == [False, False, True, True]
    assert rd.next_start(False, None, segs, iter(())).redispatched(np.array([0, 1])).tolist() == [False, True]
    # abnormal: the newest segment whose first record's PHYSICALOFFSET <= the checkpoint; everything from it
    crash = rd.next_start(True, 150, segs, iter(_heads((0, 0), (100, 100), (200, 200))))
    assert (crash.segment, crash.redispatched(np.array([99, 100, 150])).tolist()) == (100, [False, True, True])
    moved = rd.next_start(True, 150, segs, iter(_heads((0, 0), (100, 500), (200, 600))))
    assert moved.segment == 0  # a segment whose first record says another offset does not match
    assert "00000000000000000100" in crash.describe(300) and "200 bytes" in crash.describe(300)


def test_a_max_record_behind_is_pending_only_when_the_next_start_rewrites_it():
    start = rd.next_start(False, 100, [0], iter(()))
    tail = rd.QueueTail.of(np.array([10, 50, 120]), np.array([0, 1, 2]), start)
    assert rd.max_verdict(tail, (120, 2)) == rd.MAX_OK
    assert rd.max_verdict(tail, (50, 1)) == rd.MAX_PENDING
    assert rd.max_verdict(tail, (10, 0)) == rd.MAX_DIFFERS
    done = rd.QueueTail.of(np.array([10, 50]), np.array([0, 1]), start)
    assert rd.max_verdict(done, (10, 0)) == rd.MAX_DIFFERS and rd.max_verdict(done, None) == rd.MAX_DIFFERS
    assert tail == rd.QueueTail.of(np.array([10]), np.array([0]), start).then(
        rd.QueueTail.of(np.array([50, 120]), np.array([1, 2]), start))


# ------------------------------------------------------------------------------------------ verify, end to end

# Per golden case: exit status, status, finding counts, and what the `rocksdb` section counts apart.
OUTCOMES = {
    "rocksdb-clean-11": (0, "consistent", {}, {"min_records": 3, "units_compared": 4346}),
    # the crash image: its checkpoint is behind the log; the units past it are what the next start dispatches
    "rocksdb-unclean-11": (0, "consistent", {}, {"not_yet_dispatched_units": 1350, "units_compared": 3029,
                                                 "max_records_rewritten_at_next_start": 22}),
    # the broker's recovery: the database consistent; its own index loss (106 keys between the kept index file and
    # the RocksDB start segment) stays findings, named (index_gap)
    "rocksdb-unclean-11-recovered": (1, "inconsistent", {"index.key_not_found": 106}, {"units_compared": 4379}),
    # the database deleted and rebuilt by a clean restart: the unit of the record at offset 0 is lost for good
    "rocksdb-cq-deleted-11": (1, "inconsistent", {"consumequeue.missing_entry": 1}, {"units_compared": 4345}),
    "rocksdb-lmq-clean-11": (0, "consistent", {}, {"min_records": 4, "units_compared": 7169}),
}


def _verify(store: Path, tmp_path: Path, capfd, *extra: str) -> tuple[int, dict, str]:
    report = tmp_path / "verify.json"
    code, _, err = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                      "--report", str(report), "--work-dir", str(tmp_path / "work"), *extra], capfd)
    return code, json.loads(report.read_text()), err


@pytest.mark.parametrize("case", DB_CASES)
def test_verify_of_each_golden_case(case, tmp_path, capfd):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    code, r, err = _verify(store, tmp_path, capfd)
    want_code, status, counts, apart = OUTCOMES[case]
    assert (code, r["status"]) == (want_code, status), err[-3000:]
    for kind, n in counts.items():
        assert r["finding_counts"].get(kind) == n, r["finding_counts"]
    if case != "rocksdb-unclean-11-recovered":
        assert set(r["finding_counts"]) == set(counts)
    else:  # only index findings, and the broker's own loss accounts for them
        assert all(k.startswith("index.") for k in r["finding_counts"])
        assert "RocksDB-mode crash recovery" in r["index_gap"]["message"] and r["index_gap"]["keys"] == 106
    d = r["rocksdb"]
    for key, n in apart.items():
        assert d[key] == n, d
    assert d["units_in_database"] == d["units_compared"] and d["column_families"] == ["default", "offset"]
    assert store_listing(store) == before


def test_an_sst_file_the_manifest_does_not_reference_is_named_not_read(tmp_path, capfd):
    """A stray *.sst beside the database (a copy of a live one under another number): not read, and named on stderr
    and in the report's rocksdb section; the store is consistent as it was."""
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    live = sorted((store / "consumequeue").glob("*.sst"))[0]
    (store / "consumequeue" / "000777.sst").write_bytes(live.read_bytes())
    code, r, err = _verify(store, tmp_path, capfd)
    assert code == 0 and r["status"] == "consistent" and r["rocksdb"]["unreferenced_files"] == ["000777.sst"], err
    assert (f"reput verify: note: 1 *.sst files in {store / 'consumequeue'} are not in the database's MANIFEST and are "
            f"not read (the broker's next read-write open deletes them): 000777.sst") in err


def test_the_crash_image_names_where_the_broker_re_dispatches_from(tmp_path, capfd):
    store = rocks_copy("rocksdb-unclean-11", tmp_path / "s")
    code, out, _ = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf")], capfd)
    assert code == 0 and "CONSISTENT" in out and "1350 units its next start dispatches" in out
    assert "re-dispatches from commit-log file 00000000000002097152 at its next start (abnormal recovery" in out
    code, r, _ = _verify(store, tmp_path, capfd)
    assert r["rocksdb"]["checkpoint"]["state"] == "behind"
    assert (r["rocksdb"]["next_start"]["segment"], r["rocksdb"]["next_start"]["rule"]) == ("00000000000002097152",
                                                                                          "abnormal")


def test_the_offset_0_hole_is_a_finding_with_its_consequence(tmp_path, capfd):
    store = rocks_copy("rocksdb-cq-deleted-11", tmp_path / "s")
    code, r, _ = _verify(store, tmp_path, capfd)
    [hole] = [d for d in r["findings"] if d["artifact"] == "consumequeue"]
    assert hole["kind"] == "missing_entry" and hole["key"] == rc.unit_key(b"Pay-Events", 2, 0).hex()
    assert "consumers skip the message at commit-log offset 0 (Pay-Events/2 queue offset 0)" in hole["detail"]
    assert r["restart_reindex"] == {"index.entries": 2, "index.starts": 1}  # the clean restart indexed the last again
    code, out, _ = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf")], capfd)
    assert code == 1 and "consumers skip the message at commit-log offset 0" in out


WRITER = """
import sys, rocksdict
db_dir, cf = sys.argv[1], sys.argv[2]
opts = rocksdict.Options(raw_mode=True)
db = rocksdict.Rdict(db_dir, opts, column_families={"offset": rocksdict.Options(raw_mode=True)})
target = db if cf == "default" else db.get_column_family(cf)
for line in sys.stdin.read().split():
    key, _, value = line.partition("=")
    if value:
        target[bytes.fromhex(key)] = bytes.fromhex(value)
    else:
        del target[bytes.fromhex(key)]
del target
db.flush()
db.close()
"""


def _write(db_dir: Path, puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = (), cf: str = rc.DEFAULT_CF) -> None:
    """Change a scratch copy's database with the binding, in a process of its own: a database opened writable in
    this process would leave RocksDB's threads behind in every worker the local engine forks from it."""
    lines = [f"{k.hex()}={v.hex()}" for k, v in puts.items()] + [f"{k.hex()}=" for k in deletes]
    subprocess.run([sys.executable, "-c", WRITER, str(db_dir), cf], input="\n".join(lines), text=True, check=True,
                   timeout=120)
    (db_dir / "rocksdict-config.json").unlink(missing_ok=True)


def test_damage_in_a_copys_database_is_named_by_its_key(tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    dump = {bytes.fromhex(r["key"]): r for r in expected_cq("rocksdb-clean-11") if r["cf"] == rc.DEFAULT_CF}
    wrong = rc.unit_key(b"TopicTest", 1, 5)
    gone = rc.unit_key(b"Pay-Events", 0, 7)
    inside = rc.unit_key(b"TopicTest", 2, 10**6)  # past the queue's "max": the dirty tail nobody reads
    v = rc.parse_unit_value(bytes.fromhex(dump[wrong]["value"]))
    _write(store / "consumequeue", {wrong: rc.unit_value(replace(v, store_timestamp=v.store_timestamp + 1)),
                                    inside: rc.unit_value(v)}, deletes=(gone,))
    code, r, _ = _verify(store, tmp_path, capfd)
    assert code == 1 and r["finding_counts"] == {"consumequeue.entry_differs": 1, "consumequeue.missing_entry": 1}
    by_kind = {d["kind"]: d for d in r["findings"]}
    assert by_kind["entry_differs"]["key"] == wrong.hex() and by_kind["entry_differs"]["fields"] == ["storeTimestamp"]
    assert by_kind["missing_entry"]["key"] == gone.hex()
    assert r["rocksdb"]["dirty_tail_units"] == 1


def test_a_unit_value_cut_short_is_a_finding_and_the_check_goes_on(tmp_path, capfd):
    """A unit whose value is 20 bytes instead of 28: a malformed_key finding naming its key (with the unit it should
    be missing), and the rest of the database still compared (it stopped verify with exit 2, no report)."""
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    dump = {bytes.fromhex(r["key"]): r for r in expected_cq("rocksdb-clean-11") if r["cf"] == rc.DEFAULT_CF}
    cut = rc.unit_key(b"TopicTest", 1, 5)
    other = rc.unit_key(b"Pay-Events", 0, 7)
    _write(store / "consumequeue", {cut: bytes.fromhex(dump[cut]["value"])[:20]}, deletes=(other,))
    code, r, _ = _verify(store, tmp_path, capfd)
    assert code == 1 and r["finding_counts"] == {"consumequeue.malformed_key": 1, "consumequeue.missing_entry": 2}
    [bad] = [d for d in r["findings"] if d["kind"] == "malformed_key"]
    assert bad["key"] == cut.hex() and "a value of 20 bytes, not a unit's 28" in bad["detail"]
    assert {d["key"] for d in r["findings"] if d["kind"] == "missing_entry"} == {cut.hex(), other.hex()}


def test_a_wrong_max_record_and_a_checkpoint_past_the_log_are_findings(tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    key = rc.offset_key(b"TopicTest", rc.MAX_KIND, 0)
    _write(store / "consumequeue", {key: rc.offset_value(rc.OffsetValue(1, 1)),
                                    rc.CHECKPOINT_KEY: rc.checkpoint_value(10**9)}, cf=rc.OFFSET_CF)
    code, r, _ = _verify(store, tmp_path, capfd)
    assert code == 1 and r["finding_counts"] == {"consumequeue.offset_record_differs": 2}
    assert {d["key"] for d in r["findings"]} == {key.hex(), rc.CHECKPOINT_KEY.hex()}


def test_since_is_refused_by_name_on_a_rocksdb_store(tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    (tmp_path / "r.json").write_text("{}")
    code, _, err = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                      "--since", str(tmp_path / "r.json")], capfd)
    assert code == 2 and "--since on a store with RocksDB consume queues" in err


@pytest.mark.parametrize("split_size", [1 << 16, 1 << 14])
def test_the_compiled_decoder_agrees_with_the_reference_under_rocksdb_rules(split_size, tmp_path):
    """The LMQ golden case decoded split by split by the kernel and the numpy reference under RocksDB's rules (names
    with '/' kept as key bytes): the same summaries and work files; a split holding such a name is the reference's."""
    from tests.split_compare import compare_store

    store = rocks_case("rocksdb-lmq-clean-11")
    settings = load_settings(store / "broker.conf")
    taken = compare_store(store, settings, split_size, tmp_path, rules=rd.rocksdb_lmq_rules(True))
    assert taken["kernel"] > 0 and taken["reference"] > 0, taken
