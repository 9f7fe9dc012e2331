"""The column-based queue tables (storage_format.queue_table): a split's table and the driver's merge, against
the per-queue dict merge they replace (one object per queue per split, merged in Python, as plan_cq,
verify's queue_ends and the scan's per-queue counts did), on generated splits and at the boundaries."""
from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from storage_format import queue_table
from storage_format.queue_table import MergedQueues, QueueTable, key_order, merge_queue_tables

# One split as the old code held it: {(topic, queueId): (records, cq_rows, first_row, lo, hi, unordered)}.
TOPICS = st.sampled_from(["a", "b", "%LMQ%x", "%LMQ%y", "%RETRY%g", "z\u00e9", "\u00e9", "\u4e2d", "\U0001f600", "A",
                          "a b", ""])
QUEUE = st.tuples(TOPICS, st.integers(-3, 5))
STATS = st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 100), st.integers(-2, 50), st.integers(0, 9),
                  st.booleans())
SPLIT = st.dictionaries(QUEUE, STATS, max_size=12)


def _stats(records, rows, first, lo, span, unordered):
    """A queue's stats as a decoder gives them: no rows, no range (first_row and offsets 0, in order)."""
    return (records, rows, first, lo, lo + span, unordered) if rows else (records, 0, 0, 0, 0, False)


def _table(split: dict, seed: int) -> QueueTable:
    """The split's table from its queues in a shuffled order (build sorts them)."""
    items = list(split.items())
    random.Random(seed).shuffle(items)
    cols = list(zip(*(v for _, v in items))) or [()] * 6
    return QueueTable.build([t for (t, _), _ in items], np.array([q for (_, q), _ in items], np.int64),
                            *(np.array(c, np.int64) for c in cols[:5]), unordered=np.array(cols[5], bool))


def _old_merge(splits: list[tuple[int, dict]]) -> dict:
    """The dict merge the tables replace: per queue, records and rows summed, the range over the splits with
    rows, the sources (split, first row, rows, lo, hi) in split order, unordered in any split."""
    out: dict = {}
    for index, split in splits:
        for key, (records, rows, first, lo, hi, unordered) in split.items():
            q = out.setdefault(key, {"records": 0, "rows": 0, "lo": None, "hi": None, "sources": [],
                                     "unordered": False})
            q["records"] += records
            q["unordered"] |= unordered
            if rows:
                q["rows"] += rows
                q["lo"] = lo if q["lo"] is None else min(q["lo"], lo)
                q["hi"] = hi if q["hi"] is None else max(q["hi"], hi)
                q["sources"].append((index, first, rows, lo, hi))
    return dict(sorted(out.items()))


def _as_dict(m: MergedQueues) -> dict:
    out = {}
    for i, key in enumerate(m.keys()):
        rows = int(m.cq_rows[i])
        out[key] = {"records": int(m.records[i]), "rows": rows, "lo": int(m.min_offset[i]) if rows else None,
                    "hi": int(m.max_offset[i]) if rows else None, "unordered": bool(m.unordered[i]),
                    "first_lo": int(m.first_lo[i]) if rows else None, "last_hi": int(m.last_hi[i]) if rows else None}
        assert rows or (m.min_offset[i] == 0 and m.max_offset[i] == 0 and not m.broken[i])
    return out


def _summary(want: dict) -> dict:
    """The old merge's answer without its sources: what the fold keeps of them (the first split's smallest and the
    last split's largest offset)."""
    return {k: {"records": q["records"], "rows": q["rows"], "lo": q["lo"], "hi": q["hi"], "unordered": q["unordered"],
                "first_lo": q["sources"][0][3] if q["sources"] else None,
                "last_hi": q["sources"][-1][4] if q["sources"] else None} for k, q in want.items()}


def _check(splits: list[tuple[int, dict]], fold_rows: int | None = None) -> MergedQueues:
    tables = [_table(s, i) for i, s in splits]
    for (_, split), t in zip(splits, tables):
        assert t.keys() == sorted(split)  # (topic, queueId) order is Python's
        assert t == QueueTable.build(t.topic, t.queue_id, t.records, t.cq_rows, t.first_row, t.min_offset,
                                     t.max_offset, t.unordered) and pickle.loads(pickle.dumps(t)) == t
        assert t.row_slices() == [(topic, qid, v[2], v[1]) for (topic, qid), v in sorted(split.items()) if v[1]]
        assert QueueTable.from_arrow(t.to_arrow()) == t
        assert QueueTable.from_arrow(t.to_arrow().slice(1, 2)) == t.slice(1, 3)  # Arrow: offset, length
    if fold_rows is None:
        merged = merge_queue_tables(tables)
    else:  # batches of a few rows: the merge folded into itself again and again
        old, queue_table.FOLD_ROWS = queue_table.FOLD_ROWS, fold_rows
        try:
            merged = merge_queue_tables(iter(tables))
        finally:
            queue_table.FOLD_ROWS = old
    want = _old_merge(splits)
    assert list(want) == merged.keys()
    assert _as_dict(merged) == _summary(want)
    # plan_cq's in-step rule (sources follow each other by exactly 1) as the old per-queue loop had it
    assert merged.sources_adjacent().tolist() == [all(b[3] == a[4] + 1 for a, b in zip(q["sources"], q["sources"][1:]))
                                                  for q in want.values()]
    per_topic: dict = {}
    for (topic, qid), q in want.items():
        if q["records"]:
            per_topic.setdefault(topic, {})[qid] = q["records"]
    assert merged.per_topic("records") == per_topic
    keys = merged.keys()
    for t in tables:  # every split's queue found at its row of the merge
        assert [keys[i] for i in merged.positions(t).tolist()] == t.keys()
    return merged


@settings(max_examples=300, deadline=None)
@given(st.lists(SPLIT, max_size=6), st.data())
def test_merge_equals_the_per_queue_dict_merge(splits, data):
    splits = [{k: _stats(*v) for k, v in s.items()} for s in splits]
    indices = sorted(data.draw(st.sets(st.integers(0, 40), min_size=len(splits), max_size=len(splits))))
    _check(list(zip(indices, splits)), data.draw(st.sampled_from([None, 1, 5, 20])))


def test_key_order_is_pythons_order():
    keys = [("\U0001f600", 1), ("\uffff", 0), ("\u00e9", -1), ("e", 2**31 - 1), ("e", -2**31), ("", 0), ("%LMQ%a", 0)]
    order = key_order(pa.array([t for t, _ in keys], pa.large_string()), np.array([q for _, q in keys]))
    assert [keys[i] for i in order] == sorted(keys)


def test_queue_in_one_split_only_and_in_every_split():
    one = ("only", 1)
    every = ("%LMQ%every", 0)
    splits = [(i, {every: (1, 2, 10 * i, 2 * i, 2 * i + 1, False), ("p", i): (3, 3, 0, 0, 2, False)})
              for i in range(5)]
    splits[2][1][one] = (0, 1, 99, 7, 7, False)
    for fold_rows in (None, 1):
        m = _check(splits, fold_rows)
        i = m.keys().index(every)
        assert m.cq_rows[i] == 10 and (m.min_offset[i], m.max_offset[i]) == (0, 9) and m.sources_adjacent()[i]
        assert (m.first_lo[i], m.last_hi[i]) == (0, 9)
        j = m.keys().index(one)
        assert m.records[j] == 0 and (m.first_lo[j], m.last_hi[j]) == (7, 7)


def test_a_gap_between_splits_breaks_the_step_however_the_merge_is_folded():
    """Offsets 0-1, 2-3, then 5-6: the step from the second split to the third is 2, whether the first two were
    folded before the third arrived or all three at once."""
    splits = [(i, {("t", 0): (2, 2, 0, lo, lo + 1, False)}) for i, lo in enumerate((0, 2, 5))]
    for fold_rows in (None, 1, 2):
        assert not _check(splits, fold_rows).sources_adjacent()[0]


def test_no_queues():
    for tables in ([], [QueueTable.empty()], [QueueTable.empty(), QueueTable.empty()]):
        m = merge_queue_tables(tables)
        assert len(m) == 0 and m.keys() == [] and m.per_topic("records") == {}
        assert len(m.sources_adjacent()) == 0 and len(m.positions(QueueTable.empty())) == 0
    assert QueueTable.empty().row_slices() == [] and not QueueTable.empty().has_rows


def test_a_queue_the_merge_lacks_is_refused():
    m = merge_queue_tables([QueueTable.build(["a"], np.array([1]), np.array([1]))])
    for other in (QueueTable.build(["b"], np.array([1]), np.array([1])),
                  QueueTable.build(["a"], np.array([2]), np.array([1]))):
        with pytest.raises(ValueError, match="lacks"):
            m.positions(other)


def test_twenty_thousand_lmq_queues_in_four_splits():
    """An LMQ store's shape: 20,000 %LMQ% queues, all in the first split and 15,000 of them in each of three
    more, and the splits' own queues."""
    rng = np.random.default_rng(7)
    splits = []
    for i in range(4):
        names = rng.choice(20_000, 15_000, replace=False) if i else rng.permutation(20_000)
        split = {(f"%LMQ%q{n:05d}", 0): (0, 1, int(r), i, i, False) for r, n in enumerate(names.tolist())}
        split.update({(f"t{t}", q): (1000, 1000, 15_000 + 1000 * (8 * t + q), 1000 * i, 1000 * i + 999, False)
                      for t in range(8) for q in range(8)})
        splits.append((i, split))
    for fold_rows in (None, 30_000):
        m = _check(splits, fold_rows)
        assert len(m) == 20_064 and m.records.sum() == 4 * 64 * 1000
        assert m.cq_rows.sum() == 5_000 + 4 * (15_000 + 64_000)


def test_queue_table_file_reads_a_run_of_rows_across_batches(tmp_path, monkeypatch):
    """The work directory's queue table: a run of rows read back equal to the same rows of the table, whichever
    record batches it spans."""
    from jobs.pipeline.io import workdir
    from jobs.pipeline.io.fs import location
    monkeypatch.setattr(workdir, "QUEUE_BATCH_ROWS", 7)
    n = 50
    t = QueueTable.build([f"t{i % 3}" for i in range(n)], np.arange(n) // 3, np.arange(n) + 1, np.arange(n) % 2,
                         np.arange(n), np.arange(n), np.arange(n) + 2, np.arange(n) % 5 == 0)
    work = location(str(tmp_path))
    workdir.write_queue_table(work, 3, t)
    assert workdir.read_queue_table(work, 3) == t
    for start, stop in ((0, 1), (0, 7), (6, 8), (7, 14), (13, 50), (49, 50), (10, 10), (0, 50)):
        assert workdir.read_queue_table(work, 3, start, stop) == t.slice(start, stop), (start, stop)
