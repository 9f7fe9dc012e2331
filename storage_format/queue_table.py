"""Per-queue counts and queue-offset ranges as columns: one split's table (what either decoder hands on) and
their merge across splits (what the driver plans the consume queues from). An LMQ split names tens of
thousands of (topic, queueId)s: arrays keep that work vectorised, never one Python object per queue."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_numpy import large_strings, to_arrow, to_numpy

_QID_BIAS = 2**31  # a signed queueId as a non-negative 32-bit key part (signed order kept)


def key_order(topic: pa.Array, queue_id: np.ndarray) -> np.ndarray:
    """Indices that sort (topic, queueId) pairs: topics by their UTF-8 bytes (Python's str order, as code
    points), queue ids as signed ints."""
    if not len(topic):
        return np.zeros(0, np.int64)
    table = pa.table({"t": topic, "q": to_arrow(np.asarray(queue_id), pa.int32())})
    return to_numpy(pc.sort_indices(table, sort_keys=[("t", "ascending"), ("q", "ascending")])).astype(np.int64)


def _strings(topic: pa.Array | Sequence[str]) -> pa.LargeStringArray:
    arr = topic if isinstance(topic, pa.Array) else large_strings(topic)
    return arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr


@dataclass(frozen=True, eq=False, kw_only=True)
class QueueTable:
    """One split's (topic, queueId)s in (topic, queueId) order: records, consume-queue rows (where they
    start in the split's consume-queue table, grouped in this order), the smallest and largest queue offset
    among those rows (first_row and both offsets 0 for a queue without rows), and whether the rows do not
    step by exactly 1 (repeats, or offsets used up elsewhere)."""

    topic: pa.LargeStringArray
    queue_id: np.ndarray  # int32
    records: np.ndarray  # int64, as the columns below
    cq_rows: np.ndarray
    first_row: np.ndarray
    min_offset: np.ndarray
    max_offset: np.ndarray
    unordered: np.ndarray  # bool

    @staticmethod
    def build(topic: pa.Array | Sequence[str], queue_id: np.ndarray, records: np.ndarray,
              cq_rows: np.ndarray | None = None, first_row: np.ndarray | None = None,
              min_offset: np.ndarray | None = None, max_offset: np.ndarray | None = None,
              unordered: np.ndarray | None = None, *, order: np.ndarray | None = None) -> QueueTable:
        """A table from unsorted columns (omitted ones: no rows), put in (topic, queueId) order (`order`:
        that order when the caller has it already)."""
        topic = _strings(topic)
        n = len(topic)
        zeros = np.zeros(n, np.int64)
        cols = [np.asarray(c if c is not None else zeros) for c in (records, cq_rows, first_row, min_offset,
                                                                   max_offset)]
        unord = np.zeros(n, bool) if unordered is None else np.asarray(unordered, bool)
        qid = np.asarray(queue_id, np.int64).astype(np.int32)
        if order is None:
            order = key_order(topic, qid)
        has = cols[1][order] > 0
        return QueueTable(topic=topic.take(to_arrow(order)), queue_id=qid[order],
                          records=cols[0][order].astype(np.int64), cq_rows=cols[1][order].astype(np.int64),
                          first_row=np.where(has, cols[2][order], 0).astype(np.int64),
                          min_offset=np.where(has, cols[3][order], 0).astype(np.int64),
                          max_offset=np.where(has, cols[4][order], 0).astype(np.int64),
                          unordered=unord[order] & has)

    @staticmethod
    def empty() -> QueueTable:
        return QueueTable.build(large_strings([]), np.zeros(0, np.int32), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.queue_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueTable):
            return NotImplemented
        return self.topic.equals(other.topic) and all(
            getattr(self, f.name).dtype == getattr(other, f.name).dtype
            and np.array_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self) if f.name != "topic")

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> list[tuple[str, int]]:
        """(topic, queueId) per row (a Python object per queue: for small tables, reports and tests)."""
        return list(zip(self.topic.to_pylist(), self.queue_id.tolist()))

    def records_only(self) -> QueueTable:
        """The same queues with their records and no consume-queue rows (a scan that stages none)."""
        return QueueTable.build(self.topic, self.queue_id, self.records, order=np.arange(len(self)))

    @property
    def has_rows(self) -> bool:
        return bool(self.cq_rows.any())

    def slice(self, start: int, stop: int) -> QueueTable:
        """Rows [start, stop) (a run of queues: still in order)."""
        return QueueTable(topic=self.topic[start:stop], **{f.name: getattr(self, f.name)[start:stop]
                                                           for f in fields(self) if f.name != "topic"})

    def to_arrow(self) -> pa.Table:
        """The table as Arrow columns (the work directory's file of it: io.workdir)."""
        return pa.Table.from_arrays([self.topic if f.name == "topic" else to_arrow(getattr(self, f.name))
                                     for f in fields(self)], names=[f.name for f in fields(self)])

    @staticmethod
    def from_arrow(table: pa.Table) -> QueueTable:
        """The table to_arrow gave (or a run of its rows), as it was."""
        cols = {name: table.column(name).combine_chunks() for name in table.column_names}
        return QueueTable(topic=_strings(cols.pop("topic")), **{name: to_numpy(c) for name, c in cols.items()})

    def row_slices(self) -> list[tuple[str, int, int, int]]:
        """(topic, queueId, first row, rows) of each queue with consume-queue rows, in (topic, queueId) order."""
        sel = np.flatnonzero(self.cq_rows > 0)
        return list(zip(self.topic.take(to_arrow(sel)).to_pylist(), self.queue_id[sel].tolist(),
                        self.first_row[sel].tolist(), self.cq_rows[sel].tolist()))


@dataclass(frozen=True, eq=False, kw_only=True)
class MergedQueues:
    """The splits' tables merged per (topic, queueId), in (topic, queueId) order: records and rows summed,
    the offset range over the splits where the queue has rows (0 where it has none), unordered in any split;
    the smallest offset of the first split with rows and the largest of the last (first_lo, last_hi), and
    whether one split's rows do not follow the split before's by exactly 1 (broken). Per queue only: a store of
    50,000 queues over 4,000 splits is folded split by split in memory that grows with the queues (issue 32)."""

    topic: pa.LargeStringArray
    queue_id: np.ndarray
    records: np.ndarray
    cq_rows: np.ndarray
    min_offset: np.ndarray
    max_offset: np.ndarray
    unordered: np.ndarray
    first_lo: np.ndarray
    last_hi: np.ndarray
    broken: np.ndarray

    def __len__(self) -> int:
        return len(self.queue_id)

    def keys(self) -> list[tuple[str, int]]:
        return list(zip(self.topic.to_pylist(), self.queue_id.tolist()))

    def in_step(self) -> np.ndarray:
        """Per queue: its entries step by exactly 1 in dispatch order, so each lands at its stored offset (within
        each split and from one split's rows to the next)."""
        return ~self.unordered & self.sources_adjacent()

    def sources_adjacent(self) -> np.ndarray:
        """Per queue: each split's smallest offset follows the split before's largest by exactly 1."""
        return ~self.broken

    def per_topic(self, column: str, queues: np.ndarray | None = None) -> dict[str, dict[int, int]]:
        """{topic: {queueId: value}} of one count column over the queues where it is not 0 (and `queues`,
        a boolean mask, holds)."""
        values = getattr(self, column)
        sel = np.flatnonzero((values != 0) & (True if queues is None else queues))
        out: dict[str, dict[int, int]] = {}
        for topic, qid, n in zip(self.topic.take(to_arrow(sel)).to_pylist(), self.queue_id[sel].tolist(),
                                 values[sel].tolist()):
            out.setdefault(topic, {})[qid] = n
        return out

    def positions(self, table: QueueTable) -> np.ndarray:
        """Each row of `table` (a split's, whose queues are all here) as its row number here: ascending, since both
        are in (topic, queueId) order."""
        if not len(table):
            return np.zeros(0, np.int64)
        names = pc.unique(self.topic)  # in order: the topics are sorted
        mine = queue_keys(to_numpy(pc.index_in(self.topic, value_set=names)), self.queue_id)
        rank = pc.index_in(table.topic, value_set=names)
        if rank.null_count:
            raise ValueError("a split's queue table names a topic the merged table lacks")
        theirs = queue_keys(to_numpy(rank), table.queue_id)
        at = np.searchsorted(mine, theirs)
        if (at >= len(mine)).any() or (mine[np.minimum(at, len(mine) - 1)] != theirs).any():
            raise ValueError("a split's queue table names a queue the merged table lacks")
        return at


def queue_keys(rank: np.ndarray, queue_id: np.ndarray) -> np.ndarray:
    """(topic rank, signed queueId) as one sortable int64."""
    return (np.asarray(rank, np.int64) << 32) | (np.asarray(queue_id, np.int64) + _QID_BIAS)


FOLD_ROWS = 1 << 16  # split tables gathered before they are folded in (or more: twice the queues folded so far)


def merge_queue_tables(tables: Iterable[QueueTable]) -> MergedQueues:
    """Merge the splits' tables, given in split order, vectorised: gathered in batches of at least FOLD_ROWS rows
    (and twice the queues merged so far) and folded into the merge, so the memory held is a few times the
    store's queues, however many splits name them."""
    merged: MergedQueues | None = None
    batch: list[MergedQueues] = []
    rows = 0
    for table in tables:
        batch.append(_as_merged(table))
        rows += len(table)
        if rows >= max(FOLD_ROWS, 2 * (len(merged) if merged is not None else 0)):
            merged, batch, rows = _combine(([merged] if merged is not None else []) + batch), [], 0
    parts = ([merged] if merged is not None else []) + batch
    return _combine(parts) if parts else _as_merged(QueueTable.empty())


def _as_merged(t: QueueTable) -> MergedQueues:
    """One split's table as a merge of one split."""
    return MergedQueues(topic=t.topic, queue_id=t.queue_id, records=t.records, cq_rows=t.cq_rows,
                        min_offset=t.min_offset, max_offset=t.max_offset, unordered=t.unordered,
                        first_lo=t.min_offset, last_hi=t.max_offset, broken=np.zeros(len(t), bool))


def _combine(parts: list[MergedQueues]) -> MergedQueues:
    """Merges of consecutive runs of splits, given in split order, merged into one."""
    if len(parts) == 1:
        return parts[0]
    topic = pa.concat_arrays([p.topic for p in parts])
    cat = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(MergedQueues)
           if f.name != "topic"}
    encoded = pc.dictionary_encode(topic)
    names = encoded.dictionary
    name_order = key_order(names, np.zeros(len(names), np.int32))
    rank = np.empty(len(names), np.int64)
    rank[name_order] = np.arange(len(names))
    key = queue_keys(rank[to_numpy(encoded.indices).astype(np.int64)], cat["queue_id"])
    order = np.argsort(key, kind="stable")  # parts are in split order: a queue's rows stay in it
    key = key[order]
    col = {name: values[order] for name, values in cat.items()}
    head = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    uniq = key[head]
    n = len(uniq)
    group = np.repeat(np.arange(n), np.diff(np.r_[head, len(key)]))
    has = col["cq_rows"] > 0
    rows = col["cq_rows"]
    with_rows = np.flatnonzero(has)
    g = group[with_rows]
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, g, col["min_offset"][with_rows])
    np.maximum.at(hi, g, col["max_offset"][with_rows])
    any_rows = np.bincount(g, minlength=n) > 0
    first_lo = np.zeros(n, np.int64)
    last_hi = np.zeros(n, np.int64)
    if len(g):  # a queue's first and last split with rows
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        first_lo[g[starts]] = col["first_lo"][with_rows][starts]
        last_hi[g[starts]] = col["last_hi"][with_rows][np.r_[starts[1:] - 1, len(g) - 1]]
    same = g[1:] == g[:-1]
    step = same & (col["first_lo"][with_rows][1:] != col["last_hi"][with_rows][:-1] + 1)
    broken = (np.bincount(g[1:][step], minlength=n) > 0) | (np.bincount(g[col["broken"][with_rows]], minlength=n) > 0)
    return MergedQueues(topic=names.take(to_arrow(name_order)).take(to_arrow(uniq >> 32)).cast(pa.large_string()),
                        queue_id=((uniq & 0xFFFFFFFF) - _QID_BIAS).astype(np.int32),
                        records=np.add.reduceat(col["records"], head) if n else np.zeros(0, np.int64),
                        cq_rows=np.add.reduceat(rows, head) if n else np.zeros(0, np.int64),
                        min_offset=np.where(any_rows, lo, 0), max_offset=np.where(any_rows, hi, 0),
                        unordered=np.bincount(group[col["unordered"]], minlength=n) > 0,
                        first_lo=first_lo, last_hi=last_hi, broken=broken)
