"""Offline recovery after an unclean shutdown (`jobs.recover`): the broker's rules, pure and end to end.

Pure tests pin each rule (start segment, truncation, consume-queue re-dispatch and truncation, index
resume, checkpoint). Spark tests run `jobs.recover` on the golden crashed stores and compare OUT with
what RocketMQ itself produced (`*-recovered`), check that a second run on OUT plans nothing, and kill
the in-place switch at several points to check that the store is always old, new, or one command
away from either.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_format import recovery as R
from jobs.pipeline.runtime.tasks import SparkRunner
from storage_format.checkpoint import Checkpoint, checkpoint_bytes, parse_checkpoint
from storage_format.commitlog import ScanEnd
from storage_format.confirm_offset import RecoveredConfirm
from storage_format.consume_queue import CQ_DTYPE, build_queue_files
from storage_format.index_file import IndexHeader, IndexState
from storage_format.index_build import append_to_index_file, build_index_file
from storage_format.markers import detect_generation, markers_after_clean_start
from storage_format.record import MAGIC_V1, MAGIC_V2
from storage_format.settings import BrokerSettings

from tests.conftest import GOLDEN, REPO, case_params, golden_cases, manifest, restored_copy
from tests.recovery_helpers import (CONF, FS, RECOVERY_PAIRS, SETTINGS, assert_matches_recovered, cq_file, entries,
                                    run_recover, sha, tree, writable_copy)

UNCLEAN = ["unclean-11", "unclean-torn-11", "v5-unclean-11", "v5-unclean-torn-11"]


# ---------------------------------------------------------------------------------------------
# helpers


def dry_run(store: Path, tmp: Path, *extra: str) -> dict:
    plan_file = tmp / f"plan-{store.name}.json"
    assert run_recover("--store", str(store), "--broker-config", str(CONF), "--dry-run", "--json",
                       "--plan", str(plan_file), *extra) == 0
    return json.loads(plan_file.read_text())


def unit_rows(state: R.QueueState, files: dict[int, bytes]) -> dict[int, list[tuple[int, int]]]:
    """(phy, size) of the non-zero units of every file of a queue after recovery."""
    out = {}
    for f in state.files:
        u = R.render_units(state, f, files.__getitem__)
        out[f] = [(int(p), int(s)) for p, s in zip(u["phy"], u["size"]) if p or s]
    return out


# ---------------------------------------------------------------------------------------------
# checkpoint and markers


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=5, max_size=5))
@settings(max_examples=50, deadline=None)
def test_checkpoint_round_trip(values):
    cp = Checkpoint(*values)
    data = checkpoint_bytes(cp, 5)
    assert len(data) == 4096 and data[40:] == bytes(4056)
    assert parse_checkpoint(data) == cp
    v4 = parse_checkpoint(checkpoint_bytes(cp, 4))
    assert (v4.physic_msg_timestamp, v4.logics_msg_timestamp, v4.index_msg_timestamp) == tuple(values[:3])
    assert (v4.master_flushed_offset, v4.confirm_phy_offset) == (0, 0)


def test_checkpoint_golden_values(golden):
    cp = parse_checkpoint((golden / "v5-unclean-11-recovered" / "checkpoint").read_bytes())
    assert cp == Checkpoint(1795324940957, 1795324942827, 1795324942749, 0, 2166060)
    assert cp.min_timestamp == 1795324940957 - 3000
    assert checkpoint_bytes(cp, 5) == (golden / "v5-unclean-11-recovered" / "checkpoint").read_bytes()


@pytest.mark.parametrize("case", golden_cases())
def test_generation_detection_on_golden(golden, case):
    d = golden / case
    abort = (d / "abort").read_bytes() if (d / "abort").exists() else None
    cp = parse_checkpoint((d / "checkpoint").read_bytes()) if (d / "checkpoint").exists() else None
    guess = detect_generation(abort, (d / "abort.bak").exists(), cp)
    assert guess.generation == (5 if manifest(case)["rocketmq_version"].startswith("5") else 4), guess.evidence


def test_markers_after_clean_start():
    assert markers_after_clean_start(4, b"") == {"lock": b"lock"}
    assert markers_after_clean_start(5, b"4242\n") == {"lock": b"lock", "abort.bak": b"4242\n"}


# ---------------------------------------------------------------------------------------------
# start segment and truncation point


def head(start: int, ts: int, magic: int = MAGIC_V1) -> R.SegmentHead:
    return R.SegmentHead(start, magic, ts)


def test_start_segment_walks_back_to_first_old_enough_segment():
    cp = Checkpoint(10_000, 12_000, 9_000)  # bound: min(10000, 12000) - 3000 = 7000
    heads = [head(300, 9_000), head(200, 7_000), head(100, 5_000), head(0, 1_000)]
    looked = []

    def lazily():
        for h in heads:
            looked.append(h.start)
            yield h
    choice = R.choose_start_segment([0, 100, 200, 300], lazily(), cp, BrokerSettings(), 4, abnormal=True)
    assert choice.offset == 200 and looked == [300, 200]  # stops at the first match
    safe = BrokerSettings(message_index_safe=True)  # also <= indexMsgTimestamp - but 7000 < 9000 already
    assert R.choose_start_segment([0, 100, 200, 300], heads, Checkpoint(10_000, 12_000, 6_000), safe, 4,
                                  abnormal=True).offset == 100
    assert R.choose_start_segment([0, 100, 200, 300], heads, Checkpoint(), BrokerSettings(), 4,
                                  abnormal=True).offset == 0  # nothing qualifies: first segment
    assert R.choose_start_segment([0, 100, 200, 300], heads, cp, BrokerSettings(), 4, abnormal=False).offset == 100


def test_start_segment_magic_and_zero_timestamp():
    cp = Checkpoint(10_000, 10_000, 10_000)
    v2 = [head(100, 1_000, MAGIC_V2), head(0, 500)]
    assert R.choose_start_segment([0, 100], v2, cp, BrokerSettings(), 4, True).offset == 0  # 4.x: V2 is no message
    assert R.choose_start_segment([0, 100], v2, cp, BrokerSettings(), 5, True).offset == 100
    zero = [head(100, 0), head(0, 500)]
    assert R.choose_start_segment([0, 100], zero, cp, BrokerSettings(), 5, True).offset == 0


def test_read_segment_head_ipv6_born_host():
    data = bytearray(80)
    struct.pack_into(">iIi", data, 0, 200, MAGIC_V1, 0)
    struct.pack_into(">i", data, 36, 0x10)  # born host IPv6: storeTimestamp at 48 + 20
    struct.pack_into(">q", data, 68, 123456789)
    assert R.read_segment_head(bytes(data), 0) == R.SegmentHead(0, MAGIC_V1, 123456789)


def test_truncation_point_rules():
    t = R.truncation_point(ScanEnd("crc_mismatch", 5000, detail="body CRC 1 != stored bodyCRC 2"), None)
    assert (t.offset, t.reason, t.invalid_record_offset) == (5000, "crc_mismatch", 5000)
    blank = R.truncation_point(ScanEnd("no_next_segment", 2048), ScanEnd("blank", 1900))
    assert (blank.offset, blank.reason, blank.invalid_record_offset) == (1900, "end_of_log", None)
    exact = R.truncation_point(ScanEnd("no_next_segment", 2048), ScanEnd("end_of_file", 2048))
    assert exact.offset == 2048
    with pytest.raises(R.RecoveryError):
        R.truncation_point(ScanEnd("missing_segment", 1024, detail="no segment starts at 1024"), None)
    assert R.segments_to_delete([0, 1024, 2048, 3072], 2048) == [3072]  # a segment starting at P stays


# ---------------------------------------------------------------------------------------------
# consume queues


def test_load_queue_walks_from_third_last_file_and_drops_files_past_the_run():
    files = {0: cq_file([(i * 10, 10, 0) for i in range(5)]), 100: cq_file([(50, 10, 0), (60, 10, 0)]),
             200: cq_file([(900, 10, 0)])}
    ld = R.load_queue("T", 0, list(files), files.__getitem__, FS)
    assert (ld.files, ld.write_offset, ld.max_phy, ld.removed_at_load) == ((0, 100), 140, 70, (200,))
    empty = R.load_queue("T", 1, [0], {0: cq_file([])}.__getitem__, FS)
    assert (empty.write_offset, empty.max_phy) == (0, -1)


def test_dispatch_skips_what_the_queue_has_and_appends_the_rest_across_files():
    files = {0: cq_file([(0, 10, 0), (10, 10, 0), (20, 10, 0)])}
    st_ = R.QueueState.start(R.load_queue("T", 0, [0], files.__getitem__, FS), FS)
    n = st_.dispatch(entries([(q, q * 10, 10) for q in range(8)]))  # 0..2 are there, 3..7 are new
    assert n == 5 and st_.files == [0, 100] and st_.created == [100] and st_.first_created is None
    assert st_.write_offset == 160 and st_.max_phy == 80
    rows = unit_rows(st_, files)
    assert rows[0] == [(q * 10, 10) for q in range(5)] and rows[100] == [(50, 10), (60, 10), (70, 10)]
    assert st_.changed_files() == [0, 100]


@given(first=st.integers(0, 12), count=st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_new_queue_matches_the_rebuild_and_fast_equals_slow_path(first, count):
    """A queue with no files: the first unit creates its file with pre-blank units, exactly as the
    rebuild's build_queue_files does; the vectorised path equals the broker's unit-by-unit rules."""
    e = entries([(first + i, 1000 + 100 * i, 100) for i in range(count)])
    fast = R.QueueState.start(R.QueueLoad("T", 0, (), 0, -1), FS)
    fast.dispatch(e)
    slow = R.QueueState.start(R.QueueLoad("T", 0, (), 0, -1), FS)
    slow._write_one_by_one(e)
    expect = build_queue_files(e.queue_offset, e.phy, e.size, e.tags, FS)
    for state in (fast, slow):
        assert {f: R.render_queue_file(state, f, {}.__getitem__) for f in state.files} == expect
        assert state.max_phy == 1000 + 100 * count and not state.warnings


@given(have=st.integers(1, 14), lost=st.integers(0, 6), extra=st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_redispatch_into_existing_files_fast_equals_slow_path(have, lost, extra):
    """A queue whose last `lost` units were lost: re-dispatching everything restores them and appends
    the rest; the vectorised path and the unit-by-unit rules write the same bytes."""
    total = have + extra
    e = entries([(q, 1000 + 100 * q, 100) for q in range(total)])
    full = build_queue_files(e.queue_offset, e.phy, e.size, e.tags, FS)
    kept = max(0, have - lost)
    crash = build_queue_files(e.queue_offset[:kept], e.phy[:kept], e.size[:kept], e.tags[:kept], FS) if kept else {}
    results = []
    for slow in (False, True):
        ld = R.load_queue("T", 0, list(crash), crash.__getitem__, FS)
        state = R.QueueState.start(ld, FS)
        rest = e.take(e.phy + e.size > ld.max_phy)
        state._write_one_by_one(rest) if slow else state.dispatch(e)
        results.append({f: R.render_queue_file(state, f, crash.__getitem__) for f in state.files})
    assert results[0] == results[1] == full


def test_dispatch_repeated_and_out_of_order_units_follow_the_broker():
    files = {0: cq_file([(0, 10, 0), (10, 10, 0)])}
    st_ = R.QueueState.start(R.load_queue("T", 0, [0], files.__getitem__, FS), FS)
    st_.dispatch(entries([(1, 15, 10), (2, 30, 10), (2, 40, 10), (5, 50, 10)]))
    # (1) is "repeated" (its slot is below the write position), the second (2) too; (5) jumps a gap:
    # the broker appends it at the write position and logs "logic queue order maybe wrong"
    assert unit_rows(st_, files)[0] == [(0, 10), (10, 10), (30, 10), (50, 10)]
    assert len(st_.warnings) == 1 and "queue offset 5" in st_.warnings[0]


def test_truncate_deletes_trailing_files_past_p_and_cuts_the_last_one():
    p = 100
    files = {0: cq_file([(0, 10, 0), (10, 10, 0), (20, 10, 0), (30, 10, 0), (40, 10, 0)]),
             100: cq_file([(50, 10, 0), (60, 10, 0), (120, 10, 0), (130, 10, 0), (140, 10, 0)]),
             200: cq_file([(150, 10, 0)])}
    ld = R.load_queue("T", 0, list(files), files.__getitem__, FS)
    assert ld.max_phy == 160 and ld.write_offset == 220
    st_ = R.QueueState.start(ld, FS)
    st_.truncate(p, files.__getitem__)
    assert st_.files == [0, 100] and st_.deleted_files() == [200]
    assert (st_.write_offset, st_.max_phy) == (140, 70)  # cut before the first unit >= P
    assert st_.changed_files() == []  # logical: the stale units of file 100 stay on disk
    gone = R.QueueState.start(R.load_queue("U", 0, [0], {0: cq_file([(500, 10, 0)])}.__getitem__, FS), FS)
    gone.truncate(p, {0: cq_file([(500, 10, 0)])}.__getitem__)
    assert gone.files == [] and gone.max_phy == p  # every file gone: maxPhysicOffset = P


# ---------------------------------------------------------------------------------------------
# index


def keys_for(records: list[tuple[int, int, int]]) -> R.KeyBatch:
    """(phy, store_ts, number of keys) per record -> a key batch with distinct hashes."""
    rows = [(phy * 7 + k, phy, ts) for phy, ts, n in records for k in range(n)]
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return R.KeyBatch(a[:, 0].astype(np.int32), a[:, 1], a[:, 2])


def build(batch: R.KeyBatch, inherited: IndexState = IndexState()) -> bytes:
    return build_index_file(batch.key_hash, batch.phy, batch.store_ts, SETTINGS.max_hash_slot_num,
                            SETTINGS.max_index_num, inherited)


def test_resume_appends_to_a_kept_file_and_reindexes_the_boundary_record():
    records = [(100, 1_000, 2), (200, 2_000, 1), (300, 3_000, 2), (400, 4_000, 1)]
    crash_keys = keys_for(records[:2])  # indexed before the crash: 3 keys, file not full (7 usable)
    kept = build(crash_keys)
    info = R.IndexFileInfo("20260101000000000", IndexHeader.from_bytes(kept[:40]))
    res = R.resume_index(info, [R.DispatchPass("recovery", 0, 400, keys_for(records))], SETTINGS.max_index_num)
    assert res.boundary_reindexed == [{"pass": "recovery", "record_offset": 200, "keys": 1}]
    app = res.appended.all_keys()
    assert list(app.phy) == [200, 300, 300, 400] and not res.new_files and res.rolled_full_end_ts == []
    data = bytearray(kept)
    assert append_to_index_file(data, app.key_hash, app.phy, app.store_ts, SETTINGS.max_hash_slot_num,
                                SETTINGS.max_index_num) == 4
    assert bytes(data) == build(R.KeyBatch.concat([crash_keys, app]))  # append == build of the same sequence


def test_resume_rolls_full_files_and_opens_one_for_a_trailing_record():
    full = keys_for([(100 + i, 1_000 + i, 1) for i in range(7)])  # exactly maxIndexNum - 1 keys
    info = R.IndexFileInfo("a", IndexHeader.from_bytes(build(full)[:40]))
    more = keys_for([(106, 1_006, 1)] + [(200 + i, 2_000 + i, 1) for i in range(6)])
    res = R.resume_index(info, [R.DispatchPass("recovery", 0, 500, more)], SETTINGS.max_index_num)
    new = res.new_files
    # the full kept file makes the first record open a new file inheriting its end; the boundary
    # record 106 goes in again; its 7 keys fill that file, so record 500 (no keys) opens a third
    assert [len(t.all_keys()) for t in new] == [7, 0]
    assert new[0].inherited == IndexState(1_006, 106)
    assert new[1].inherited == IndexState(2_005, 205)
    assert res.rolled_full_end_ts == [1_006, 2_005]
    split = R.resume_index(info, [R.DispatchPass("recovery", 0, 206, keys_for([(106, 1_006, 9)]))],
                           SETTINGS.max_index_num)
    assert [len(t.all_keys()) for t in split.new_files] == [7, 2]  # a record's keys roll mid-record


def test_4x_post_start_redispatch_indexes_the_last_record_again():
    keys = keys_for([(100, 1_000, 1), (200, 2_000, 2)])
    passes = [R.DispatchPass("recovery", 0, 300, keys), R.DispatchPass("post-start", 150, 300, keys)]
    res = R.resume_index(None, passes, 64)
    assert list(res.new_files[0].all_keys().phy) == [100, 200, 200, 200, 200]
    assert R.post_start_reput_from(4, [150, 120], 0, 300) == 150
    assert R.post_start_reput_from(5, [150, 120], 0, 300) == 300


def test_checkpoint_after_rules():
    cp = Checkpoint(10, 20, 30, 0, 0)
    after, why = R.checkpoint_after(cp, 5, 25, [28, 29], RecoveredConfirm(400, "the last valid record"))
    assert after == Checkpoint(10, 25, 29, 0, 400) and set(why) >= {"logics_msg_timestamp", "confirm_phy_offset"}
    assert why["confirm_phy_offset"] == "the last valid record"
    assert R.checkpoint_after(cp, 4, None, [], RecoveredConfirm(400, "4.x has no confirm field"))[0] == cp
    slave, why = R.checkpoint_after(cp, 4, 25, [], RecoveredConfirm(0, "-"), physic_from_queue="SLAVE")
    assert slave == Checkpoint(25, 25, 30, 0, 0) and "SLAVE" in why["physic_msg_timestamp"]


@pytest.mark.parametrize("case", ["unclean-11", "v5-unclean-11"])
def test_a_slaves_recovery_leaves_the_queues_time_as_physic_msg_timestamp(case, spark, tmp_path):
    """brokerRole=SLAVE: every consume-queue put sets physicMsgTimestamp too (ConsumeQueue.putMessagePositionInfoWrapper,
    4.9.8 and 5.3.3; RocketMQ's own code run on these stores leaves 1795324942827 on v5-unclean-11): the checkpoint is
    the broker's recovered one with physicMsgTimestamp = its logicsMsgTimestamp (it was left unchanged)."""
    conf = tmp_path / "slave.conf"
    conf.write_text((GOLDEN / case / "broker.conf").read_text() + "\nbrokerRole=SLAVE\n")
    out = tmp_path / "out"
    assert run_recover("--store", str(GOLDEN / case), "--broker-config", str(conf), "--out", str(out), "--json") == 0
    got = parse_checkpoint((out / "checkpoint").read_bytes())
    want = parse_checkpoint((GOLDEN / f"{case}-recovered" / "checkpoint").read_bytes())
    assert got == dataclasses.replace(want, physic_msg_timestamp=want.logics_msg_timestamp), (got, want)


# ---------------------------------------------------------------------------------------------
# jobs.recover on the golden crashed stores (Spark)


class _Recovered(dict):
    """OUT of `jobs.recover` per golden crashed case, made on first use (one run per case per module)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, case: str) -> Path:
        out = self.root / case
        store = GOLDEN / case
        if case.startswith("dledger-"):  # the DLedger index files are stored cut: their real length on a copy
            store = restored_copy(case, self.root / f"{case}-input")
        assert run_recover("--store", str(store), "--broker-config", str(GOLDEN / case / "broker.conf"),
                           "--out", str(out), "--json") == 0
        self[case] = out
        return out


@pytest.fixture(scope="module")
def recovered(spark, golden, tmp_path_factory) -> dict[str, Path]:
    return _Recovered(tmp_path_factory.mktemp("recovered"))


@pytest.mark.parametrize("case", case_params(sorted(RECOVERY_PAIRS)))
def test_out_equals_broker_recovery(recovered, case):
    """OUT of every golden crashed store equals what RocketMQ's own recovery made of it."""
    assert_matches_recovered(recovered[case], case)


@pytest.mark.parametrize("case", UNCLEAN)
def test_crc_checked_validation_runs_on_the_kernel(recovered, case):
    """checkCRCOnRecover (the default) checks body CRCs in the compiled pass: the run report counts every split
    of the validating scan that holds records as the kernel's, none left to the reference (a torn store's torn
    record: its CRC mismatch found by the kernel)."""
    validation = json.loads((recovered[case] / "reput-recover-report.json").read_text())["validation"]
    decoders = validation["decoders"]
    assert validation["crc"] is True and validation["records"] > 0
    assert decoders["splits"].get("kernel", 0) > 0 and "reference" not in decoders["splits"], decoders
    assert decoders["fallback_splits"] == 0 and not decoders["fallbacks"], decoders


@pytest.mark.parametrize("case", UNCLEAN)
def test_second_run_on_out_plans_no_change(recovered, tmp_path, case):
    plan = dry_run(recovered[case], tmp_path)
    assert plan["recovery"] == "normal" and plan["state"].startswith("clean")
    assert plan["changes"] is False
    assert plan["checkpoint"]["before"] == plan["checkpoint"]["after"]
    assert not plan["commitlog"]["to_delete"]
    cq = plan["consumequeue"]
    assert not (cq["to_rewrite"] or cq["to_create"] or cq["to_delete"])
    assert not (plan["index"]["to_create"] or plan["index"]["appended_to"])


@pytest.mark.parametrize("case", ["unclean-torn-11", "v5-unclean-torn-11"])
def test_dry_run_names_the_torn_record(golden, tmp_path, case):
    before = tree(golden / case)
    plan = dry_run(golden / case, tmp_path)
    torn = manifest(case)["torn"]
    t = plan["truncation"]
    assert t["offset"] == t["invalid_record_offset"] == torn["torn_record_offset"]
    # the body was zeroed, and the broker checks the body CRC first (checkCRCOnRecover)
    assert t["reason"] == "crc_mismatch" and "CRC" in t["detail"]
    assert plan["recovery"] == "abnormal" and plan["changes"] is True
    assert plan["index"]["boundary_records_indexed_again"]
    cut = plan["consumequeue"]["to_cut"]  # the torn record's unit stays on disk behind the cut
    queue_file = f"consumequeue/{torn['torn_record_topic']}/{torn['torn_record_queue']}/"
    assert [c["first_unit_left_behind_phy_offset"] for c in cut if c["file"].startswith(queue_file)] == \
        [torn["torn_record_offset"]]
    assert tree(golden / case) == before  # the store is only read


def test_lagging_consume_queues_are_redispatched(spark, golden, tmp_path):
    """Consume queues behind the commit log (a lost tail, a lost file, a lost queue) are re-dispatched
    to the same bytes the broker wrote; a unit past P stays on disk but is cut; a file past the
    valid units goes. Everything else equals unclean-11-recovered."""
    store = writable_copy(golden / "unclean-11", tmp_path / "store")
    cq = store / "consumequeue"
    tt0 = cq / "TopicTest" / "0"
    (tt0 / "00000000000000004000").unlink()
    data = bytearray((tt0 / "00000000000000002000").read_bytes())
    data[1400:] = bytes(len(data) - 1400)  # units 70..99 of the middle file lost too
    (tt0 / "00000000000000002000").write_bytes(bytes(data))
    pe1 = cq / "Pay-Events" / "1" / "00000000000000002000"
    units = np.frombuffer(pe1.read_bytes(), dtype=CQ_DTYPE).copy()
    n = int(np.flatnonzero(units["size"] == 0)[0])
    units[n - 5:n] = 0
    pe1.write_bytes(units.tobytes())
    shutil.rmtree(cq / "主题-Ω-topic" / "1")
    pe2 = cq / "Pay-Events" / "2" / "00000000000000002000"
    units = np.frombuffer(pe2.read_bytes(), dtype=CQ_DTYPE).copy()
    w = int(np.flatnonzero(units["size"] == 0)[0])
    units[w] = (2_100_000, 300, 7)  # a unit past the truncation point
    stale = units.tobytes()
    pe2.write_bytes(stale)
    (pe2.parent / "00000000000000004000").write_bytes(cq_file([]) * 20)  # a zero file past the run

    plan = dry_run(store, tmp_path)
    c = plan["consumequeue"]
    assert sorted(c["queues_redispatched"]) == ["Pay-Events/1", "TopicTest/0", "主题-Ω-topic/1"]
    assert "consumequeue/TopicTest/0/00000000000000004000" in c["to_create"]
    assert "consumequeue/主题-Ω-topic/1/00000000000000000000" in c["to_create"]
    assert c["to_delete"] == ["consumequeue/Pay-Events/2/00000000000000004000"]
    assert c["max_phy_offset_before"] == 2_100_300

    out = tmp_path / "out"
    assert run_recover("--store", str(store), "--broker-config", str(CONF), "--out", str(out), "--json") == 0
    got = tree(out)
    expect = {k: v["sha256"] for k, v in manifest("unclean-11-recovered")["files"].items()
              if k.startswith(("commitlog/", "consumequeue/"))}
    expect["consumequeue/Pay-Events/2/00000000000000002000"] = hashlib.sha256(stale).hexdigest()
    assert {k: v for k, v in got.items() if k.startswith(("commitlog/", "consumequeue/"))} == expect


def test_full_index_rebuilds_every_index_file(recovered, golden, tmp_path):
    out = tmp_path / "out"
    assert run_recover("--store", str(golden / "unclean-11"), "--broker-config", str(CONF), "--out", str(out),
                       "--full-index", "--json") == 0
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert report["index"]["mode"].startswith("full rebuild") and len(report["index"]["deleted"]) == 32
    # the crash-time index was complete up to the crash, so a clean rebuild of [0, P) reproduces it
    files = manifest("unclean-11")["files"]
    assert [sha(p) for p in sorted((out / "index").iterdir())] == \
        [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]
    same = ("commitlog/", "consumequeue/")
    assert {k: v for k, v in tree(out).items() if k.startswith(same)} == \
        {k: v for k, v in tree(recovered["unclean-11"]).items() if k.startswith(same)}


def test_full_index_in_shares_rebuilds_every_index_file(golden, tmp_path, monkeypatch):
    """--full-index builds its index files as the rebuild does, a large file in shares by parallel tasks: here
    every file is its own task cut into shares of a few keys each, and the files are the crash-time index."""
    import jobs.pipeline.outputs.build as build
    share = build.share_index_tasks
    monkeypatch.setattr(build, "TARGET_INDEX_ENTRIES_PER_TASK", 1)
    monkeypatch.setattr(build, "MIN_SHARE_KEYS", 2)
    planned: list = []
    monkeypatch.setattr(build, "share_index_tasks", lambda tasks, cores: planned.extend(share(tasks, 10_000)) or planned)
    out = tmp_path / "out"
    assert run_recover("--store", str(golden / "unclean-11"), "--broker-config", str(CONF), "--out", str(out),
                       "--full-index", "--json") == 0
    files = manifest("unclean-11")["files"]
    assert [sha(p) for p in sorted((out / "index").iterdir())] == \
        [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]
    assert sum(isinstance(t, build.IndexShare) for t in planned) > 2 * len(list((out / "index").iterdir()))


def test_bad_store_exits_2_naming_file_and_offset(spark, golden, tmp_path, capsys):
    from jobs.pipeline.runtime.cli import run_main
    from jobs.recover import main

    store = writable_copy(golden / "unclean-11", tmp_path / "store")
    bad = store / "consumequeue" / "Pay-Events" / "0" / "00000000000000002000"
    bad.write_bytes(bad.read_bytes()[:1990])
    with pytest.raises(SystemExit) as exit_info:
        run_main("recover", main, ["--store", str(store), "--broker-config", str(CONF), "--dry-run"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and str(bad) in err and "1990" in err and "Traceback" not in err, err


# ---------------------------------------------------------------------------------------------
# in place: backup, journal, kill at several points, resume / rollback


APPLY_SNIPPET = """
import json, sys
from pathlib import Path
from jobs.pipeline.recover import inplace
from jobs.pipeline.recover.journal import Op
store, staging, backup, ops = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4])
inplace.apply(store, staging, backup, [Op(**o) for o in ops], {})
"""


@pytest.fixture(scope="module")
def staged(spark, golden, tmp_path_factory):
    """An in-place plan for v5-unclean-torn-11, staged once: (store copy, staging copy, ops)."""
    from jobs.pipeline.recover import inplace
    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.recover.gather import plan_recovery
    from jobs.pipeline.recover.write import plan_output, write_output
    from storage_format.settings import load_settings

    root = tmp_path_factory.mktemp("inplace")
    store = writable_copy(golden / "v5-unclean-torn-11", root / "store")
    plan = plan_recovery(SparkRunner(spark.sparkContext), Location(str(store)), load_settings(CONF), Location(str(root / "work")),
                         split_size=0, quiet=True)
    staging = inplace.prepare_staging(store)
    output = plan_output(plan, with_copies=False)
    write_output(SparkRunner(spark.sparkContext), plan, output, Location(str(staging)), True)
    ops = inplace.build_ops(store, staging, output.rendered, output.deleted)
    shutil.move(str(staging), root / "staging")
    return store, root / "staging", ops


def fresh(staged, tmp: Path) -> tuple[Path, Path]:
    store, staging, _ = staged
    s = tmp / "store"
    shutil.copytree(store, s)
    shutil.copytree(staging, s / ".reput-recover.staging")
    return s, tmp / "backup"


def apply_until(store: Path, backup: Path, ops, point: str | None) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if point:
        env["REPUT_CRASH_AT"] = point
    proc = subprocess.run([sys.executable, "-c", APPLY_SNIPPET, str(store), str(store / ".reput-recover.staging"),
                           str(backup), json.dumps([o.to_dict() for o in ops])], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode


def test_inplace_ops_order_puts_abort_last(staged):
    _, _, ops = staged
    paths = [o.path for o in ops]
    assert paths[-1] == "abort" and paths[-2] == "abort.bak" and paths[-3] == "checkpoint"
    assert {o.op for o in ops} == {"create", "replace", "delete"}


@pytest.mark.parametrize("point", ["staged", "backed-up"])
def test_killed_before_the_journal_leaves_the_old_store(staged, golden, tmp_path, point):
    store, backup = fresh(staged, tmp_path)
    old = tree(store, skip=())
    assert apply_until(store, backup, staged[2], point) == -signal.SIGKILL
    assert not (store / ".reput-recover.journal").exists()
    now = tree(store, skip=())
    assert {k: v for k, v in now.items() if not k.startswith(".reput")} == \
        {k: v for k, v in old.items() if not k.startswith(".reput")}


@pytest.mark.parametrize("point,way", [("journaled", "rollback"), ("op-2", "resume"), ("op-3", "rollback"),
                                       ("applied", "resume")])
def test_killed_after_the_journal_has_a_way_back_and_forward(staged, golden, tmp_path, point, way):
    store, backup = fresh(staged, tmp_path)
    old = {k: v for k, v in tree(store).items() if not k.startswith(".reput")}
    assert apply_until(store, backup, staged[2], point) == -signal.SIGKILL
    assert (store / ".reput-recover.journal").exists()
    assert (store / "abort").exists() == (point != "applied")  # abort goes last: the store stays marked unclean
    proc = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), f"--{way}",
                           "--backup-dir", str(backup)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (store / ".reput-recover.journal").exists() and not (store / ".reput-recover.staging").exists()
    if way == "resume":
        assert_matches_recovered(store, "v5-unclean-torn-11")
    else:
        assert tree(store) == old


def test_inplace_end_to_end_with_a_kill_then_resume_then_rollback(golden, tmp_path):
    """The real CLI: killed mid-switch, a plain re-run refuses, --resume finishes (the store equals the
    broker's recovery), --rollback afterwards restores the crashed input byte for byte."""
    store = writable_copy(golden / "unclean-torn-11", tmp_path / "store")
    old = tree(store)
    backup = tmp_path / "backup"
    cmd = [sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config", str(CONF), "--in-place",
           "--backup-dir", str(backup), "--master", "local[1]", "--json"]
    killed = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, REPUT_CRASH_AT="op-2"), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--resume" in again.stderr and "Traceback" not in again.stderr
    done = subprocess.run(cmd[:5] + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"resumed: {store} recovered in place (") and "{" not in done.stdout
    assert_matches_recovered(store, "unclean-torn-11")
    manifest_ops = json.loads((backup / "reput-backup.json").read_text())["ops"]
    assert {o["path"] for o in manifest_ops if o["op"] not in ("create", "patch")} <= {
        str(p.relative_to(backup)) for p in backup.rglob("*") if p.is_file()}
    assert (backup / "reput-patches.old").exists() == any(o["op"] == "patch" for o in manifest_ops)
    back = subprocess.run(cmd[:5] + ["--rollback", "--backup-dir", str(backup)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert back.returncode == 0, back.stderr
    assert back.stdout.startswith(f"rolled back: {store} is as it was before recovery (") and "{" not in back.stdout
    assert tree(store) == old


def test_a_stray_name_in_a_queue_directory_is_refused(spark, golden, tmp_path, capsys):
    """A `.bak` copy in consumequeue/<topic>/<queueId>/ would stop the broker (MappedFileQueue.load parses every
    name there as a long): recover refuses, naming the file and that consequence, and changes nothing."""
    from jobs.pipeline.runtime.cli import run_main

    store = writable_copy(golden / "unclean-11", tmp_path / "store")
    queue = store / "consumequeue" / "TopicTest" / "0"
    shutil.copyfile(queue / "00000000000000000000", queue / "00000000000000000000.bak")
    with pytest.raises(SystemExit) as done:
        run_main("recover", lambda argv: run_recover("--store", str(store), "--broker-config", str(CONF),
                                                     "--dry-run", "--json"))
    assert done.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and f"{queue / '00000000000000000000.bak'} at byte offset 0" in err[0], err
    assert "the broker does not start" in err[0] and "NumberFormatException" in err[0], err


def test_a_clean_5x_store_the_modelled_recovery_would_cut_is_refused(tmp_path, capfd):
    """A 5.x store that shut down cleanly (no abort) with a damaged record in its third-last segment: 4.9.8's normal
    recovery (what reput models) validates from there and cuts the log, dropping the last segment's records; 5.3.3's
    validates only from the segment holding the consume queues' end and keeps them. Refused by name, in every mode,
    the store unchanged (a plan dropping records 5.3.3 keeps; --in-place deleted them)."""
    from tests.helpers import run_job

    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "v5-unclean-11", store)
    (store / "abort").unlink()
    third = sorted((store / "commitlog").iterdir())[-3]
    data = bytearray(third.read_bytes())
    at = 0
    for _ in range(10):  # the 10th record's magic code
        at += struct.unpack_from(">i", data, at)[0]
    data[at + 4] ^= 0xFF
    third.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    for mode in (["--dry-run"], ["--in-place", "--backup-dir", str(tmp_path / "bak")]):
        code, _, err = run_job("recover", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                           *mode], capfd)
        lines = [line for line in err.splitlines() if line.startswith("reput recover: error:")]
        assert code == 2 and len(lines) == 1 and "shut down cleanly (no abort file)" in lines[0], err[-2000:]
        assert f"{third.name} at byte offset {at}" in lines[0] and "5.3.3's normal recovery" in lines[0]
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
