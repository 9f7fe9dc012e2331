"""`timerlog/<20-digit start>` files: append-only 52-byte units (TimerLog.UNIT_SIZE, big-endian), never split
across files; a 16-byte filler (room, 0L, BLANK_MAGIC_CODE) ends a file whose room is too small for the next
unit (TimerLog.append). `scan_file` reads a file the way TimerMessageStore.recoverAndRevise does."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

UNIT_SIZE = 52
MIN_BLANK_LEN = 16  # TimerLog.MIN_BLANK_LEN: int room, long 0, int magic
BLANK_MAGIC = 0xBBCCDDEE ^ (1880681586 + 8)  # TimerLog.BLANK_MAGIC_CODE = 0xCBD43194 (Java: + binds before ^)
BLANK_MAGIC_SIGNED = BLANK_MAGIC - (1 << 32)
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
DEFAULT_FILE_SIZE = 100 * 1024 * 1024  # MessageStoreConfig.mappedFileSizeTimerLog
OFFSET_PY_AT = 28  # TimerLog.UNIT_PRE_SIZE_FOR_MSG: where offsetPy sits in a unit

_UNIT = struct.Struct(">iqiqiqiiq")
_FILLER = struct.Struct(">iqi")
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev_pos", ">i8"), ("magic", ">i4"), ("write_time", ">i8"),
                       ("delay", ">i4"), ("offset_py", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"),
                       ("reserved", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE == _UNIT.size


def magic_ok(magic: int) -> bool:
    """TimerMessageStore.isMagicOK: only the low four bits may be set (0 counts as valid)."""
    return (magic | 0xF) == 0xF


@dataclass(frozen=True, kw_only=True)
class TimerUnit:
    """One timer-log unit: its chain link, kind bits, enqueue time, delay and the commit-log record it names."""

    prev_pos: int
    magic: int
    write_time: int
    delay: int
    offset_py: int
    size_py: int
    topic_hash: int
    reserved: int = 0
    size: int = UNIT_SIZE

    @property
    def delayed_time(self) -> int:
        """The slot time the unit belongs to (writeTime + delay)."""
        return self.write_time + self.delay

    @property
    def end_py(self) -> int:
        """End of the commit-log record the unit names."""
        return self.offset_py + self.size_py


def encode_unit(u: TimerUnit) -> bytes:
    """The 52 bytes TimerMessageStore.doEnqueue appends."""
    return _UNIT.pack(u.size, u.prev_pos, u.magic, u.write_time, u.delay, u.offset_py, u.size_py, u.topic_hash,
                      u.reserved)


def decode_unit(data: bytes, at: int = 0) -> TimerUnit:
    """The unit at a byte position."""
    size, prev, magic, wt, delay, off, sz, h, res = _UNIT.unpack_from(data, at)
    return TimerUnit(prev_pos=prev, magic=magic, write_time=wt, delay=delay, offset_py=off, size_py=sz,
                     topic_hash=h, reserved=res, size=size)


def filler_bytes(room: int) -> bytes:
    """The 16-byte blank TimerLog.append writes where `room` bytes are left in a file."""
    return _FILLER.pack(room, 0, BLANK_MAGIC_SIGNED)


def fits(position_in_file: int, file_size: int) -> bool:
    """Whether a unit still goes into a file at this position (else a filler, and the next file)."""
    return UNIT_SIZE + MIN_BLANK_LEN <= file_size - position_in_file


def units_per_file(file_size: int) -> int:
    """How many units a file holds before its filler."""
    return (file_size - MIN_BLANK_LEN) // UNIT_SIZE


def file_name(start: int) -> str:
    """The 20-digit name of the file starting at a log offset."""
    return f"{start:020d}"


@dataclass(frozen=True)
class FileScan:
    """One file read as recoverAndRevise reads it: its units up to where reading stopped, and why.

    `stop` is the byte position in the file where reading ended; `reason` is "blank" (the filler: the next
    file follows), "invalid" (a unit with a bad size or magic: the log ends here), or "end" (read to the
    file's end)."""

    units: np.ndarray  # UNIT_DTYPE rows, in position order
    stop: int
    reason: str

    @property
    def ends_log(self) -> bool:
        """True when the broker's scan stops in this file (the log's valid end)."""
        return self.reason == "invalid"


def scan_file(data: bytes) -> FileScan:
    """Units from byte 0 in 52-byte steps until a blank magic (file done), an invalid unit (log done) or
    the file's end. A blank magic is tested before validity, as the broker does."""
    n = len(data) // UNIT_SIZE
    units = np.frombuffer(data, UNIT_DTYPE, count=n)
    magic = units["magic"].astype(np.int64)
    blank = magic == BLANK_MAGIC_SIGNED
    bad = blank | (units["size"] != UNIT_SIZE) | ((magic | 0xF) != 0xF)
    hit = np.flatnonzero(bad)
    if len(hit):
        k = int(hit[0])
        return FileScan(units[:k], k * UNIT_SIZE, "blank" if blank[k] else "invalid")
    tail = len(data) - n * UNIT_SIZE
    if tail >= MIN_BLANK_LEN:  # the filler of a file whose size is no multiple of 52
        _, _, m = _FILLER.unpack_from(data, n * UNIT_SIZE)
        return FileScan(units, n * UNIT_SIZE, "blank" if m == BLANK_MAGIC_SIGNED else "invalid")
    if tail:  # fewer bytes than a filler: the broker's read fails there and its scan stops
        return FileScan(units, n * UNIT_SIZE, "invalid")
    return FileScan(units, n * UNIT_SIZE, "end")


def delayed_times(units: np.ndarray) -> np.ndarray:
    """writeTime + delay of each unit (the slot time), int64."""
    return units["write_time"].astype(np.int64) + units["delay"].astype(np.int64)


def end_py(units: np.ndarray) -> np.ndarray:
    """offsetPy + sizePy of each unit, int64."""
    return units["offset_py"].astype(np.int64) + units["size_py"].astype(np.int64)


@dataclass(frozen=True)
class LogEnd:
    """Where TimerMessageStore.recover's scan (recoverAndRevise with checkTimerLog) leaves the timer log: it
    starts at the file holding lastTimerLogFlushPos - fileSize and reads whole files, not up to the checkpoint."""

    files: tuple[int, ...]  # starts of the files the broker keeps loaded (sorted)
    scan_from: int  # start of the first file the scan reads
    end: int  # processOffset: the log's valid end
    deleted: tuple[int, ...]  # files truncateDirtyFiles removes (wholly past the end)


def scan_start(files: list[int], flush_pos: int, file_size: int) -> int:
    """Index of the file recover() scans from: the last file whose start is <= flushPos - fileSize (or 0)."""
    begin = max(0, flush_pos - file_size)
    for i in range(len(files) - 1, -1, -1):
        if begin >= files[i]:
            return i
    return 0


def log_end(files: list[int], read, flush_pos: int, file_size: int) -> tuple[LogEnd, dict[int, FileScan]]:
    """The broker's scan over files (starts, sorted, each `file_size` long; `read(start)` gives the bytes):
    its valid end, the files it deletes, and the scans of the files it read."""
    if not files:
        return LogEnd((), 0, 0, ()), {}
    i = scan_start(files, flush_pos, file_size)
    scans: dict[int, FileScan] = {}
    end = files[i]
    for start in files[i:]:
        scan = scan_file(read(start))
        scans[start] = scan
        end = start + scan.stop
        if scan.ends_log:
            break
    kept = tuple(f for f in files if f <= end)
    return LogEnd(kept, files[i], end, tuple(f for f in files if f > end)), scans
