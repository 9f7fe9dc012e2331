"""A consume-queue file read from a unit boundary to its end of data only (a continued file's units that a new scan
overlaps lie near its end; the bytes before them go into the new file by copy_file_range, io.copy), and where its
units end, searched from the end back. The tail read last is kept: placing a queue's units and joining its file read
the same one. Verify reads whole files up to their end of data here too."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from storage_format.consume_queue import CQ_UNIT_SIZE

from ..io.copy import data_extents
from ..io.fs import Location
from ..io.paths import is_local

STEP = CQ_UNIT_SIZE * 3277  # ~64 KiB, whole units: what a search from the end back reads at a time


@dataclass(frozen=True)
class Tail:
    """A file's bytes from `start` (a unit boundary) to `end`, the end of its data (a local file's sparse zero tail,
    which an OUT's consume-queue files have past their last unit, is not read)."""

    start: int
    end: int
    data: memoryview


_RECENT: dict[tuple[str, int, int], Tail] = {}
RECENT_FILES = 4


def read_tail(loc: Location, start: int) -> Tail:
    """The file's bytes from `start` to its end of data (FileNotFoundError as open's); a local file's tail read
    before from `start` or earlier serves (by path, size and modification time)."""
    return _tail(loc, lambda end: start)


def read_back(loc: Location, back: int) -> Tail:
    """The file's last `back` bytes of data (from a unit boundary), or all of them."""
    return _tail(loc, lambda end: max(0, end - back) // CQ_UNIT_SIZE * CQ_UNIT_SIZE)


def kept_head(loc: Location, n: int) -> memoryview | None:
    """The file's first `n` bytes where a tail read before from its start holds them (a file read whole by the
    placer, the size of most queues' files), else None."""
    if not is_local(loc):
        return None
    st = os.stat(loc.path)
    kept = _RECENT.get((loc.path, st.st_size, st.st_mtime_ns))
    return kept.data[:n] if kept is not None and kept.start == 0 and kept.end >= n else None


def _tail(loc: Location, start_of: Callable[[int], int]) -> Tail:
    if not is_local(loc):  # read whole, not kept (no cheap way to know the file is still the one read)
        data = loc.read_bytes()
        at = min(start_of(len(data)), len(data))
        return Tail(at, len(data), memoryview(data)[at:])
    st = os.stat(loc.path)
    key = (loc.path, st.st_size, st.st_mtime_ns)
    kept = _RECENT.get(key)
    if kept is None or kept.start > start_of(kept.end):
        while len(_RECENT) >= RECENT_FILES:
            _RECENT.pop(next(iter(_RECENT)))
        kept = _RECENT[key] = _read(loc, start_of)
    at = min(start_of(kept.end), kept.end)
    return Tail(at, kept.end, kept.data[at - kept.start:])


def _read(loc: Location, start_of: Callable[[int], int]) -> Tail:
    with open(loc.path, "rb") as f:
        at, data = _read_from(f, start_of)
    return Tail(at, at + len(data), memoryview(data))


def _read_from(f, start_of: Callable[[int], int]) -> tuple[int, bytes]:
    """(where the bytes start, the open local file's bytes from there to its end of data)."""
    extents = data_extents(f.fileno(), os.fstat(f.fileno()).st_size)
    end = extents[-1][1] if extents else 0
    at = min(start_of(end), end)
    f.seek(at)  # data_extents moved the descriptor's position
    return at, f.read(end - at)


def read_data(loc: Location) -> bytes:
    """A whole file up to its end of data, as bytes (verify compares files with bytes' methods); not kept."""
    if not is_local(loc):
        return loc.read_bytes()
    with open(loc.path, "rb") as f:
        return _read_from(f, lambda end: 0)[1]


def used_length(data: bytes | memoryview) -> int:
    """The end of the last unit of `data` (whole units from a unit boundary) holding a non-zero byte (0: none),
    searched from the end back a STEP at a time (the last unit is usually in the last step)."""
    raw = np.frombuffer(data, np.uint8, len(data) - len(data) % CQ_UNIT_SIZE)
    end = len(raw)
    while end > 0:
        start = max(0, end - STEP)
        nonzero = np.flatnonzero(raw[start:end])
        if len(nonzero):
            return ((start + int(nonzero[-1])) // CQ_UNIT_SIZE + 1) * CQ_UNIT_SIZE
        end = start
    return 0


def used_end(loc: Location, tail: Tail) -> int:
    """Where the file's units end (the end of its last unit holding a non-zero byte): in `tail`, else searched back
    from the tail's start, a STEP read at a time."""
    used = used_length(tail.data)
    if used:
        return tail.start + used
    end = tail.start
    while end > 0:
        start = max(0, end - STEP)
        used = used_length(loc.read_range(start, end - start))
        if used:
            return start + used
        end = start
    return 0
