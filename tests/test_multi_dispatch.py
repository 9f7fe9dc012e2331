"""LMQ / multi-dispatch rules without Spark: the vectorised rules agree with a record-at-a-time reading of
ConsumeQueue.multiDispatchLmqQueue (4.9.8 and 5.3.3) on any input, and rebuild the golden LMQ queues."""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from storage_format.java_props import LONG_BITS, java_parse_integral
from storage_format.commitlog import decode_buffer, parse_segment_name
from storage_format.consume_queue import (build_queue_files, has_cq_entry, keep_first_of_each_offset, place_units,
                                          tags_codes)
from storage_format.multi_dispatch import (INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, MultiDispatchError,
                                           MultiDispatchRules, first_empty_offset_slot, java_split,
                                           lmq_entries, non_blank, rules_for)
from storage_format.properties import TAGS
from storage_format.settings import load_settings
from tests.conftest import GOLDEN, manifest

R4, R5 = MultiDispatchRules(4, True, True), MultiDispatchRules(5, True, True)


def split_ref(text: str) -> list[str]:
    """Java String.split(","): trailing empty strings removed."""
    items = text.split(",")
    while items and items[-1] == "":
        items.pop()
    return items


def entries_ref(names, offsets, topics, qids, rules) -> list[tuple[int, str, int, int]]:
    """(record, queue, queueId, offset) the broker dispatches, one record at a time."""
    out = []
    for r, (n, o, t, q) in enumerate(zip(names, offsets, topics, qids)):
        if not rules.enable_multi_dispatch or n is None or o is None or not n.strip(" \t") or not o.strip(" \t"):
            continue
        if rules.generation >= 5 and (t.startswith(("%RETRY%", "rmq_sys_")) or t == "SCHEDULE_TOPIC_XXXX"):
            continue
        ns, os_ = split_ref(n), split_ref(o)
        if len(ns) != len(os_):
            continue
        for name, off in zip(ns, os_):
            if rules.generation >= 5 and "/" in name:
                continue
            qid = 0 if rules.enable_lmq and name.startswith("%LMQ%") else q
            out.append((r, name, qid, int(off)))
    return out


NAME = st.sampled_from(["%LMQ%a", "%LMQ%b", "%RETRY%g", "q/x", "%LMQ%房"])
OFFSET = st.sampled_from(["0", "7", "+3", "12", ""])
LIST = st.one_of(st.none(), st.lists(st.one_of(NAME, OFFSET), max_size=4).map(",".join))
TOPIC = st.sampled_from(["T", "%RETRY%g", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX"])


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(NAME, min_size=1, max_size=3).map(",".join),
                               st.lists(OFFSET, max_size=4).map(",".join), TOPIC), min_size=1, max_size=6),
       generation=st.sampled_from([4, 5]))
def test_entries_match_the_record_at_a_time_reading(rows, generation):
    names, offsets, topics = ([r[i] for r in rows] for i in range(3))
    qids = list(range(1, len(rows) + 1))
    rules = MultiDispatchRules(generation, True, True)
    try:
        want = entries_ref(names, offsets, topics, qids, rules)
    except ValueError:  # Long.parseLong("") in the broker: refused with the record named
        with pytest.raises(MultiDispatchError):
            lmq_entries(pa.array(names), pa.array(offsets), pa.array(topics), np.array(qids, np.int32), rules)
        return
    e = lmq_entries(pa.array(names), pa.array(offsets), pa.array(topics), np.array(qids, np.int32), rules)
    got = list(zip(e.record.tolist(), e.queue.to_pylist(), e.queue_id.tolist(), e.queue_offset.tolist()))
    assert got == want


@given(st.lists(st.sampled_from(["a", "", ",", "bc", ",,"]), max_size=6).map("".join))
def test_java_split(text):
    owner, items = java_split(pa.array([text]))
    assert items.to_pylist() == split_ref(text) and (owner == 0).all()


def test_version_rules_on_hand_made_records():
    names = pa.array(["%LMQ%a,%LMQ%b", "%LMQ%a,%RETRY%g", "%LMQ%a,%RETRY%g", "%LMQ%a/x,%LMQ%b", None, "%LMQ%a"])
    offsets = pa.array(["3,4", "5,", "5,7", "6,8", "1", " \t"])
    topics = pa.array(["T", "T", "SCHEDULE_TOPIC_XXXX", "T", "T", "T"])
    qids = np.array([1, 2, 3, 4, 5, 6], np.int32)
    e4 = lmq_entries(names, offsets, topics, qids, R4)
    # 4.x: "5," splits to one item (count mismatch, no entries); the schedule record is dispatched; the
    # %RETRY% name takes the record's queueId; a '/' name is kept (the scan refuses it as a directory name)
    assert e4.record.tolist() == [0, 0, 2, 2, 3, 3]
    assert e4.queue_id.tolist() == [0, 0, 0, 3, 0, 0] and e4.queue_offset.tolist() == [3, 4, 5, 7, 6, 8]
    e5 = lmq_entries(names, offsets, topics, qids, R5)  # 5.x: no schedule record, '/' names skipped
    assert e5.record.tolist() == [0, 0, 3] and e5.queue.to_pylist() == ["%LMQ%a", "%LMQ%b", "%LMQ%b"]
    assert e5.seq.tolist() == [1, 2, 2]
    no_lmq = lmq_entries(names, offsets, topics, qids, MultiDispatchRules(4, False, True))
    assert no_lmq.queue_id.tolist() == [1, 1, 3, 3, 4, 4]  # without enableLmq %LMQ% names keep the queueId
    assert not len(lmq_entries(names, offsets, topics, qids, MultiDispatchRules(4, True, False)))
    assert rules_for(None, True, 5) is None and rules_for(True, None, 5) == MultiDispatchRules(5, False, True)


def test_unparseable_offset_is_refused_naming_the_record():
    with pytest.raises(MultiDispatchError) as err:
        lmq_entries(pa.array(["T", "%RETRY%g,%LMQ%a"]), pa.array(["1", ",4"]), pa.array(["T", "T"]),
                    np.array([0, 0], np.int32), R5)
    assert err.value.record == 1 and "''" in str(err.value)


@pytest.mark.parametrize("text,value", [("5", 5), ("+5", 5), ("-5", -5), ("\u0663\u0664", 34), ("007", 7),
                                        ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63)])
def test_java_parse_long_accepts(text, value):
    """INNER_MULTI_QUEUE_OFFSET items are read with the one Long.parseLong (java_props.java_parse_integral)."""
    assert java_parse_integral(text, LONG_BITS) == value


@pytest.mark.parametrize("text", ["", "+", "-", " 5", "5 ", "5_0", "9223372036854775808", "0x5", "²"])
def test_java_parse_long_rejects(text):
    assert java_parse_integral(text, LONG_BITS) is None


def test_blank_and_empty_slot():
    assert non_blank(pa.array(["a", " ", "\u2003", "\u00a0", None, "\x1c"])).tolist() == \
        [True, False, False, True, False, False]  # Java: NBSP is no whitespace, U+001C is
    assert first_empty_offset_slot(pa.array(["1,2", None, "3,", "4"])) == 2
    assert first_empty_offset_slot(pa.array(["1,2", ",,"])) == 1 and first_empty_offset_slot(pa.array(["1"])) is None


def test_place_units():
    phy, size = np.array([10, 20, 20, 30, 40, 50]), np.full(6, 5)
    keep, at = place_units(np.array([0, 1, 1, 3, 4, 0]), phy, size)
    # the repeat of phy 20 is skipped; offset 3 lands at write position 2; offset 0 is never "repeated"
    assert keep.tolist() == [True, True, False, True, True, True] and at.tolist() == [0, 1, 2, 3, 4]
    keep, at = place_units(np.array([1, 3, 5]), np.array([10, 20, 30]), np.full(3, 5))
    assert at.tolist() == [1, 2, 3]  # the first entry at its offset (pre-blank before it), then compacted


@given(st.lists(st.integers(0, 3), min_size=1, max_size=20), st.integers(1, 50))
def test_place_units_equals_stored_offsets_when_in_step(steps, start):
    """Offsets that never jump land at their stored offsets, repeats skipped as keep_first_of_each_offset does
    (from offset 1 on: a repeated offset 0 with a new physical offset is appended, never "repeated")."""
    qo = start + np.cumsum(np.minimum(steps, 1)) - min(steps[0], 1)
    phy = np.arange(len(qo)) * 100
    keep, at = place_units(qo, phy, np.full(len(qo), 10))
    assert (keep == keep_first_of_each_offset(qo)).all() and (at == qo[keep]).all()


def _golden_lmq_files(case: str, generation: int) -> dict[str, bytes]:
    """Every multi-dispatch target queue's files, from the commit log with the module's rules (no Spark)."""
    settings = load_settings(GOLDEN / case / "broker.conf")
    rules = rules_for(settings.enable_multi_dispatch, settings.enable_lmq, generation)
    per_queue: dict[tuple[str, int], list[tuple]] = {}
    for seg in sorted((GOLDEN / case / "commitlog").iterdir()):
        data = seg.read_bytes()
        cols = decode_buffer(data, parse_segment_name(seg.name), path=str(seg)).columns
        rows = np.flatnonzero(has_cq_entry(cols.sys_flag))
        tags = tags_codes(cols.property_binary(TAGS), cols.topic, cols.delay_level, cols.store_timestamp,
                          settings.delay_levels_ms)
        take = pa.array(rows)
        e = lmq_entries(cols.property_string(INNER_MULTI_DISPATCH).take(take),
                        cols.property_string(INNER_MULTI_QUEUE_OFFSET).take(take), cols.topic.take(take),
                        cols.queue_id[rows], rules)
        rec = rows[e.record]
        for r, q, qid, off in zip(rec.tolist(), e.queue.to_pylist(), e.queue_id.tolist(), e.queue_offset.tolist()):
            per_queue.setdefault((q, qid), []).append((off, cols.physical_offset[r], cols.total_size[r], tags[r]))
    out = {}
    for (q, qid), rows_ in per_queue.items():
        if not q.startswith("%LMQ%"):
            continue  # %RETRY% names share their queue with the retry topic's own records
        qo, phy, size, tg = (np.array(c) for c in zip(*rows_))
        keep, at = place_units(qo, phy, size)
        files = build_queue_files(at, phy[keep], size[keep], tg[keep], settings.consume_queue_file_size,
                                  int(at[0]))
        out.update({f"consumequeue/{q}/{qid}/{start:020d}": data for start, data in files.items()})
    return out


@pytest.mark.parametrize("case,generation", [("lmq-clean-small-11", 4), ("v5-lmq-clean-small-11", 5)])
def test_golden_lmq_queues(case, generation):
    """Every %LMQ% queue of a broker-written store, byte for byte, from the commit log and these rules."""
    files = manifest(case)["files"]
    built = _golden_lmq_files(case, generation)
    want = {k for k in files if k.startswith("consumequeue/%LMQ%")}
    assert set(built) == want and len(want) >= 12
    assert all(hashlib.sha256(data).hexdigest() == files[k]["sha256"] for k, data in built.items())


def test_guessed_4x_refuses_a_5x_only_record():
    """With 4 only guessed, an empty offset item (written only by 5.x) is refused naming the record."""
    guessed = MultiDispatchRules(4, True, True, generation_known=False)
    with pytest.raises(MultiDispatchError) as err:
        lmq_entries(pa.array(["%LMQ%a", "%LMQ%a,%RETRY%g"]), pa.array(["1", "2,"]), pa.array(["T", "T"]),
                    np.array([0, 0], np.int32), guessed)
    assert err.value.record == 1 and "--rocketmq-version" in str(err.value)
    assert len(lmq_entries(pa.array(["%LMQ%a"]), pa.array(["1"]), pa.array(["T"]), np.array([0], np.int32), guessed))


def test_4x_abnormal_recovery_dispatches_schedule_records_with_the_tags_hash():
    """4.9.8 runs the abnormal recovery before the schedule service loads its delay levels: a
    SCHEDULE_TOPIC_XXXX record it dispatches gets the TAGS hash; 5.x and normal recovery are unchanged."""
    from storage_format.java_hash import java_hash_arrow
    from storage_format.recovery import dispatch_settings
    s = load_settings(GOLDEN / "lmq-unclean-11" / "broker.conf")
    tags, topics = pa.array(["TagA", None]), pa.array(["SCHEDULE_TOPIC_XXXX"] * 2)
    level, ts = np.array([3, 3]), np.array([1000, 1000])
    quirk = dispatch_settings(s, 4, True)
    assert tags_codes(tags, topics, level, ts, quirk.delay_levels_ms).tolist() == \
        [int(java_hash_arrow(tags)[0]), 0]
    for same in (dispatch_settings(s, 5, True), dispatch_settings(s, 4, False)):
        assert tags_codes(tags, topics, level, ts, same.delay_levels_ms).tolist() == [11000, 11000]


def test_golden_recovery_shows_the_schedule_tags_quirk():
    """The broker's recovered LMQ store holds SCHEDULE_TOPIC_XXXX entries with tagsCode 0 or a TAGS hash
    (far below any delivery time), which a normal dispatch never writes."""
    from storage_format.consume_queue import unpack_entries
    base = GOLDEN / "lmq-unclean-11-recovered" / "consumequeue" / "SCHEDULE_TOPIC_XXXX"
    small = sum(int(((u["size"] > 0) & (u["size"] < 0x7FFFFFFF) & (np.abs(u["tags"]) < 2**32)).sum())
                for f in base.rglob("0*") for u in [unpack_entries(f.read_bytes())])
    assert small > 0


def test_5x_drops_an_empty_last_consume_queue_file_at_load():
    from storage_format.recovery import dropped_at_load
    assert dropped_at_load([(2000, 0), (0, 2000)], 5) == (2000,)
    assert dropped_at_load([(0, 0), (2000, 2000)], 5) == () and dropped_at_load([(2000, 0)], 4) == ()


def test_trimmed_queue_file_is_the_full_file_without_its_zero_tail():
    qo, phy, size, tg = np.array([3, 4, 7]), np.array([10, 20, 30]), np.full(3, 5), np.array([1, 2, 3])
    full = build_queue_files(qo, phy, size, tg, 200, 3)
    trimmed = build_queue_files(qo, phy, size, tg, 200, 3, trim=True)
    assert set(full) == set(trimmed) == {0}
    assert len(trimmed[0]) == 8 * 20 and full[0] == trimmed[0] + bytes(200 - 160)


def test_many_small_lmq_queues_share_few_consume_queue_tasks():
    """100,000 one-entry LMQ queues (as one split summarises them) are packed into a few tasks."""
    from types import SimpleNamespace

    from jobs.pipeline.outputs.build import plan_cq
    from jobs.pipeline.io.fs import location
    from storage_format.settings import BrokerSettings
    from storage_format.queue_table import QueueTable, merge_queue_tables
    n = 100_000
    table = QueueTable.build([f"%LMQ%q{i:06d}" for i in range(n)], np.zeros(n), np.zeros(n, np.int64),
                             np.ones(n, np.int64), np.arange(n), np.arange(n) % 5, np.arange(n) % 5)
    split = SimpleNamespace(index=0, cq_rows=n, queues=table)
    scan = SimpleNamespace(queue_table=lambda: merge_queue_tables([table]), accepted=[split],
                           split_queues=lambda s: s.queues)
    tasks = plan_cq(scan, BrokerSettings(), location("/nonexistent/work"), location("/nonexistent/out"),
                    target_tasks=4)
    assert sum(len(t.items) for t in tasks) == 100_000 and len(tasks) <= 60
    # each task reads its queues' run of the split's table: together, the table once
    assert [t.splits.tolist() for t in tasks][0][0][:2] == [0, 0]
    assert sum(int(t.splits[0, 2] - t.splits[0, 1]) for t in tasks) == n and all(len(t.splits) == 1 for t in tasks)
    assert [q for t in tasks for _, part in t.tables for q in part.keys()] == table.keys()
