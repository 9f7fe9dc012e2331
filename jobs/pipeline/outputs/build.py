"""Stages 3-4: consume-queue files and index files from the decode stage's per-split Arrow files.

The driver plans from split summaries only (counts and ranges); each task reads the slices it needs from the work
directory, packs whole files with numpy and writes them. Index keys are numbered globally by a prefix sum over splits,
so every index file is built independently, a large one in shares by position that tasks write side by side into the
one file (share_index_tasks)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np
import pyarrow.compute as pc

from storage_format.consume_queue import (CQ_UNIT_SIZE, CqColumns, build_queue_files, file_name,
                                          QueuePlacer, keep_first_of_each_offset)
from storage_format.errors import StoreFormatError
from storage_format.index_file import IndexLayout, IndexState, index_file_count, keys_per_file, names_for
from storage_format.index_build import index_file_chunks, index_file_ranges
from storage_format.queue_table import MergedQueues, QueueTable, queue_keys
from storage_format.arrow_numpy import large_strings, to_arrow, to_numpy
from storage_format.settings import BrokerSettings

from . import continued
from ..runtime import faults, worker_daemon
from ..io.copy import write_after_prefix
from ..io.fs import Location
from ..scan.result import ScanResult
from ..io.workdir import cq_columns, key_columns, offset_map, read_queue_table

worker_daemon.preload_in_workers(__name__)  # build tasks run this module's functions: worker daemons import it
TARGET_CQ_ENTRIES_PER_TASK = 4_000_000
STREAMED_ROWS = TARGET_CQ_ENTRIES_PER_TASK  # a placed (out-of-step) queue longer than this is built file by file
CQ_FILE_COST = 2_000  # writing one consume-queue file costs about as much as packing this many entries
TARGET_INDEX_ENTRIES_PER_TASK = 2_000_000
MIN_SHARE_KEYS = 1_000_000  # index files of 2 x this many keys or more are built in shares: below, their costs outweigh
MAX_SHARES = 8  # every share reads the hashes before it: more shares, more repeated reading


@dataclass(frozen=True, kw_only=True)
class QueueFiles:
    """A run of consecutive files of one queue [first_file, last_file] (logical start offsets); `rows`: the
    queue's consume-queue rows in the whole store (a bound on the run's)."""

    topic: str
    queue_id: int
    first_file: int
    last_file: int
    queue_first_offset: int
    rows: int
    placed: bool = False  # entries land where the broker's write position puts them (consume_queue.place_units)
    streamed: bool = False  # placed, and long: read split by split and written file by file (a task of its own)


@dataclass(frozen=True, eq=False, kw_only=True)
class CqTask:
    """Runs of queues in (topic, queueId) order, and where their rows are: `splits` holds (split, start, stop) per
    split with rows of them, rows [start, stop) of that split's queue table (the task's queues are one run of each
    table's rows); `tables` the same rows themselves where the scan kept its tables (no work directory)."""

    items: tuple[QueueFiles, ...]
    work: Location
    out: Location  # the consumequeue/ directory
    file_size: int
    moved: frozenset[int] = frozenset()  # splits whose rows get new offsets as read (io.workdir.OffsetMap: convert)
    splits: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    tables: tuple[tuple[int, QueueTable], ...] = ()
    continues: Location | None = None  # the consumequeue/ whose files these continue: OUT1's, or the store's (verify)
    keep_tags: bool = False  # OUT1 is a recover OUT: its units kept as they are (continued.joined)
    since: bool = False  # `continues` is OUT1's consumequeue/ (rebuild --since: continued.queue_placer)


def plan_cq(scan: ScanResult, settings: BrokerSettings, work: Location, out: Location,
            topics: set[str] | None = None, target_tasks: int = 4, continues: Location | None = None,
            place_all: bool = True, keep_tags: bool = False, since: bool = False) -> list[CqTask]:
    """Cut every queue into runs of whole files and pack the runs into tasks of bounded size. The driver holds per
    queue columns and per (task, split) row ranges, never per (queue, split) state (issue 32). `continues`: the
    consume queues the scan's units continue, which seed where each placed queue goes on (every queue with
    `place_all`: rebuild --since; only the queues out of step otherwise: verify of a store whose head expired)."""
    file_size = settings.consume_queue_file_size
    units = file_size // CQ_UNIT_SIZE
    q = scan.queue_table()
    names = q.topic.to_pylist()
    wanted = q.cq_rows > 0
    if topics is not None:
        wanted &= np.array([t in topics for t in names], bool)
    in_step = q.in_step().tolist()
    qids, lows, highs, rows = (c.tolist() for c in (q.queue_id, q.min_offset, q.max_offset, q.cq_rows))
    runs: list[tuple[int, QueueFiles]] = []  # (merged row, run)
    files_per_run = max(1, TARGET_CQ_ENTRIES_PER_TASK // units)
    for i in np.flatnonzero(wanted).tolist():
        topic, qid, lo, hi = names[i], qids[i], lows[i], highs[i]
        first, last = (lo * CQ_UNIT_SIZE) // file_size, (hi * CQ_UNIT_SIZE) // file_size
        if not in_step[i] or (continues is not None and place_all):  # --since: placed from where OUT1 left the queue
            # offsets used up without an entry (5.x LMQ) or a damaged queueOffset (queue_order): one run places the
            # whole queue as the broker's write position does, up to the file of its next offset (which the broker
            # may leave created and empty: QueuePlacer.empty_next_file)
            last = ((hi + 1) * CQ_UNIT_SIZE) // file_size
            runs.append((i, QueueFiles(topic=topic, queue_id=qid, first_file=first * file_size,
                                       last_file=last * file_size, queue_first_offset=lo, rows=rows[i], placed=True,
                                       streamed=rows[i] > STREAMED_ROWS)))
            continue
        for f in range(first, last + 1, files_per_run):
            last_file = min(last, f + files_per_run - 1) * file_size
            runs.append((i, QueueFiles(topic=topic, queue_id=qid, first_file=f * file_size, last_file=last_file,
                                       queue_first_offset=lo, rows=rows[i])))
    groups = _pack_runs(runs, units, file_size, target_tasks)
    where = _task_splits(scan, q, [(g[0][0], g[-1][0]) for g in groups])
    return [CqTask(items=tuple(r for _, r in g), work=work, out=out, file_size=file_size, splits=w, tables=t,
                   continues=continues, keep_tags=keep_tags, since=since) for g, (w, t) in zip(groups, where)]


def _pack_runs(runs: list[tuple[int, QueueFiles]], units: int, file_size: int,
               target_tasks: int) -> list[list[tuple[int, QueueFiles]]]:
    """Consecutive runs packed into groups of about equal weight (at most TARGET_CQ_ENTRIES_PER_TASK each)."""
    weights = [_run_weight(r, units, file_size) for _, r in runs]
    per_task = max(CQ_FILE_COST, min(TARGET_CQ_ENTRIES_PER_TASK, -(-sum(weights) // max(1, target_tasks))))
    groups, current, size = [], [], 0
    for r, w in zip(runs, weights):
        if r[1].streamed:  # alone: its task reads the splits for it only
            if current:
                groups.append(current)
            groups.append([r])
            current, size = [], 0
            continue
        current.append(r)
        size += w
        if size >= per_task:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups


def _task_splits(scan: ScanResult, q: MergedQueues, spans: list[tuple[int, int]]
                 ) -> list[tuple[np.ndarray, tuple[tuple[int, QueueTable], ...]]]:
    """Per task (its first and last queue as rows of the merged table): (split, start, stop) of every split whose
    queue table has rows of its queues, and those rows where the scan kept the table. One pass over the splits'
    tables, each read once: the task's queues are rows [start, stop) of each (both are in (topic, queueId) order)."""
    firsts = np.array([a for a, _ in spans], np.int64)
    lasts = np.array([b for _, b in spans], np.int64)
    found: list[list[tuple[int, int, int]]] = [[] for _ in spans]
    tables: list[list[tuple[int, QueueTable]]] = [[] for _ in spans]
    for s in scan.accepted if spans else ():
        if not s.cq_rows and (s.queues is None or not s.queues.has_rows):
            continue
        table = scan.split_queues(s)
        pos = q.positions(table)
        with_rows = np.r_[0, np.cumsum(table.cq_rows > 0)]
        start, stop = np.searchsorted(pos, firsts, "left"), np.searchsorted(pos, lasts, "right")
        for t in np.flatnonzero(with_rows[stop] > with_rows[start]).tolist():
            found[t].append((s.index, int(start[t]), int(stop[t])))
            if s.queues is not None:
                tables[t].append((s.index, table.slice(int(start[t]), int(stop[t]))))
    return [(np.array(f, np.int64).reshape(-1, 3), tuple(t)) for f, t in zip(found, tables)]


def _run_weight(run: QueueFiles, units: int, file_size: int) -> int:
    """A run's share of a task: its entries (at most its files' units) plus a fixed cost per file, so a
    task packs thousands of one-entry LMQ queues but few large queues."""
    files = (run.last_file - run.first_file) // file_size + 1
    return min(files * units, run.rows) + files * CQ_FILE_COST


def _run_entries(task: CqTask) -> list[CqColumns]:
    """Each run's rows (in the task's order), read split by split: the task's rows of a split's queue table say
    where its queues' rows lie in the split's file, which is mapped once per task and let go before the next, so a
    task holds its own rows only, however many splits the store has. Vectorised per split (no Python step per
    queue per split: 12,000 queues over 112 splits cost 20 s that way), then grouped by queue with split order
    kept; a run of a queue longer than one run takes only the rows whose offsets reach its files."""
    runs = _TaskQueues(task)
    parts = list(_split_rows(task, runs))
    if not parts:
        return [CqColumns(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64))
                for _ in task.items]
    queue = np.concatenate([q for q, _ in parts])
    order = np.argsort(queue, kind="stable")
    rows = CqColumns.joined([c for _, c in parts], order)
    edges = np.searchsorted(queue[order], np.arange(runs.count + 1))
    return [runs.run_rows(i, rows, int(edges[q]), int(edges[q + 1])) for i, q in enumerate(runs.queue_of)]


def _offset_bounds(item: QueueFiles, file_size: int) -> tuple[int, int]:
    """Queue offsets [lo, hi) that the run's files hold."""
    return item.first_file // CQ_UNIT_SIZE, (item.last_file + file_size) // CQ_UNIT_SIZE


class _TaskQueues:
    """A task's queues (its runs' distinct (topic, queueId)s, in order) as sortable keys, each with the queue offsets
    its runs in the task hold: what finds their rows in a split's queue table, vectorised."""

    def __init__(self, task: CqTask) -> None:
        self.bounds = [_offset_bounds(item, task.file_size) for item in task.items]
        keys: list[tuple[str, int]] = []
        self.queue_of: list[int] = []  # per run, its queue
        for item in task.items:
            if not keys or keys[-1] != (item.topic, item.queue_id):
                keys.append((item.topic, item.queue_id))
            self.queue_of.append(len(keys) - 1)
        self.count = len(keys)
        self.topics = large_strings(sorted({t for t, _ in keys}))  # not pa.array: it imports pandas to probe
        code = to_numpy(pc.index_in(large_strings([t for t, _ in keys]), value_set=self.topics))
        self.keys = queue_keys(code, np.array([q for _, q in keys], np.int64))
        self.lo = np.full(self.count, np.iinfo(np.int64).max)
        self.hi = np.full(self.count, np.iinfo(np.int64).min)
        for q, (lo, hi) in zip(self.queue_of, self.bounds):
            self.lo[q], self.hi[q] = min(self.lo[q], lo), max(self.hi[q], hi)

    def rows_in(self, split_index: int, table: QueueTable, task: CqTask) -> tuple[np.ndarray, CqColumns] | None:
        """(queue of each row, the rows) of the task's queues in one split: their rows of the split's file whose
        offsets reach the queue's runs, offsets through the split's map where it moved."""
        code = pc.index_in(table.topic, value_set=self.topics)
        known = to_numpy(code.is_valid()) & (table.cq_rows > 0)
        if not known.any():
            return None
        sel = np.flatnonzero(known)
        keys = queue_keys(to_numpy(code.take(to_arrow(sel))), table.queue_id[sel].astype(np.int64))
        at = np.minimum(np.searchsorted(self.keys, keys), self.count - 1)
        mine = self.keys[at] == keys
        sel, at = sel[mine], at[mine]
        lo, hi = table.min_offset[sel], table.max_offset[sel]
        reach = (hi >= self.lo[at]) & (lo < self.hi[at])
        sel, at = sel[reach], at[reach]
        if not len(sel):
            return None
        n = table.cq_rows[sel]
        idx = np.repeat(table.first_row[sel] - np.concatenate(([0], np.cumsum(n)[:-1])), n) + np.arange(int(n.sum()))
        cols = cq_columns(task.work, split_index)
        qo, phy, size, tags = (cols[name].take(idx) for name in ("queue_offset", "phy", "size", "tags"))
        ts = cols["store_ts"].take(idx) if "store_ts" in cols else None  # the decode was asked for them
        queue, rows = np.repeat(at, n), CqColumns(qo, phy, size, tags, ts)
        keep = (qo >= self.lo[queue]) & (qo < self.hi[queue])
        if not keep.all():
            queue, rows = queue[keep], rows.rows(keep)
        if split_index in task.moved:
            rows = replace(rows, phy=offset_map(task.work, split_index)(rows.phy))
        return queue, rows

    def run_rows(self, i: int, rows: CqColumns, a: int, b: int) -> CqColumns:
        """Run i's rows: its queue's rows [a, b) of the grouped rows, those whose offsets its files hold."""
        part = rows.rows(slice(a, b))
        lo, hi = self.bounds[i]
        q = self.queue_of[i]
        if lo <= self.lo[q] and self.hi[q] <= hi:  # the queue's only run here: all its rows
            return part
        return part.rows((part.queue_offset >= lo) & (part.queue_offset < hi))


@dataclass(frozen=True)
class CqFile:
    """One consume-queue file of a task: its run, start offset, bytes (full size, or only the first `used`
    when built trimmed), the entries it holds and its used length (the end of its last entry; zeros follow)."""

    item: QueueFiles
    start: int
    data: bytes
    entries: int
    used: int
    queue_first: int = 0  # the queue offset of the first unit the task's rows give the queue


def cq_file_bytes(task: CqTask, trim: bool = False) -> Iterator[CqFile]:
    """Every consume-queue file of the task; with `trim` its bytes end at its last unit (a queue of a few
    entries costs a few units, not a whole file): the one code path behind writing (build_cq) and
    comparing (jobs.pipeline.verify.cq)."""
    if len(task.items) == 1 and task.items[0].streamed:
        yield from _streamed_files(task, task.items[0], trim)
        return
    for item, rows in zip(task.items, _run_entries(task)):
        qo, phy, size = rows.queue_offset, rows.phy, rows.size
        placer = None
        if item.placed:
            placer = _placer(task, item, phy) if task.continues is not None and len(phy) else QueuePlacer()
            keep, at = placer.place(qo, phy, size)
            first = int(at[0]) if len(at) else 0
        else:
            keep = keep_first_of_each_offset(qo)
            at, first = qo[keep], item.queue_first_offset
        yield from _files(task, item, CqColumns(at, phy[keep], size[keep], rows.tags[keep]), first, trim)
        if placer is not None:
            yield from _empty_next_file(task, item, placer, first)


def _files(task: CqTask, item: QueueFiles, units: CqColumns, first: int, trim: bool) -> Iterator[CqFile]:
    """The files holding `units` (queue_offset: where each lands), the queue's first unit at `first`."""
    at = units.queue_offset
    files = build_queue_files(at, units.phy, units.size, units.tags, task.file_size, first, trim)
    for start, data in files.items():
        lo, hi = start // CQ_UNIT_SIZE, (start + task.file_size) // CQ_UNIT_SIZE
        inside = at[(at >= lo) & (at < hi)]
        yield CqFile(item, start, data, len(inside), (int(inside.max()) + 1 - lo) * CQ_UNIT_SIZE, first)


def _streamed_files(task: CqTask, item: QueueFiles, trim: bool) -> Iterator[CqFile]:
    """A long placed queue's files in memory of a split's rows and a file: its rows read split by split, placed with
    the write position carried (consume_queue.QueuePlacer), and each file built once the write position is past it
    (positions only grow, so a file behind it takes no more units)."""
    placer, first = None if task.continues is not None else QueuePlacer(), None
    held: list[CqColumns] = []
    per_file = task.file_size // CQ_UNIT_SIZE
    for _, rows in _split_rows(task, _TaskQueues(task)):  # the task's one queue, split by split
        if placer is None and len(rows.phy):
            placer = _placer(task, item, rows.phy)
        elif placer is None:
            continue
        keep, at = placer.place(rows.queue_offset, rows.phy, rows.size)
        if not len(at):
            continue
        first = int(at[0]) if first is None else first
        held.append(CqColumns(at, rows.phy[keep], rows.size[keep], rows.tags[keep]))
        done = (int(at[-1]) // per_file) * per_file  # positions below this lie in files the queue has left
        if int(held[0].queue_offset[0]) < done:
            units = _concat(held)
            cut = int(np.searchsorted(units.queue_offset, done))
            yield from _files(task, item, _part(units, 0, cut), first, trim)
            held = [_part(units, cut, len(units))]
    if held and first is not None:
        yield from _files(task, item, _concat(held), first, trim)
    if placer is not None:
        yield from _empty_next_file(task, item, placer, 0 if first is None else first)


def _empty_next_file(task: CqTask, item: QueueFiles, placer: QueuePlacer, first: int) -> Iterator[CqFile]:
    """The file the broker creates and leaves empty after a placed queue's last unit (QueuePlacer.empty_next_file)."""
    start = placer.empty_next_file(task.file_size)
    if start is not None:
        yield CqFile(item, start, bytes(task.file_size), 0, 0, first)


def _split_rows(task: CqTask, runs: _TaskQueues) -> Iterator[tuple[np.ndarray, CqColumns]]:
    """(queue of each row, the rows) of the task's queues, one split at a time in split order (splits without any
    of their rows skipped)."""
    inline = dict(task.tables)
    for split_index, start, stop in task.splits.tolist():
        table = inline[split_index] if split_index in inline else read_queue_table(task.work, split_index, start, stop)
        found = runs.rows_in(split_index, table, task)
        if found is not None:
            yield found


def _concat(parts: list[CqColumns]) -> CqColumns:
    return parts[0] if len(parts) == 1 else CqColumns.joined(parts)


def _part(units: CqColumns, a: int, b: int) -> CqColumns:
    return CqColumns(units.queue_offset[a:b], units.phy[a:b], units.size[a:b], units.tags[a:b])


def build_cq(task: CqTask) -> dict | ContinuedFiles:
    """Write the task's consume-queue files; returns {relative path: entries} for the report, with rebuild --since
    (`continues`) also how OUT1's part of each file was copied."""
    written: dict[str, int] = {}
    copies: list[tuple[str, int, str | None]] = []
    for f in cq_file_bytes(task, trim=True):
        name = file_name(f.start)  # the zeros after the last entry need not be written
        data = memoryview(f.data)[:f.used]
        dest = task.out.child(f.item.topic, str(f.item.queue_id), name)
        j = _continued(task, f, data) if task.continues is not None else None
        if j is not None and j.head is not None and j.prefix:
            dest.write_with_zero_tail([j.head, j.rest], task.file_size)
            copies.append((HEAD_AS_READ, j.prefix, None))
        elif j is not None and j.out1_file is not None and j.prefix:
            copies.append(write_after_prefix(j.out1_file, j.prefix, j.rest, dest, task.file_size))
        else:
            dest.write_with_zero_tail([data if j is None else j.rest], task.file_size)
        written[f"{f.item.topic}/{f.item.queue_id}/{name}"] = f.entries
    return written if task.continues is None else ContinuedFiles(written, copies)


HEAD_AS_READ = "written_as_read"  # OUT1's units ahead of the scan's written from the bytes placing them read


@dataclass(frozen=True)
class ContinuedFiles:
    """What a rebuild --since consume-queue task wrote: {relative path: entries}, and how OUT1's part of each file
    came over (io.copy methods: the report counts them, a fallback is named)."""

    written: dict[str, int]
    copies: list[tuple[str, int, str | None]]


def _placer(task: CqTask, item: QueueFiles, phy: np.ndarray) -> QueuePlacer:
    """The queue's placement state before its first row here, from the files continued (outputs.continued)."""
    qdir = task.continues.child(item.topic, str(item.queue_id))
    return continued.queue_placer(qdir, task.file_size, int(phy[0]), task.since)


def _continued(task: CqTask, f: CqFile, data: memoryview) -> continued.Joined:
    """rebuild --since: the file joined to OUT1's file of the same name (outputs.continued)."""
    qdir = task.continues.child(f.item.topic, str(f.item.queue_id))
    first = f.queue_first * CQ_UNIT_SIZE
    first_pos = first - f.start if f.start <= first < f.start + task.file_size else 0
    return continued.joined(qdir.child(file_name(f.start)), data, first_pos,
                            lambda: continued.queue_files(qdir) is not None, task.keep_tags)


@dataclass(frozen=True)
class KeySlice:
    split_index: int
    lo: int
    hi: int


@dataclass(frozen=True)
class IndexFilePlan:
    """One index file: its number, the key slices it holds, and where its inherited end comes from."""

    file_no: int
    sources: tuple[KeySlice, ...]
    inherited_from: KeySlice | None  # the key just before the file (previous file's last entry)
    inherited: tuple[int, int] | None = None  # without inherited_from: (endTimestamp, endPhyOffset) given (--since)


@dataclass(frozen=True, kw_only=True)
class IndexTask:
    """Consecutive index files built by one task."""

    files: tuple[IndexFilePlan, ...]
    work: Location
    out: Location  # the index/ directory
    slots: int
    max_entries: int
    empty_count: int = 1  # indexCount of a file without keys (index_file.empty_file_index_count)
    moved: frozenset[int] = frozenset()  # splits whose keys get new offsets as read (io.workdir.OffsetMap: convert)


@dataclass(frozen=True)
class IndexShare:
    """One share of a one-file index task: the file's keys at positions [start, end) (counted from 0 in the
    file), written into the file beside the other shares; the last share writes the header and slot table."""

    task: IndexTask
    start: int
    end: int
    last: bool


def pending_name(file_no: int) -> str:
    return f".pending-{file_no:010d}"


def plan_index(scan: ScanResult, settings: BrokerSettings, work: Location, out: Location,
               empty_count: int = 1) -> list[IndexTask]:
    """Number keys globally (prefix sum over accepted splits) and cut them into files of
    maxIndexNum - 1 keys; add the empty file the broker opens when a full file is followed by
    more records. Small files are grouped so a task holds about TARGET_INDEX_ENTRIES_PER_TASK keys."""
    per = keys_per_file(settings.max_index_num)
    acc = [s for s in scan.accepted if s.records]
    if not acc:
        return []
    counts = np.array([s.keys for s in acc], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    total = int(starts[-1])
    last_key_record = max((s.last_key[1] for s in acc if s.last_key), default=None)
    record_after_last_key = last_key_record is None or acc[-1].last_record_offset > last_key_record
    n_files = index_file_count(total, settings.max_index_num, record_after_last_key)

    def slices(lo: int, hi: int) -> tuple[KeySlice, ...]:
        out_slices = []
        for i, s in enumerate(acc):
            a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
            if a < b:
                out_slices.append(KeySlice(s.index, a - int(starts[i]), b - int(starts[i])))
        return tuple(out_slices)

    plans = []
    for f in range(n_files):
        lo, hi = f * per, min(total, (f + 1) * per)
        plans.append(IndexFilePlan(f, slices(lo, hi), slices(lo - 1, lo)[0] if lo > 0 else None))
    group = max(1, TARGET_INDEX_ENTRIES_PER_TASK // per)
    return [IndexTask(files=tuple(plans[i:i + group]), work=work, out=out, slots=settings.max_hash_slot_num,
                      max_entries=settings.max_index_num, empty_count=empty_count) for i in range(0, len(plans), group)]


def _keys(work: Location, sl: KeySlice,
          moved: frozenset[int] = frozenset()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The slice's (key_hash, phy, store_ts) in dispatch order (phy through the split's offset map when moved)."""
    columns, rows = key_columns(work, sl.split_index), slice(sl.lo, sl.hi)
    key_hash, phy, store_ts = (columns[name].take(rows) for name in ("key_hash", "phy", "store_ts"))
    if sl.split_index in moved:
        phy = offset_map(work, sl.split_index)(phy)
    return key_hash, phy, store_ts


def _first_key(work: Location, sl: KeySlice, moved: frozenset[int] = frozenset()) -> tuple[int, int]:
    """(store time, commit-log offset) of the slice's first key, read alone."""
    _, phy, store_ts = _keys(work, KeySlice(sl.split_index, sl.lo, sl.lo + 1), moved)
    return int(store_ts[0]), int(phy[0])


def _inherited(task: IndexTask, plan: IndexFilePlan) -> IndexState:
    """The end a new file inherits: the previous file's last key, or the end given (the last file continued)."""
    if plan.inherited_from is not None:
        return IndexState(*_first_key(task.work, plan.inherited_from, task.moved))
    return IndexState(*plan.inherited) if plan.inherited is not None else IndexState()


def build_index(task: IndexTask) -> list[tuple[int, int | None]]:
    """Write the task's index files under pending names; returns (file number, first entry's store time)."""
    return [_build_one(task, plan) for plan in task.files]


def _build_one(task: IndexTask, plan: IndexFilePlan) -> tuple[int, int | None]:
    size = IndexLayout(task.slots, task.max_entries).size
    if task.out.writes_in_place:  # one pass over the keys, the header and slot table written last
        keys = sum(sl.hi - sl.lo for sl in plan.sources)
        return plan.file_no, _write_share(task, plan, 0, keys, True)
    stream, first_ts = index_file_stream(task, plan, zero_tail=False)
    task.out.child(pending_name(plan.file_no)).write_with_zero_tail(stream, size)
    return plan.file_no, first_ts


def share_index_tasks(tasks: list, cores: int) -> list:
    """The build tasks with each large file of a one-file index task cut into shares by position, so that the
    cores build it side by side: a file gets cores // files shares (at most MAX_SHARES, each of at least
    MIN_SHARE_KEYS keys). Only where tasks can write byte ranges of one file (Location.writes_in_place);
    other tasks pass unchanged, in order."""
    files = sum(len(t.files) for t in tasks if isinstance(t, IndexTask))
    out = []
    for task in tasks:
        if not isinstance(task, IndexTask):
            out.append(task)
            continue
        keys = sum(sl.hi - sl.lo for sl in task.files[0].sources) if len(task.files) == 1 else 0
        shares = min(MAX_SHARES, max(1, cores // max(1, files)), keys // MIN_SHARE_KEYS)
        if shares < 2 or not task.out.writes_in_place:
            out.append(task)
            continue
        cuts = [keys * i // shares for i in range(shares + 1)]
        out.extend(IndexShare(task, a, b, b == keys) for a, b in zip(cuts, cuts[1:]))
    return out


def one_stream_note(tasks: list) -> str | None:
    """What to say on stderr when the index tasks' OUT takes no side-by-side writes into one file (object
    storage, HDFS): each file is then one task's stream, two passes over its keys. None otherwise."""
    out = next((t.out for t in tasks if isinstance(t, IndexTask)), None)
    if out is None or out.writes_in_place:
        return None
    return (f"{out.uri} takes no writes side by side into one file: each index file is written by one task as one "
            f"stream (two passes over its keys)")


def build_index_share(share: IndexShare) -> list[tuple[int, int | None]]:
    """Write one share of an index file; the share holding the file's first key returns (file number, that
    key's store time), the others nothing."""
    plan = share.task.files[0]
    first_ts = _write_share(share.task, plan, share.start, share.end, share.last)
    return [(plan.file_no, first_ts)] if share.start == 0 else []


def _write_share(task: IndexTask, plan: IndexFilePlan, start: int, end: int, last: bool) -> int | None:
    """Write the file's keys at positions [start, end) (and the header and slot table when `last`) into its
    pending file; returns the store time of the file's first key (None for a file without keys)."""
    inherited = _inherited(task, plan)
    first_key = _first_key(task.work, plan.sources[0], task.moved) if plan.sources else None
    own = _cut(plan.sources, start, end)
    before = _cut(plan.sources, 0, start)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for sl in own:
            yield _keys(task.work, sl, task.moved)

    def hashes() -> Iterator[np.ndarray]:
        for sl in before:
            yield key_columns(task.work, sl.split_index)["key_hash"].take(slice(sl.lo, sl.hi))

    ranges = index_file_ranges(chunks, hashes, start, first_key, task.slots, task.max_entries, inherited, last,
                               task.empty_count)
    task.out.child(pending_name(plan.file_no)).write_ranges(ranges, IndexLayout(task.slots, task.max_entries).size)
    return first_key[0] if first_key is not None else None


def _cut(sources: tuple[KeySlice, ...], start: int, end: int) -> tuple[KeySlice, ...]:
    """The slices holding a file's keys at positions [start, end), its keys numbered from 0 across `sources`."""
    out, at = [], 0
    for sl in sources:
        lo, hi = max(start, at), min(end, at + sl.hi - sl.lo)
        if lo < hi:
            out.append(KeySlice(sl.split_index, sl.lo + lo - at, sl.lo + hi - at))
        at += sl.hi - sl.lo
    return tuple(out)


def index_file_stream(task: IndexTask, plan: IndexFilePlan,
                      zero_tail: bool = True) -> tuple[Iterator[bytes], int | None]:
    """The bytes of one planned index file as a stream of chunks (without the zeros after the last
    entry unless `zero_tail`), and its first entry's store time: the one code path behind writing
    (build_index) and comparing (jobs.pipeline.verify.pointer). Memory stays bounded by one split's keys
    and the slot tables however full the file is."""
    inherited = _inherited(task, plan)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for s in plan.sources:
            yield _keys(task.work, s, task.moved)

    first_ts = _first_key(task.work, plan.sources[0])[0] if plan.sources else None
    return index_file_chunks(chunks, task.slots, task.max_entries, inherited, zero_tail, task.empty_count), first_ts


def index_file_bytes(task: IndexTask, plan: IndexFilePlan) -> tuple[bytes, int | None]:
    """Full bytes of one planned index file and its first entry's store time (index_file_stream joined)."""
    stream, first_ts = index_file_stream(task, plan)
    return b"".join(stream), first_ts


def build_files(task: CqTask | IndexTask | IndexShare | continued.IndexAppend
                ) -> tuple[str, dict | list[tuple[int, int | None]], float]:
    """Run one consume-queue or index task (or index file share): (kind, its result, seconds). Both kinds go
    into one Spark job, so consume-queue tasks run beside a long index task instead of after it."""
    started = time.monotonic()
    faults.pause_at("in-build-task")
    if isinstance(task, IndexTask):
        return "index", build_index(task), time.monotonic() - started
    if isinstance(task, IndexShare):
        return "index", build_index_share(task), time.monotonic() - started
    if isinstance(task, continued.IndexAppend):
        return "index", continued.append_index(task), time.monotonic() - started
    return "consumequeue", build_cq(task), time.monotonic() - started


def name_index_files(scan: ScanResult, firsts: list[tuple[int, int | None]], tz) -> dict[int, str]:
    """Names for built index files: the store time of the record that opened each file (the first
    dispatched record for file 0, the first entry's record otherwise, the last record for a trailing
    empty file), formatted yyyyMMddHHmmssSSS in `tz` and bumped to be strictly increasing."""
    acc = [s for s in scan.accepted if s.records]
    first_record_ts = acc[0].first_store_ts if acc else 0
    last_record_ts = acc[-1].last_store_ts if acc else 0
    ordered = sorted(firsts)
    opening = []
    for no, ts in ordered:
        opening.append(first_record_ts if no == 0 else (ts if ts is not None else last_record_ts))
    try:
        names = names_for(opening, tz)
    except (ValueError, OverflowError, OSError) as exc:
        raise _undated_error(scan, exc) from None
    return dict(zip((no for no, _ in ordered), names))


def _undated_error(scan: ScanResult, exc: Exception) -> Exception:
    """A store time that cannot be formatted as yyyyMMddHHmmssSSS opened an index file: name the first
    record whose storeTimestamp is no date (the broker names files by its clock, so it never meets this)."""
    found = scan.undated_record()
    if found is None:
        return exc
    seg, at = found
    return StoreFormatError(seg.path, at - seg.start, f"record at commit-log offset {at} has a storeTimestamp that is "
                                                      f"no date ({exc}); index files are named after store times")
