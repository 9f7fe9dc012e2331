"""Byte-level helpers of the compiled split decoder (split_kernel): big-endian fields, the Java String
hash over UTF-8 bytes, Integer.parseInt, the property scan, topic safety. All are inlined into the
kernel. numba checks a cached kernel only against its own module's source, so jit.KERNEL_MODULES puts
this module's source in every kernel's cache key: a change here compiles the kernels anew.
"""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit(inline="always")
def i32(a, p):
    """The big-endian int32 at a[p]."""
    v = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(inline="always")
def i64(a, p):
    """The big-endian int64 at a[p]."""
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(a[p + k])
    return np.int64(v)


@njit(inline="always")
def java_hash(a, h, lo, hi):
    """Java hash continued from h over the UTF-16 units of the well-formed UTF-8 bytes a[lo:hi]:
    (hash, True), or (h, False) when the bytes are not well-formed UTF-8 (the reference hashes those).
    Four ASCII bytes fold in per step (31**4 .. 31**0; h < 2**32 keeps every product inside int64)."""
    p = lo
    while p < hi:
        if p + 4 <= hi:
            b0, b1, b2, b3 = np.int64(a[p]), np.int64(a[p + 1]), np.int64(a[p + 2]), np.int64(a[p + 3])
            if (b0 | b1 | b2 | b3) < 0x80:
                h = (h * 923521 + b0 * 29791 + b1 * 961 + b2 * 31 + b3) & 0xFFFFFFFF
                p += 4
                continue
        b = np.int64(a[p])
        if b < 0x80:
            h = (h * 31 + b) & 0xFFFFFFFF
            p += 1
            continue
        if 0xC2 <= b <= 0xDF:
            n, cp, low, high = 1, b & 0x1F, 0x80, 0xBF
        elif 0xE0 <= b <= 0xEF:
            n, cp = 2, b & 0x0F
            low = 0xA0 if b == 0xE0 else 0x80
            high = 0x9F if b == 0xED else 0xBF
        elif 0xF0 <= b <= 0xF4:
            n, cp = 3, b & 0x07
            low = 0x90 if b == 0xF0 else 0x80
            high = 0x8F if b == 0xF4 else 0xBF
        else:
            return h, False
        if p + n >= hi:
            return h, False
        for j in range(1, n + 1):
            c = np.int64(a[p + j])
            if (j == 1 and not low <= c <= high) or (j > 1 and not 0x80 <= c <= 0xBF):
                return h, False
            cp = (cp << 6) | (c & 0x3F)
        if cp >= 0x10000:
            h = (h * 31 + 0xD800 + ((cp - 0x10000) >> 10)) & 0xFFFFFFFF
            h = (h * 31 + 0xDC00 + ((cp - 0x10000) & 0x3FF)) & 0xFFFFFFFF
        else:
            h = (h * 31 + cp) & 0xFFFFFFFF
        p += n + 1
    return h, True


@njit(inline="always")
def parse_int(a, lo, hi):
    """Integer.parseInt of ASCII a[lo:hi]: (value, True), or (0, False) when Java would throw."""
    neg = lo < hi and a[lo] == 0x2D
    p = lo + 1 if lo < hi and (a[lo] == 0x2D or a[lo] == 0x2B) else lo
    if p >= hi:
        return 0, False
    v = np.int64(0)
    for q in range(p, hi):
        if not 0x30 <= a[q] <= 0x39:
            return 0, False
        v = v * 10 + (a[q] - 0x30)
        if v > (np.int64(1) << 31):
            return 0, False
    v = -v if neg else v
    if v < -(np.int64(1) << 31) or v >= (np.int64(1) << 31):
        return 0, False
    return v, True


@njit(inline="always")
def signed32(h):
    """An unsigned 32-bit value as Java's int."""
    return h - (np.int64(1) << 32) if h >= (np.int64(1) << 31) else h


@njit(inline="always")
def same_bytes(a, p, b, q, n):
    """a[p:p+n] == b[q:q+n]."""
    for k in range(n):
        if a[p + k] != b[q + k]:
            return False
    return True


@njit(inline="always")
def is_name(a, lo, hi, names, name_off, k):
    """a[lo:hi] is wanted name k (names concatenated, name_off their bounds); length and first byte first."""
    n = name_off[k + 1] - name_off[k]
    if hi - lo != n or a[lo] != names[name_off[k]]:
        return False
    for j in range(1, n):
        if a[lo + j] != names[name_off[k] + j]:
            return False
    return True


@njit(inline="always")
def find_props(a, ps, pe, names, name_off, found_lo, found_hi):
    """Wanted properties of one record (the broker's item rules, a later duplicate wins):
    value ranges into found_lo/found_hi, -1 where absent. One scan finds an item's first 0x01 and its
    closing 0x02."""
    for k in range(found_lo.shape[0]):
        found_lo[k] = -1
        found_hi[k] = -1
    index = ps
    while index < pe:
        kv = index
        while kv < pe and a[kv] != 0x01 and a[kv] != 0x02:
            kv += 1
        new_index = kv
        if kv < pe and a[kv] == 0x01:
            new_index = kv + 1
            while new_index < pe and a[new_index] != 0x02:
                new_index += 1
        if index < kv < new_index - 1:  # a name, a 0x01 and a value: at least three bytes
            for k in range(found_lo.shape[0]):
                if is_name(a, index, kv, names, name_off, k):
                    found_lo[k] = kv + 1
                    found_hi[k] = new_index
        index = new_index + 1


@njit(inline="always")
def unsafe_topic(a, ts, tl):
    """The topic a[ts:ts+tl] is no name the fast path takes: empty, too long, or unsafe as a directory name."""
    if tl == 0 or tl > 255:
        return True
    if tl <= 2 and a[ts] == 0x2E and (tl == 1 or a[ts + 1] == 0x2E):
        return True  # "." or ".."
    for p in range(ts, ts + tl):
        c = a[p]
        if c == 0x2F or c == 0x5C or c == 0:
            return True
    return False


@njit(inline="always")
def equals_array(a, p, b):
    """a[p:p+len(b)] == b."""
    for k in range(b.shape[0]):
        if a[p + k] != b[k]:
            return False
    return True


@njit(inline="always")
def index_key_hash(h):
    """IndexFile.indexKeyHashMethod on an unsigned 32-bit Java hash: abs, Integer.MIN_VALUE -> 0."""
    s = signed32(h)
    if s == -(np.int64(1) << 31):
        return 0
    return abs(s)
