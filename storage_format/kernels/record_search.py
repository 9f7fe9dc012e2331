"""The search for a record start in a split that begins mid-segment, compiled (commitlog.find_first_record's rule).

A segment's zero-filled tail (a broker with warmMapedFileEnable, or preallocation, writes real zeros) is most of
the last segment of a crashed store, and every validation split there searches its whole range and finds
nothing: numpy's form (a 0xDA mask per window, then a candidate loop) costs 0.1-0.4 s per 128 MiB split; this
pass reads eight bytes at a time and skips words holding no 0xDA byte. Reference:
storage_format.commitlog.find_first_record, tested equal in tests/test_record_search.py.
"""
from __future__ import annotations

import numpy as np

from .jit import njit
from .kernel_bytes import i32, i64

ONES = np.uint64(0x0101010101010101)
HIGHS = np.uint64(0x8080808080808080)
DA8 = np.uint64(0xDADADADADADADADA)


@njit(inline="always")
def _record_at(a, base_offset, p, magic_v1, magic_v2):
    """A record starts at a[p] by the physicalOffset rule: magic v1/v2 at p+4 and physicalOffset == base+p."""
    m = i32(a, p + 4) & 0xFFFFFFFF
    return (m == magic_v1 or m == magic_v2) and i64(a, p + 28) == base_offset + p


@njit()
def find_record(a, words, base_offset, start, stop, magic_v1, magic_v2):
    """First p in [start, stop) with a record start (p + 36 <= len(a)), else -1. `words` is `a` viewed as
    little-endian uint64 (len(a) // 8 of them): a word with no 0xDA byte holds no magic's first byte."""
    last = min(stop, a.shape[0] - 36 + 1)  # candidates p < last
    p = start
    while p < last and (p + 4) % 8 != 0:  # up to the first aligned magic byte
        if a[p + 4] == 0xDA and _record_at(a, base_offset, p, magic_v1, magic_v2):
            return p
        p += 1
    while p < last:
        w = (p + 4) // 8
        x = words[w] ^ DA8  # a zero byte where a[p+4+k] == 0xDA
        if ((x - ONES) & ~x & HIGHS) != 0:
            for k in range(8):
                q = p + k
                if q < last and a[q + 4] == 0xDA and _record_at(a, base_offset, q, magic_v1, magic_v2):
                    return q
        p += 8
    return -1
