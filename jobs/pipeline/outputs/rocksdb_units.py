"""A RocksDB consume queue's `default` column family built in parallel: the queues cut into key ranges (RocksDB's
bytewise key order: the int32 topic length first, then the topic bytes, the queueId unsigned), each range one task
that reads its queues' rows from the decode stage's work files (outputs.build's reader), makes them units by
RocksDB's dispatch rules (storage_format.rocksdb_dispatch: one unit per stored queue offset, the last put wins; the
record's storeTimestamp read from the commit log) and writes them as one sorted SST file. The tasks' ranges do not
overlap, so the driver ingests every file into the bottommost level; it gets back per queue the "max" record and the
end of the last record that got a unit (the checkpoint)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from storage_format.consume_queue import CQ_UNIT_SIZE
from storage_format.queue_table import MergedQueues, QueueTable
from storage_format.rocksdb_cq import DEFAULT_CF, UNIT_VALUE_DTYPE, UNIT_VALUE_SIZE, unit_key
from storage_format.rocksdb_dispatch import TIMESTAMP_BYTES, queue_units, store_timestamps
from storage_format.scan_plan import Segment

from ..io.fs import Location
from ..io.rocksdb_writer import write_sst
from ..runtime.faults import pause_at
from ..scan.result import ScanResult
from .build import CqTask, QueueFiles, _run_entries

TARGET_UNITS_PER_TASK = 2_000_000  # rows per task (an SST of ~2 M units: ~60 MB compressed)
MIN_UNITS_PER_TASK = 50_000  # fewer rows than this per task and a task's start costs more than its work
CHUNK_UNITS = 65_536  # keys and values made as Python bytes at a time (a task's memory: its numpy columns)


def key_order(topics: list[str], queue_ids: list[int]) -> list[int]:
    """Indexes of the (topic, queueId) queues in the order of their `default` keys (bytewise: topic length, topic
    bytes, queueId as unsigned 32 bits)."""
    encoded = [t.encode("utf-8") for t in topics]
    return sorted(range(len(topics)), key=lambda i: (len(encoded[i]), encoded[i], queue_ids[i] & 0xFFFFFFFF))


@dataclass(frozen=True, kw_only=True)
class UnitsTask:
    """One key range: consecutive queues in key order, whose units one task writes as one SST file (`sst`, a local
    path in the work directory). `rows` names the queues in (topic, queueId) order, the order outputs.build's reader
    finds their rows in, with where those rows are."""

    number: int
    rows: CqTask
    segments: tuple[Segment, ...]
    sst: str


@dataclass(frozen=True, kw_only=True)
class UnitsPart:
    """What one task wrote: its SST file (None without units), its units and rows, per queue with units the "max"
    record (phy offset and queue offset of its last unit in dispatch order), and the end of its last record."""

    number: int
    sst: str | None
    units: int
    rows: int
    max_topic: tuple[str, ...]
    max_queue_id: np.ndarray
    max_phy: np.ndarray
    max_queue_offset: np.ndarray
    units_per_queue: np.ndarray
    end: int  # the largest phy offset + size among its rows (0 without rows)
    seconds: float = 0.0


def plan_units(scan: ScanResult, work: Location, sst_dir: Path, target_tasks: int) -> list[UnitsTask]:
    """The queues with rows cut into key ranges of about equal rows (at most TARGET_UNITS_PER_TASK each, a queue
    never cut), and per range where its rows are (per split the run of table rows holding its queues)."""
    q = scan.queue_table()
    wanted = np.flatnonzero(q.cq_rows > 0)
    if not len(wanted):
        return []
    names = q.topic.to_pylist()
    qids, lows, highs, rows = (c.tolist() for c in (q.queue_id, q.min_offset, q.max_offset, q.cq_rows))
    ordered = [int(wanted[i]) for i in key_order([names[i] for i in wanted], [qids[i] for i in wanted])]
    total = int(q.cq_rows[wanted].sum())
    per_task = max(MIN_UNITS_PER_TASK, min(TARGET_UNITS_PER_TASK, -(-total // max(1, target_tasks))))
    groups: list[list[int]] = [[]]
    size = 0
    for i in ordered:
        if groups[-1] and size + rows[i] > per_task:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += rows[i]
    task_of = np.full(len(q), -1, np.int64)
    for t, g in enumerate(groups):
        task_of[g] = t
    where = _task_rows(scan, q, task_of, len(groups))
    tasks = []
    for t, (g, (splits, tables)) in enumerate(zip(groups, where)):
        items = tuple(QueueFiles(topic=names[i], queue_id=qids[i], first_file=lows[i] * CQ_UNIT_SIZE,
                                 last_file=highs[i] * CQ_UNIT_SIZE, queue_first_offset=lows[i], rows=rows[i])
                      for i in sorted(g))  # the merged table's (topic, queueId) order
        cq = CqTask(items=items, work=work, out=work, file_size=CQ_UNIT_SIZE, splits=splits, tables=tables)
        tasks.append(UnitsTask(number=t, rows=cq, segments=tuple(scan.segments),
                               sst=str(sst_dir / f"default-{t:06d}.sst")))
    return tasks


def _task_rows(scan: ScanResult, q: MergedQueues, task_of: np.ndarray, n: int
               ) -> list[tuple[np.ndarray, tuple[tuple[int, QueueTable], ...]]]:
    """Per task, (split, start, stop) of every split whose queue table has rows of its queues (the table rows from
    its first to its last such queue: the reader skips the others), and those rows where the scan kept the table."""
    found: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    tables: list[list[tuple[int, QueueTable]]] = [[] for _ in range(n)]
    for s in scan.accepted:
        if not s.cq_rows and (s.queues is None or not s.queues.has_rows):
            continue
        table = scan.split_queues(s)
        owner = np.where(table.cq_rows > 0, task_of[q.positions(table)], -1)
        for t in np.unique(owner[owner >= 0]).tolist():
            at = np.flatnonzero(owner == t)
            start, stop = int(at[0]), int(at[-1]) + 1
            found[t].append((s.index, start, stop))
            if s.queues is not None:
                tables[t].append((s.index, table.slice(start, stop)))
    return [(np.array(f, np.int64).reshape(-1, 3), tuple(t)) for f, t in zip(found, tables)]


def build_units(task: UnitsTask) -> UnitsPart:
    """Write the task's units, in key order, as one SST file of the `default` column family."""
    started = time.monotonic()
    pause_at("in-build-task")
    items = task.rows.items
    rows = _run_entries(task.rows)
    end = max((int((r.phy + r.size).max()) for r in rows if len(r.phy)), default=0)
    per_queue = [queue_units(r.queue_offset, r.phy, r.size, r.tags, r.store_ts) for r in rows]
    order = key_order([i.topic for i in items], [i.queue_id for i in items])
    values = np.zeros(sum(len(u) for u in per_queue), UNIT_VALUE_DTYPE)
    at = 0
    for i in order:
        part, u = values[at:at + len(per_queue[i])], per_queue[i]
        part["phy_offset"], part["size"], part["tags_code"] = u.phy, u.size, u.tags
        if u.store_ts is not None:
            part["store_timestamp"] = u.store_ts
        at += len(u)
    if any(u.store_ts is None for u in per_queue):  # the decode gave none (a split the reference decoded): the log
        values["store_timestamp"] = commit_log_timestamps(task.segments, values["phy_offset"].astype(np.int64))
    written = write_sst(Path(task.sst), DEFAULT_CF, _chunks(items, per_queue, order, values.tobytes()))
    with_units = [i for i in range(len(items)) if len(per_queue[i])]
    last = [(per_queue[i], per_queue[i].max_at) for i in with_units]
    return UnitsPart(number=task.number, sst=task.sst if written else None, units=written,
                     rows=sum(len(r.phy) for r in rows), max_topic=tuple(items[i].topic for i in with_units),
                     max_queue_id=np.array([items[i].queue_id for i in with_units], np.int32),
                     max_phy=np.array([u.phy[a] for u, a in last], np.int64),
                     max_queue_offset=np.array([u.queue_offset[a] for u, a in last], np.int64),
                     units_per_queue=np.array([len(u) for u, _ in last], np.int64), end=end,
                     seconds=time.monotonic() - started)


def _chunks(items: tuple[QueueFiles, ...], per_queue: list, order: list[int],
            raw: bytes) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """The units' (keys, values) in key order, CHUNK_UNITS at most at a time: `raw` holds their values in that order."""
    at = 0
    for i in order:
        topic, u = items[i].topic.encode("utf-8"), per_queue[i]
        for a in range(0, len(u), CHUNK_UNITS):
            qo = u.queue_offset[a:a + CHUNK_UNITS]
            lo, hi = (at + a) * UNIT_VALUE_SIZE, (at + a + len(qo)) * UNIT_VALUE_SIZE
            yield _unit_keys(topic, items[i].queue_id, qo), np.frombuffer(raw[lo:hi], f"V{UNIT_VALUE_SIZE}").tolist()
        at += len(u)


def _unit_keys(topic: bytes, queue_id: int, queue_offset: np.ndarray) -> list[bytes]:
    """The `default` keys of one queue's units (unit_key's bytes, built for all offsets at once)."""
    head = np.frombuffer(unit_key(topic, queue_id, 0)[:-8], np.uint8)
    n, width = len(queue_offset), len(head) + 8
    rows = np.empty((n, width), np.uint8)
    rows[:, :len(head)] = head
    rows[:, len(head):] = np.asarray(queue_offset, ">i8").view(np.uint8).reshape(n, 8)
    return rows.view(f"V{width}").ravel().tolist()  # bytes of `width` each (a void item keeps its zero bytes)


def commit_log_timestamps(segments: tuple[Segment, ...], phy: np.ndarray) -> np.ndarray:
    """The storeTimestamp of the records at commit-log offsets `phy`, read from their segments (per segment one
    read of the range its records span: memory-mapped for a local file)."""
    out = np.zeros(len(phy), np.int64)
    if not len(phy):
        return out
    starts = np.array([s.start for s in segments], np.int64)
    seg_of = np.searchsorted(starts, phy, "right") - 1
    for i in np.unique(seg_of).tolist():
        sel = np.flatnonzero(seg_of == i)
        sel = sel[np.argsort(phy[sel], kind="stable")]  # read in file order: each page once, in sequence
        seg = segments[i]
        pos = phy[sel] - seg.start
        lo, hi = int(pos[0]), min(seg.size, int(pos[-1]) + TIMESTAMP_BYTES)
        data = np.frombuffer(Location(seg.path).read_range(lo, hi - lo), np.uint8)
        out[sel] = store_timestamps(data, pos - lo)
    return out
