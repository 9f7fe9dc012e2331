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

from .kernel_cache import njit

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


# Columns of the per-queue table `qs` (one row per (topic, queueId) of the split, first-seen order).
Q_TS, Q_TL, Q_QID, Q_HASH, Q_REC, Q_CQ, Q_LO, Q_HI, Q_UNORD, Q_LAST = range(10)
NQ_COLS = 10
# Columns of the consume-queue rows `rows` and of the index keys `keys`.
C_QUEUE, C_QO, C_PHY, C_SIZE, C_TAGS = range(5)
K_HASH, K_PHY, K_TS = range(3)


@njit(cache=True, nogil=True)
def _grow_rows(x, need):
    if need <= x.shape[0]:
        return x
    y = np.empty((max(need, 2 * x.shape[0]), x.shape[1]), x.dtype)
    y[:x.shape[0]] = x
    return y


@njit(cache=True, nogil=True)
def _slot_of(th, qid, mask):
    return (th * 1000003 + qid) & mask


@njit(cache=True, nogil=True)
def _queue(a, ts, tl, qid, th, table, qs, nq):
    """The record's queue in the split's table (open addressing on the topic hash and queueId; `table`
    holds queue index + 1 per slot), added when new: (queue, table, qs, queue count)."""
    mask = table.shape[0] - 1
    slot = _slot_of(th, qid, mask)
    while table[slot] != 0:
        q = table[slot] - 1
        if qs[q, Q_QID] == qid and qs[q, Q_HASH] == th and qs[q, Q_TL] == tl and _same_bytes(a, qs[q, Q_TS], ts, tl):
            return q, table, qs, nq
        slot = (slot + 1) & mask
    qs = _grow_rows(qs, nq + 1)
    qs[nq] = 0
    qs[nq, Q_TS], qs[nq, Q_TL], qs[nq, Q_QID], qs[nq, Q_HASH] = ts, tl, qid, th
    table[slot] = nq + 1
    nq += 1
    if 2 * nq > table.shape[0]:  # rehash into a table twice the size
        table = np.zeros(table.shape[0] * 2, np.int64)
        mask = table.shape[0] - 1
        for q in range(nq):
            slot = _slot_of(qs[q, Q_HASH], qs[q, Q_QID], mask)
            while table[slot] != 0:
                slot = (slot + 1) & mask
            table[slot] = q + 1
    return nq - 1, table, qs, nq


# Slots of the `rules` argument: the broker constants the kernel applies, passed in from their homes.
R_MIN_SIZE, R_MAGIC_V1, R_MAGIC_V2, R_MAGIC_BLANK, R_TRAN_MASK, R_TRAN_ROLLBACK, R_TRAN_NOT, R_TRAN_COMMIT = range(8)
R_BORN_V6, R_STORE_V6, R_MIN_TS, R_MAX_TS, R_INNER_BATCH = range(8, 13)
N_RULES = 13


@njit(cache=True, nogil=True)
def _magic_end(magic, rules, stats):
    """A BLANK or a bad magic ends the walk (True, the end written into stats); a record magic does not."""
    if magic == rules[R_MAGIC_BLANK]:
        stats[S_END] = KEND_BLANK
        stats[S_BLANKS] = 1
        return True
    if magic != rules[R_MAGIC_V1] and magic != rules[R_MAGIC_V2]:
        stats[S_END] = KEND_BAD_MAGIC
        stats[S_END_MAGIC] = magic
        return True
    return False


@njit(cache=True, nogil=True)
def _header(a, pos, stop, limit, segment_end, rules, stats):
    """The chain rules at `pos` (commitlog.walk_chain): the record's totalSize, or -1 when the walk ends
    here (its end, or a fallback reason, written into stats)."""
    if pos >= stop:  # peek at the next header, as commitlog._end_after_stop
        stats[S_END] = KEND_STOP
        if pos + 8 <= limit:
            _magic_end(_i32(a, pos + 4) & 0xFFFFFFFF, rules, stats)
        return -1
    if pos == segment_end:
        stats[S_END] = KEND_FILE
        return -1
    if pos + 8 > limit:
        stats[S_FALLBACK] = FB_NEED_BYTES if limit < segment_end else FB_BAD_TOTAL_SIZE
        return -1
    size = _i32(a, pos)
    if _magic_end(_i32(a, pos + 4) & 0xFFFFFFFF, rules, stats):
        return -1
    if size < rules[R_MIN_SIZE] or pos + size > segment_end:
        stats[S_FALLBACK] = FB_BAD_TOTAL_SIZE
        return -1
    if pos + size > a.shape[0]:
        stats[S_FALLBACK] = FB_NEED_BYTES
        return -1
    return size


@njit(cache=True, nogil=True)
def _layout(a, pos, end, rules):
    """Every field inside the record and adding up to totalSize: (FB_NONE, sysFlag, storeTimestamp
    position, topic start, topic length, properties start), or (fallback reason, 0, ...)."""
    sys_flag = _i32(a, pos + 36)
    if sys_flag & rules[R_INNER_BATCH]:
        return FB_INNER_BATCH, 0, 0, 0, 0, 0
    ts_at = pos + 48 + (16 if sys_flag & rules[R_BORN_V6] else 4) + 4
    body_len_at = ts_at + 8 + (16 if sys_flag & rules[R_STORE_V6] else 4) + 4 + 12
    if body_len_at + 4 > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    body_len = _i32(a, body_len_at)
    tl_at = body_len_at + 4 + body_len
    width = 2 if (_i32(a, pos + 4) & 0xFFFFFFFF) == rules[R_MAGIC_V2] else 1
    if body_len < 0 or tl_at + width > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    tl = (np.int64(a[tl_at]) << 8 | a[tl_at + 1]) if width == 2 else np.int64(a[tl_at])
    pl_at = tl_at + width + tl
    if pl_at + 2 > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    pl = np.int64(a[pl_at]) << 8 | a[pl_at + 1]
    if pl >= 0x8000 or pl_at + 2 + pl != end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    return FB_NONE, sys_flag, ts_at, tl_at + width, tl, pl_at + 2


@njit(cache=True, nogil=True)
def _checks(a, ts, tl, ps, end, schedule, names, name_off, found_lo, found_hi):
    """Topic and properties of a laid-out record: (FB_NONE, topic hash, DELAY level or -1, TAGS hash),
    or (fallback reason, 0, 0, 0). Fills found_lo/found_hi with the wanted properties."""
    why = _topic_fallback(a, ts, tl, schedule)
    th, ok = _hash_utf8(a, np.int64(0), ts, ts + tl)
    if (why != FB_NONE and why != FB_SCHEDULE) or not ok:
        return FB_TOPIC, np.int64(0), np.int64(0), np.int64(0)
    _find_props(a, ps, end, names, name_off, found_lo, found_hi)
    if found_lo[P_MULTI] >= 0:
        return FB_MULTI_DISPATCH, np.int64(0), np.int64(0), np.int64(0)
    delay = np.int64(-1)
    if why == FB_SCHEDULE and found_lo[P_DELAY] >= 0:
        delay, ok = _parse_int(a, found_lo[P_DELAY], found_hi[P_DELAY])
        if not ok:  # the broker rejects the record: the reference says so
            return FB_SCHEDULE, np.int64(0), np.int64(0), np.int64(0)
    tags_h, ok = _hash_utf8(a, np.int64(0), found_lo[P_TAGS], found_hi[P_TAGS])
    if not ok:
        return FB_NON_ASCII, np.int64(0), np.int64(0), np.int64(0)
    return FB_NONE, th, delay, tags_h


@njit(cache=True, nogil=True)
def _cq_row(rows, ncq, q, qs, qo, phy, size, tags):
    """Append a consume-queue row of queue q and update the queue's statistics; returns rows."""
    rows = _grow_rows(rows, ncq + 1)
    rows[ncq, C_QUEUE], rows[ncq, C_QO], rows[ncq, C_PHY], rows[ncq, C_SIZE], rows[ncq, C_TAGS] = q, qo, phy, size, tags
    first = qs[q, Q_CQ] == 0
    if not first and qo != qs[q, Q_LAST] + 1:
        qs[q, Q_UNORD] = 1  # entries of the queue do not step by exactly 1
    qs[q, Q_LAST] = qo
    if first or qo < qs[q, Q_LO]:
        qs[q, Q_LO] = qo
    if first or qo > qs[q, Q_HI]:
        qs[q, Q_HI] = qo
    qs[q, Q_CQ] += 1
    return rows


@njit(cache=True, nogil=True)
def _index_keys(a, th, found_lo, found_hi, phy, store_ts, keys, nk):
    """Append the record's index keys: UNIQ_KEY, then each non-empty KEYS token (split on spaces), as
    hash("topic#key"). Returns (keys, count), count -1 for malformed UTF-8 in a key."""
    keys = _grow_rows(keys, nk + 2 + max(0, found_hi[P_KEYS] - found_lo[P_KEYS]))
    prefix = (th * 31 + 35) & 0xFFFFFFFF  # "topic#"
    if found_lo[P_UNIQ] >= 0:
        nk = _put_key(a, prefix, found_lo[P_UNIQ], found_hi[P_UNIQ], phy, store_ts, keys, nk)
    p, kend = found_lo[P_KEYS], found_hi[P_KEYS]
    while nk >= 0 and 0 <= p < kend:
        while p < kend and a[p] == 0x20:
            p += 1
        e = p
        while e < kend and a[e] != 0x20:
            e += 1
        if e > p:
            nk = _put_key(a, prefix, p, e, phy, store_ts, keys, nk)
        p = e
    return keys, nk


@njit(cache=True, nogil=True)
def _note_record(stats, n, pos, size, store_ts):
    """The split summary's store times and last record, after record number n."""
    if n == 0:
        stats[S_FIRST_TS], stats[S_MIN_TS], stats[S_MAX_TS] = store_ts, store_ts, store_ts
    stats[S_LAST_TS] = store_ts
    stats[S_MIN_TS] = min(stats[S_MIN_TS], store_ts)
    stats[S_MAX_TS] = max(stats[S_MAX_TS], store_ts)
    stats[S_LAST_POS], stats[S_LAST_SIZE] = pos, size


@njit(cache=True, nogil=True)
def decode_kernel(a, base_offset, start, stop, segment_end, rules, names, name_off, schedule, delay_ms):
    """Walk and decode a[start:...] (see the module doc). Returns (stats, per-queue table, consume-queue
    rows, index keys); stats[S_FALLBACK] != FB_NONE means the rest is to be ignored."""
    stats = np.zeros(N_STATS, np.int64)
    cap = max(16, (stop - start) // 256)
    rows, keys = np.empty((cap, 5), np.int64), np.empty((2 * cap, 3), np.int64)
    table, qs = np.zeros(1024, np.int64), np.zeros((64, NQ_COLS), np.int64)
    found_lo, found_hi = np.empty(name_off.shape[0] - 1, np.int64), np.empty(name_off.shape[0] - 1, np.int64)
    limit = min(a.shape[0], segment_end)
    pos, n, ncq, nk, nq = start, 0, 0, 0, 0
    while True:
        size = _header(a, pos, stop, limit, segment_end, rules, stats)
        if size < 0:
            break
        end = pos + size
        fb, sys_flag, ts_at, ts, tl, ps = _layout(a, pos, end, rules)
        phy, store_ts = _i64(a, pos + 28), _i64(a, ts_at)
        if fb == FB_NONE and phy != base_offset + pos:
            fb = FB_MOVED
        if fb == FB_NONE and (store_ts < rules[R_MIN_TS] or store_ts > rules[R_MAX_TS]):
            fb = FB_UNDATED
        th, delay, tags_h = np.int64(0), np.int64(-1), np.int64(0)
        if fb == FB_NONE:
            fb, th, delay, tags_h = _checks(a, ts, tl, ps, end, schedule, names, name_off, found_lo, found_hi)
        if fb != FB_NONE:
            stats[S_FALLBACK] = fb
            break
        q, table, qs, nq = _queue(a, ts, tl, _i32(a, pos + 12), th, table, qs, nq)
        qs[q, Q_REC] += 1
        tran = sys_flag & rules[R_TRAN_MASK]
        if tran == rules[R_TRAN_NOT] or tran == rules[R_TRAN_COMMIT]:
            tags = _signed32(tags_h)
            if delay > 0 and delay_ms.shape[0] > 0:  # delivery time of a delayed message
                tags = store_ts + delay_ms[min(delay, delay_ms.shape[0]) - 1]
            rows = _cq_row(rows, ncq, q, qs, _i64(a, pos + 20), phy, size, tags)
            ncq += 1
        if tran != rules[R_TRAN_ROLLBACK]:
            keys, nk = _index_keys(a, th, found_lo, found_hi, phy, store_ts, keys, nk)
            if nk < 0:
                stats[S_FALLBACK] = FB_NON_ASCII
                break
        _note_record(stats, n, pos, size, store_ts)
        n += 1
        pos = end
    stats[S_FALLBACK_POS], stats[S_END_POS] = pos, pos
    nk = max(nk, 0)
    stats[S_RECORDS], stats[S_CQ], stats[S_KEYS], stats[S_QUEUES] = n, ncq, nk, nq
    return stats, qs[:nq], rows[:ncq], keys[:nk]


@njit(cache=True, nogil=True)
def _put_key(a, prefix, lo, hi, phy, store_ts, keys, nk):
    """Append the index key hash("topic#" + a[lo:hi]) at nk; returns the new count, -1 for malformed UTF-8."""
    h, ok = _hash_utf8(a, prefix, lo, hi)
    if not ok:
        return -1
    keys[nk, K_HASH], keys[nk, K_PHY], keys[nk, K_TS] = _key_hash(h), phy, store_ts
    return nk + 1


@njit(cache=True, nogil=True)
def _key_hash(h):
    """IndexFile.indexKeyHashMethod on an unsigned 32-bit Java hash: abs, Integer.MIN_VALUE -> 0."""
    s = _signed32(h)
    if s == -(np.int64(1) << 31):
        return 0
    return abs(s)
