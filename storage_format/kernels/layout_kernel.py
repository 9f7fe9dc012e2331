"""convert's compiled passes (numba): the hop over DLedger entries that lists records (offset, size,
transaction type, prepared offset), the same hop copying the records to their new offsets with PHYSICALOFFSET
rewritten and the msgId map's one-host check, the prepared-offset rewrite, and old record offsets given their new
ones (the build tasks' rows). References: commitlog_layout's hop_entries_reference, rewrite_reference and
one_store_host_reference (hop_copy: all three), map_offsets_reference, tested equal."""
from __future__ import annotations

import numpy as np

from .jit import njit

@njit()
def _i32(a, p):
    v = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit()
def _i64(a, p):
    hi = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
    lo = (np.int64(a[p + 4]) << 24) | (np.int64(a[p + 5]) << 16) | (np.int64(a[p + 6]) << 8) | np.int64(a[p + 7])
    return (hi << 32) | lo


@njit()
def _put64(a, p, v):
    for k in range(8):
        a[p + k] = (v >> (56 - 8 * k)) & 0xFF


@njit()
def _prepared_at(flag):
    born = 20 if flag & 0x10 else 8
    store = 20 if flag & 0x20 else 8
    return 48 + born + 8 + store + 4


TOUCH_AHEAD = 4096  # bytes ahead of the entry header it reads whose cache lines the hop loads early


@njit()
def hop_entries(buf: np.ndarray, base: int, start: int, limit: int, header: int,
                offs: np.ndarray, sizes: np.ndarray, trans: np.ndarray, preps: np.ndarray):
    """Walk entries (a `header`-byte DLedger entry header, then the record) from buf[start] while a whole
    entry lies in buf and its record ends at or below the absolute `limit`; per record its absolute offset,
    size, sysFlag transaction bits and (COMMIT/ROLLBACK) preparedTransactionOffset. Returns (records, where the
    walk stopped (relative), 1 when it met the data's end (blank, zeros, limit) else 0: more bytes needed,
    the sum of the bytes touched ahead). Each header's address hangs on the last one's load, so the cache
    lines TOUCH_AHEAD bytes ahead are loaded early, all in flight at once (10x fewer stalls on the 4M bench
    store); the returned sum keeps those loads from being compiled away."""
    n = 0
    p = start
    end = buf.shape[0]
    ahead = start - start % 64
    touched = 0
    while True:
        stop_at = min(p + TOUCH_AHEAD, end)
        while ahead < stop_at:
            touched += buf[ahead]
            ahead += 64
        if p + header + 8 > end:
            return n, p, 0, touched
        magic = _i32(buf, p)
        if magic != 1:
            return n, p, 1, touched  # a DLedger blank (-1) or zeros: the file's data ends here
        size = _i32(buf, p + 4)
        if p + size > end:
            return n, p, 0, touched
        rec = p + header
        rsize = size - header
        if base + rec + rsize > limit:
            return n, p, 1, touched
        flag = _i32(buf, rec + 36)
        offs[n] = base + rec
        sizes[n] = rsize
        trans[n] = flag & 0xC
        preps[n] = _i64(buf, rec + _prepared_at(flag)) if (flag & 0xC) >= 8 else -1
        n += 1
        p += size


@njit()
def hop_copy(buf: np.ndarray, base: int, start: int, header: int, want: int, dst: np.ndarray, dst_base: int,
             offs: np.ndarray, sizes: np.ndarray, news: np.ndarray):
    """hop_entries (no limit) and the records' copy in one pass, so each record's bytes are read once: walk up to
    `want` entries from buf[start], copying each record right after the last into `dst` (absolute offset
    `dst_base`) with PHYSICALOFFSET set to its new offset; per record its old offset, size and new offset.
    Returns (records, where the walk stopped (relative), 1 at the data's end else 0, bytes copied, whether every
    record copied has the first one's store host (address and port: the msgId map then uses one prefix), the
    sum of the bytes touched ahead). `dst` must hold the bytes of the records the walk finds (at most len(buf))."""
    n = 0
    p = start
    end = buf.shape[0]
    ahead = start - start % 64
    touched = 0
    q = 0
    ended = 0
    one_host = True
    host0 = 0
    v6 = 0
    width = 8
    while n < want:
        stop_at = min(p + TOUCH_AHEAD, end)
        while ahead < stop_at:
            touched += buf[ahead]
            ahead += 64
        if p + header + 8 > end:
            break
        if _i32(buf, p) != 1:
            ended = 1  # a DLedger blank (-1) or zeros: the file's data ends here
            break
        size = _i32(buf, p + 4)
        if p + size > end:
            break
        rec = p + header
        rsize = size - header
        dst[q:q + rsize] = buf[rec:rec + rsize]
        _put64(dst, q + 28, dst_base + q)
        flag = _i32(buf, rec + 36)
        host = q + 48 + (20 if flag & 0x10 else 8) + 8
        if n == 0:
            host0, v6, width = host, flag & 0x20, 20 if flag & 0x20 else 8
        elif one_host:
            if (flag & 0x20) != v6:
                one_host = False
            else:
                for k in range(width):
                    if dst[host + k] != dst[host0 + k]:
                        one_host = False
                        break
        offs[n] = base + rec
        sizes[n] = rsize
        news[n] = dst_base + q
        q += rsize
        n += 1
        p += size
    return n, p, ended, q, one_host, touched


@njit()
def rewrite_prepared(dst: np.ndarray, dst_base: int, new: np.ndarray, keys: np.ndarray, values: np.ndarray) -> int:
    """In COMMIT/ROLLBACK records at `new` offsets in `dst`, preparedTransactionOffset old -> new through the
    sorted `keys` -> `values`; an offset not in keys is left. Returns how many were rewritten."""
    done = 0
    for i in range(new.shape[0]):
        b = new[i] - dst_base
        flag = _i32(dst, b + 36)
        if (flag & 0xC) >= 8:
            at = b + _prepared_at(flag)
            old = _i64(dst, at)
            j = np.searchsorted(keys, old)
            if j < keys.shape[0] and keys[j] == old:
                _put64(dst, at, values[j])
                done += 1
    return done


@njit()
def map_offsets(old: np.ndarray, new: np.ndarray, phy: np.ndarray, out: np.ndarray) -> int:
    """Each of `phy` (record offsets among `old`, strictly ascending) as the `new` offset at its place, into
    `out`; returns the position of the first one not among `old`, or -1. Rows in ascending order (a split's index
    keys, a queue's consume-queue rows) gallop from the last match instead of searching the whole map (convert's
    build tasks read the source scan's rows with OUT's offsets). Reference: commitlog_layout.map_offsets_reference."""
    n = old.shape[0]
    j = 0
    for i in range(phy.shape[0]):
        v = phy[i]
        if j < n and old[j] <= v:  # at or past the last match: gallop, keeping old[lo] <= v
            lo = j
            hi = j + 1
            step = 1
            while hi < n and old[hi] <= v:
                lo = hi
                step <<= 1
                hi = j + step
            if hi > n:
                hi = n
        else:
            lo = 0
            hi = n
        while lo < hi:  # the first place whose offset is >= v
            mid = (lo + hi) >> 1
            if old[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        if lo >= n or old[lo] != v:
            return i
        out[i] = new[lo]
        j = lo
    return -1
