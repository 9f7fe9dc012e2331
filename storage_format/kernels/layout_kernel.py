"""convert's compiled passes (numba): the hop over DLedger entries that lists records (offset, size,
transaction type, prepared offset), the same hop copying the records to their new offsets with PHYSICALOFFSET
rewritten and the msgId map's one-host check, the prepared-offset rewrite, and old record offsets given their new
ones (the build tasks' rows). References: commitlog_layout's hop_entries_reference, rewrite_reference and
one_store_host_reference (hop_copy: all three), map_offsets_reference, tested equal; hop_copy_checked's body CRC
check: record_columns.first_crc_error (zlib), tested equal.

The copy and the CRC are what convert's write job spends its CPU on, so they go below numba's array code: a record is
copied with llvm.memcpy (numba's slice assignment moves a byte at a time: 4x slower here), and on x86-64 CPUs with
PCLMULQDQ a body's CRC-32 folds 64 bytes per round in four lanes (the bit-reflected constants and Barrett reduction
of Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", as zlib's SIMD CRC uses them: 5x the
slicing-by-16 table of crc_kernel on 400-byte bodies, which every other CPU, and a numba told to compile for another
CPU, still uses).
These helpers are numba intrinsics made when numba is first imported for the kernels (`_Lowered`), so importing
this module still imports no numba."""
from __future__ import annotations

import os
import platform
from typing import Callable

import numpy as np

from .crc_kernel import TABLES, crc32
from .jit import Kernel, njit


class _Lowered(Kernel):
    """An LLVM-level helper (a numba intrinsic), made by `make` once numba is imported: jit turns every Kernel named
    in a kernel module into its `dispatcher` before any kernel compiles, and this one's is the intrinsic."""

    def __init__(self, make: Callable) -> None:  # noqa: D107 - no py_func: jit compiles nothing of it
        self._make, self._made = make, None

    @property
    def dispatcher(self):  # noqa: D102
        if self._made is None:
            self._made = self._make()
        return self._made


def _clmul_intrinsic():
    """clmul(a, b) -> (low, high): the 128-bit carry-less product of two uint64 (PCLMULQDQ)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def clmul(typingctx, a, b):
        sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            i32, v2 = ir.IntType(32), ir.VectorType(ir.IntType(64), 2)
            va = builder.insert_element(ir.Constant(v2, ir.Undefined), args[0], ir.Constant(i32, 0))
            vb = builder.insert_element(ir.Constant(v2, ir.Undefined), args[1], ir.Constant(i32, 0))
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v2, [v2, v2, ir.IntType(8)]),
                                                "llvm.x86.pclmulqdq")
            r = builder.call(fn, [va, vb, ir.Constant(ir.IntType(8), 0)])
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_element(r, ir.Constant(i32, k)) for k in (0, 1)])
        return sig, codegen
    return clmul


def _load64_intrinsic():
    """load64(a, p): the little-endian uint64 at a[p:p + 8] of a byte array, unaligned (the caller keeps
    p + 8 <= len(a))."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def load64(typingctx, a, p):
        sig = types.uint64(a, types.int64)

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            at = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(64).as_pointer())
            return builder.load(at, align=1)
        return sig, codegen
    return load64


def _memcpy_intrinsic():
    """memcpy(dst, d, src, s, n): dst[d:d + n] = src[s:s + n] as llvm.memcpy (the caller keeps both in bounds)."""
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def memcpy(typingctx, dst, d, src, s, n):
        sig = types.void(dst, types.int64, src, types.int64, types.int64)

        def codegen(context, builder, signature, args):
            da = context.make_array(signature.args[0])(context, builder, args[0])
            sa = context.make_array(signature.args[2])(context, builder, args[2])
            cgutils.raw_memcpy(builder, builder.gep(da.data, [args[1]]), builder.gep(sa.data, [args[3]]), args[4], 1)
            return context.get_dummy_value()
        return sig, codegen
    return memcpy


def has_clmul() -> bool:
    """PCLMULQDQ is there for the kernels: an x86-64 CPU whose flags name it, numba compiling for this CPU (or told
    to with NUMBA_CPU_FEATURES holding +pclmul)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if os.environ.get("NUMBA_CPU_NAME", "host") != "host":
        return "+pclmul" in os.environ.get("NUMBA_CPU_FEATURES", "")
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "pclmulqdq" in line.split() for line in f)
    except OSError:
        return False


_clmul, _load64, _memcpy = (_Lowered(m) for m in (_clmul_intrinsic, _load64_intrinsic, _memcpy_intrinsic))

# CRC-32 folding constants for the bit-reflected polynomial 0xEDB88320 (x^(4*128+32), x^(4*128-32) for four lanes
# 64 bytes apart, x^(128+32), x^(128-32), x^64 mod P, then P and Barrett's mu), as zlib's crc32_simd.c holds them
_K1, _K2 = np.uint64(0x0154442BD4), np.uint64(0x01C6E41596)
_K3, _K4, _K5 = np.uint64(0x01751997D0), np.uint64(0x00CCAA009E), np.uint64(0x0163CD6124)
_POLY, _MU = np.uint64(0x01DB710641), np.uint64(0x01F7011641)
_LOW32 = np.uint64(0xFFFFFFFF)


@njit(inline="always")
def _fold(xl, xh, kl, kh, yl, yh):
    """x.lo * kl ^ x.hi * kh ^ y: one 128-bit lane folded forward onto the bytes y."""
    l1, h1 = _clmul(xl, kl)
    l2, h2 = _clmul(xh, kh)
    return l1 ^ l2 ^ yl, h1 ^ h2 ^ yh


@njit()
def crc32_clmul(a, lo, hi):
    """CRC-32 of a[lo:hi] (0 <= lo <= hi <= len(a)), as zlib.crc32(a[lo:hi]): from 128 bytes on, four independent
    lanes fold 64 bytes per round (the multiplies overlap: 2-3x one lane on bodies of 400 bytes and more), then one
    lane 16 bytes per fold from 32 bytes on, the last 0-15 bytes with crc_kernel's byte table."""
    c = np.uint64(0xFFFFFFFF)
    p = lo
    if hi - lo >= 32:
        xl, xh = _load64(a, p) ^ c, _load64(a, p + 8)
        p += 16
        if hi - lo >= 128:
            bl, bh, cl, ch = _load64(a, p), _load64(a, p + 8), _load64(a, p + 16), _load64(a, p + 24)
            dl, dh = _load64(a, p + 32), _load64(a, p + 40)
            p += 48
            while p + 64 <= hi:
                xl, xh = _fold(xl, xh, _K1, _K2, _load64(a, p), _load64(a, p + 8))
                bl, bh = _fold(bl, bh, _K1, _K2, _load64(a, p + 16), _load64(a, p + 24))
                cl, ch = _fold(cl, ch, _K1, _K2, _load64(a, p + 32), _load64(a, p + 40))
                dl, dh = _fold(dl, dh, _K1, _K2, _load64(a, p + 48), _load64(a, p + 56))
                p += 64
            xl, xh = _fold(xl, xh, _K3, _K4, bl, bh)  # four lanes into one
            xl, xh = _fold(xl, xh, _K3, _K4, cl, ch)
            xl, xh = _fold(xl, xh, _K3, _K4, dl, dh)
        while p + 16 <= hi:  # x = x.lo * K3 ^ x.hi * K4 ^ the next 16 bytes
            xl, xh = _fold(xl, xh, _K3, _K4, _load64(a, p), _load64(a, p + 8))
            p += 16
        l2, h2 = _clmul(xl, _K4)  # 128 -> 64 bits
        xl, xh = xh ^ l2, h2
        l1, h1 = _clmul(xl & _LOW32, _K5)  # 64 -> 32 bits (in the high half)
        xl = l1 ^ ((xl >> np.uint64(32)) | (xh << np.uint64(32)))
        t, _ = _clmul(xl & _LOW32, _MU)  # Barrett reduction
        t, _ = _clmul(t & _LOW32, _POLY)
        c = ((xl ^ t) >> np.uint64(32)) & _LOW32
    t0 = TABLES
    c32 = np.uint32(c)
    while p < hi:
        c32 = t0[0, (c32 ^ a[p]) & 0xFF] ^ (c32 >> 8)
        p += 1
    return np.int64(c32 ^ np.uint32(0xFFFFFFFF))


HAS_CLMUL = has_clmul()
_body_crc = crc32_clmul if HAS_CLMUL else crc32  # which the copy pass checks bodies with (crc_kernel.crc32 elsewhere)

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


MIN_RECORD = 91  # commitlog.MIN_RECORD_SIZE: the fields the copy reads and rewrites lie inside any record
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


@njit(inline="always")
def _body_crc_fails(a, rp, end):
    """The record at a[rp:end] fails the broker's body check (crc_kernel.record_crc_ok): bodyLength after the born
    and store hosts (4 or 16 address bytes each, sysFlag bits 0x10 and 0x20), a body that does not lie inside the
    record not checked, an empty one passes, else CRC-32 of the body & 0x7FFFFFFF equals the stored bodyCRC, as
    split_kernel's walk with check_crc and record_columns.first_crc_error."""
    flag = _i32(a, rp + 36)
    body_len_at = rp + 48 + (16 if flag & 0x10 else 4) + 4 + 8 + (16 if flag & 0x20 else 4) + 4 + 12
    if body_len_at + 4 > end:
        return False
    body_len = _i32(a, body_len_at)
    if body_len <= 0 or body_len_at + 4 + body_len > end:
        return False
    return (_body_crc(a, body_len_at + 4, body_len_at + 4 + body_len) & 0x7FFFFFFF) != _i32(a, rp + 8)


@njit(inline="always")
def _hop_copy(buf, base, start, header, want, dst, dst_base, offs, sizes, news, check_crc, bad):
    """hop_copy's walk; with `check_crc` each copied record's body CRC is checked in `dst` while its bytes are in
    the cache, and the indexes of those failing go to `bad`. Returns hop_copy's answer with their count before the
    touched sum."""
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
    failed = 0
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
        if size < header + MIN_RECORD:
            ended = 1  # no record fits: not an entry the scan accepted (the writer's count check names it)
            break
        rec = p + header
        rsize = size - header
        _memcpy(dst, q, buf, rec, rsize)  # dst holds it: the caller sizes dst to the bytes it hands in
        _put64(dst, q + 28, dst_base + q)
        if check_crc and _body_crc_fails(dst, q, q + rsize):
            bad[failed] = n
            failed += 1
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
    return n, p, ended, q, one_host, failed, touched


@njit()
def hop_copy(buf: np.ndarray, base: int, start: int, header: int, want: int, dst: np.ndarray, dst_base: int,
             offs: np.ndarray, sizes: np.ndarray, news: np.ndarray):
    """hop_entries (no limit) and the records' copy in one pass, so each record's bytes are read once: walk up to
    `want` entries from buf[start], copying each record right after the last into `dst` (absolute offset
    `dst_base`) with PHYSICALOFFSET set to its new offset; per record its old offset, size and new offset.
    Returns (records, where the walk stopped (relative), 1 at the data's end else 0, bytes copied, whether every
    record copied has the first one's store host (address and port: the msgId map then uses one prefix), the
    sum of the bytes touched ahead). `dst` must hold the bytes of the records the walk finds (at most len(buf))."""
    n, p, ended, q, one_host, _, touched = _hop_copy(buf, base, start, header, want, dst, dst_base, offs, sizes,
                                                     news, False, offs[:0])
    return n, p, ended, q, one_host, touched


@njit()
def hop_copy_checked(buf: np.ndarray, base: int, start: int, header: int, want: int, dst: np.ndarray, dst_base: int,
                     offs: np.ndarray, sizes: np.ndarray, news: np.ndarray, bad: np.ndarray, check_crc: bool):
    """hop_copy, with `check_crc` every copied record's body CRC checked as the broker's recovery checks it
    (checkCRCOnRecover) in the same pass: the copy's bytes are still in the cache, so the check costs the CRC alone
    instead of a second decode of the store. The indexes (into offs/sizes/news) of the records that fail go to
    `bad` (as large as `offs`). Returns (records, stop, ended, bytes copied, one host, records failing, touched
    sum)."""
    return _hop_copy(buf, base, start, header, want, dst, dst_base, offs, sizes, news, check_crc, bad)


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
    keys, a queue's consume-queue rows) search from the last match: first where the map's mean record spacing puts
    the offset, then galloping from that guess (a queue's next row lies about as many records on as queues share
    the split: 2-3x fewer probes than galloping from the last match). convert's build tasks read the source scan's
    rows with OUT's offsets. Reference: commitlog_layout.map_offsets_reference."""
    n = old.shape[0]
    if n == 0:
        return 0 if phy.shape[0] else -1
    span = max(np.int64(1), (old[n - 1] - old[0]) // max(np.int64(1), np.int64(n - 1)))
    j = 0
    for i in range(phy.shape[0]):
        v = phy[i]
        if not (j < n and old[j] <= v):  # before the last match (the next queue's rows): from the map's start
            j = 0
            if old[0] > v:
                return i
        g = min(j + (v - old[j]) // span, n - 1)
        if old[g] <= v:  # gallop up from the guess, keeping old[lo] <= v
            lo, hi, step = g, g + 1, 1
            while hi < n and old[hi] <= v:
                lo = hi
                step <<= 1
                hi = g + step
            hi = min(hi, n)
        else:  # gallop down, keeping old[hi] > v (old[j] <= v bounds it)
            lo, hi, step = g - 1, g, 1
            while lo > j and old[lo] > v:
                hi = lo
                step <<= 1
                lo = max(j, g - step)
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
