"""The broker's recovery sequence (`storage_format.recovery.plan_sequence`) on hand-made facts, no Spark.

Each test pins one decision of DefaultMessageStore.load/recover/start (4.9.8 and 5.3.3): which queue
units are re-dispatched or cut, which files go, the 4.x post-start re-dispatch, the index passes and
the boundary record indexed twice, the checkpoint and the confirm offset. The golden crashed stores
check the same function end to end through `jobs.recover` (tests/test_recovery.py).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from storage_format import recovery as R
from storage_format.checkpoint import Checkpoint
from storage_format.consume_queue import CQ_DTYPE
from storage_format.index_file import IndexHeader
from storage_format.settings import BrokerSettings

SETTINGS = BrokerSettings(mapped_file_size_consume_queue=100, max_index_num=8, max_hash_slot_num=4)
FS = SETTINGS.consume_queue_file_size  # 5 units per consume-queue file
P = 1500  # the truncation point of every case: segments 0, 1000, 2000; recovery starts at 1000
CP = Checkpoint(10_000, 20_000, 30_000, 0, 1_234)


def cq_file(units: list[tuple[int, int]]) -> bytes:
    """A consume-queue file holding (phy, size) units, tagsCode = phy."""
    arr = np.zeros(FS // 20, dtype=CQ_DTYPE)
    for i, (phy, size) in enumerate(units):
        arr[i] = (phy, size, phy)
    return arr.tobytes()


def entries(rows: list[tuple[int, int, int]]) -> R.QueueEntries:
    """(queueOffset, phy, size) rows in commit-log order, tagsCode = phy."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return R.QueueEntries(a[:, 0], a[:, 1], a[:, 2].astype(np.int32), a[:, 1].copy())


def keys(records: list[tuple[int, int, int]]) -> R.KeyBatch:
    """(phy, store_ts, number of keys) per record -> index keys with distinct hashes."""
    rows = [(phy * 7 + k, phy, ts) for phy, ts, n in records for k in range(n)]
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return R.KeyBatch(a[:, 0].astype(np.int32), a[:, 1], a[:, 2])


class Store:
    """Hand-made consume queues: files per queue; load state as ConsumeQueue.recover finds it."""

    def __init__(self, queues: dict[tuple[str, int], dict[int, bytes]]) -> None:
        self.files = queues
        self.loads = {k: R.load_queue(k[0], k[1], list(f), f.__getitem__, FS) for k, f in queues.items()}

    def read(self, key: tuple[str, int], start: int) -> bytes:
        return self.files[key][start]


# Queue A holds records 1000..1300 (100 bytes each); queue B is one record behind (1000..1200).
# Records 1300 (A) and 1400 (B) reach P = 1500; record 1400 is the last valid one.
A, B = ("A", 0), ("B", 0)


def lagging_store() -> Store:
    return Store({A: {0: cq_file([(1000, 100), (1100, 100), (1300, 100)])}, B: {0: cq_file([(1200, 100)])}})


TAILS = {B: entries([(1, 1400, 100)])}  # the scanned entries past each queue's maxPhysicOffset


def facts(store: Store | None = None, **kw) -> R.RecoveryFacts:
    """Facts of a 4.x abnormal recovery of `lagging_store`, with overrides."""
    store = store or lagging_store()
    base = dict(generation=4, abnormal=True, settings=SETTINGS, checkpoint=CP, segment_starts=(0, 1000, 2000),
                start_offset=1000, truncate_at=P, last_valid_record=1400, last_dispatched_record=1400,
                dispatched_end=1500, queues=R.QueueFacts(store.loads, TAILS, FS, store.read), index=R.IndexOff(),
                last_cq_record_ts=lambda frm: 7_777 if frm <= 1400 else None)
    base.update(kw)
    return R.RecoveryFacts(**base)


def units(state: R.QueueState, store: Store, key: tuple[str, int]) -> list[tuple[int, int]]:
    """(phy, size) of the non-zero units of the queue's first file after recovery."""
    u = R.render_units(state, state.files[0], lambda s: store.read(key, s))
    return [(int(p), int(s)) for p, s in zip(u["phy"], u["size"]) if p or s]


# ---------------------------------------------------------------------------------------------
# consume queues and segments


def test_abnormal_recovery_redispatches_the_tails_and_deletes_segments_past_p():
    store = lagging_store()
    plan = R.plan_sequence(facts(store))
    assert plan.segments_deleted == [2000]  # the segment holding P keeps its bytes
    assert set(plan.queues.states) == {B}  # A already holds its units: nothing to write
    assert units(plan.queues.states[B], store, B) == [(1200, 100), (1400, 100)]
    assert not plan.queues.truncate_queues and plan.queues.max_phy_before == 1400
    assert plan.queues.reput_from == 1500 and plan.queues.post_start_from is None  # the queues reach P


def test_normal_recovery_dispatches_nothing_5x_and_4x_start_redispatches_from_the_queues_end():
    store = lagging_store()
    v5 = R.plan_sequence(facts(store, generation=5, abnormal=False))
    assert v5.queues.states == {} and v5.queues.reput_from == P  # 5.x start(): reput from the max offset
    v4 = R.plan_sequence(facts(store, abnormal=False))
    # 4.x start(): ReputMessageService from the largest maxPhysicOffset (1400, queue A) to P
    assert v4.queues.reput_from == 1400 and v4.queues.post_start_from == 1400
    assert units(v4.queues.states[B], store, B) == [(1200, 100), (1400, 100)]


def test_4x_refuses_a_post_start_redispatch_from_before_the_validated_range():
    store = Store({A: {0: cq_file([(500, 100)])}})
    with pytest.raises(R.RecoveryError, match="before the validated range"):
        R.plan_sequence(facts(store, abnormal=False, queues=R.QueueFacts(store.loads, {}, FS, store.read)))


def test_queues_past_p_are_truncated_and_only_they_change():
    """truncateDirtyLogicFiles(P) runs when the largest maxPhysicOffset is >= P; only queues holding a
    unit past P change: trailing files whose first unit is >= P go, the last file's write position is
    cut before its first unit >= P (the bytes stay)."""
    store = Store({A: {0: cq_file([(1000, 100), (1100, 100), (1300, 100), (1500, 100), (1600, 100)]),
                       100: cq_file([(1700, 100)])},
                   B: {0: cq_file([(1200, 100), (1400, 100)])}})
    plan = R.plan_sequence(facts(store, queues=R.QueueFacts(store.loads, {}, FS, store.read)))
    q = plan.queues
    assert q.truncate_queues and q.max_phy_before == 1800 and set(q.states) == {A}
    a = q.states[A]
    assert a.files == [0] and a.deleted_files() == [100]
    assert (a.write_offset, a.max_phy) == (60, 1400)
    assert a.cut == {"file": 0, "units_kept": 3, "first_unit_left_behind": 1500}
    assert a.changed_files() == []  # a logical cut: file 0 keeps its bytes
    assert q.reput_from == P  # after the cut A ends at 1400, B at P: nothing for 4.x start() to re-dispatch


def test_a_queue_ending_exactly_at_p_triggers_truncation_but_keeps_its_state():
    store = Store({A: {0: cq_file([(1000, 100), (1400, 100)])}})
    plan = R.plan_sequence(facts(store, queues=R.QueueFacts(store.loads, {}, FS, store.read)))
    assert plan.queues.truncate_queues and plan.queues.states == {}  # maxPhysicOffset == P: nothing to cut


# ---------------------------------------------------------------------------------------------
# index


def kept_file(end_ts: int, end_phy: int, count: int) -> R.IndexFileInfo:
    return R.IndexFileInfo("20260101000000000", IndexHeader(1, end_ts, 1000, end_phy, 0, count))


def test_index_files_newer_than_the_checkpoint_are_deleted_after_a_crash_only():
    files = [R.IndexFileInfo(n, IndexHeader(1, end, 0, 0, 0, 2)) for n, end in
             (("20260101000000002", 31_000), ("20260101000000000", 29_000), ("20260101000000001", 30_000))]
    kept, deleted = R.index_files_after_load(files, CP, abnormal=True)  # indexMsgTimestamp 30_000
    assert [f.name for f in kept] == ["20260101000000000", "20260101000000001"]  # name order
    assert [f.name for f in deleted] == ["20260101000000002"]
    kept, deleted = R.index_files_after_load(files, CP, abnormal=False)
    assert len(kept) == 3 and deleted == []


def test_index_resume_reindexes_the_boundary_record_and_4x_start_indexes_the_last_records_again():
    scanned = keys([(1200, 12_000, 1), (1300, 13_000, 1), (1400, 14_000, 2)])
    idx = R.IndexResumeFacts(kept_file(12_000, 1200, 3), scanned, SETTINGS.max_index_num)
    store = Store({A: {0: cq_file([(1000, 100), (1100, 100)])}})  # queues end at 1200: 4.x re-dispatches
    plan = R.plan_sequence(facts(store, index=idx, queues=R.QueueFacts(store.loads, {}, FS, store.read)))
    assert plan.queues.reput_from == 1200
    r = plan.index_resume
    # recovery pass [1000, P): resumes at the kept file's endPhyOffset 1200, which it indexes again;
    # the post-start pass [1200, P) then starts at the new end (1400) and indexes record 1400 again
    assert r.boundary_reindexed == [{"pass": "recovery", "record_offset": 1200, "keys": 1},
                                    {"pass": "post-start re-dispatch", "record_offset": 1400, "keys": 2}]
    assert list(r.targets[0].all_keys().phy) == [1200, 1300, 1400, 1400, 1400]  # 3 + 5 = maxIndexNum: full
    assert [list(t.all_keys().phy) for t in r.new_files] == [[1400]]  # the rest opens a new file
    assert plan.rolled_full_end_ts == [14_000] and plan.checkpoint.index_msg_timestamp == 14_000


def test_index_passes_per_generation_and_recovery_kind():
    k = keys([(1400, 14_000, 1)])
    v4 = R.plan_sequence(facts(abnormal=False))
    assert [(p.name, p.first_offset, p.last_record_offset)
            for p in R.index_passes(facts(abnormal=False), v4.queues, k)] == [("post-start re-dispatch", 1400, 1400)]
    v5 = R.plan_sequence(facts(generation=5))
    assert [p.name for p in R.index_passes(facts(generation=5), v5.queues, k)] == ["recovery"]
    # a confirm-offset limit stops the recovery's dispatch at record 1300: a post-start pass from the
    # queues' end 1400 has no dispatched record to index
    f = facts(last_dispatched_record=1300)
    assert [(p.name, p.last_record_offset) for p in R.index_passes(f, v4.queues, k)] == [
        ("recovery", 1300), ("post-start re-dispatch", None)]


def test_index_off_and_full_rebuild():
    off = R.plan_sequence(facts())
    assert (off.index_resume.targets, off.rolled_full_end_ts) == ([], [])
    assert off.checkpoint.index_msg_timestamp == CP.index_msg_timestamp
    full = R.plan_sequence(facts(index=R.FullIndexRebuild((25_000,))))
    assert full.index_resume is None and full.checkpoint.index_msg_timestamp == 25_000


# ---------------------------------------------------------------------------------------------
# checkpoint and confirm offset


def test_logics_timestamp_comes_from_the_dispatches_that_reach_the_queues():
    asked: list[int] = []

    def last_ts(frm: int) -> int | None:
        asked.append(frm)
        return 7_777

    assert R.plan_sequence(facts(last_cq_record_ts=last_ts)).checkpoint.logics_msg_timestamp == 7_777
    assert R.plan_sequence(facts(abnormal=False, last_cq_record_ts=last_ts)).checkpoint.logics_msg_timestamp == 7_777
    assert asked == [1000, 1400]  # abnormal: from the start segment; 4.x normal: from the post-start pass
    v5 = R.plan_sequence(facts(generation=5, abnormal=False, last_cq_record_ts=last_ts))
    assert asked == [1000, 1400] and v5.checkpoint.logics_msg_timestamp == CP.logics_msg_timestamp
    assert v5.checkpoint.physic_msg_timestamp == CP.physic_msg_timestamp  # recovery appends nothing


def test_confirm_offset_4x_5x_and_controller_mode():
    assert R.plan_sequence(facts()).checkpoint == replace(CP, logics_msg_timestamp=7_777)  # 4.x: no confirm field
    v5 = R.plan_sequence(facts(generation=5))
    assert v5.checkpoint.confirm_phy_offset == 1400  # the last valid record's start
    empty = R.plan_sequence(facts(generation=5, last_valid_record=None, last_dispatched_record=None,
                                  dispatched_end=None))
    assert empty.checkpoint.confirm_phy_offset == 1000  # none found: the start segment's offset
    normal = R.plan_sequence(facts(generation=5, abnormal=False, last_valid_record=None))
    assert normal.checkpoint.confirm_phy_offset == P  # normal recovery, none found: the log's end
    ctl = replace(SETTINGS, enable_controller_mode=True, all_ack_in_sync_state_set=True)
    high = R.plan_sequence(facts(generation=5, settings=ctl, checkpoint=replace(CP, confirm_phy_offset=9_999),
                                 dispatched_end=1300, last_dispatched_record=1200))
    assert high.checkpoint.confirm_phy_offset == 1300 and "lowered" in high.checkpoint_why["confirm_phy_offset"]
    kept = R.plan_sequence(facts(generation=5, settings=ctl, checkpoint=replace(CP, confirm_phy_offset=1300),
                                 dispatched_end=1300, last_dispatched_record=1200))
    assert kept.checkpoint.confirm_phy_offset == 1300 and "kept" in kept.confirm.why
