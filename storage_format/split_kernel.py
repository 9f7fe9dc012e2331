"""The compiled one-pass decoder of a split: walk the record chain and emit what the build reads.

One numba function walks a buffer's records (CommitLog.checkMessageAndReturnSize's chain rules, as in
commitlog.walk_chain), checks each record's layout, parses its properties (properties.parse_properties'
rules), and emits per record its queue (an index into a per-split (topic, queueId) table), queue offset,
physical offset, size and tagsCode, and per index key its hash, physical offset and store time
(index_keys' order and hash rules). It handles only the common case: whatever it does not (an invalid,
moved or undated record, a record running past the buffer, non-ASCII hashed strings, unsafe topic names,
SCHEDULE_TOPIC_XXXX, LMQ multi-dispatch) makes it return a fallback reason, and the caller decodes the
split with the numpy reference (commitlog.decode_buffer) instead. The rules' constants come from their
homes and are passed in, so this module defines none of them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import kernel_cache  # noqa: F401 - the cache locator, before any kernel is defined

# Fallback reasons (the kernel left the split to the reference decoder).
FB_NONE = 0
FB_NEED_BYTES = 1  # a record or header runs past the buffer: the reference reads a larger window
FB_BAD_TOTAL_SIZE = 2
FB_LAYOUT = 3  # fields do not add up to totalSize (size_mismatch)
FB_MOVED = 4  # stored physicalOffset is not where the record is
FB_UNDATED = 5  # storeTimestamp is no date
FB_TOPIC = 6  # topic not well-formed UTF-8, or unsafe as a directory name
FB_SCHEDULE = 7  # a SCHEDULE_TOPIC_XXXX record whose DELAY is no int (the broker rejects it)
FB_NON_ASCII = 8  # a hashed property value (TAGS, KEYS, UNIQ_KEY) is not well-formed UTF-8
FB_MULTI_DISPATCH = 9  # LMQ multi-dispatch property
FB_INNER_BATCH = 10  # a BatchConsumeQueue record (refused by the reference)
FALLBACK_NAMES = ("", "record runs past the buffer", "bad totalSize", "size mismatch", "moved record",
                  "undated record", "unsafe or malformed topic", "bad DELAY", "malformed key or tag",
                  "multi-dispatch", "inner-batch record")

# Walk ends, mapped to commitlog's END_* names by the caller.
KEND_STOP, KEND_BLANK, KEND_FILE, KEND_BAD_MAGIC = 0, 1, 2, 3

# Slots of the `stats` output.
S_FALLBACK, S_FALLBACK_POS, S_RECORDS, S_CQ, S_KEYS, S_QUEUES, S_END, S_END_POS, S_END_MAGIC, S_BLANKS = range(10)
S_FIRST_TS, S_LAST_TS, S_MIN_TS, S_MAX_TS, S_LAST_POS, S_LAST_SIZE = range(10, 16)
N_STATS = 16

# Wanted property names, by their index in the `names` argument.
P_TAGS, P_KEYS, P_UNIQ, P_MULTI, P_DELAY = range(5)


@njit(cache=True, nogil=True)
def _i32(a, p):
    v = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(cache=True, nogil=True)
def _i64(a, p):
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(a[p + k])
    return np.int64(v)


@njit(cache=True, nogil=True)
def _hash_utf8(a, h, lo, hi):
    """Java hash continued from h over the UTF-16 units of the well-formed UTF-8 bytes a[lo:hi]:
    (hash, True), or (h, False) when the bytes are not well-formed UTF-8 (the reference hashes those)."""
    p = lo
    while p < hi:
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


@njit(cache=True, nogil=True)
def _parse_int(a, lo, hi):
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


@njit(cache=True, nogil=True)
def _signed32(h):
    return h - (np.int64(1) << 32) if h >= (np.int64(1) << 31) else h


@njit(cache=True, nogil=True)
def _grow(x, need):
    if need <= x.shape[0]:
        return x
    y = np.empty(max(need, 2 * x.shape[0]), x.dtype)
    y[:x.shape[0]] = x
    return y


@njit(cache=True, nogil=True)
def _same_bytes(a, p, q, n):
    for k in range(n):
        if a[p + k] != a[q + k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _is_name(a, lo, hi, names, name_off, k):
    n = name_off[k + 1] - name_off[k]
    if hi - lo != n:
        return False
    for j in range(n):
        if a[lo + j] != names[name_off[k] + j]:
            return False
    return True


@njit(cache=True, nogil=True)
def _find_props(a, ps, pe, names, name_off, found_lo, found_hi):
    """Wanted properties of one record (the broker's item rules, a later duplicate wins):
    value ranges into found_lo/found_hi, -1 where absent."""
    for k in range(found_lo.shape[0]):
        found_lo[k] = -1
        found_hi[k] = -1
    index = ps
    while index < pe:
        new_index = index
        while new_index < pe and a[new_index] != 0x02:
            new_index += 1
        if new_index - index >= 3:
            kv = index
            while kv < new_index and a[kv] != 0x01:
                kv += 1
            if index < kv < new_index - 1:
                for k in range(found_lo.shape[0]):
                    if _is_name(a, index, kv, names, name_off, k):
                        found_lo[k] = kv + 1
                        found_hi[k] = new_index
        index = new_index + 1


@njit(cache=True, nogil=True)
def _topic_fallback(a, ts, tl, schedule):
    """Why the fast path cannot take a topic (a FB_* code), FB_SCHEDULE for the schedule topic, or FB_NONE."""
    if tl == 0 or tl > 255:
        return FB_TOPIC
    if tl <= 2 and a[ts] == 0x2E and (tl == 1 or a[ts + 1] == 0x2E):
        return FB_TOPIC  # "." or ".."
    for p in range(ts, ts + tl):
        c = a[p]
        if c == 0x2F or c == 0x5C or c == 0:
            return FB_TOPIC
    if tl == schedule.shape[0] and _same_bytes_arr(a, ts, schedule):
        return FB_SCHEDULE
    return FB_NONE


@njit(cache=True, nogil=True)
def _same_bytes_arr(a, p, b):
    for k in range(b.shape[0]):
        if a[p + k] != b[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _queue_of(a, ts, tl, qid, th, table, q_ts, q_tl, q_qid, q_hash, nq):
    """Index of (topic, queueId) in the split's queue table (open addressing on the topic hash and
    queueId), or -1 when absent; `table` holds queue index + 1 per slot."""
    mask = table.shape[0] - 1
    slot = (th * 1000003 + qid) & mask
    while True:
        q = table[slot] - 1
        if q < 0:
            return -1, slot
        if q_qid[q] == qid and q_hash[q] == th and q_tl[q] == tl and _same_bytes(a, q_ts[q], ts, tl):
            return q, slot
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True)
def _rehash(table, q_hash, q_qid, nq):
    new = np.zeros(table.shape[0] * 2, np.int64)
    mask = new.shape[0] - 1
    for q in range(nq):
        slot = (q_hash[q] * 1000003 + q_qid[q]) & mask
        while new[slot] != 0:
            slot = (slot + 1) & mask
        new[slot] = q + 1
    return new


# Slots of the `rules` argument: the broker constants the kernel applies, passed in from their homes.
R_MIN_SIZE, R_MAGIC_V1, R_MAGIC_V2, R_MAGIC_BLANK, R_TRAN_MASK, R_TRAN_ROLLBACK, R_TRAN_NOT, R_TRAN_COMMIT = range(8)
R_BORN_V6, R_STORE_V6, R_MIN_TS, R_MAX_TS, R_INNER_BATCH = range(8, 13)
N_RULES = 13


@njit(cache=True, nogil=True)
def decode_kernel(a, base_offset, start, stop, segment_end, rules, names, name_off, schedule, delay_ms):
    """Walk and decode a[start:...] (see the module doc). Returns (stats, per-queue arrays, per-cq-row
    arrays, per-key arrays); stats[S_FALLBACK] != FB_NONE means the rest is to be ignored."""
    stats = np.zeros(N_STATS, np.int64)
    cap = max(16, (stop - start) // 256)
    r_q = np.empty(cap, np.int32)
    r_qo = np.empty(cap, np.int64)
    r_phy = np.empty(cap, np.int64)
    r_size = np.empty(cap, np.int32)
    r_tags = np.empty(cap, np.int64)
    k_hash = np.empty(cap * 2, np.int32)
    k_phy = np.empty(cap * 2, np.int64)
    k_ts = np.empty(cap * 2, np.int64)
    table = np.zeros(1024, np.int64)
    qcap = 64
    q_ts = np.empty(qcap, np.int64)
    q_tl = np.empty(qcap, np.int64)
    q_qid = np.empty(qcap, np.int64)
    q_hash = np.empty(qcap, np.int64)
    q_rec = np.zeros(qcap, np.int64)
    q_cq = np.zeros(qcap, np.int64)
    q_lo = np.zeros(qcap, np.int64)
    q_hi = np.zeros(qcap, np.int64)
    q_unord = np.zeros(qcap, np.int64)
    q_last = np.zeros(qcap, np.int64)
    found_lo = np.empty(name_off.shape[0] - 1, np.int64)
    found_hi = np.empty(name_off.shape[0] - 1, np.int64)
    buf_len = a.shape[0]
    limit = min(buf_len, segment_end)
    pos = start
    n = 0
    ncq = 0
    nk = 0
    nq = 0
    while True:
        if pos >= stop:  # peek at the next header, as commitlog._end_after_stop
            stats[S_END] = KEND_STOP
            if pos + 8 <= limit:
                magic = _i32(a, pos + 4) & 0xFFFFFFFF
                if magic == rules[R_MAGIC_BLANK]:
                    stats[S_END] = KEND_BLANK
                    stats[S_BLANKS] = 1
                elif magic != rules[R_MAGIC_V1] and magic != rules[R_MAGIC_V2]:
                    stats[S_END] = KEND_BAD_MAGIC
                    stats[S_END_MAGIC] = magic
            break
        if pos == segment_end:
            stats[S_END] = KEND_FILE
            break
        if pos + 8 > limit:
            stats[S_FALLBACK] = FB_NEED_BYTES if limit < segment_end else FB_BAD_TOTAL_SIZE
            break
        size = _i32(a, pos)
        magic = _i32(a, pos + 4) & 0xFFFFFFFF
        if magic == rules[R_MAGIC_BLANK]:
            stats[S_END] = KEND_BLANK
            stats[S_BLANKS] = 1
            break
        if magic != rules[R_MAGIC_V1] and magic != rules[R_MAGIC_V2]:
            stats[S_END] = KEND_BAD_MAGIC
            stats[S_END_MAGIC] = magic
            break
        if size < rules[R_MIN_SIZE] or pos + size > segment_end:
            stats[S_FALLBACK] = FB_BAD_TOTAL_SIZE
            break
        if pos + size > buf_len:
            stats[S_FALLBACK] = FB_NEED_BYTES
            break
        end = pos + size
        # ---- layout: every field inside the record, adding up to totalSize
        sys_flag = _i32(a, pos + 36)
        if sys_flag & rules[R_INNER_BATCH]:
            stats[S_FALLBACK] = FB_INNER_BATCH
            break
        bhl = 16 if sys_flag & rules[R_BORN_V6] else 4
        shl = 16 if sys_flag & rules[R_STORE_V6] else 4
        ts_at = pos + 48 + bhl + 4
        body_len_at = ts_at + 8 + shl + 4 + 12
        if body_len_at + 4 > end:
            stats[S_FALLBACK] = FB_LAYOUT
            break
        body_len = _i32(a, body_len_at)
        tl_at = body_len_at + 4 + body_len
        v2 = magic == rules[R_MAGIC_V2]
        if body_len < 0 or tl_at + (2 if v2 else 1) > end:
            stats[S_FALLBACK] = FB_LAYOUT
            break
        tl = (np.int64(a[tl_at]) << 8 | a[tl_at + 1]) if v2 else np.int64(a[tl_at])
        ts = tl_at + (2 if v2 else 1)
        pl_at = ts + tl
        if pl_at + 2 > end:
            stats[S_FALLBACK] = FB_LAYOUT
            break
        pl = np.int64(a[pl_at]) << 8 | a[pl_at + 1]
        ps = pl_at + 2
        if pl >= 0x8000 or ps + pl != end:
            stats[S_FALLBACK] = FB_LAYOUT
            break
        # ---- record-level checks the reference makes (they end the fast path)
        phy = _i64(a, pos + 28)
        if phy != base_offset + pos:
            stats[S_FALLBACK] = FB_MOVED
            break
        store_ts = _i64(a, ts_at)
        if store_ts < rules[R_MIN_TS] or store_ts > rules[R_MAX_TS]:
            stats[S_FALLBACK] = FB_UNDATED
            break
        why = _topic_fallback(a, ts, tl, schedule)
        th, ok = _hash_utf8(a, np.int64(0), ts, ts + tl)
        if (why != FB_NONE and why != FB_SCHEDULE) or not ok:
            stats[S_FALLBACK] = FB_TOPIC
            break
        _find_props(a, ps, end, names, name_off, found_lo, found_hi)
        if found_lo[P_MULTI] >= 0:
            stats[S_FALLBACK] = FB_MULTI_DISPATCH
            break
        delay = np.int64(-1)
        if why == FB_SCHEDULE and found_lo[P_DELAY] >= 0:
            delay, ok = _parse_int(a, found_lo[P_DELAY], found_hi[P_DELAY])
            if not ok:
                stats[S_FALLBACK] = FB_SCHEDULE  # the broker rejects the record: the reference says so
                break
        tags_h, ok = _hash_utf8(a, np.int64(0), found_lo[P_TAGS], found_hi[P_TAGS])
        if not ok:
            stats[S_FALLBACK] = FB_NON_ASCII
            break
        # ---- queue of the record
        qid = _i32(a, pos + 12)
        q, slot = _queue_of(a, ts, tl, qid, th, table, q_ts, q_tl, q_qid, q_hash, nq)
        if q < 0:
            if nq == qcap:
                qcap *= 2
                q_ts, q_tl, q_qid, q_hash = _grow(q_ts, qcap), _grow(q_tl, qcap), _grow(q_qid, qcap), _grow(q_hash, qcap)
                q_rec, q_cq, q_lo, q_hi = _grow(q_rec, qcap), _grow(q_cq, qcap), _grow(q_lo, qcap), _grow(q_hi, qcap)
                q_unord, q_last = _grow(q_unord, qcap), _grow(q_last, qcap)
            q = nq
            q_ts[q], q_tl[q], q_qid[q], q_hash[q] = ts, tl, qid, th
            q_rec[q], q_cq[q], q_unord[q] = 0, 0, 0
            table[slot] = q + 1
            nq += 1
            if 2 * nq > table.shape[0]:
                table = _rehash(table, q_hash, q_qid, nq)
        q_rec[q] += 1
        tran = sys_flag & rules[R_TRAN_MASK]
        # ---- consume-queue row
        if tran == rules[R_TRAN_NOT] or tran == rules[R_TRAN_COMMIT]:
            if ncq == r_q.shape[0]:
                r_q, r_qo, r_phy = _grow(r_q, ncq + 1), _grow(r_qo, ncq + 1), _grow(r_phy, ncq + 1)
                r_size, r_tags = _grow(r_size, ncq + 1), _grow(r_tags, ncq + 1)
            qo = _i64(a, pos + 20)
            r_q[ncq], r_qo[ncq], r_phy[ncq], r_size[ncq] = q, qo, phy, size
            if delay > 0 and delay_ms.shape[0] > 0:  # delivery time of a delayed message
                r_tags[ncq] = store_ts + delay_ms[min(delay, delay_ms.shape[0]) - 1]
            else:
                r_tags[ncq] = _signed32(tags_h)
            if q_cq[q] > 0 and qo != q_last[q] + 1:
                q_unord[q] = 1  # entries of the queue do not step by exactly 1
            q_last[q] = qo
            if q_cq[q] == 0 or qo < q_lo[q]:
                q_lo[q] = qo
            if q_cq[q] == 0 or qo > q_hi[q]:
                q_hi[q] = qo
            q_cq[q] += 1
            ncq += 1
        # ---- index keys: UNIQ_KEY, then each non-empty KEYS token, as hash("topic#key")
        if tran != rules[R_TRAN_ROLLBACK]:
            if nk + 2 + (found_hi[P_KEYS] - found_lo[P_KEYS]) > k_hash.shape[0]:
                need = nk + 2 + (found_hi[P_KEYS] - found_lo[P_KEYS])
                k_hash, k_phy, k_ts = _grow(k_hash, need), _grow(k_phy, need), _grow(k_ts, need)
            prefix = (th * 31 + 35) & 0xFFFFFFFF  # "topic#"
            if found_lo[P_UNIQ] >= 0:
                nk = _put_key(a, prefix, found_lo[P_UNIQ], found_hi[P_UNIQ], phy, store_ts, k_hash, k_phy, k_ts, nk)
                if nk < 0:
                    stats[S_FALLBACK] = FB_NON_ASCII
                    break
            if found_lo[P_KEYS] >= 0:
                p = found_lo[P_KEYS]
                kend = found_hi[P_KEYS]
                while p < kend:
                    while p < kend and a[p] == 0x20:
                        p += 1
                    if p >= kend:
                        break
                    e = p
                    while e < kend and a[e] != 0x20:
                        e += 1
                    nk = _put_key(a, prefix, p, e, phy, store_ts, k_hash, k_phy, k_ts, nk)
                    if nk < 0:
                        stats[S_FALLBACK] = FB_NON_ASCII
                        break
                    p = e
                if stats[S_FALLBACK] != FB_NONE:
                    break
        # ---- summary
        if n == 0:
            stats[S_FIRST_TS] = store_ts
            stats[S_MIN_TS] = store_ts
            stats[S_MAX_TS] = store_ts
        stats[S_LAST_TS] = store_ts
        stats[S_MIN_TS] = min(stats[S_MIN_TS], store_ts)
        stats[S_MAX_TS] = max(stats[S_MAX_TS], store_ts)
        stats[S_LAST_POS] = pos
        stats[S_LAST_SIZE] = size
        n += 1
        pos = end
    stats[S_FALLBACK_POS] = pos
    stats[S_END_POS] = pos
    stats[S_RECORDS], stats[S_CQ], stats[S_KEYS], stats[S_QUEUES] = n, ncq, nk, nq
    queues = (q_ts[:nq], q_tl[:nq], q_qid[:nq], q_rec[:nq], q_cq[:nq], q_lo[:nq], q_hi[:nq], q_unord[:nq])
    rows = (r_q[:ncq], r_qo[:ncq], r_phy[:ncq], r_size[:ncq], r_tags[:ncq])
    return stats, queues, rows, (k_hash[:nk], k_phy[:nk], k_ts[:nk])


@njit(cache=True, nogil=True)
def _put_key(a, prefix, lo, hi, phy, store_ts, k_hash, k_phy, k_ts, nk):
    """Append the index key hash("topic#" + a[lo:hi]) at nk; returns the new count, -1 for malformed UTF-8."""
    h, ok = _hash_utf8(a, prefix, lo, hi)
    if not ok:
        return -1
    k_hash[nk] = _key_hash(h)
    k_phy[nk], k_ts[nk] = phy, store_ts
    return nk + 1


@njit(cache=True, nogil=True)
def _key_hash(h):
    """IndexFile.indexKeyHashMethod on an unsigned 32-bit Java hash: abs, Integer.MIN_VALUE -> 0."""
    s = _signed32(h)
    if s == -(np.int64(1) << 31):
        return 0
    return abs(s)


@njit(cache=True, nogil=True)
def group_rows(row_queue, queue_rank, n_queues):
    """Stable counting sort of consume-queue rows by their queue's rank: (row order, rows per rank)."""
    counts = np.zeros(n_queues + 1, np.int64)
    for i in range(row_queue.shape[0]):
        counts[queue_rank[row_queue[i]] + 1] += 1
    for r in range(n_queues):
        counts[r + 1] += counts[r]
    order = np.empty(row_queue.shape[0], np.int64)
    fill = counts[:-1].copy()
    for i in range(row_queue.shape[0]):
        r = queue_rank[row_queue[i]]
        order[fill[r]] = i
        fill[r] += 1
    return order, counts
