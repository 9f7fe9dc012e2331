"""Where records land in a plain commit log (`CommitLog`'s placement rule), as a pure function of their sizes.

A record goes in the current segment only when its size plus the 8-byte end marker fits the bytes left
(`CommitLog.END_FILE_MIN_BLANK_LENGTH`); otherwise the segment ends with a BLANK record (totalSize = the
bytes left, BLANK magic, FORMAT.md) at the write position and the record starts the next segment. The
one home of this rule: storegen's SegmentWriter asks `rolls`, convert lays out a whole log with `layout`
(vectorised numpy; `layout_reference` is the one-record-at-a-time reference, tested equal).
Also here: the record's fields convert rewrites (PHYSICALOFFSET, preparedTransactionOffset) and where they sit.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .dledger import ENTRY_HEADER_SIZE, ENTRY_MAGIC
from .record import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_BLANK, TRAN_COMMIT, TRAN_MASK, TRAN_ROLLBACK

END_MARKER = 8  # CommitLog.END_FILE_MIN_BLANK_LENGTH: a segment always keeps room for the BLANK header
BLANK = struct.Struct(">iI")  # totalSize = bytes left in the segment, BLANK magic; zeros after

AT_PHYSICAL_OFFSET = 28  # totalSize, magic, bodyCRC, queueId, flag (4 each), queueOffset (8)
AT_SYS_FLAG = 36
AT_BORN_HOST = 48  # after sysFlag (4) and bornTimestamp (8)
HOST_V4, HOST_V6 = 8, 20  # address + port


def rolls(size: int, remaining: int) -> bool:
    """A record (or batch) of `size` bytes does not fit the `remaining` bytes of the segment: BLANK, next one."""
    return size + END_MARKER > remaining


@dataclass(frozen=True)
class Layout:
    """Where each record lands (`offsets`, absolute), where each segment that ends early got its BLANK
    (`blanks`, absolute, one per segment rolled over), the write end, and the segments used (starts)."""

    offsets: np.ndarray
    blanks: np.ndarray
    end: int
    segment_size: int
    start: int

    @property
    def segment_starts(self) -> list[int]:
        """Start offsets of the segments that hold bytes (a segment whose write end is its start holds none)."""
        last = self.end - (self.end - self.start) % self.segment_size if self.end > self.start else self.start
        if self.end == last:
            last -= self.segment_size
        return list(range(self.start, last + 1, self.segment_size)) if self.end > self.start else []


def _check(sizes: np.ndarray, segment_size: int, start: int) -> None:
    if segment_size <= END_MARKER:
        raise ValueError(f"segment size must exceed {END_MARKER} bytes, got {segment_size}")
    if start % segment_size:
        raise ValueError(f"start {start} is not a multiple of the segment size {segment_size}")
    if len(sizes) and int(sizes.max()) + END_MARKER > segment_size:
        raise ValueError(f"a record of {int(sizes.max())} bytes never fits a {segment_size}-byte segment")
    if len(sizes) and int(sizes.min()) <= 0:
        raise ValueError("record sizes must be positive")


def layout_reference(sizes: np.ndarray, segment_size: int, start: int = 0) -> Layout:
    """The placement rule one record at a time (pure Python): the reference the compiled pass is tested against."""
    sizes = np.asarray(sizes, np.int64)
    _check(sizes, segment_size, start)
    offsets = np.empty(len(sizes), np.int64)
    blanks = []
    seg, pos = start, 0
    for i, size in enumerate(sizes.tolist()):
        if rolls(size, segment_size - pos):
            blanks.append(seg + pos)
            seg, pos = seg + segment_size, 0
        offsets[i] = seg + pos
        pos += size
    return Layout(offsets, np.asarray(blanks, np.int64), seg + pos, segment_size, start)


def layout(sizes: np.ndarray, segment_size: int, start: int = 0) -> Layout:
    """The placement rule over every record, vectorised: a running sum of the sizes, and per segment one binary
    search for the first record that does not fit (a few steps for a whole store: no compiled kernel to load on
    the driver, which cost seconds there). Sizes may be int32 (convert's listing): the sums are int64; one array
    of n offsets is allocated (the running sum, turned into the offsets in place), since fresh memory is what
    costs on the driver."""
    sizes = np.asarray(sizes)
    if sizes.dtype not in (np.int32, np.int64):
        sizes = sizes.astype(np.int64)
    _check(sizes, segment_size, start)
    n = len(sizes)
    ends = np.cumsum(sizes, dtype=np.int64)  # ends[i]: where record i ends, counted from the first record's start
    pieces = []  # (first record, first record past the segment, shift to the absolute offset)
    blanks = []
    end = start
    first, seg, used = 0, start, 0  # used: the bytes before record `first`, counted like ends
    while first < n:
        stop = int(np.searchsorted(ends, used + segment_size - END_MARKER, side="right"))  # first that does not fit
        pieces.append((first, stop, seg - used))
        if stop == n:
            end = seg + int(ends[-1]) - used
            break
        blanks.append(seg + int(ends[stop - 1]) - used)
        first, seg, used = stop, seg + segment_size, int(ends[stop - 1])
    offsets = np.subtract(ends, sizes, out=ends)  # where each starts, counted the same way, then moved per segment
    for a, b, shift in pieces:
        offsets[a:b] += shift
    return Layout(offsets, np.asarray(blanks, np.int64), end, segment_size, start)


def blank_record(at: int, segment_size: int) -> bytes:
    """The BLANK record that ends a segment at absolute offset `at`."""
    return BLANK.pack(segment_size - at % segment_size, MAGIC_BLANK)


def prepared_offset_at(sys_flag: int) -> int:
    """Where preparedTransactionOffset sits in a record with this sysFlag (after reconsumeTimes)."""
    born = HOST_V6 if sys_flag & FLAG_BORNHOST_V6 else HOST_V4
    store = HOST_V6 if sys_flag & FLAG_STOREHOST_V6 else HOST_V4
    return AT_BORN_HOST + born + 8 + store + 4


def is_transaction_end(sys_flag: int) -> bool:
    """A COMMIT or ROLLBACK record: its preparedTransactionOffset points at the half record."""
    return (sys_flag & TRAN_MASK) in (TRAN_COMMIT, TRAN_ROLLBACK)


def rewrite_reference(src: bytes | memoryview, src_base: int, old: np.ndarray, sizes: np.ndarray, new: np.ndarray,
                      dst: bytearray, dst_base: int, prepared: dict[int, int]) -> int:
    """Copy each record from `src` (absolute offset src_base) to `dst` (dst_base) at its new offset, rewriting
    PHYSICALOFFSET to it and, in COMMIT/ROLLBACK records, preparedTransactionOffset through `prepared` (old ->
    new; an offset not in it is left as it is). Returns how many prepared offsets were rewritten. The
    reference of `kernels.layout_kernel.hop_copy`'s copy + `rewrite_prepared`."""
    done = 0
    for o, s, n in zip(old.tolist(), sizes.tolist(), new.tolist()):
        a, b = o - src_base, n - dst_base
        dst[b:b + s] = src[a:a + s]
        struct.pack_into(">q", dst, b + AT_PHYSICAL_OFFSET, n)
        flag = struct.unpack_from(">i", dst, b + AT_SYS_FLAG)[0]
        if is_transaction_end(flag):
            at = b + prepared_offset_at(flag)
            old_prep = struct.unpack_from(">q", dst, at)[0]
            if old_prep in prepared:
                struct.pack_into(">q", dst, at, prepared[old_prep])
                done += 1
    return done


def map_offsets_reference(old: np.ndarray, new: np.ndarray, phy: np.ndarray) -> tuple[np.ndarray, int]:
    """Each of `phy` (record offsets among `old`, strictly ascending) as the `new` offset at its place, and the
    position of the first one not among `old` (-1: none); the reference of `kernels.layout_kernel.map_offsets`
    (which returns the mapped values up to that position only)."""
    at = np.searchsorted(old, phy)
    ok = (at < len(old)) & (old[np.minimum(at, max(len(old) - 1, 0))] == phy) if len(old) else np.zeros(len(phy), bool)
    bad = np.flatnonzero(~ok)
    return new[np.where(ok, at, 0)] if len(old) else np.zeros(len(phy), np.int64), int(bad[0]) if len(bad) else -1


def hop_entries_reference(buf: bytes | memoryview, base: int, start: int, limit: int, header: int = ENTRY_HEADER_SIZE):
    """convert's listing walk, one entry at a time (the reference of kernels.layout_kernel.hop_entries): from
    buf[start], while a whole entry lies in buf and its record ends at or below the absolute `limit`: each
    record's absolute offset, size, sysFlag transaction bits and (COMMIT/ROLLBACK) preparedTransactionOffset
    (else -1). Returns (offsets, sizes, trans, preps, where the walk stopped, 1 at the data's end else 0)."""
    offs, sizes, trans, preps = [], [], [], []
    p = start
    ended = 0
    while True:
        if p + header + 8 > len(buf):
            break
        magic, size = struct.unpack_from(">ii", buf, p)
        if magic != ENTRY_MAGIC:
            ended = 1
            break
        if p + size > len(buf):
            break
        rec, rsize = p + header, size - header
        if base + rec + rsize > limit:
            ended = 1
            break
        flag = struct.unpack_from(">i", buf, rec + AT_SYS_FLAG)[0]
        offs.append(base + rec)
        sizes.append(rsize)
        trans.append(flag & 0xC)
        preps.append(struct.unpack_from(">q", buf, rec + prepared_offset_at(flag))[0] if flag & 0xC >= 8 else -1)
        p += size
    return (np.asarray(offs, np.int64), np.asarray(sizes, np.int32), np.asarray(trans, np.int8),
            np.asarray(preps, np.int64), p, ended)


def store_host_at(sys_flag: int) -> int:
    """Where the store host (address, then port) sits in a record with this sysFlag."""
    return AT_BORN_HOST + (HOST_V6 if sys_flag & FLAG_BORNHOST_V6 else HOST_V4) + 8


def one_store_host_reference(buf: bytes | memoryview, base: int, offsets: np.ndarray) -> bool:
    """Every record at `offsets` (absolute; `buf` starts at `base`) has the first one's store host, address and
    port (the reference of the one-host check in kernels.layout_kernel.hop_copy)."""
    hosts = set()
    for o in np.asarray(offsets).tolist():
        flag = struct.unpack_from(">i", buf, o - base + AT_SYS_FLAG)[0]
        at = o - base + store_host_at(flag)
        hosts.add(bytes(buf[at:at + (HOST_V6 if flag & FLAG_STOREHOST_V6 else HOST_V4)]))
    return len(hosts) <= 1
