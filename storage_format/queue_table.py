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

    def row_slices(self) -> list[tuple[str, int, int, int]]:
        """(topic, queueId, first row, rows) of each queue with consume-queue rows, in (topic, queueId) order."""
        sel = np.flatnonzero(self.cq_rows > 0)
        return list(zip(self.topic.take(to_arrow(sel)).to_pylist(), self.queue_id[sel].tolist(),
                        self.first_row[sel].tolist(), self.cq_rows[sel].tolist()))


@dataclass(frozen=True, eq=False, kw_only=True)
class MergedQueues:
    """The splits' tables merged per (topic, queueId), in (topic, queueId) order: records and rows summed,
    the offset range over the splits where the queue has rows (0 where it has none), unordered in any split;
    and each queue's sources, the (split, first row, rows, lo, hi) of every split where it has rows, in the
    order the splits were given (sources of queue i: [source_start[i], source_start[i + 1]))."""

    topic: pa.LargeStringArray
    queue_id: np.ndarray
    records: np.ndarray
    cq_rows: np.ndarray
    min_offset: np.ndarray
    max_offset: np.ndarray
    unordered: np.ndarray
    source_start: np.ndarray
    src_split: np.ndarray
    src_row: np.ndarray
    src_rows: np.ndarray
    src_lo: np.ndarray
    src_hi: np.ndarray

    def __len__(self) -> int:
        return len(self.queue_id)

    def keys(self) -> list[tuple[str, int]]:
        return list(zip(self.topic.to_pylist(), self.queue_id.tolist()))

    def in_step(self) -> np.ndarray:
        """Per queue: its entries step by exactly 1 in dispatch order, so each lands at its stored offset (within
        each split and from one split's sources to the next)."""
        return ~self.unordered & self.sources_adjacent()

    def sources_adjacent(self) -> np.ndarray:
        """Per queue: each source's smallest offset follows the one before's largest by exactly 1."""
        src_queue = np.repeat(np.arange(len(self)), np.diff(self.source_start))
        broken = (src_queue[1:] == src_queue[:-1]) & (self.src_lo[1:] != self.src_hi[:-1] + 1)
        return np.bincount(src_queue[1:][broken], minlength=len(self)) == 0

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


def merge_queue_tables(tables: Iterable[tuple[int, QueueTable]]) -> MergedQueues:
    """Merge (split index, table) pairs, vectorised (work per queue per split, no Python loop over queues)."""
    tables = list(tables)
    if not tables:
        tables = [(0, QueueTable.empty())]
    topic = pa.concat_arrays([t.topic for _, t in tables])
    cat = {name: np.concatenate([getattr(t, name) for _, t in tables])
           for name in ("queue_id", "records", "cq_rows", "first_row", "min_offset", "max_offset", "unordered")}
    split = np.repeat(np.array([i for i, _ in tables], np.int64), [len(t) for _, t in tables])
    encoded = pc.dictionary_encode(topic)
    names = encoded.dictionary
    name_order = key_order(names, np.zeros(len(names), np.int32))
    rank = np.empty(len(names), np.int64)
    rank[name_order] = np.arange(len(names))
    code = rank[to_numpy(encoded.indices).astype(np.int64)]
    key = (code << 32) | (cat["queue_id"].astype(np.int64) + _QID_BIAS)
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    n = len(uniq)
    has = cat["cq_rows"] > 0
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, inv[has], cat["min_offset"][has])
    np.maximum.at(hi, inv[has], cat["max_offset"][has])
    rows = np.zeros(n, np.int64)
    np.add.at(rows, inv, cat["cq_rows"])
    any_rows = np.bincount(inv[has], minlength=n) > 0
    src = np.flatnonzero(has)
    src = src[np.argsort(inv[src], kind="stable")]
    start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(inv[has], minlength=n), out=start[1:])
    records = np.zeros(n, np.int64)
    np.add.at(records, inv, cat["records"])
    return MergedQueues(topic=names.take(to_arrow(name_order)).take(to_arrow(uniq >> 32)).cast(pa.large_string()),
                        queue_id=((uniq & 0xFFFFFFFF) - _QID_BIAS).astype(np.int32), records=records, cq_rows=rows,
                        min_offset=np.where(any_rows, lo, 0), max_offset=np.where(any_rows, hi, 0),
                        unordered=np.bincount(inv[cat["unordered"]], minlength=n) > 0, source_start=start,
                        src_split=split[src], src_row=cat["first_row"][src], src_rows=cat["cq_rows"][src],
                        src_lo=cat["min_offset"][src], src_hi=cat["max_offset"][src])
