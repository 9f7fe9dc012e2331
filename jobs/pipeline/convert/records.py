"""Listing a DLedger store's records (one Spark task per data file): offset, size, transaction type and, for
COMMIT/ROLLBACK records, the prepared offset, read by hopping entry headers in bounded chunks. The driver
gets numeric arrays only (12 bytes per record, plus the few transaction ends): what the layout needs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.dledger import ENTRY_HEADER_SIZE
from storage_format.kernels.layout_kernel import hop_entries
from storage_format.record import TRAN_PREPARED
from storage_format.scan_plan import Segment

from ..io.fs import Location

CHUNK = 64 << 20  # bytes read at a time: a task's memory does not grow with the data file's size
MIN_ENTRY = ENTRY_HEADER_SIZE + 20  # no entry is smaller: bounds the arrays a chunk can fill


@dataclass(frozen=True)
class ListTask:
    """One data file to list, up to the absolute offset `limit` (the end of the valid, committed log)."""

    segment: Segment
    limit: int


@dataclass(frozen=True)
class FileRecords:
    """A data file's records: offsets (int64) and sizes (int32) of every record, the prepared-transaction
    offsets of its COMMIT/ROLLBACK records (their offsets, and the offsets they point at) and its PREPARED count."""

    offsets: np.ndarray
    sizes: np.ndarray
    end_offsets: np.ndarray
    end_prepared: np.ndarray
    prepared: int


def hop(loc: Location, base: int, file_size: int, start: int, limit: int, header: int,
        want: int | None = None):
    """Yield (offsets, sizes, trans, preps, chunk, chunk's absolute offset) chunk by chunk walking entries from
    byte `start` of the file (absolute offset base + start) until the data ends, `limit` or `want` records."""
    at = start
    got = 0
    while at < file_size and (want is None or got < want):
        length = min(CHUNK, file_size - at)
        buf = np.frombuffer(loc.read_range(at, length), np.uint8)
        cap = length // MIN_ENTRY + 1
        offs, sizes = np.empty(cap, np.int64), np.empty(cap, np.int32)
        trans, preps = np.empty(cap, np.int8), np.empty(cap, np.int64)
        n, stop, ended = hop_entries(buf, base + at, 0, limit, header, offs, sizes, trans, preps)
        if want is not None:
            n = min(n, want - got)
        got += n
        yield offs[:n], sizes[:n], trans[:n], preps[:n], buf, base + at
        if ended or (n == 0 and stop == 0 and at + length >= file_size):
            return
        if stop == 0:
            raise ValueError(f"{loc.uri}: an entry at byte {at} is larger than {CHUNK} bytes")
        at += stop


def list_file(task: ListTask) -> FileRecords:
    """The records of one data file (runs in a Spark task)."""
    seg = task.segment
    parts = [p[:4] for p in hop(Location(seg.path), seg.start, seg.size, 0, task.limit, seg.header)]
    offs = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    sizes = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32)
    trans = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int8)
    preps = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, np.int64)
    ends = trans >= 8
    return FileRecords(offs, sizes, offs[ends], preps[ends], int(np.count_nonzero(trans == TRAN_PREPARED)))
