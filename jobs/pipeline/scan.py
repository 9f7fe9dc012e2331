"""Stage 1-2 of every job: list segments, cut splits, decode every split in a Spark task, stitch.

Each task walks its byte range, decodes the records vectorised and returns a small summary (counts,
per-queue ranges, where its walk ended). With a work directory it also writes the split's consume-queue
entries and index keys as Arrow IPC files, which the build stages read; rows never cross the driver.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from storage_format.commitlog import DecodedChunk, NeedMoreBytes, RecordColumns, ScanEnd, decode_buffer, parse_segment_name
from storage_format.consume_queue import has_cq_entry, tags_codes, unsafe_topic_reason
from storage_format.errors import StoreFormatError
from storage_format.index_keys import index_keys
from storage_format.properties import TAGS
from storage_format.scan_plan import END_ERROR, END_NO_NEXT_SEGMENT, Segment, Split, SplitWalk, Stitched, plan_splits, stitch
from storage_format.settings import BrokerSettings

from .fs import Location
from .tasks import run_tasks

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
CQ_SCHEMA = pa.schema([("topic", pa.large_string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                       ("phy", pa.int64()), ("size", pa.int32()), ("tags", pa.int64())])
KEY_SCHEMA = pa.schema([("key_hash", pa.int32()), ("phy", pa.int64()), ("store_ts", pa.int64())])


class ScanError(Exception):
    """The store cannot be scanned (missing commit log, segment of the wrong size, bad bytes)."""


@dataclass(frozen=True)
class SplitTask:
    """What one decode task needs: its split, where to start, and what to write."""

    split: Split
    settings: BrokerSettings
    exact_start: int | None = None  # segment-relative offset to walk from (after a failed stitch)
    check_crc: bool = False
    work: Location | None = None  # write cq-<i>.arrow / keys-<i>.arrow here
    with_cq: bool = True
    with_keys: bool = True


@dataclass
class SplitSummary:
    """A decode task's result: small, sent to the driver."""

    index: int
    first_offset: int | None
    end: ScanEnd
    records: int = 0
    blanks: int = 0
    bytes_read: int = 0
    min_store_ts: int | None = None
    max_store_ts: int | None = None
    first_store_ts: int | None = None
    last_store_ts: int | None = None
    last_record_offset: int | None = None
    last_record_end: int | None = None
    # (topic, queueId) -> [records, cq entries, first cq row, min queue offset, max queue offset]
    queues: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    keys: int = 0
    last_key: tuple[int, int] | None = None  # (store_ts, phy) of the split's last index key
    error: StoreFormatError | None = None

    def walk(self) -> SplitWalk:
        return SplitWalk(self.index, self.first_offset, self.end, self.records, self.blanks)


@dataclass
class ScanResult:
    """Segments, splits, the stitched scan and the summaries of the splits the scan accepted."""

    segments: list[Segment]
    splits: list[Split]
    stitched: Stitched
    summaries: dict[int, SplitSummary]

    @property
    def accepted(self) -> list[SplitSummary]:
        return [self.summaries[i] for i in self.stitched.accepted]

    @property
    def end(self) -> ScanEnd:
        return self.stitched.end

    @property
    def message_records(self) -> int:
        return sum(s.records for s in self.accepted)

    @property
    def max_physical_offset(self) -> int:
        """End of the last valid record (where the broker would append next)."""
        ends = [s.last_record_end for s in self.accepted if s.last_record_end is not None]
        return max(ends) if ends else (self.segments[0].start if self.segments else 0)

    def records_per_queue(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = defaultdict(dict)
        for s in self.accepted:
            for (topic, qid), stats in s.queues.items():
                out[topic][qid] = out[topic].get(qid, 0) + stats[0]
        return {t: dict(sorted(q.items())) for t, q in sorted(out.items())}

    def tail_problems(self) -> list[str]:
        """Why the commit log does not end cleanly (an invalid record before the zero-filled tail, or
        data in segments past the end); empty for a healthy store."""
        problems = []
        end = self.end
        if end is not None and not end.is_clean and end.reason != END_NO_NEXT_SEGMENT:
            problems.append(f"the commit log ends with an invalid record: {end.describe()}")
        if self.stitched.data_after_end:
            problems.append(f"segments hold records after the end of the valid commit log: "
                            f"{', '.join(self.stitched.data_after_end)}")
        return problems

    @property
    def bytes_read(self) -> int:
        return sum(s.bytes_read for s in self.summaries.values())


def list_segments(store: Location, settings: BrokerSettings) -> list[Segment]:
    """Commit-log segments in offset order; a segment of the wrong size is an error (the broker
    refuses to load it too)."""
    commitlog = store.child("commitlog")
    if not commitlog.is_dir():
        raise ScanError(f"{commitlog.uri}: no commitlog directory in the store")
    segments = []
    for info in commitlog.list():
        start = parse_segment_name(info.base_name)
        if start is None or info.type.name != "File":
            continue
        if info.size != settings.mapped_file_size_commitlog:
            raise ScanError(f"{commitlog.child(info.base_name).uri}: segment is {info.size} bytes, expected "
                            f"{settings.mapped_file_size_commitlog} (mappedFileSizeCommitLog); pass the broker's "
                            f"config with --broker-config")
        segments.append(Segment(start, info.size, commitlog.child(info.base_name).uri))
    return sorted(segments, key=lambda s: s.start)


def _read_window(task: SplitTask, want_end: int) -> tuple[pa.Buffer, int]:
    sp = task.split
    begin = sp.start if task.exact_start is None else min(sp.start, task.exact_start)
    end = min(sp.segment.size, want_end)
    return Location(sp.segment.path).read_range(begin, end - begin), begin


def decode_chunk(task: SplitTask) -> tuple[DecodedChunk, int]:
    """Read the split's bytes (plus enough to finish its last record) and decode them."""
    sp = task.split
    want_end = sp.stop + task.settings.max_message_size + 64
    while True:
        buf, begin = _read_window(task, want_end)
        try:
            start = (sp.start if task.exact_start is None else task.exact_start) - begin
            chunk = decode_buffer(buf, sp.segment.start + begin, start, sp.stop - begin,
                                  segment_end=sp.segment.size - begin, path=sp.segment.path,
                                  check_crc=task.check_crc,
                                  find_start=task.exact_start is None and not sp.at_segment_start)
            return chunk, len(buf)
        except NeedMoreBytes as more:
            if begin + more.needed_end <= want_end:
                raise
            want_end = begin + more.needed_end


def decode_split_columns(task: SplitTask) -> RecordColumns:
    """The split's valid records as columns (the DataFrame reader's path); bad bytes raise."""
    return decode_chunk(task)[0].columns


def decode_split(task: SplitTask) -> SplitSummary:
    """Decode one split (runs in a Spark task); never raises for bad bytes: the error is returned."""
    try:
        chunk, bytes_read = decode_chunk(task)
        return _summarise(task, chunk, bytes_read)
    except StoreFormatError as err:
        sp = task.split
        return SplitSummary(sp.index, None, ScanEnd(END_ERROR, sp.global_start, detail=str(err)), error=err)


def _summarise(task: SplitTask, chunk, bytes_read: int) -> SplitSummary:
    sp, cols = task.split, chunk.columns
    first = None if chunk.first_position is None else chunk.columns.base_offset + chunk.first_position
    summary = SplitSummary(sp.index, first, chunk.end, chunk.count, chunk.blank_count, bytes_read)
    if not chunk.count:
        return summary
    ts = cols.store_timestamp
    summary.min_store_ts, summary.max_store_ts = int(ts.min()), int(ts.max())
    summary.first_store_ts, summary.last_store_ts = int(ts[0]), int(ts[-1])
    last_pos = int(cols.pos[-1])
    summary.last_record_offset = cols.base_offset + last_pos
    summary.last_record_end = summary.last_record_offset + int(cols.total_size[-1])
    topics = cols.topic
    for reason_at, topic in _unsafe_topics(topics):
        raise StoreFormatError(sp.segment.path, cols.base_offset + int(cols.pos[reason_at]), topic)
    qids = cols.queue_id
    cq_mask = has_cq_entry(cols.sys_flag)
    table = pa.table({"topic": topics, "queue_id": pa.array(qids, pa.int32()),
                      "queue_offset": pa.array(cols.queue_offset), "phy": pa.array(cols.physical_offset),
                      "size": pa.array(cols.total_size, pa.int32()), "cq": pa.array(cq_mask)})
    grouped = table.group_by(["topic", "queue_id"], use_threads=False).aggregate([("cq", "count")])
    for row in grouped.to_pylist():
        summary.queues[(row["topic"], row["queue_id"])] = [row["cq_count"], 0, 0, 0, 0]
    if task.with_cq:
        tags = tags_codes(cols.property_string(TAGS), topics, cols.delay_level, ts,
                          task.settings.delay_levels_ms)
        cq = table.append_column("tags", pa.array(tags)).filter(pa.array(cq_mask)).drop_columns(["cq"])
        cq = cq.take(pc.sort_indices(cq, [("topic", "ascending"), ("queue_id", "ascending")]))
        _queue_ranges(summary, cq)
        if task.work is not None:
            _write_ipc(task.work.child(f"cq-{sp.index:06d}.arrow"), cq.cast(CQ_SCHEMA))
    if task.with_keys and task.settings.message_index_enable:
        keys = index_keys(cols)
        summary.keys = len(keys)
        if len(keys):
            summary.last_key = (int(keys.store_ts[-1]), int(keys.phy[-1]))
        if task.work is not None:
            _write_ipc(task.work.child(f"keys-{sp.index:06d}.arrow"),
                       pa.table({"key_hash": keys.key_hash, "phy": keys.phy, "store_ts": keys.store_ts},
                                schema=KEY_SCHEMA))
    return summary


def _unsafe_topics(topics: pa.Array) -> list[tuple[int, str]]:
    """(record index, reason) for topics that cannot be a directory name under consumequeue/."""
    unique = pc.unique(topics).to_pylist()
    bad = {t: r for t in unique if (r := unsafe_topic_reason(t))}
    if not bad:
        return []
    first = min(topics.to_pylist().index(t) for t in bad)
    return [(first, bad[topics[first].as_py()])]


def _queue_ranges(summary: SplitSummary, cq: pa.Table) -> None:
    """Record per queue where its rows start in the split's sorted consume-queue table."""
    if not cq.num_rows:
        return
    grouped = cq.group_by(["topic", "queue_id"], use_threads=False).aggregate(
        [("queue_offset", "min"), ("queue_offset", "max"), ("queue_offset", "count")])
    row = 0
    for g in sorted(grouped.to_pylist(), key=lambda r: (r["topic"], r["queue_id"])):
        stats = summary.queues[(g["topic"], g["queue_id"])]
        stats[1:] = [g["queue_offset_count"], row, g["queue_offset_min"], g["queue_offset_max"]]
        row += g["queue_offset_count"]


def _write_ipc(loc: Location, table: pa.Table) -> None:
    loc.parent.makedirs()
    with loc.fs.open_output_stream(loc.path) as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_ipc(loc: Location) -> pa.Table:
    with loc.fs.open_input_file(loc.path) as source:
        return pa.ipc.open_file(source).read_all()


def scan_store(spark: SparkSession, store: Location, settings: BrokerSettings, *,
               split_size: int = DEFAULT_SPLIT_SIZE, check_crc: bool = False, work: Location | None = None,
               with_cq: bool = True, with_keys: bool = True, from_offset: int | None = None,
               label: str = "decode", quiet: bool = False) -> ScanResult:
    """Decode the whole commit log in parallel and stitch the splits into the broker's scan.

    `from_offset` starts at the segment holding that offset (recovery's start segment).
    """
    segments = list_segments(store, settings)
    if from_offset is not None:
        segments = [s for s in segments if s.start + s.size > from_offset]
    splits = plan_splits(segments, split_size)
    base = SplitTask(splits[0], settings, None, check_crc, work, with_cq, with_keys) if splits else None
    tasks = [replace(base, split=sp) for sp in splits]
    summaries = {s.index: s for s in run_tasks(spark, tasks, decode_split, label,
                                               total_bytes=sum(s.size for s in segments), quiet=quiet)}
    while True:
        stitched = stitch(splits, {i: s.walk() for i, s in summaries.items()})
        if not stitched.redo:
            break
        redo = [replace(base, split=splits[i], exact_start=off - splits[i].segment.start)
                for i, off in stitched.redo.items()]
        for s in run_tasks(spark, redo, decode_split, f"{label} (re-walk)", quiet=True):
            summaries[s.index] = s
    if stitched.failed is not None:
        raise summaries[stitched.failed].error
    return ScanResult(segments, splits, stitched, summaries)
