"""Stage 1-2 of every job: list segments, cut splits, decode every split in a Spark task, stitch.

Each task walks its byte range, decodes the records vectorised and returns a small summary (counts,
per-queue ranges, where its walk ended). With a work directory it also writes the split's consume-queue
entries and index keys as Arrow IPC files, which the build stages read; rows never cross the driver.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from storage_format.arrow_numpy import to_arrow
from storage_format.commitlog import END_STOP, DecodedChunk, NeedMoreBytes, RecordColumns, ScanEnd, decode_buffer
from storage_format.consume_queue import has_cq_entry, tags_codes
from storage_format.dledger import entry_index_at, entry_term_at
from storage_format.errors import SettingsError, StoreFormatError
from storage_format.index_keys import KeyBatch, index_keys
from storage_format.multi_dispatch import INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, MultiDispatchError
from storage_format.properties import TAGS
from storage_format.record import MAX_DATE_MS, MIN_DATE_MS
from storage_format.scan_plan import (DEFAULT_SPLIT_SIZE, END_ERROR, Segment, balanced_split_size,
                                     check_split_count, plan_splits, stitch)
from storage_format.settings import BrokerSettings
from storage_format.kernels.split_decode import NO_RECORD_START, FastSplit, decode_fast, record_after_clean_end
from storage_format.split_rows import CqRows
from storage_format.store_layout import inner_batch_reason, inner_batch_records

from .queue_order import out_of_step_queues
from .cq_rows import (cq_table, multi_dispatch_rules, names_are_dirs, queue_groups, queue_table, split_lmq,
                      unsafe_topics)
from .split_records import list_buffer
from ..runtime import env, worker_daemon
from ..runtime.cli import warn
from ..runtime.failure import JobError
from ..runtime.faults import fail_once, pause_at
from ..io.fs import Location
from .result import (DECODER_KERNEL, DECODER_NO_START, DECODER_REFERENCE, DECODER_SPARSE, NegativeQueueIds, ScanResult,
                     SplitSummary, SplitTask)
from ..runtime.engine import TaskRunner
from ..runtime.tasks import run_tasks
from ..io.workdir import write_cq, write_keys, write_queue_table, write_record_sizes, write_transaction_ends
from ..store.segments import list_segments, segments_from

PACK_SPLITS = 4  # at most this many splits per decode task (fewer tasks: each costs a Spark round trip)
KERNEL_ENV = "REPUT_DECODE_KERNEL"  # "0": decode every split with the numpy reference (comparisons)
FALLBACK_DISPATCH_LIMIT = "dispatch limit inside the split"  # a confirm offset / DLedger committed position
worker_daemon.preload_in_workers(__name__)  # decode tasks run this module's functions: worker daemons import it


def _read_window(task: SplitTask, want_end: int) -> tuple[pa.Buffer, int]:
    sp = task.split
    begin = sp.start if task.exact_start is None else min(sp.start, task.exact_start)
    end = min(sp.segment.size, want_end)
    return Location(sp.segment.path).read_range(begin, end - begin), begin


def in_hole(task: SplitTask) -> bool:
    """The split lies in the unwritten (sparse) tail of its segment: no record can start in it."""
    sp = task.split
    return (task.exact_start is None and not sp.at_segment_start
            and Location(sp.segment.path).is_hole(sp.start, min(sp.segment.size, sp.stop + 8)))


def decode_chunk(task: SplitTask) -> tuple[DecodedChunk, int]:
    """Read the split's bytes (plus enough to finish its last record) and decode them."""
    sp = task.split
    find_start = task.exact_start is None and not sp.at_segment_start
    if in_hole(task):
        # Nothing stored there (the sparse zero tail of a segment): no record starts in the split,
        # which is what searching its zeros would find, without reading them.
        cols = RecordColumns(b"", sp.segment.start + sp.start, np.zeros(0, np.int64), sp.segment.path)
        return DecodedChunk(cols, 0, ScanEnd(END_STOP, sp.segment.start + sp.stop), None, sp.segment.path), 0
    want_end = sp.stop + task.settings.max_message_size + 64 + sp.segment.header
    while True:
        buf, begin = _read_window(task, want_end)
        try:
            start = (sp.start if task.exact_start is None else task.exact_start) - begin
            chunk = decode_buffer(buf, sp.segment.start + begin, start, sp.stop - begin,
                                  segment_end=sp.segment.size - begin, path=sp.segment.path,
                                  check_crc=task.check_crc, find_start=find_start, header=sp.segment.header)
            return chunk, len(buf)
        except NeedMoreBytes as more:
            if begin + more.needed_end <= want_end:
                raise
            want_end = begin + more.needed_end


def decode_split_columns(task: SplitTask) -> RecordColumns:
    """The split's valid records as columns (the DataFrame reader's path); bad bytes raise."""
    return decode_chunk(task)[0].columns


def decode_split(task: SplitTask) -> SplitSummary:
    """Decode one split (runs in a Spark task); never raises for bad bytes: the error is returned. With a work
    directory the split's queue table goes there and the driver gets its few store-wide facts (issue 32)."""
    started = time.monotonic()
    summary = _decode_split(task)
    if summary.error is None and summary.queues is not None:
        _settle_queues(task, summary)
    summary.seconds = time.monotonic() - started
    return summary


def _settle_queues(task: SplitTask, summary: SplitSummary) -> None:
    """Note what the driver checks over every split (rows, the smallest queue offset, negative queue ids) and,
    with a work directory, move the queue table there: a split of an LMQ or 50,000-queue store names every queue,
    and the driver folds the tables from the work directory one by one (ScanResult.queue_table)."""
    q = summary.queues
    rows = q.cq_rows > 0
    summary.cq_rows = int(q.cq_rows.sum())
    summary.min_queue_offset = int(q.min_offset[rows].min()) if rows.any() else None
    negative = np.flatnonzero((q.queue_id < 0) & (q.records > 0))
    if len(negative):
        summary.negative_queue_records = int(q.records[negative].sum())
        summary.negative_queues = tuple(f"{t}/{i}" for t, i in zip(q.topic.take(to_arrow(negative)).to_pylist(),
                                                                   q.queue_id[negative].tolist()))
    dest = task.work if task.work is not None else task.tables
    if dest is not None:
        write_queue_table(dest, task.split.index, q)
        summary.queues = None
    elif not task.keep_queues:
        summary.queues = None


def _decode_split(task: SplitTask) -> SplitSummary:
    """decode_split's decode: the kernel, else the reference, else the error.
    The compiled kernel decodes it when it can (body CRCs checked in its pass with check_crc); otherwise (the
    split holding a confirm offset or DLedger committed position, or whatever split_decode leaves) the numpy
    reference, and the summary says which decoder ran and why the kernel left it (the run report counts
    both)."""
    decoder, fallback = DECODER_REFERENCE, ""
    try:
        if in_hole(task):
            decoder = DECODER_SPARSE
        elif task.kernel:
            decoder = DECODER_KERNEL
            fast = _decode_fast(task)
            if isinstance(fast, SplitSummary):
                fail_once()
                pause_at("in-decode-task")
                fast.decoder = DECODER_NO_START if fast.decoder == DECODER_NO_START else DECODER_KERNEL
                return fast
            decoder, fallback = DECODER_REFERENCE, fast
        chunk, bytes_read = decode_chunk(task)
        summary = _summarise(task, chunk, bytes_read)
        summary.record_after_end = _record_after_zero_end(task, chunk)
        _list_records(task, summary, chunk.columns.buf, chunk.columns.base_offset)
        summary.decoder, summary.fallback = decoder, fallback
        fail_once()  # test hook: a task that dies after writing its work files is retried
        pause_at("in-decode-task")
        return summary
    except StoreFormatError as err:
        sp = task.split
        return SplitSummary(index=sp.index, first_offset=None,
                            end=ScanEnd(END_ERROR, sp.global_start, detail=str(err)), error=err,
                            decoder=decoder, fallback=fallback)


def _record_after_zero_end(task: SplitTask, chunk: DecodedChunk) -> int | None:
    """When the walk ended at a zero header inside the split, the first record after it in the split's
    bytes (the later splits of the segment search their own ranges)."""
    cols, sp = chunk.columns, task.split
    return record_after_clean_end(cols.buf, cols.base_offset, chunk.end, sp.global_start, sp.global_stop,
                                  sp.segment.header)


def _decode_fast(task: SplitTask) -> SplitSummary | str:
    """The split's summary (and work files) from the compiled kernel, or why the kernel leaves the split
    to the reference (split_decode's reason, or the dispatch limit falling inside the split)."""
    sp = task.split
    find_start = task.exact_start is None and not sp.at_segment_start
    buf, begin = _read_window(task, sp.stop + task.settings.max_message_size + 64 + sp.segment.header)
    start = (sp.start if task.exact_start is None else task.exact_start) - begin
    base = sp.segment.start + begin
    fast = decode_fast(buf, base, start, sp.stop - begin, sp.segment.size - begin, path=sp.segment.path,
                       find_start=find_start, dated=(MIN_DATE_MS, MAX_DATE_MS),
                       delay_levels_ms=task.settings.delay_levels_ms, header=sp.segment.header,
                       check_crc=task.check_crc,
                       # multi-dispatch entries are consume-queue rows: without those, none (as the reference)
                       multi_dispatch=task.lmq if task.with_cq else None,
                       multi_dispatch_configured=task.settings.enable_multi_dispatch is not None or not task.with_cq,
                       with_store_ts=task.with_store_ts)
    if fast == NO_RECORD_START:
        return _no_start_summary(task, len(buf))
    if isinstance(fast, str):
        return fast
    limit = task.dispatch_limit
    if limit is not None and fast.records and base + fast.last_position + fast.last_size > limit:
        return FALLBACK_DISPATCH_LIMIT  # the reference takes the split's records one by one
    summary = _summarise_fast(task, fast, base, len(buf))
    if limit is not None and fast.records:  # every record of the split ends at or below the limit
        summary.last_dispatched_offset, summary.last_dispatched_end = summary.last_record_offset, summary.last_record_end
    summary.record_after_end = record_after_clean_end(buf, base, fast.end, sp.global_start, sp.global_stop,
                                                      sp.segment.header)
    _list_records(task, summary, buf, base)
    return summary


def _list_records(task: SplitTask, summary: SplitSummary, buf, base: int) -> None:
    """convert's listing of a DLedger split's records, from the bytes just decoded (no second read)."""
    header = task.split.segment.header
    if task.with_records and header and summary.records:
        listed = list_buffer(buf, base, summary.first_offset, summary.last_record_end, header, summary.records,
                             task.dispatch_limit)
        if task.work is not None:  # sizes and ends stay in the work directory: the driver gets counts (issue 32)
            write_record_sizes(task.work, task.split.index, listed.sizes)
            if listed.ends:
                write_transaction_ends(task.work, task.split.index, listed.end_prepared)
            listed = replace(listed, sizes=None, end_prepared=None, split=task.split.index)
        summary.listed = listed


def _no_start_summary(task: SplitTask, bytes_read: int) -> SplitSummary:
    """No record starts in the split (the kernel searched it): the reference's summary of the same bytes
    (decode_buffer's answer when find_start finds nothing: no record, the walk stops at the split's stop),
    without searching the range a second time."""
    sp = task.split
    return SplitSummary(index=sp.index, first_offset=None, end=ScanEnd(END_STOP, sp.segment.start + sp.stop),
                        bytes_read=bytes_read, decoder=DECODER_NO_START)


def _summarise_fast(task: SplitTask, fast: FastSplit, base: int, bytes_read: int) -> SplitSummary:
    """SplitSummary from a FastSplit (the same fields _summarise fills from the reference's columns)."""
    sp = task.split
    first = None if fast.first_position is None else base + fast.first_position
    summary = SplitSummary(index=sp.index, first_offset=first, end=fast.end, records=fast.records, blanks=fast.blanks,
                           bytes_read=bytes_read)
    if not fast.records:
        return summary
    summary.first_entry_index, summary.last_entry_index = fast.first_entry, fast.last_entry
    summary.first_entry_term, summary.last_entry_term = fast.first_term, fast.last_term
    summary.first_store_ts, summary.last_store_ts, summary.min_store_ts, summary.max_store_ts = fast.store_ts
    summary.last_record_offset = base + fast.last_position
    summary.last_record_end = summary.last_record_offset + fast.last_size
    if task.with_cq:
        summary.queues = fast.queues
        if task.work is not None:
            write_cq(task.work, sp.index, fast.cq)
    else:
        summary.queues = fast.queues.records_only()
    if task.with_keys and task.settings.message_index_enable:
        _summarise_keys(task, summary, fast.keys)
    return summary


def _summarise_keys(task: SplitTask, summary: SplitSummary, keys: KeyBatch) -> None:
    summary.keys = len(keys)
    if len(keys):
        summary.last_key = (int(keys.store_ts[-1]), int(keys.phy[-1]))
    if task.work is not None:
        write_keys(task.work, task.split.index, keys)


def _note_entries(summary: SplitSummary, cols: RecordColumns) -> None:
    """A DLedger split's first and last entry index and term (the stitch checks they follow on)."""
    first, last = int(cols.pos[0]), int(cols.pos[-1])
    summary.first_entry_index, summary.last_entry_index = entry_index_at(cols.buf, first), entry_index_at(cols.buf, last)
    summary.first_entry_term, summary.last_entry_term = entry_term_at(cols.buf, first), entry_term_at(cols.buf, last)


def _summarise(task: SplitTask, chunk, bytes_read: int) -> SplitSummary:
    sp, cols = task.split, chunk.columns
    first = None if chunk.first_position is None else chunk.columns.base_offset + chunk.first_position
    summary = SplitSummary(index=sp.index, first_offset=first, end=chunk.end, records=chunk.count,
                           blanks=chunk.blank_count, bytes_read=bytes_read)
    if not chunk.count:
        return summary
    if sp.segment.header:
        _note_entries(summary, cols)
    ts = cols.store_timestamp
    summary.min_store_ts, summary.max_store_ts = int(ts.min()), int(ts.max())
    summary.first_store_ts, summary.last_store_ts = int(ts[0]), int(ts[-1])
    last_pos = int(cols.pos[-1])
    summary.last_record_offset = cols.base_offset + last_pos
    summary.last_record_end = summary.last_record_offset + int(cols.total_size[-1])
    topics = cols.topic
    groups = queue_groups(topics, cols.queue_id)
    for reason_at, topic in unsafe_topics(groups):
        at = cols.base_offset + int(cols.pos[reason_at])
        raise StoreFormatError(sp.segment.path, at - sp.segment.start, f"{topic} (record at commit-log offset {at})")
    moved = np.flatnonzero(cols.physical_offset != cols.base_offset + cols.pos)
    if len(moved):
        at = cols.base_offset + int(cols.pos[moved[0]])
        raise StoreFormatError(sp.segment.path, at - sp.segment.start,
                               f"record at commit-log offset {at} stores physicalOffset "
                               f"{int(cols.physical_offset[moved[0]])}: its consume-queue and index entries would "
                               f"point elsewhere")
    batch = inner_batch_records(cols.sys_flag)
    if len(batch):
        at = cols.base_offset + int(cols.pos[batch[0]])
        raise StoreFormatError(sp.segment.path, at - sp.segment.start, inner_batch_reason(at))
    undated = np.flatnonzero((ts < MIN_DATE_MS) | (ts > MAX_DATE_MS))
    if len(undated):
        summary.undated_record = cols.base_offset + int(cols.pos[undated[0]])
    dispatched = _dispatched(task, summary, cols)
    cq_mask = has_cq_entry(cols.sys_flag) & dispatched
    records = np.bincount(groups.group, minlength=len(groups.keys))
    summary.queues = queue_table(groups, records)
    if task.with_cq:
        tags = tags_codes(cols.property_binary(TAGS), topics, cols.delay_level, ts, task.settings.delay_levels_ms)
        rows = np.flatnonzero(cq_mask)
        try:
            lmq = split_lmq(cols, rows, task.lmq, task.settings.enable_multi_dispatch is not None)
            cq, cq_groups, row_group = cq_table(cols, groups, rows, tags, lmq.entries, names_are_dirs(task.lmq))
        except MultiDispatchError as err:
            at = cols.base_offset + int(cols.pos[err.record])
            raise StoreFormatError(sp.segment.path, at - sp.segment.start,
                                   f"{err} (record at commit-log offset {at})") from None
        summary.lmq_unconfigured = lmq.unconfigured_at
        summary.queues = queue_table(groups, records, cq_groups, row_group, cq.column("queue_offset").to_numpy())
        if task.work is not None:
            write_cq(task.work, sp.index, CqRows(*(cq.column(c).to_numpy() for c in ("queue_offset", "phy", "size",
                                                                                     "tags"))))
    if task.with_keys and task.settings.message_index_enable:
        keys = index_keys(cols, None if task.dispatch_limit is None else dispatched)
        _summarise_keys(task, summary, KeyBatch(keys.key_hash, keys.phy, keys.store_ts))
    return summary


def _dispatched(task: SplitTask, summary: SplitSummary, cols) -> np.ndarray:
    """Which records dispatch takes (all, or those ending at or below the confirm offset); notes in the
    summary the last record taken and the first held back."""
    ends = cols.physical_offset + cols.total_size.astype(np.int64)
    if task.dispatch_limit is None:
        return np.ones(len(ends), bool)
    ok = ends <= task.dispatch_limit
    taken, held = np.flatnonzero(ok), np.flatnonzero(~ok)
    if len(taken):
        summary.last_dispatched_offset = int(cols.physical_offset[taken[-1]])
        summary.last_dispatched_end = int(ends[taken[-1]])
    if len(held):
        summary.first_held_back = int(cols.physical_offset[held[0]])
        summary.held_back = len(held)
    return ok


def pack_splits(tasks: list[SplitTask], max_bytes: int, min_groups: int) -> list[tuple[SplitTask, ...]]:
    """Consecutive splits packed into Spark tasks of at most `max_bytes` (0: one split per task), but
    small enough to give at least `min_groups` tasks when there are that many splits: a store of many
    small segments runs as a few tasks instead of one task per segment."""
    if max_bytes <= 0:
        return [(t,) for t in tasks]
    total = sum(t.split.stop - t.split.start for t in tasks)
    target = max(1, min(max_bytes, -(-total // max(1, min_groups))))
    groups: list[tuple[SplitTask, ...]] = []
    current: list[SplitTask] = []
    size = 0
    for t in tasks:
        n = t.split.stop - t.split.start
        if current and size + n > target:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(t)
        size += n
    if current:
        groups.append(tuple(current))
    return groups


def decode_splits(tasks: tuple[SplitTask, ...]) -> list[SplitSummary]:
    """decode_split over a pack of consecutive splits, one after the other (one Spark task)."""
    return [decode_split(t) for t in tasks]


def scan_store(sc: TaskRunner, store: Location, settings: BrokerSettings, *,
               split_size: int = DEFAULT_SPLIT_SIZE, check_crc: bool = False, work: Location | None = None,
               with_cq: bool = True, with_keys: bool = True, from_offset: int | None = None,
               dispatch_limit: int | None = None, label: str = "decode", quiet: bool = False,
               generation: int | None = None, with_records: bool = False, tables: Location | None = None,
               keep_queues: bool = True, segments: list[Segment] | None = None, with_store_ts: bool = False
               ) -> ScanResult:
    """Decode the whole commit log in parallel and stitch the splits into the broker's scan.

    `from_offset` starts at the segment holding that offset (recovery's start segment). With `dispatch_limit` (a
    confirm offset) only records ending at or below it get consume-queue entries and index keys; the scan itself still
    covers every valid record. `generation` (4 or 5) picks the multi-dispatch rules; None detects it from the store's
    marker files. `with_records` lists each DLedger record in the split summaries (convert's layout input). `tables`
    (without `work`): where the decode tasks put their splits' queue tables, which otherwise come to the driver whole
    (queues x splits rows); `keep_queues` False drops them in the tasks (a job that reads no per-queue figure:
    catalog). `segments`: the store's segments as the caller listed them (None: listed here). `with_store_ts`: the
    consume-queue rows also hold their records' storeTimestamp where the kernel decoded (RocksDB units)."""
    segments = list_segments(store, settings) if segments is None else segments
    if from_offset is not None:
        segments = segments_from(segments, from_offset)
    check_split_count(segments, split_size)
    splits = plan_splits(segments, balanced_split_size(segments, split_size, sc.default_parallelism))
    lmq = multi_dispatch_rules(store, settings, generation)
    kernel = env.value(KERNEL_ENV) != "0"
    base = (SplitTask(split=splits[0], settings=settings, exact_start=None, check_crc=check_crc, work=work,
                      with_cq=with_cq, with_keys=with_keys, dispatch_limit=dispatch_limit, lmq=lmq, kernel=kernel,
                      with_records=with_records, tables=None if work is not None else tables,
                      keep_queues=keep_queues, with_store_ts=with_store_ts)
            if splits else None)
    tasks = [replace(base, split=sp) for sp in splits]
    # Splits in a segment's sparse tail are summarised here (no bytes to read): a Spark task each would
    # cost more than the answer. The rest go in packs of up to PACK_SPLITS consecutive splits per task.
    holes = [t for t in tasks if in_hole(t)]
    summaries = {t.split.index: decode_split(t) for t in holes}
    hole_set = {t.split.index for t in holes}
    groups = pack_splits([t for t in tasks if t.split.index not in hole_set], PACK_SPLITS * split_size,
                         2 * sc.default_parallelism)
    summaries.update({s.index: s for done in run_tasks(sc, groups, decode_splits, label,
                                                       total_bytes=sum(s.size for s in segments), quiet=quiet)
                      for s in done})
    while True:
        stitched = stitch(splits, {i: s.walk() for i, s in summaries.items()})
        if not stitched.redo:
            break
        redo = [replace(base, split=splits[i], exact_start=off - splits[i].segment.start)
                for i, off in stitched.redo.items()]
        for s in run_tasks(sc, redo, decode_split, f"{label} (re-walk)", quiet=True):
            summaries[s.index] = s
    if stitched.failed is not None:
        raise summaries[stitched.failed].error
    result = ScanResult(segments=segments, splits=splits, stitched=stitched, summaries=summaries,
                        work=work if work is not None else tables, driver_memory=sc.driver_memory)
    check_multi_dispatch(result)
    check_queue_offsets(result, base)
    result.negative_queue_ids = find_negative_queue_ids(result, base)
    if with_cq and work is not None:
        result.out_of_step_queues = out_of_step_queues(result, work)
    note_fallbacks(result, label)
    return result


def check_tail(scan: ScanResult, accept_invalid_tail: bool, job: str) -> None:
    """A commit log that does not end cleanly refuses (the broker stops dispatching at the first invalid record)
    unless `accept_invalid_tail`; what is accepted, and the queues dispatched as the broker does them, are warned."""
    problems = scan.tail_problems()
    if problems and not accept_invalid_tail:
        raise JobError("; ".join(problems) + ". The broker would stop dispatching there: run jobs.recover "
                       "first, or pass --accept-invalid-tail to rebuild up to that point")
    for problem in problems + [f.describe() for f in (scan.negative_queue_ids, scan.out_of_step_queues) if f]:
        warn(job, problem)


def note_fallbacks(scan: ScanResult, label: str) -> None:
    """One `reput: note:` line on stderr when the kernel left any split to the (about 10x slower) numpy
    reference, with the count per reason (the run report holds the same counts under "decoders")."""
    counts = scan.decoders()
    if counts["fallbacks"] == {FALLBACK_DISPATCH_LIMIT: 1}:  # what every run with a limit inside the log does
        print(f"reput: note: {label}: the split holding the dispatch limit (the confirm offset or DLedger committed "
              f"position) is decoded record by record by the numpy reference decoder, as planned; the other "
              f"{len(scan.summaries) - 1} by the compiled decoder", file=sys.stderr, flush=True)
    elif counts["fallback_splits"]:
        reasons = ", ".join(f"{n} {reason}" for reason, n in counts["fallbacks"].items())
        print(f"reput: note: {label}: the compiled decoder left {counts['fallback_splits']} of {len(scan.summaries)} "
              f"splits to the numpy reference decoder (about 10x slower): {reasons}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class FoundRecord:
    """The first record of a split that a test picked: its segment, byte offset there, commit-log offset, and
    the picked column's value (None when the re-decode found no such record: the split's first record)."""

    path: str
    byte_offset: int
    offset: int
    value: int | None


def first_record(scan: ScanResult, base: SplitTask, summary: SplitSummary, column: str, test) -> FoundRecord:
    """Decode one accepted split again (no work files) and find its first record whose `column` passes `test`
    (a vectorised predicate): how a check over the summaries names the record by file and byte offset."""
    sp = scan.splits[summary.index]
    exact = None if summary.first_offset is None else summary.first_offset - sp.segment.start
    cols = decode_split_columns(replace(base, split=sp, exact_start=exact, work=None))
    values = getattr(cols, column)
    rows = np.flatnonzero(test(values))
    at = cols.base_offset + int(cols.pos[rows[0]]) if len(rows) else summary.first_offset
    return FoundRecord(sp.segment.path, at - sp.segment.start, at, int(values[rows[0]]) if len(rows) else None)


def check_queue_offsets(scan: ScanResult, base: SplitTask | None) -> None:
    """Refuse a record with a negative queueOffset, named by file and byte offset (a damaged store: the broker
    never assigns one). Its ConsumeQueue.putMessagePositionInfo would take the entry for one it already wrote
    (the expected file offset lies below the queue's current end) and drop it with a "Build consume queue
    repeatedly" log line; reput does not guess, and never writes a file named by a negative offset."""
    bad = [s for s in scan.accepted if s.min_queue_offset is not None and s.min_queue_offset < 0]
    if not bad or base is None:
        return
    summary = bad[0]
    found = first_record(scan, base, summary, "queue_offset", lambda v: v < 0)
    offset = found.value if found.value is not None else summary.min_queue_offset
    raise StoreFormatError(found.path, found.byte_offset,
                           f"record at commit-log offset {found.offset} has queueOffset {offset}, which the broker "
                           f"never assigns (a damaged record): the broker's ConsumeQueue would drop its entry as one "
                           f"already written, and a consume-queue file named by a negative offset is never right; "
                           f"reput refuses rather than guess")


def find_negative_queue_ids(scan: ScanResult, base: SplitTask | None) -> NegativeQueueIds | None:
    """Valid records with a negative queueId (counted from the splits' per-queue stats), the first one named by
    file and byte offset. The broker dispatches them as any other (consumequeue/<topic>/-1/), and reput too:
    the jobs say it (a warning, verify a finding) and count it in their reports."""
    records, queues, first = 0, set(), None
    for s in scan.accepted:
        if s.negative_queue_records:
            first = first or s
            records += s.negative_queue_records
            queues.update(s.negative_queues)
    if first is None or base is None:
        return None
    found = first_record(scan, base, first, "queue_id", lambda v: v < 0)
    return NegativeQueueIds(records=records, queues=tuple(sorted(queues)), path=found.path,
                            byte_offset=found.byte_offset, offset=found.offset,
                            queue_id=found.value if found.value is not None else -1)


def check_multi_dispatch(scan: ScanResult) -> None:
    """Refuse records written with enableMultiDispatch=true when the config leaves it unset (the broker
    default, false, would drop every multi-dispatch entry: more likely a forgotten config than intended)."""
    unset = min((s.lmq_unconfigured for s in scan.accepted if s.lmq_unconfigured is not None), default=None)
    if unset is not None:
        seg = scan.segment_of(unset)
        raise SettingsError(f"the record at {seg.path} at byte offset {unset - seg.start} (commit-log offset {unset}) "
                            f"carries {INNER_MULTI_DISPATCH} and {INNER_MULTI_QUEUE_OFFSET}, which a broker writes "
                            f"only with enableMultiDispatch=true, but the broker config does not set "
                            f"enableMultiDispatch: set enableMultiDispatch (and enableLmq) in the broker config "
                            f"given with --broker-config as the store's broker had them")
