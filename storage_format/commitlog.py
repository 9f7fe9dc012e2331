"""Commit-log records: walk the record chain of a segment buffer, then decode fields as columns.

The only per-record Python work is the chain walk (totalSize + magic of each record); every field is
then gathered with numpy from the record start positions, and strings become Arrow arrays. The walk
follows the broker's dispatch rules (CommitLog.checkMessageAndReturnSize): a BLANK record ends the
segment, anything else that is not a valid record ends the scan (the broker's first invalid record).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import numpy as np

from . import dledger
from .record import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, SCHEDULE_TOPIC  # noqa: F401 (SCHEDULE_TOPIC re-exported)
from .record_columns import HEAD_DTYPE, RecordColumns  # noqa: F401 (HEAD_DTYPE re-exported)
from .segment_names import file_offset, parse_segment_name, segment_name  # noqa: F401 (re-exported)

MIN_RECORD_SIZE = 91  # IPv4 hosts, empty body, topic and properties (v1)
BLANK_HEADER = 8
_HEAD = struct.Struct(">iI")
_ENTRY_HEAD = struct.Struct(">Ii")  # DLedger entry magic (unsigned, as record magics are reported), size
# A DLedger entry header (dledger._HEADER's fields, magic unsigned) and the _HEAD of the record behind it.
_ENTRY_AND_HEAD = struct.Struct(">IiqqqiiiiiI")

# Why a scan stopped. The first four come from the broker's own checks.
END_BAD_MAGIC = "badmagic"
END_SIZE_MISMATCH = "size_mismatch"
END_CRC_MISMATCH = "crc_mismatch"
END_BAD_TOTAL_SIZE = "bad_total_size"
END_BAD_DELAY = "bad_delay_level"
END_BLANK = "blank"  # normal end of a segment: reading goes on in the next one
END_STOP = "stop"  # reached the end of the byte range asked for: the chain goes on
END_FILE = "end_of_file"  # the chain ended exactly at the segment end (no blank)
END_BAD_ENTRY = "bad_entry"  # a DLedger entry header DLedger's recovery rejects (size, pos, bodySize, blank length)
INVALID_ENDS = (END_BAD_MAGIC, END_SIZE_MISMATCH, END_CRC_MISMATCH, END_BAD_TOTAL_SIZE, END_BAD_DELAY,
                END_BAD_ENTRY)


class NeedMoreBytes(Exception):
    """A record runs past the end of the buffer although the segment goes on: read a larger window."""

    def __init__(self, position: int, needed_end: int) -> None:
        super().__init__(f"record at {position} needs bytes up to {needed_end}")
        self.position = position
        self.needed_end = needed_end


@dataclass(frozen=True)
class ScanEnd:
    """Where a walk stopped (global commit-log offset) and why; `magic` for badmagic ends."""

    reason: str
    offset: int
    magic: int | None = None
    detail: str = ""
    path: str = ""  # the segment file holding `offset`, when known
    file_offset: int | None = None  # `offset` as a byte offset inside that file

    @property
    def is_invalid(self) -> bool:
        return self.reason in INVALID_ENDS

    @property
    def is_clean(self) -> bool:
        """The ordinary end of a commit log: the zero-filled tail after the last record."""
        return self.reason == END_BAD_MAGIC and self.magic == 0

    def describe(self) -> str:
        """One line for operators: what, where (file and byte offset), why."""
        where = f"commit-log offset {self.offset}"
        if self.path:
            where += f" ({self.path} at byte offset {self.file_offset})"
        if self.is_clean:  # the zero-filled tail: where a healthy log ends, not damage
            what = "end of data (the zero-filled rest of the file)"
        else:
            what = {END_BAD_MAGIC: f"bad magic code 0x{(self.magic or 0) & 0xFFFFFFFF:08X}"}.get(self.reason, self.reason)
        return f"{what} at {where}" + (f": {self.detail}" if self.detail else "")

    def as_list(self) -> list:
        """The manifest's `scan_end` form: [reason, offset] (+ magic for badmagic)."""
        return [self.reason, self.offset] + ([self.magic] if self.reason == END_BAD_MAGIC else [])


def find_first_record(buf: memoryview | bytes, base_offset: int, start: int, stop: int) -> int | None:
    """First position p in [start, stop) where a record starts: valid magic and physicalOffset == base+p.

    Used by splits that begin mid-segment. Searched in growing windows so the common case (a record
    within a few KiB) touches little memory.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    pos, window = start, 1 << 16
    while pos < stop:
        hi = min(stop, pos + window)
        seg = arr[pos + 4:min(len(arr), hi + 4)]
        cand = np.flatnonzero(seg == 0xDA) + pos
        cand = cand[cand + 36 <= len(arr)]
        for p in cand:
            magic = int.from_bytes(arr[p + 4:p + 8].tobytes(), "big")
            if magic in (MAGIC_V1, MAGIC_V2) and int.from_bytes(arr[p + 28:p + 36].tobytes(), "big") == base_offset + p:
                return int(p)
        pos, window = hi, window * 4
    return None


def find_first_start(buf: memoryview | bytes, base_offset: int, start: int, stop: int, header: int = 0) -> int | None:
    """find_first_record for a plain segment (header 0), dledger.find_first_entry for a DLedger data file."""
    if header:
        return dledger.find_first_entry(buf, base_offset, start, stop, find_first_record)
    return find_first_record(buf, base_offset, start, stop)


def walk_chain(buf: memoryview | bytes, base_offset: int, start: int, stop: int,
               segment_end: int, header: int = 0) -> tuple[np.ndarray, int, ScanEnd]:
    """Follow totalSize from `start` while positions are < `stop`: (record positions, blanks, end).

    `segment_end` is where the segment ends in buffer coordinates; when it lies past the buffer,
    a record that runs off the buffer raises NeedMoreBytes instead of being called invalid.
    With `header` (a DLedger data file) the walk goes entry by entry: walk_entries.
    """
    if header:
        return walk_entries(buf, base_offset, start, stop, segment_end)
    positions: list[int] = []
    append = positions.append
    unpack = _HEAD.unpack_from
    buf_len = len(buf)
    limit = min(buf_len, segment_end)
    pos, blanks = start, 0
    end: ScanEnd
    while True:
        if pos >= stop:
            end = _end_after_stop(buf, base_offset, pos, limit)
            if end.reason == END_BLANK:
                blanks += 1
            break
        if pos == segment_end:
            end = ScanEnd(END_FILE, base_offset + pos)
            break
        if pos + 8 > limit:
            if limit < segment_end:
                raise NeedMoreBytes(pos, pos + 8)
            end = ScanEnd(END_BAD_TOTAL_SIZE, base_offset + pos, detail="record header runs past the segment end")
            break
        size, magic = unpack(buf, pos)
        if magic == MAGIC_V1 or magic == MAGIC_V2:
            if size < MIN_RECORD_SIZE or pos + size > segment_end:
                end = ScanEnd(END_BAD_TOTAL_SIZE, base_offset + pos,
                              detail=f"totalSize {size} does not fit (min {MIN_RECORD_SIZE}, "
                                     f"{segment_end - pos} bytes left in the segment)")
                break
            if pos + size > buf_len:
                raise NeedMoreBytes(pos, pos + size)
            append(pos)
            pos += size
        elif magic == MAGIC_BLANK:
            blanks += 1
            end = ScanEnd(END_BLANK, base_offset + pos)
            break
        else:
            end = ScanEnd(END_BAD_MAGIC, base_offset + pos, magic=magic)
            break
    return np.asarray(positions, dtype=np.int64), blanks, end


def walk_entries(buf: memoryview | bytes, base_offset: int, start: int, stop: int,
                 segment_end: int) -> tuple[np.ndarray, int, ScanEnd]:
    """walk_chain over a DLedger data file: (record positions = entry positions + 48, blanks, end). An entry
    goes on the chain when its magic is 1 and its header and record agree (dledger.entry_problem); a DLedger
    blank (int -1, bytes-left) ends the file; any other magic ends the walk (zeros: the end of the data).
    Positions in the end are entry positions. As the broker's dispatch (DLedgerCommitLog.
    checkMessageAndReturnSize) the record itself is then checked by the plain record rules."""
    h = dledger.ENTRY_HEADER_SIZE
    positions: list[int] = []
    append = positions.append
    unpack = _ENTRY_HEAD.unpack_from
    buf_len = len(buf)
    limit = min(buf_len, segment_end)
    pos, blanks, prev, prev_term = start, 0, None, None
    end: ScanEnd
    while True:
        pos, prev, prev_term = _accepted_run(buf, pos, stop, limit, base_offset, segment_end, prev, prev_term, append)
        if pos >= stop:
            end = _entry_end_after_stop(buf, base_offset, pos, limit)
            blanks += end.reason == END_BLANK
            break
        if pos == segment_end:
            end = ScanEnd(END_FILE, base_offset + pos)
            break
        if pos + 8 > limit:
            if limit < segment_end:
                raise NeedMoreBytes(pos, pos + 8)
            end = ScanEnd(END_BAD_ENTRY, base_offset + pos, detail="entry header runs past the data file's end")
            break
        magic, size = unpack(buf, pos)
        if magic == dledger.BLANK_MAGIC & 0xFFFFFFFF:
            if size != segment_end - pos:
                end = ScanEnd(END_BAD_ENTRY, base_offset + pos,
                              detail=f"DLedger blank says {size} bytes left, the data file has {segment_end - pos}")
                break
            blanks += 1
            end = ScanEnd(END_BLANK, base_offset + pos)
            break
        if magic != dledger.ENTRY_MAGIC:
            end = ScanEnd(END_BAD_MAGIC, base_offset + pos, magic=magic)
            break
        if pos + h + 8 > limit:
            if limit < segment_end:
                raise NeedMoreBytes(pos, pos + h + 8)
            end = ScanEnd(END_BAD_ENTRY, base_offset + pos, detail="entry header runs past the data file's end")
            break
        index, term = dledger.entry_index_at(buf, pos + h), dledger.entry_term_at(buf, pos + h)
        why = _entry_problem(buf, pos, base_offset, segment_end, size) or \
            dledger.sequence_problem(index, term, prev, prev_term)
        prev, prev_term = index, term
        if why:
            end = ScanEnd(END_BAD_ENTRY, base_offset + pos, detail=why)
            break
        if pos + size > buf_len:
            raise NeedMoreBytes(pos, pos + size)
        append(pos + h)
        pos += size
    return np.asarray(positions, dtype=np.int64), blanks, end


def _accepted_run(buf: memoryview | bytes, pos: int, stop: int, limit: int, base_offset: int, segment_end: int,
                  prev: int | None, prev_term: int | None, append) -> tuple[int, int | None, int | None]:
    """walk_entries' fast lane: from pos, every entry each of its rules accepts (read in one unpack), its record
    position appended; returns where it stopped and the last entry's index and term. The walk then takes the
    entry there rule by rule (_entry_problem, dledger.entry_problem, sequence_problem), which names what fails."""
    h = dledger.ENTRY_HEADER_SIZE
    unpack, last, buf_len = _ENTRY_AND_HEAD.unpack_from, limit - _ENTRY_AND_HEAD.size, len(buf)
    while pos < stop and pos <= last:
        magic, size, index, term, at, _, _, _, body_size, record_size, record_magic = unpack(buf, pos)
        if not (magic == dledger.ENTRY_MAGIC and h + MIN_RECORD_SIZE <= size <= segment_end - pos
                and at == base_offset + pos and body_size == size - h == record_size
                and record_magic in (MAGIC_V1, MAGIC_V2) and pos + size <= buf_len
                and (prev is None or index == prev + 1) and (prev_term is None or term >= prev_term)):
            break
        append(pos + h)
        pos += size
        prev, prev_term = index, term
    return pos, prev, prev_term


def _entry_problem(buf: memoryview | bytes, pos: int, base_offset: int, segment_end: int, size: int) -> str | None:
    """Why the entry at pos is not one DLedger wrote there with a record behind it (None: it is): its header
    (dledger.entry_problem), the record's magic, the smallest record."""
    h = dledger.ENTRY_HEADER_SIZE
    record_size, record_magic = _HEAD.unpack_from(buf, pos + h)
    why = dledger.entry_problem(buf, pos, base_offset, segment_end - pos, record_size)
    if why is None and record_magic not in (MAGIC_V1, MAGIC_V2):
        why = f"no commit-log record behind the entry header (magic 0x{record_magic:08X})"
    if why is None and size < h + MIN_RECORD_SIZE:
        why = f"entry size {size} is below the smallest record ({MIN_RECORD_SIZE}) + {h}"
    return why


def _entry_end_after_stop(buf: memoryview | bytes, base_offset: int, pos: int, limit: int) -> ScanEnd:
    """_end_after_stop for a DLedger data file: a DLedger blank or another magic at the next entry is reported
    here."""
    if pos + 8 <= limit:
        magic, _ = _ENTRY_HEAD.unpack_from(buf, pos)
        if magic == dledger.BLANK_MAGIC & 0xFFFFFFFF:
            return ScanEnd(END_BLANK, base_offset + pos)
        if magic != dledger.ENTRY_MAGIC:
            return ScanEnd(END_BAD_MAGIC, base_offset + pos, magic=magic)
    return ScanEnd(END_STOP, base_offset + pos)


def _end_after_stop(buf: memoryview | bytes, base_offset: int, pos: int, limit: int) -> ScanEnd:
    """The walk reached its stop: peek at the next header so a blank or the end of the data is
    reported here rather than making the next split search for a record that is not there."""
    if pos + 8 <= limit:
        _, magic = _HEAD.unpack_from(buf, pos)
        if magic == MAGIC_BLANK:
            return ScanEnd(END_BLANK, base_offset + pos)
        if magic not in (MAGIC_V1, MAGIC_V2):
            return ScanEnd(END_BAD_MAGIC, base_offset + pos, magic=magic)
    return ScanEnd(END_STOP, base_offset + pos)


@dataclass
class DecodedChunk:
    """Valid records of a byte range and how the walk ended."""

    columns: RecordColumns
    blank_count: int
    end: ScanEnd
    first_position: int | None  # buffer position of the first record walked, if any
    path: str = "<buffer>"

    @property
    def count(self) -> int:
        return len(self.columns)


def decode_buffer(buf: memoryview | bytes, base_offset: int, start: int = 0, stop: int | None = None, *,
                  segment_end: int | None = None, path: str = "<buffer>", check_crc: bool = False,
                  find_start: bool = False, header: int = 0) -> DecodedChunk:
    """Decode the records that start in buf[start:stop].

    `base_offset` is the commit-log offset of buf[0]; `segment_end` (default len(buf)) is where the
    segment ends in buffer coordinates. With `find_start`, the first record is searched by the
    physicalOffset rule (for splits that begin mid-segment). Records after the first invalid one are
    dropped and the end says where and why, like the broker's dispatch (CRC only with check_crc).
    With `header` (a DLedger data file: dledger.ENTRY_HEADER_SIZE) positions walked are entry positions
    (`first_position`, the end) while the columns hold the records behind them.
    """
    stop = len(buf) if stop is None else stop
    segment_end = len(buf) if segment_end is None else segment_end
    first = start
    if find_start:
        found = find_first_start(buf, base_offset, start, stop, header)
        if found is None:
            return DecodedChunk(RecordColumns(buf, base_offset, np.zeros(0, np.int64), path), 0,
                                ScanEnd(END_STOP, base_offset + stop), None, path)
        first = found
    positions, blanks, end = walk_chain(buf, base_offset, first, stop, segment_end, header)
    cols = RecordColumns(buf, base_offset, positions, path)
    invalid = first_invalid_record(cols, check_crc)
    if invalid is not None:
        i, reason, why = invalid
        end = ScanEnd(reason, base_offset + int(cols.pos[i]) - header, detail=why)
        blanks = 0
        cols = cols.take(i)
    seg_start = parse_segment_name(path.rstrip("/").rsplit("/", 1)[-1])
    end = replace(end, path=path, file_offset=end.offset - (base_offset if seg_start is None else seg_start))
    cols.topic  # noqa: B018 - invalid UTF-8 in a topic is an error, raised here with its offset
    return DecodedChunk(cols, blanks, end, first if len(positions) or not find_start else None, path)


def first_invalid_record(cols: RecordColumns, check_crc: bool) -> tuple[int, str, str] | None:
    """The first record the broker would reject: (index, reason, detail), checks in the broker's order.

    At one record the broker checks the body CRC first (recovery only), then parses DELAY, then
    compares the field lengths with totalSize.
    """
    n = len(cols)
    layout = cols.first_layout_error()
    limit = layout[0] if layout else n
    found: list[tuple[int, int, str, str]] = []
    if layout:
        found.append((layout[0], 2, END_SIZE_MISMATCH, layout[1]))
    if check_crc:
        crc = cols.take(min(limit + 1, n)).first_crc_error()
        if crc:
            found.append((crc[0], 0, END_CRC_MISMATCH, crc[1]))
    delay = cols.take(limit).first_delay_error()
    if delay:
        found.append((delay[0], 1, END_BAD_DELAY, delay[1]))
    if not found:
        return None
    i, _, reason, why = min(found)
    return i, reason, why
