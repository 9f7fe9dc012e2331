"""Writing one segment of the new commit log (a Spark task): its records hopped from the DLedger data files
by offset range in bounded chunks (a task's memory does not grow with the data file) and copied in the same
pass to their new offsets with PHYSICALOFFSET (and COMMIT/ROLLBACK prepared offsets) rewritten, the BLANK at
the end when the next record did not fit, zeros to the segment size; and the segment's part of the old -> new
msgId map (Parquet)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage_format.commitlog_layout import AT_BORN_HOST, AT_SYS_FLAG, BLANK, blank_record, store_host_at
from storage_format.kernels.layout_kernel import hop_copy, rewrite_prepared
from storage_format.msg_id import encode_offset_msg_ids, offset_msg_ids_one_host
from storage_format.record import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6
from storage_format.scan_plan import Segment
from storage_format.segment_names import segment_name

from ..io.direct import BUFFERED_MODE, SegmentFileWriter
from ..io.fs import Location
from ..runtime.faults import pause_at
from .records import CHUNK, MIN_ENTRY

MAP_DIR = "reput-msgid-map"  # in OUT: the old -> new offset msgId map, one Parquet file per segment
MAP_SCHEMA = pa.schema([("old_physical_offset", pa.int64()), ("new_physical_offset", pa.int64()),
                        ("old_offset_msg_id", pa.string()), ("new_offset_msg_id", pa.string())])


@dataclass(frozen=True, kw_only=True)
class SegmentTask:
    """One new segment: its start, where its first record starts (the segment's start), the first record's old
    offset and how many records it holds, the BLANK's offset (None: the log ends in it), the data files
    to read, the prepared-offset map for its COMMIT/ROLLBACK records, and where to write."""

    start: int
    segment_size: int
    first_old: int
    count: int
    blank_at: int | None
    sources: tuple[Segment, ...]
    prepared_keys: tuple[int, ...] = field(default=())
    prepared_values: tuple[int, ...] = field(default=())
    out_dir: str
    map_dir: str
    direct_io: bool = True  # O_DIRECT where the filesystem takes it (REPUT_CONVERT_DIRECT_IO=0: buffered)


@dataclass(frozen=True)
class SegmentWritten:
    name: str
    records: int
    bytes: int
    prepared_rewritten: int
    write_mode: str = BUFFERED_MODE  # io.direct's DIRECT_MODE or BUFFERED_MODE
    fallback: str = ""  # why O_DIRECT was not used ("" when it was)


def _source_of(sources: tuple[Segment, ...], offset: int) -> int:
    return next(i for i, s in enumerate(sources) if s.start <= offset < s.start + s.size)


def write_segment(task: SegmentTask) -> SegmentWritten:
    """Write the segment file and its map part (runs in a Spark task). The records are copied chunk by chunk
    straight into the file writer's one aligned buffer (O_DIRECT where the filesystem takes it, io.direct), the
    map part row group by row group. Checks that the records end where the plan put the BLANK (or the log's end)."""
    state = {"pos": task.start, "rewritten": 0}
    name = segment_name(task.start)
    part = Location(task.map_dir).child(f"part-{name}.parquet")
    out = SegmentFileWriter(Location(task.out_dir).child(name), task.segment_size, task.direct_io)
    try:
        # no dictionary: every id is unique, so the writer's dictionary attempt is wasted (it halves write_table)
        with part.fs.open_output_stream(part.path) as sink, \
                pq.ParquetWriter(sink, MAP_SCHEMA, use_dictionary=False) as maps:
            _fill(task, state, maps, out)
        written = out.close()
    except BaseException:
        out.abort()
        raise
    if written != state["pos"] - task.start + (BLANK.size if task.blank_at is not None else 0):
        raise ValueError(f"segment {name}: {written} bytes written, {state['pos'] - task.start} planned")
    return SegmentWritten(name, task.count, state["pos"] - task.start, state["rewritten"], out.mode, out.fallback)


def _fill(task: SegmentTask, state: dict, maps: pq.ParquetWriter, out: SegmentFileWriter) -> None:
    """The segment's bytes in order: the records, hopped and copied in one pass chunk by chunk (hop_copy) straight
    into the writer's buffer, then the BLANK (if the log goes on)."""
    keys = np.asarray(task.prepared_keys, np.int64)
    values = np.asarray(task.prepared_values, np.int64)
    left = task.count
    cap = CHUNK // MIN_ENTRY + 1
    offs, sizes, news = np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int64)
    i = _source_of(task.sources, task.first_old)
    at = task.first_old - task.sources[i].start - task.sources[i].header
    while left > 0:
        src = task.sources[i]
        loc = Location(src.path)
        while left > 0 and at < src.size:
            buf = np.frombuffer(loc.read_range(at, min(CHUNK, src.size - at)), np.uint8)
            pos = state["pos"]
            dst = out.reserve(len(buf))
            n, stop, ended, total, one_host, _ = hop_copy(buf, src.start + at, 0, src.header, left, dst, pos, offs,
                                                          sizes, news)
            if n:
                if len(keys):
                    state["rewritten"] += rewrite_prepared(dst, pos, news[:n], keys, values)
                maps.write_table(_map_part(dst, pos, offs[:n], news[:n], one_host))  # before the commit (buffer reuse)
                out.commit(total)
                state["pos"] = pos + total
                left -= n
                pause_at("in-convert-write")
            if ended or (n == 0 and stop == 0 and at + len(buf) >= src.size):
                break
            if stop == 0:
                raise ValueError(f"{loc.uri}: an entry at byte {at} is larger than {CHUNK} bytes")
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


def _map_part(dst: np.ndarray, dst_base: int, old: np.ndarray, new: np.ndarray, one_host: bool) -> pa.Table:
    """old/new offsets and offset msgIds (store host + port + offset) of the records copied into `dst`: one
    prefix for the whole chunk when one host stored every record (`one_host`: a broker's store), else per record."""
    if one_host:
        b = int(new[0] - dst_base) if len(new) else 0
        flag = int.from_bytes(dst[b + AT_SYS_FLAG:b + AT_SYS_FLAG + 4].tobytes(), "big", signed=True) if len(new) else 0
        at = b + store_host_at(flag)
        prefix = dst[at:at + (20 if flag & FLAG_STOREHOST_V6 else 8)].tobytes()
        return pa.table({"old_physical_offset": pa.array(old, pa.int64()),
                         "new_physical_offset": pa.array(new, pa.int64()),
                         "old_offset_msg_id": offset_msg_ids_one_host(prefix, old),
                         "new_offset_msg_id": offset_msg_ids_one_host(prefix, new)})
    at = (new - dst_base).astype(np.int64)
    flag = np.frombuffer(np.ascontiguousarray(dst[(at + AT_SYS_FLAG)[:, None] + np.arange(4)]).tobytes(), ">i4")
    host_at = at + AT_BORN_HOST + np.where(flag & FLAG_BORNHOST_V6, 20, 8) + 8
    v6 = (flag & FLAG_STOREHOST_V6) != 0
    widths = np.where(v6, 16, 4)
    host_arr = pa.array([dst[h:h + w].tobytes() for h, w in zip(host_at.tolist(), widths.tolist())], pa.binary())
    port_at = host_at + widths
    ports = np.frombuffer(np.ascontiguousarray(dst[port_at[:, None] + np.arange(4)]).tobytes(), ">i4").astype(np.int64)
    return pa.table({"old_physical_offset": pa.array(old, pa.int64()), "new_physical_offset": pa.array(new, pa.int64()),
                     "old_offset_msg_id": encode_offset_msg_ids(host_arr, ports, old),
                     "new_offset_msg_id": encode_offset_msg_ids(host_arr, ports, new)})
