"""Writing one segment of the new commit log (a Spark task): its records hopped from the DLedger data files
by offset range in bounded chunks (a task's memory does not grow with the data file) and copied in the same
pass to their new offsets with PHYSICALOFFSET (and COMMIT/ROLLBACK prepared offsets) rewritten, the BLANK at
the end when the next record did not fit, zeros to the segment size; and the segment's part of the old -> new
msgId map (Parquet, convert.msgid_map). With `crc_splits` every record's body CRC is checked in the copy pass
(layout_kernel.hop_copy_checked): the audit convert makes of the records it converts, without a second decode of
the store; the failing records are listed as scan.crc_audit lists them."""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from storage_format.commitlog import RecordColumns
from storage_format.commitlog_layout import BLANK, blank_record
from storage_format.dledger import ENTRY_HEADER_SIZE, read_entry_header
from storage_format.kernels.layout_kernel import hop_copy_checked, rewrite_prepared
from storage_format.scan_plan import Segment
from storage_format.segment_names import segment_name

from ..io.direct import BUFFERED_MODE, SegmentFileWriter
from ..io.fs import Location
from ..io.workdir import read_prepared_pairs
from ..runtime.faults import pause_at
from ..scan import crc_audit
from ..scan.split_records import MIN_ENTRY
from .msgid_map import map_part, map_writer

# bytes a segment writer reads at a time (more only for an entry larger than that): a task's memory does not grow
# with the data file's size, and its two write buffers stay small: a fresh page costs its first touch (~0.5 ms per
# MiB on a VM), which 64 MiB windows paid for 0.09 CPU s per 1 GiB segment more than 8 MiB ones (0.49 -> 0.40 s)
CHUNK = 8 << 20


@dataclass(frozen=True, kw_only=True)
class SegmentTask:
    """One new segment: its start, where its first record starts (the segment's start), the first record's old
    offset and how many records it holds, the BLANK's offset (None: the log ends in it), the data files
    to read, the listed splits whose prepared pairs (in `work`) its COMMIT/ROLLBACK records need, and where to
    write. `crc_splits`: check every record's body CRC, listing the failing ones per source split (the splits'
    commit-log starts, ascending: the first LISTED_PER_SPLIT of each, as scan.crc_audit); None: no check."""

    start: int
    segment_size: int
    first_old: int
    count: int
    blank_at: int | None
    sources: tuple[Segment, ...]
    prepared_splits: tuple[int, ...] = field(default=())
    work: str | None = None
    out_dir: str
    map_dir: str
    direct_io: bool = True  # O_DIRECT where the filesystem takes it (REPUT_CONVERT_DIRECT_IO=0: buffered)
    crc_splits: tuple[int, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class SegmentWritten:
    name: str
    records: int
    bytes: int
    prepared_rewritten: int
    write_mode: str = BUFFERED_MODE  # io.direct's DIRECT_MODE or BUFFERED_MODE
    fallback: str = ""  # why O_DIRECT was not used ("" when it was)
    seconds: float = 0.0  # the task's time
    bad_crc: int = 0  # records whose body CRC fails (with crc_splits)
    bad_crc_listed: tuple[crc_audit.BadCrc, ...] = ()  # the first LISTED_PER_SPLIT per source split, in log order


def _source_of(sources: tuple[Segment, ...], offset: int) -> int:
    return next(i for i, s in enumerate(sources) if s.start <= offset < s.start + s.size)


def write_segment(task: SegmentTask) -> SegmentWritten:
    """Write the segment file and its map part (runs in a Spark task). The records are copied chunk by chunk
    straight into the file writer's one aligned buffer (O_DIRECT where the filesystem takes it, io.direct), the
    map part row group by row group. Checks that the records end where the plan put the BLANK (or the log's end)."""
    started = time.monotonic()
    state = {"pos": task.start, "rewritten": 0, "bad": 0, "listed": [], "per_split": {}}
    name = segment_name(task.start)
    part = Location(task.map_dir).child(f"part-{name}.parquet")
    out = SegmentFileWriter(Location(task.out_dir).child(name), task.segment_size, task.direct_io)
    try:
        with part.fs.open_output_stream(part.path) as sink, map_writer(sink) as maps:
            _fill(task, state, maps, out)
        written = out.close()
    except BaseException:
        out.abort()
        raise
    if written != state["pos"] - task.start + (BLANK.size if task.blank_at is not None else 0):
        raise ValueError(f"segment {name}: {written} bytes written, {state['pos'] - task.start} planned")
    return SegmentWritten(name=name, records=task.count, bytes=state["pos"] - task.start,
                          prepared_rewritten=state["rewritten"], write_mode=out.mode, fallback=out.fallback,
                          seconds=time.monotonic() - started, bad_crc=state["bad"],
                          bad_crc_listed=tuple(state["listed"]))


def _prepared_pairs(task: SegmentTask) -> tuple[np.ndarray, np.ndarray]:
    """The half records' old -> new offsets the segment's transaction ends need (keys sorted, unique): the pairs
    of the listed splits in its old offset range, read from the work directory."""
    if not task.prepared_splits:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    parts = [read_prepared_pairs(Location(task.work), k) for k in task.prepared_splits]
    keys, first = np.unique(np.concatenate([p[0] for p in parts]), return_index=True)
    return keys, np.concatenate([p[1] for p in parts])[first]


def _note_bad(task: SegmentTask, state: dict, src: Segment, buf: np.ndarray, base: int, olds: np.ndarray,
              sizes: np.ndarray) -> None:
    """Count the records whose body CRC failed (old record offsets `olds`, sizes `sizes`, in `buf` at absolute
    `base`) and list the first LISTED_PER_SPLIT of each source split as scan.crc_audit does: the data file, the
    entry's byte offset there, its commit-log offset and size, and the mismatch in the reference decoder's words."""
    state["bad"] += len(olds)
    for old, size in zip(olds.tolist(), sizes.tolist()):
        entry = old - src.header
        split = bisect.bisect_right(task.crc_splits, entry) - 1
        if state["per_split"].get(split, 0) >= crc_audit.LISTED_PER_SPLIT:
            continue
        state["per_split"][split] = state["per_split"].get(split, 0) + 1
        found = RecordColumns(buf, base, np.array([old - base], np.int64), src.path).first_crc_error()
        if found is None:
            raise ValueError(f"{src.path} at byte offset {entry - src.start}: the compiled body CRC check fails the "
                             f"record, the reference passes it")
        state["listed"].append(crc_audit.BadCrc(path=src.path, byte_offset=entry - src.start, offset=entry,
                                                size=size + src.header, detail=found[1]))


def _entry_size(loc: Location, buf: np.ndarray, at: int, file_size: int) -> int:
    """The size of the entry at `at` that the window `buf` does not hold whole (the next window's size)."""
    size = read_entry_header(buf, 0).size if len(buf) >= ENTRY_HEADER_SIZE else 0
    if size <= len(buf) or at + size > file_size:
        raise ValueError(f"{loc.uri}: the entry at byte {at} declares {size} bytes, which the file does not hold")
    return size


def _fill(task: SegmentTask, state: dict, maps: pq.ParquetWriter, out: SegmentFileWriter) -> None:
    """The segment's bytes in order: the records, hopped and copied in one pass chunk by chunk (hop_copy_checked)
    straight into the writer's buffer, then the BLANK (if the log goes on)."""
    keys, values = _prepared_pairs(task)
    left = task.count
    cap = CHUNK // MIN_ENTRY + 1
    offs, sizes, news = np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int64)
    bad = np.empty(cap if task.crc_splits is not None else 0, np.int64)
    i = _source_of(task.sources, task.first_old)
    at = task.first_old - task.sources[i].start - task.sources[i].header
    while left > 0:
        src = task.sources[i]
        loc = Location(src.path)
        window = CHUNK
        while left > 0 and at < src.size:
            buf = np.frombuffer(loc.read_range(at, min(window, src.size - at)), np.uint8)
            pos = state["pos"]
            dst = out.reserve(len(buf))
            n, stop, ended, total, one_host, failed, _ = hop_copy_checked(
                buf, src.start + at, 0, src.header, min(left, cap), dst, pos, offs, sizes, news, bad,
                task.crc_splits is not None)
            if failed:
                _note_bad(task, state, src, buf, src.start + at, offs[bad[:failed]], sizes[bad[:failed]])
            if n:
                if len(keys):
                    state["rewritten"] += rewrite_prepared(dst, pos, news[:n], keys, values)
                maps.write_table(map_part(dst, pos, offs[:n], news[:n], one_host))  # before the commit (buffer reuse)
                out.commit(total)
                state["pos"] = pos + total
                left -= n
                pause_at("in-convert-write")
            if ended or (n == 0 and stop == 0 and at + len(buf) >= src.size):
                break
            window = CHUNK if stop else _entry_size(loc, buf, at, src.size)
            at += stop
        i += 1
        at = 0
        if left and i >= len(task.sources):
            raise ValueError(f"segment {segment_name(task.start)}: {left} records not found in the data files")
    if task.blank_at is not None:
        if task.blank_at != state["pos"]:
            raise ValueError(f"segment {segment_name(task.start)}: BLANK planned at {task.blank_at}, records end at "
                             f"{state['pos']}")
        out.put(blank_record(state["pos"], task.segment_size))

