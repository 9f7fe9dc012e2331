"""The compiled one-pass decoder of a split: walk the record chain and emit what the build reads.

One numba function walks a buffer's records (CommitLog.checkMessageAndReturnSize's chain rules, as in
commitlog.walk_chain), checks each record's layout, parses its properties (properties.parse_properties'
rules), and emits per record its queue (an index into a per-split (topic, queueId) table), queue offset,
physical offset, size and tagsCode, and per index key its hash, physical offset and store time
(index_keys' order and hash rules). It handles only the common case: whatever it does not (an invalid,
moved or undated record, a record running past the buffer, non-ASCII hashed strings, unsafe topic names,
SCHEDULE_TOPIC_XXXX, a multi-dispatch record lmq_kernel cannot settle) makes it return a fallback reason, and
the caller decodes the split with the numpy reference (commitlog.decode_buffer) instead. A multi-dispatch
record's extra consume-queue entries (lmq_kernel's rules) follow its own entry, in name order, as the
reference emits them; their queues are looked up a few dozen items at a time (_resolve), so that the cache
misses of lookups among tens of thousands of LMQ queues overlap. With `check_crc` (checkCRCOnRecover) it checks each record's body CRC (crc_kernel)
before its other checks, and the first that fails ends the walk (KEND_CRC), as
commitlog.first_invalid_record orders the broker's checks. The rules' constants come from their
homes and are passed in, so this module defines none of them.
"""
from __future__ import annotations

import numpy as np

from .crc_kernel import record_crc_ok
from .kernel_bytes import (equals_array, find_props, i32, i64, index_key_hash, java_hash, parse_int,
                           same_bytes, signed32, unsafe_topic)
from .jit import njit
from .lmq_kernel import L_SEPARATOR, LEAVE, item_end, item_queue_id, multi_dispatch_items, parse_offset, skipped_name

TOUCH_AHEAD = 4096  # bytes ahead of the record it reads whose cache lines the walk loads early

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
FB_MULTI_DISPATCH = 9  # a multi-dispatch record lmq_kernel leaves to the reference
FB_INNER_BATCH = 10  # a BatchConsumeQueue record (refused by the reference)
FB_BAD_ENTRY = 11  # a DLedger entry header the reference rejects (it says why)

# Walk ends, mapped to commitlog's END_* names by the caller.
KEND_STOP, KEND_BLANK, KEND_FILE, KEND_BAD_MAGIC = 0, 1, 2, 3
KEND_CRC = 4  # a record whose body CRC fails (check_crc): the walk ends at it

# Slots of the `stats` output.
S_FALLBACK, S_FALLBACK_POS, S_RECORDS, S_CQ, S_KEYS, S_QUEUES, S_END, S_END_POS, S_END_MAGIC, S_BLANKS = range(10)
S_FIRST_TS, S_LAST_TS, S_MIN_TS, S_MAX_TS, S_LAST_POS, S_LAST_SIZE = range(10, 16)
S_FIRST_ENTRY, S_LAST_ENTRY = 16, 17  # DLedger entry index of the first and last entry walked
S_FIRST_TERM, S_LAST_TERM = 18, 19  # and their terms
N_STATS = 20

# Wanted property names, by their index in the `names` argument.
P_TAGS, P_KEYS, P_UNIQ, P_MULTI, P_DELAY, P_MULTI_OFFSET = range(6)


# Columns of the per-queue table `qs` the kernel returns (one row per (topic, queueId) of the split, first-seen
# order): where the topic's bytes start in the name pool and their length (topic_at/topic_len; *_TS names are
# store timestamps). The pool holds each queue's topic once, in queue order.
Q_TOPIC_AT, Q_TOPIC_LEN, Q_QID, Q_REC, Q_CQ, Q_LO, Q_HI, Q_UNORD, Q_LAST = range(9)
NQ_COLS = 9
# Columns of the consume-queue rows `rows` and of the index keys `keys`.
C_QUEUE, C_QO, C_PHY, C_SIZE, C_TAGS, C_TS = range(6)  # C_TS: the record's storeTimestamp (RocksDB units)
K_HASH, K_PHY, K_TS = range(3)

# The walk's queue lookup, a few random cache lines per multi-dispatch item among tens of thousands of LMQ
# queues (measured: the lookup's chained loads were most of an item's cost). `table` (open addressing, a power
# of two) holds per used slot the queue's 31-bit key hash (topic hash and queueId mixed, _key_of) above its
# index + 1, so a probe landing on another queue's slot ends there; `hot` holds one cache-line row per queue
# (first-seen order, 64-byte aligned): queueId, where its topic is in the name pool and its length, its
# records, and the topic's first HOT_NAME bytes inline, so a found queue costs its slot and one line (the pool
# is read only for longer names). The consume-queue statistics per queue are counted after the walk
# (_queue_stats), off the per-item path.
HOT_ROW = 64  # bytes per hot row
H_QID, H_TOPIC, H_REC = 0, 1, 2  # its int64 words; H_TOPIC: pool position << 16 | topic length (<= 255)
HOT_NAME_AT, HOT_NAME = 24, 40  # where the inline topic bytes are in a row, and how many
KEY_BITS = 0x7FFFFFFF


@njit()
def _grow_rows(x, need):
    """x in a larger array (at least need rows, at least twice as many)."""
    y = np.empty((max(need, 2 * x.shape[0]), x.shape[1]), x.dtype)
    y[:x.shape[0]] = x
    return y


@njit()
def _grow_bytes(x, need):
    """The byte array x in a larger one (at least need bytes, at least twice as many)."""
    y = np.empty(max(need, 2 * x.shape[0]), x.dtype)
    y[:x.shape[0]] = x
    return y


@njit()
def _hot_rows(n):
    """Room for n hot rows: a zeroed, 64-byte aligned byte array (n * HOT_ROW bytes)."""
    raw = np.zeros(n * HOT_ROW + HOT_ROW, np.uint8)
    at = (-raw.ctypes.data) % HOT_ROW
    return raw[at:at + n * HOT_ROW]


@njit()
def _grow_hot(hot, need):
    """The hot rows in room for at least need rows (at least twice as many)."""
    y = _hot_rows(max(need, 2 * (hot.shape[0] // HOT_ROW)))
    y[:hot.shape[0]] = hot
    return y


@njit(inline="always")
def _key_of(th, qid):
    """The lookup's key hash of (topic hash, queueId): its low bits pick the slot, all of it is the slot's tag."""
    return (th * 1000003 + qid) & KEY_BITS


@njit(inline="always")
def _find_queue(a, topic_at, topic_len, qid, key, table, hot, hot8, pool):
    """The record's queue in the split's table (see `hot` above): its index, or -1 - the free slot where a new
    queue goes."""
    mask = table.shape[0] - 1
    slot = key & mask
    while True:
        v = table[slot]
        if v == 0:
            return -1 - slot
        if (v >> 32) == key:
            q = (v & 0xFFFFFFFF) - 1
            w = q * (HOT_ROW // 8)
            if hot[w + H_QID] == qid and (hot[w + H_TOPIC] & 0xFFFF) == topic_len:
                inline = min(topic_len, HOT_NAME)
                if (same_bytes(hot8, q * HOT_ROW + HOT_NAME_AT, a, topic_at, inline)
                        and same_bytes(pool, (hot[w + H_TOPIC] >> 16) + inline, a, topic_at + inline,
                                       topic_len - inline)):
                    return q
        slot = (slot + 1) & mask


@njit()
def _rehashed(table, size):
    """The queues of `table` in a table of `size` slots (a power of two)."""
    out = np.zeros(size, np.int64)
    for v in table:
        if v != 0:
            slot = (v >> 32) & (size - 1)
            while out[slot] != 0:
                slot = (slot + 1) & (size - 1)
            out[slot] = v
    return out


# Slots of the `rules` argument: the broker constants the kernel applies, passed in from their homes.
R_MIN_SIZE, R_MAGIC_V1, R_MAGIC_V2, R_MAGIC_BLANK, R_TRAN_MASK, R_TRAN_ROLLBACK, R_TRAN_NOT, R_TRAN_COMMIT = range(8)
R_BORN_V6, R_STORE_V6, R_MIN_TS, R_MAX_TS, R_INNER_BATCH, R_ENTRY_MAGIC, R_ENTRY_BLANK = range(8, 15)
N_RULES = 15


@njit(inline="always")
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


@njit(inline="always")
def _header(a, pos, stop, limit, segment_end, rules, stats):
    """The chain rules at `pos` (commitlog.walk_chain): the record's totalSize, or -1 when the walk ends
    here (its end, or a fallback reason, written into stats)."""
    if pos >= stop:  # peek at the next header, as commitlog._end_after_stop
        stats[S_END] = KEND_STOP
        if pos + 8 <= limit:
            _magic_end(i32(a, pos + 4) & 0xFFFFFFFF, rules, stats)
        return -1
    if pos == segment_end:
        stats[S_END] = KEND_FILE
        return -1
    if pos + 8 > limit:
        stats[S_FALLBACK] = FB_NEED_BYTES if limit < segment_end else FB_BAD_TOTAL_SIZE
        return -1
    size = i32(a, pos)
    if _magic_end(i32(a, pos + 4) & 0xFFFFFFFF, rules, stats):
        return -1
    if size < rules[R_MIN_SIZE] or pos + size > segment_end:
        stats[S_FALLBACK] = FB_BAD_TOTAL_SIZE
        return -1
    if pos + size > a.shape[0]:
        stats[S_FALLBACK] = FB_NEED_BYTES
        return -1
    return size


@njit(inline="always")
def _entry(a, pos, stop, limit, segment_end, base_offset, header, rules, stats):
    """The DLedger entry rules at `pos` (commitlog.walk_entries): the entry's size, or -1 when the walk ends
    here (its end, or a fallback reason, written into stats). An entry the reference would call bad (size,
    pos field, bodySize, the record's totalSize and magic, a blank's length) is left to it, which says why."""
    if pos >= stop:  # peek at the next header, as walk_entries does
        stats[S_END] = KEND_STOP
        if pos + 8 <= limit:
            magic = i32(a, pos)
            if magic == rules[R_ENTRY_BLANK]:
                stats[S_END] = KEND_BLANK
                stats[S_BLANKS] = 1
            elif magic != rules[R_ENTRY_MAGIC]:
                stats[S_END] = KEND_BAD_MAGIC
                stats[S_END_MAGIC] = magic & 0xFFFFFFFF
        return -1
    if pos == segment_end:
        stats[S_END] = KEND_FILE
        return -1
    if pos + 8 > limit:
        stats[S_FALLBACK] = FB_NEED_BYTES if limit < segment_end else FB_BAD_ENTRY
        return -1
    magic, size = i32(a, pos), i32(a, pos + 4)
    if magic == rules[R_ENTRY_BLANK]:  # a blank may be shorter than an entry header (DLedger's is 8 bytes or more)
        if size != segment_end - pos:
            stats[S_FALLBACK] = FB_BAD_ENTRY
            return -1
        stats[S_END] = KEND_BLANK
        stats[S_BLANKS] = 1
        return -1
    if magic != rules[R_ENTRY_MAGIC]:
        stats[S_END] = KEND_BAD_MAGIC
        stats[S_END_MAGIC] = magic & 0xFFFFFFFF
        return -1
    if pos + header + 8 > limit:
        stats[S_FALLBACK] = FB_NEED_BYTES if limit < segment_end else FB_BAD_ENTRY
        return -1
    body = i32(a, pos + header)
    rmagic = i32(a, pos + header + 4) & 0xFFFFFFFF
    if (size < header + rules[R_MIN_SIZE] or pos + size > segment_end or i64(a, pos + 24) != base_offset + pos
            or i32(a, pos + header - 4) != size - header or body != size - header
            or (rmagic != rules[R_MAGIC_V1] and rmagic != rules[R_MAGIC_V2])):
        stats[S_FALLBACK] = FB_BAD_ENTRY
        return -1
    if pos + size > a.shape[0]:
        stats[S_FALLBACK] = FB_NEED_BYTES
        return -1
    return size


@njit(inline="always")
def _store_ts_at(pos, sys_flag, rules):
    """Where storeTimestamp is, after the born host and port."""
    return pos + 48 + (16 if sys_flag & rules[R_BORN_V6] else 4) + 4


@njit(inline="always")
def _body_len_at(store_ts_at, sys_flag, rules):
    """Where bodyLength is, after storeTimestamp, the store host, reconsumeTimes and preparedTransactionOffset."""
    return store_ts_at + 8 + (16 if sys_flag & rules[R_STORE_V6] else 4) + 4 + 12


@njit(inline="always")
def _crc_fails(a, rp, end, rules):
    """The record at rp (ending at end) fails the body CRC check (crc_kernel.record_crc_ok), laid out or not:
    as record_columns.first_crc_error, a body that does not lie inside the record is not checked."""
    sys_flag = i32(a, rp + 36)
    body_len_at = _body_len_at(_store_ts_at(rp, sys_flag, rules), sys_flag, rules)
    if body_len_at + 4 > end:
        return False
    body_len = i32(a, body_len_at)
    return body_len_at + 4 + body_len <= end and not record_crc_ok(a, rp, body_len_at + 4, body_len)


@njit(inline="always")
def _layout(a, pos, end, rules):
    """Every field inside the record and adding up to totalSize: (FB_NONE, sysFlag, storeTimestamp
    position, topic start, topic length, properties start), or (fallback reason, 0, ...)."""
    sys_flag = i32(a, pos + 36)
    if sys_flag & rules[R_INNER_BATCH]:
        return FB_INNER_BATCH, 0, 0, 0, 0, 0
    store_ts_at = _store_ts_at(pos, sys_flag, rules)
    body_len_at = _body_len_at(store_ts_at, sys_flag, rules)
    if body_len_at + 4 > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    body_len = i32(a, body_len_at)
    topic_len_at = body_len_at + 4 + body_len
    width = 2 if (i32(a, pos + 4) & 0xFFFFFFFF) == rules[R_MAGIC_V2] else 1
    if body_len < 0 or topic_len_at + width > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    topic_len = (np.int64(a[topic_len_at]) << 8 | a[topic_len_at + 1]) if width == 2 else np.int64(a[topic_len_at])
    if topic_len >= (0x8000 if width == 2 else 0x80):  # Java reads a signed byte / short: negative, the record invalid
        return FB_LAYOUT, 0, 0, 0, 0, 0
    pl_at = topic_len_at + width + topic_len
    if pl_at + 2 > end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    pl = np.int64(a[pl_at]) << 8 | a[pl_at + 1]
    if pl >= 0x8000 or pl_at + 2 + pl != end:
        return FB_LAYOUT, 0, 0, 0, 0, 0
    return FB_NONE, sys_flag, store_ts_at, topic_len_at + width, topic_len, pl_at + 2


@njit(inline="always")
def _checks(fb, a, topic_at, topic_len, qid, ps, end, schedule, names, name_off, found_lo, found_hi, table, hot, hot8,
            pool):
    """Topic and properties of a laid-out record: (FB_NONE, topic hash, queue (see _find_queue), DELAY level
    or -1, TAGS hash), or (fallback reason, 0, 0, 0, 0); a record that already has a fallback reason `fb` is not
    read. Only a new queue's topic is checked (a known one passed before). Fills found_lo/found_hi with the wanted
    properties."""
    if fb != FB_NONE:
        return fb, np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    th, ok = java_hash(a, np.int64(0), topic_at, topic_at + topic_len)
    q = _find_queue(a, topic_at, topic_len, qid, _key_of(th, qid), table, hot, hot8, pool) if ok else np.int64(-1)
    if not ok or (q < 0 and unsafe_topic(a, topic_at, topic_len)):
        return FB_TOPIC, np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    find_props(a, ps, end, names, name_off, found_lo, found_hi)
    delay = np.int64(-1)
    if found_lo[P_DELAY] >= 0 and topic_len == schedule.shape[0] and equals_array(a, topic_at, schedule):
        delay, ok = parse_int(a, found_lo[P_DELAY], found_hi[P_DELAY])
        if not ok:  # the broker rejects the record: the reference says so
            return FB_SCHEDULE, np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    tags_h, ok = java_hash(a, np.int64(0), found_lo[P_TAGS], found_hi[P_TAGS])
    if not ok:
        return FB_NON_ASCII, np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    return FB_NONE, th, q, delay, tags_h


@njit(inline="always")
def _cq_row(rows, ncq, q, qo, phy, size, tags, ts):
    """Write consume-queue row ncq (of queue q; rows has room)."""
    rows[ncq, C_QUEUE], rows[ncq, C_QO], rows[ncq, C_PHY], rows[ncq, C_SIZE], rows[ncq, C_TAGS] = q, qo, phy, size, tags
    rows[ncq, C_TS] = ts


@njit()
def _queues_out(hot, nq, rows, ncq):
    """The per-queue table `qs` the kernel returns, from the hot rows and the consume-queue rows (in walk
    order): per queue its rows, smallest, largest and last queue offset, and whether they do not step by
    exactly 1."""
    qs = np.zeros((nq, NQ_COLS), np.int64)
    for q in range(nq):
        w = q * (HOT_ROW // 8)
        qs[q, Q_TOPIC_AT], qs[q, Q_TOPIC_LEN] = hot[w + H_TOPIC] >> 16, hot[w + H_TOPIC] & 0xFFFF
        qs[q, Q_QID], qs[q, Q_REC] = hot[w + H_QID], hot[w + H_REC]
    for r in range(ncq):
        q, qo = rows[r, C_QUEUE], rows[r, C_QO]
        first = qs[q, Q_CQ] == 0
        if not first and qo != qs[q, Q_LAST] + 1:
            qs[q, Q_UNORD] = 1  # entries of the queue do not step by exactly 1
        qs[q, Q_LAST] = qo
        if first or qo < qs[q, Q_LO]:
            qs[q, Q_LO] = qo
        if first or qo > qs[q, Q_HI]:
            qs[q, Q_HI] = qo
        qs[q, Q_CQ] += 1
    return qs


@njit(inline="always")
def _index_keys(a, th, found_lo, found_hi, phy, store_ts, keys, nk):
    """Append the record's index keys: UNIQ_KEY, then each non-empty KEYS token (split on spaces), as
    hash("topic#key"), from nk on (keys has room). Returns the new count, -1 for malformed UTF-8 in a key."""
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
    return nk


@njit(inline="always")
def _note_record(stats, n, pos, size, store_ts):
    """The split summary's store times and last record, after record number n."""
    if n == 0:
        stats[S_FIRST_TS], stats[S_MIN_TS], stats[S_MAX_TS] = store_ts, store_ts, store_ts
    stats[S_LAST_TS] = store_ts
    stats[S_MIN_TS] = min(stats[S_MIN_TS], store_ts)
    stats[S_MAX_TS] = max(stats[S_MAX_TS], store_ts)
    stats[S_LAST_POS], stats[S_LAST_SIZE] = pos, size


# Slots of the walk's `cursor`: where it stands, so that it can stop for larger outputs and go on.
W_POS, W_N, W_NCQ, W_NK, W_NQ, W_AHEAD, W_KEYS_NEED, W_TOUCHED = range(8)
W_ROWS_NEED, W_QUEUES_NEED = 8, 9  # rows and queues the next record needs room for (its multi-dispatch ones too)
W_POOL, W_POOL_NEED = 10, 11  # name pool bytes used, and needed for the next record's new queues
W_PEND, W_PEND_BYTES = 12, 13  # multi-dispatch items waiting for their queue (see _resolve), their names' bytes
N_CURSOR = 14


@njit()
def decode_kernel(a, base_offset, start, stop, segment_end, rules, names, name_off, schedule, delay_ms, header,
                  check_crc, lmq, lmq_text):
    """Walk and decode a[start:...] (see the module doc). Returns (stats, per-queue table, consume-queue
    rows, index keys, the name pool the table's topic_at/topic_len point into); stats[S_FALLBACK] != FB_NONE means the rest is to be ignored. `header`: the bytes of
    the DLedger entry header in front of each record (0: a plain segment); the walk goes entry by entry and
    decodes the record at entry pos + header, so everything it emits is as for a plain record. `check_crc`:
    check body CRCs (a failing record ends the walk, KEND_CRC at its entry/record position). `lmq` and
    `lmq_text`: the multi-dispatch rules (lmq_kernel's L_* slots) and their bytes."""
    stats = np.zeros(N_STATS, np.int64)
    cap = max(16, (stop - start) // 256)
    rows, keys = np.empty((cap, C_TS + 1), np.int64), np.empty((2 * cap, 3), np.int64)
    table, hot8, pool = np.zeros(1024, np.int64), _hot_rows(64), np.empty(4096, np.uint8)
    found_lo, found_hi = np.empty(name_off.shape[0] - 1, np.int64), np.empty(name_off.shape[0] - 1, np.int64)
    cur = np.zeros(N_CURSOR, np.int64)
    pend = np.empty((PENDING, N_PEND), np.int64)
    cur[W_POS], cur[W_AHEAD] = start, start - start % 64
    args = (base_offset, stop, min(a.shape[0], segment_end), segment_end, rules, names, name_off, schedule, delay_ms,
            header, check_crc, lmq, lmq_text)
    while not _walk(a, *args, stats, cur, found_lo, found_hi, table, hot8.view(np.int64), hot8, rows, keys, pool,
                    pend):
        if cur[W_ROWS_NEED] > rows.shape[0]:
            rows = _grow_rows(rows, cur[W_ROWS_NEED])
        if cur[W_KEYS_NEED] > keys.shape[0]:
            keys = _grow_rows(keys, cur[W_KEYS_NEED])
        if cur[W_QUEUES_NEED] * HOT_ROW > hot8.shape[0]:
            hot8 = _grow_hot(hot8, cur[W_QUEUES_NEED])
        if cur[W_POOL_NEED] > pool.shape[0]:
            pool = _grow_bytes(pool, cur[W_POOL_NEED])
        if 2 * cur[W_QUEUES_NEED] > table.shape[0]:
            size = 2 * table.shape[0]
            while 2 * cur[W_QUEUES_NEED] > size:
                size *= 2
            table = _rehashed(table, size)
    pos, n, ncq, nk, nq = cur[W_POS], cur[W_N], cur[W_NCQ], max(cur[W_NK], 0), cur[W_NQ]
    stats[S_FALLBACK_POS], stats[S_END_POS] = pos, pos
    stats[S_RECORDS], stats[S_CQ], stats[S_KEYS], stats[S_QUEUES] = n, ncq, nk, nq
    pu = cur[W_POOL]
    if stats[S_FALLBACK] != FB_NONE:  # the reference makes the outputs (the counts may be -1 here)
        nq, ncq, nk, pu = 0, 0, 0, 0
    return stats, _queues_out(hot8.view(np.int64), nq, rows, ncq), rows[:ncq], keys[:nk], pool[:pu]


@njit(inline="always")
def _record_at(a, pos, n, stop, limit, segment_end, base_offset, header, rules, stats):
    """Where the record of the entry or record at `pos` starts, and its size; size -1 when the walk ends here
    (stats say how). A DLedger entry (`header` bytes before its record) must follow the last one's index and
    may not lower its term: where one does not, the reference says where."""
    if not header:
        return pos, _header(a, pos, stop, limit, segment_end, rules, stats)
    size = _entry(a, pos, stop, limit, segment_end, base_offset, header, rules, stats)
    if size < 0:
        return pos, size
    entry, term = i64(a, pos + 8), i64(a, pos + 16)
    if n > 0 and (entry != stats[S_LAST_ENTRY] + 1 or term < stats[S_LAST_TERM]):
        stats[S_FALLBACK] = FB_BAD_ENTRY  # an index gap or a term going down: the reference says where
        return pos, np.int64(-1)
    return pos + header, size - header


@njit(inline="always")
def _placed(fb, phy, store_ts, rp, base_offset, rules):
    """A laid-out record's fallback reason once its physicalOffset and storeTimestamp are read: moved, undated."""
    if fb == FB_NONE and phy != base_offset + rp:
        return FB_MOVED
    if fb == FB_NONE and (store_ts < rules[R_MIN_TS] or store_ts > rules[R_MAX_TS]):
        return FB_UNDATED
    return fb


@njit(inline="always")
def _multi_items(a, fb, topic_at, topic_len, own_entry, found_lo, found_hi, schedule, lmq, lmq_text):
    """A checked record's multi-dispatch items (lmq_kernel): (fallback reason, how many)."""
    if fb != FB_NONE:
        return fb, np.int64(0)
    n_multi = multi_dispatch_items(a, topic_at, topic_len, own_entry, found_lo[P_MULTI], found_hi[P_MULTI],
                                   found_lo[P_MULTI_OFFSET], found_hi[P_MULTI_OFFSET], schedule, lmq, lmq_text)
    return (FB_MULTI_DISPATCH if n_multi == LEAVE else fb), n_multi


@njit(inline="always")
def _lacks_room(cur, nk, ncq, nq, pu, q, n_multi, topic_len, found_lo, found_hi, rows, keys, hot8, table, pool):
    """What the outputs need for the record (its multi-dispatch rows, and the items waiting, see _resolve), noted
    in cur; True when one of them lacks it."""
    cur[W_KEYS_NEED] = nk + 2 + found_hi[P_KEYS] - found_lo[P_KEYS]  # room for every KEYS token
    cur[W_ROWS_NEED] = ncq + 1 + n_multi
    cur[W_QUEUES_NEED] = nq + cur[W_PEND] + (1 if q < 0 else 0) + n_multi  # waiting items may be new queues
    cur[W_POOL_NEED] = (pu + cur[W_PEND_BYTES] + topic_len
                        + (found_hi[P_MULTI] - found_lo[P_MULTI] if n_multi > 0 else 0))
    return (cur[W_ROWS_NEED] > rows.shape[0] or cur[W_KEYS_NEED] > keys.shape[0]
            or cur[W_QUEUES_NEED] * HOT_ROW > hot8.shape[0] or 2 * cur[W_QUEUES_NEED] > table.shape[0]
            or cur[W_POOL_NEED] > pool.shape[0])


@njit(inline="always")
def _own_rows(a, rp, q, qid, phy, size, store_ts, tags_h, delay, delay_ms, n_multi, found_lo, found_hi, lmq,
              lmq_text, table, hot, hot8, rows, ncq, nq, pool, pu, pend, cur):
    """The record's own consume-queue row (tagsCode: the TAGS hash, or a delayed message's delivery time), then its
    multi-dispatch rows: the new (row count, queue count, pool length), or (-1, -1, -1) as _multi_dispatch_rows."""
    tags = signed32(tags_h)
    if delay > 0 and delay_ms.shape[0] > 0:  # delivery time of a delayed message
        tags = store_ts + delay_ms[min(delay, delay_ms.shape[0]) - 1]
    _cq_row(rows, ncq, q, i64(a, rp + 20), phy, size, tags, store_ts)
    ncq += 1
    if n_multi > 0:
        return _multi_dispatch_rows(a, found_lo[P_MULTI], found_hi[P_MULTI], found_lo[P_MULTI_OFFSET],
                                    found_hi[P_MULTI_OFFSET], n_multi, qid, phy, size, tags, store_ts, lmq, lmq_text,
                                    table, hot, hot8, rows, ncq, nq, pool, pu, pend, cur)
    return ncq, nq, pu


@njit(inline="always")
def _note_entry(stats, n, a, pos):
    """The split summary's first and last DLedger entry index and term, after entry number n."""
    if n == 0:
        stats[S_FIRST_ENTRY], stats[S_FIRST_TERM] = i64(a, pos + 8), i64(a, pos + 16)
    stats[S_LAST_ENTRY], stats[S_LAST_TERM] = i64(a, pos + 8), i64(a, pos + 16)


@njit(_nrt=False)
def _walk(a, base_offset, stop, limit, segment_end, rules, names, name_off, schedule, delay_ms, header, check_crc,
          lmq, lmq_text, stats, cur, found_lo, found_hi, table, hot, hot8, rows, keys, pool, pend):
    """Decode records from cur[W_POS] on: True when the walk ended (stats say how), False when an output
    lacks room for the next record (cur says what it needs). Compiled without numba's reference counting:
    it allocates nothing, so the arrays it hands its helpers need no atomic increments per record."""
    pos, n, ncq, nk, nq, ahead, pu = cur[W_POS], cur[W_N], cur[W_NCQ], cur[W_NK], cur[W_NQ], cur[W_AHEAD], cur[W_POOL]
    done, touched = True, 0
    while True:
        while ahead < min(pos + TOUCH_AHEAD, limit):  # each header's address hangs on the last one's load:
            touched += a[ahead]                          # load the lines ahead early, all in flight at once
            ahead += 64
        rp, size = _record_at(a, pos, n, stop, limit, segment_end, base_offset, header, rules, stats)
        if size < 0:
            break
        end = rp + size
        fb, sys_flag, store_ts_at, topic_at, topic_len, ps = _layout(a, rp, end, rules)
        if check_crc and (fb == FB_NONE or fb == FB_LAYOUT) and _crc_fails(a, rp, end, rules):
            stats[S_END] = KEND_CRC  # the broker checks the CRC first: nothing else of the record matters
            break
        phy, store_ts, qid = i64(a, rp + 28), i64(a, store_ts_at), i32(a, rp + 12)
        fb, th, q, delay, tags_h = _checks(_placed(fb, phy, store_ts, rp, base_offset, rules), a, topic_at, topic_len,
                                           qid, ps, end, schedule, names, name_off, found_lo, found_hi, table, hot,
                                           hot8, pool)
        tran = sys_flag & rules[R_TRAN_MASK]
        own_entry = tran == rules[R_TRAN_NOT] or tran == rules[R_TRAN_COMMIT]
        fb, n_multi = _multi_items(a, fb, topic_at, topic_len, own_entry, found_lo, found_hi, schedule, lmq, lmq_text)
        if fb != FB_NONE:
            stats[S_FALLBACK] = fb
            break
        if _lacks_room(cur, nk, ncq, nq, pu, q, n_multi, topic_len, found_lo, found_hi, rows, keys, hot8, table,
                       pool):
            done = False
            break
        if q < 0:
            pu = _add_queue(-1 - q, a, topic_at, topic_len, qid, _key_of(th, qid), table, hot, hot8, nq, pool, pu)
            q, nq = nq, nq + 1
        hot[q * (HOT_ROW // 8) + H_REC] += 1
        if own_entry:
            ncq, nq, pu = _own_rows(a, rp, q, qid, phy, size, store_ts, tags_h, delay, delay_ms, n_multi, found_lo,
                                    found_hi, lmq, lmq_text, table, hot, hot8, rows, ncq, nq, pool, pu, pend, cur)
            if ncq < 0:
                stats[S_FALLBACK] = FB_MULTI_DISPATCH
                break
        if tran != rules[R_TRAN_ROLLBACK]:
            nk = _index_keys(a, th, found_lo, found_hi, phy, store_ts, keys, nk)
            if nk < 0:
                stats[S_FALLBACK] = FB_NON_ASCII
                break
        _note_record(stats, n, rp, size, store_ts)
        if header:  # noted only once the record is taken: a walk stopped for room reads it again
            _note_entry(stats, n, a, pos)
        n += 1
        pos = end
    if stats[S_FALLBACK] == FB_NONE and cur[W_PEND] > 0:  # the walk ends or stops for room: no item waits
        nq, pu = _resolve(a, pend, cur, table, hot, hot8, rows, nq, pool, pu)
        if nq < 0:
            stats[S_FALLBACK], done = FB_MULTI_DISPATCH, True
    cur[W_POS], cur[W_N], cur[W_NCQ], cur[W_NK], cur[W_NQ], cur[W_AHEAD], cur[W_POOL] = pos, n, ncq, nk, nq, ahead, pu
    cur[W_TOUCHED] += touched  # a sink, so that the touching loads stay
    return done


@njit(inline="always")
def _add_queue(slot, a, topic_at, topic_len, qid, key, table, hot, hot8, nq, pool, pu):
    """Queue nq (topic a[topic_at:topic_at + topic_len] of at most 255 bytes, queueId, key hash) into a free
    slot of the table and its hot row, its topic appended to the name pool at pu (all have room); returns the
    pool's new length."""
    w = nq * (HOT_ROW // 8)
    hot[w + H_QID], hot[w + H_TOPIC], hot[w + H_REC] = qid, pu << 16 | topic_len, 0
    for k in range(min(topic_len, HOT_NAME)):
        hot8[nq * HOT_ROW + HOT_NAME_AT + k] = a[topic_at + k]
    for k in range(topic_len):
        pool[pu + k] = a[topic_at + k]
    table[slot] = (key << 32) | (nq + 1)
    return pu + topic_len


@njit(inline="always")
def _put_key(a, prefix, lo, hi, phy, store_ts, keys, nk):
    """Append the index key hash("topic#" + a[lo:hi]) at nk; returns the new count, -1 for malformed UTF-8."""
    h, ok = java_hash(a, prefix, lo, hi)
    if not ok:
        return -1
    keys[nk, K_HASH], keys[nk, K_PHY], keys[nk, K_TS] = index_key_hash(h), phy, store_ts
    return nk + 1




# Multi-dispatch items wait in `pend` (PENDING at most) for their queue: resolved together, the lookups' cache
# misses (table slot, then hot row, among tens of thousands of LMQ queues) overlap instead of following one
# another (measured: 3x fewer ns per lookup in a stream of records). Columns of `pend`:
PEND_AT, PEND_LEN, PEND_KEY, PEND_QID, PEND_ROW = range(5)
N_PEND = 5
PENDING = 32


@njit(inline="always")
def _multi_dispatch_rows(a, n_lo, n_hi, o_lo, o_hi, n_items, own_qid, phy, size, tags, ts, lmq, lmq_text, table,
                         hot, hot8, rows, ncq, nq, pool, pu, pend, cur):
    """After a record's own row, one row per multi-dispatch item in name order (multi_dispatch.lmq_entries): the
    item's offset, the record's phy, size, tags and storeTimestamp `ts`, its queue (the named one, added to the table
    when new) filled in by _resolve (room for every item and name is made before). Returns the new (row count, queue
    count, pool length), or (-1, -1, -1) when an item is the reference's (an offset or name the kernel refuses)."""
    sep = lmq[L_SEPARATOR]
    np_, op = n_lo, o_lo
    for _ in range(n_items):
        ne, oe = item_end(a, np_, n_hi, sep), item_end(a, op, o_hi, sep)
        if not skipped_name(a, np_, ne, lmq):
            offset, ok = parse_offset(a, op, oe)
            th, ok_name = java_hash(a, np.int64(0), np_, ne)
            if not ok or not ok_name:
                return np.int64(-1), np.int64(-1), np.int64(-1)
            if cur[W_PEND] == PENDING:
                nq, pu = _resolve(a, pend, cur, table, hot, hot8, rows, nq, pool, pu)
                if nq < 0:
                    return np.int64(-1), np.int64(-1), np.int64(-1)
            qid = item_queue_id(a, np_, ne, own_qid, lmq, lmq_text)
            j = cur[W_PEND]
            pend[j, PEND_AT], pend[j, PEND_LEN], pend[j, PEND_KEY] = np_, ne - np_, _key_of(th, qid)
            pend[j, PEND_QID], pend[j, PEND_ROW] = qid, ncq
            cur[W_PEND], cur[W_PEND_BYTES] = j + 1, cur[W_PEND_BYTES] + ne - np_
            _cq_row(rows, ncq, -1, offset, phy, size, tags, ts)
            ncq += 1
        np_, op = ne + 1, oe + 1
    return ncq, nq, pu


@njit(inline="always")
def _resolve(a, pend, cur, table, hot, hot8, rows, nq, pool, pu):
    """The queues of the waiting multi-dispatch items, into their rows' C_QUEUE, in the order they came (a new
    name is added to the table and the pool): first every item's table slot is loaded, then the hot row its
    slot names, then each is looked up. Returns the new (queue count, pool length), or (-1, -1) for an unsafe
    new name (the reference's)."""
    n, mask, sink = cur[W_PEND], table.shape[0] - 1, np.int64(0)
    for j in range(n):
        sink += table[pend[j, PEND_KEY] & mask]
    for j in range(n):
        v = table[pend[j, PEND_KEY] & mask]
        if v != 0:
            sink += hot[((v & 0xFFFFFFFF) - 1) * (HOT_ROW // 8) + H_TOPIC]
    for j in range(n):
        at, ln, key, qid = pend[j, PEND_AT], pend[j, PEND_LEN], pend[j, PEND_KEY], pend[j, PEND_QID]
        q = _find_queue(a, at, ln, qid, key, table, hot, hot8, pool)
        if q < 0:
            if unsafe_topic(a, at, ln):
                return np.int64(-1), np.int64(-1)
            pu = _add_queue(-1 - q, a, at, ln, qid, key, table, hot, hot8, nq, pool, pu)
            q, nq = nq, nq + 1
        rows[pend[j, PEND_ROW], C_QUEUE] = q
    cur[W_PEND], cur[W_PEND_BYTES] = 0, 0
    cur[W_TOUCHED] += sink  # a sink, so that the loads ahead stay
    return nq, pu
