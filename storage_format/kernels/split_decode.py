"""A split decoded by the compiled kernel (split_kernel), or the reason it is left to the reference.

`decode_fast` runs the kernel over a buffer and returns a `FastSplit`: what the build stages read (the
split's (topic, queueId) table with per-queue counts and queue-offset ranges, the consume-queue rows
grouped by queue in (topic, queueId) order, the index keys in dispatch order) and how the walk ended.
The broker constants the kernel applies are passed in from their one home each, the multi-dispatch rules
(storage_format.multi_dispatch) among them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import lmq_kernel as lk, split_kernel as k
from .record_search import find_record
from .. import dledger
from ..commitlog import (END_BAD_MAGIC, END_BLANK, END_CRC_MISMATCH, END_FILE, END_STOP, MIN_RECORD_SIZE,
                         SCHEDULE_TOPIC, ScanEnd, parse_segment_name)
from ..multi_dispatch import (INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, JAVA_WHITESPACE, LMQ_PREFIX, LMQ_QUEUE_ID,
                              RETRY_PREFIX, SEPARATOR, SYSTEM_TOPIC_PREFIX, MultiDispatchRules)
from ..properties import DELAY, KEYS, TAGS, UNIQ_KEY
from ..record import (FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, TRAN_COMMIT, TRAN_MASK,
                     TRAN_NOT, TRAN_ROLLBACK)
from ..index_keys import KeyBatch
from ..record_columns import RecordColumns
from ..queue_table import QueueTable, key_order
from ..split_rows import CqRows
from .row_groups import group_rows
from ..store_layout import INNER_BATCH_FLAG

# Why the kernel left a split to the reference decoder, by its split_kernel.FB_* code.
FALLBACK_NAMES = {k.FB_NONE: "", k.FB_NEED_BYTES: "record runs past the buffer", k.FB_BAD_TOTAL_SIZE: "bad totalSize",
                  k.FB_LAYOUT: "size mismatch", k.FB_MOVED: "moved record", k.FB_UNDATED: "undated record",
                  k.FB_TOPIC: "unsafe or malformed topic", k.FB_SCHEDULE: "bad DELAY",
                  k.FB_NON_ASCII: "malformed key or tag", k.FB_MULTI_DISPATCH: "multi-dispatch edge case",
                  k.FB_INNER_BATCH: "inner-batch record", k.FB_BAD_ENTRY: "bad DLedger entry"}
NO_RECORD_START = "no record start found"  # not a fallback: no record to decode, the reference says where it ends
_END_NAMES = {k.KEND_STOP: END_STOP, k.KEND_BLANK: END_BLANK, k.KEND_FILE: END_FILE, k.KEND_BAD_MAGIC: END_BAD_MAGIC,
              k.KEND_CRC: END_CRC_MISMATCH}
CRC_DISAGREES = "kernel CRC disagrees with zlib"  # a fallback that cannot happen while crc_kernel equals zlib
_WANTED = (TAGS, KEYS, UNIQ_KEY, INNER_MULTI_DISPATCH, DELAY, INNER_MULTI_QUEUE_OFFSET)  # in split_kernel.P_* order
_NAMES = np.frombuffer("".join(_WANTED).encode(), np.uint8)
_NAME_OFF = np.cumsum([0] + [len(n) for n in _WANTED]).astype(np.int64)
_SCHEDULE = np.frombuffer(SCHEDULE_TOPIC.encode(), np.uint8)
_CQ_COLUMNS = np.array([k.C_QO, k.C_PHY, k.C_SIZE, k.C_TAGS], np.int64)  # the CqRows columns, in their order
_CQ_COLUMNS_TS = np.array([k.C_QO, k.C_PHY, k.C_SIZE, k.C_TAGS, k.C_TS], np.int64)  # and the store timestamps
FILE_SEPARATOR = "/"  # java.io.File.separator on the brokers' platforms: 5.x skips names holding it


def _read_only(buf) -> np.ndarray:
    """buf's bytes as a read-only uint8 array (one compiled signature: segment buffers are read-only)."""
    arr = np.frombuffer(buf, np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def find_first_record_fast(buf, base_offset: int, start: int, stop: int) -> int | None:
    """commitlog.find_first_record with the compiled search (record_search.find_record)."""
    arr = _read_only(buf)
    found = find_record(arr, arr[:len(arr) // 8 * 8].view("<u8"), base_offset, start, stop, MAGIC_V1, MAGIC_V2)
    return None if found < 0 else int(found)


def find_first_start_fast(buf, base_offset: int, start: int, stop: int, header: int = 0) -> int | None:
    """commitlog.find_first_start with the compiled record search (a DLedger data file's entries too)."""
    if header:
        return dledger.find_first_entry(buf, base_offset, start, stop, find_first_record_fast)
    return find_first_record_fast(buf, base_offset, start, stop)


@dataclass(frozen=True, kw_only=True)
class FastSplit:
    """What the kernel found in a split (see the module doc); positions are buffer positions."""

    records: int
    blanks: int
    end: ScanEnd
    first_position: int | None
    last_position: int | None
    last_size: int
    store_ts: tuple[int, int, int, int] | None  # first, last, min, max
    queues: QueueTable
    cq: CqRows
    keys: KeyBatch
    first_entry: int | None = None  # DLedger entry index of the first and last entry (None: plain)
    last_entry: int | None = None
    first_term: int | None = None  # and their terms
    last_term: int | None = None


def _rules(min_ts: int, max_ts: int) -> np.ndarray:
    rules = np.zeros(k.N_RULES, np.int64)
    rules[[k.R_MIN_SIZE, k.R_MAGIC_V1, k.R_MAGIC_V2, k.R_MAGIC_BLANK]] = (MIN_RECORD_SIZE, MAGIC_V1, MAGIC_V2,
                                                                          MAGIC_BLANK)
    rules[[k.R_TRAN_MASK, k.R_TRAN_ROLLBACK, k.R_TRAN_NOT, k.R_TRAN_COMMIT]] = (TRAN_MASK, TRAN_ROLLBACK, TRAN_NOT,
                                                                                TRAN_COMMIT)
    rules[[k.R_BORN_V6, k.R_STORE_V6, k.R_MIN_TS, k.R_MAX_TS]] = (FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, min_ts, max_ts)
    rules[k.R_INNER_BATCH] = INNER_BATCH_FLAG
    rules[[k.R_ENTRY_MAGIC, k.R_ENTRY_BLANK]] = (dledger.ENTRY_MAGIC, dledger.BLANK_MAGIC)
    return rules


def _lmq_rules(rules: MultiDispatchRules | None, configured: bool) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's `lmq` and `lmq_text` arguments (lmq_kernel's L_* slots) for these multi-dispatch rules."""
    lmq = np.zeros(lk.N_LMQ, np.int64)
    white = np.zeros(lk.WHITE_TABLE, np.uint8)
    white[[ord(c) for c in JAVA_WHITESPACE if ord(c) < lk.WHITE_TABLE]] = 1
    text = white.tobytes()
    for at_slot, len_slot, prefix in ((lk.L_LMQ_AT, lk.L_LMQ_LEN, LMQ_PREFIX), (lk.L_RETRY_AT, lk.L_RETRY_LEN, RETRY_PREFIX),
                                      (lk.L_SYSTEM_AT, lk.L_SYSTEM_LEN, SYSTEM_TOPIC_PREFIX)):
        lmq[at_slot], lmq[len_slot] = len(text), len(prefix.encode())
        text += prefix.encode()
    lmq[lk.L_MODE] = lk.MODE_UNCONFIGURED if not configured else lk.MODE_OFF if rules is None else lk.MODE_ON
    if rules is not None:
        lmq[[lk.L_GENERATION, lk.L_ENABLE_LMQ, lk.L_GENERATION_KNOWN]] = (rules.generation, rules.enable_lmq,
                                                                          rules.generation_known)
        if not rules.enable_multi_dispatch:
            lmq[lk.L_MODE] = lk.MODE_OFF
    lmq[[lk.L_SEPARATOR, lk.L_FILE_SEPARATOR, lk.L_LMQ_QUEUE_ID]] = (ord(SEPARATOR), ord(FILE_SEPARATOR), LMQ_QUEUE_ID)
    if rules is not None and rules.keep_separator_names:
        lmq[lk.L_FILE_SEPARATOR] = -1  # no byte equals it: RocksDB consume queues skip no name
    return lmq, np.frombuffer(text, np.uint8)


def decode_fast(buf, base_offset: int, start: int, stop: int, segment_end: int, *, path: str,
                find_start: bool, dated: tuple[int, int], delay_levels_ms: tuple[int, ...],
                header: int = 0, check_crc: bool = False, multi_dispatch: MultiDispatchRules | None = None,
                multi_dispatch_configured: bool = False, with_store_ts: bool = False) -> FastSplit | str:
    """Decode buf's records starting in [start, stop) with the kernel, or return why the reference
    must (a short reason). `dated` is the (min, max) storeTimestamp the fast path accepts;
    `delay_levels_ms` the broker's messageDelayLevel table (tagsCode of delayed messages); `header` the
    DLedger entry header in front of each record (0: a plain segment); `check_crc` checks body CRCs as
    decode_buffer does (the first failing record ends the walk: crc_mismatch, the reference's detail).
    `multi_dispatch`: the rules that give records their extra entries (None: multi-dispatch off when
    `multi_dispatch_configured`, else enableMultiDispatch is unset and a record carrying both properties is
    left to the reference, which refuses it). `with_store_ts`: the rows carry their records' storeTimestamp
    (CqRows.store_ts: RocksDB units hold it). Positions walked (first_position, the end) are entry positions;
    last_position is the last record's."""
    arr = _read_only(buf)
    first = start
    if find_start:
        found = find_first_start_fast(buf, base_offset, start, stop, header)
        if found is None:
            return NO_RECORD_START  # the reference's answer is cheap here
        first = found
    stats, queues, rows, keys, pool = k.decode_kernel(arr, base_offset, first, stop, segment_end, _rules(*dated),
                                                _NAMES, _NAME_OFF, _SCHEDULE,
                                                np.asarray(delay_levels_ms, np.int64).reshape(-1), header,
                                                bool(check_crc), *_lmq_rules(multi_dispatch, multi_dispatch_configured))
    if stats[k.S_FALLBACK] != k.FB_NONE:
        return FALLBACK_NAMES[int(stats[k.S_FALLBACK])]
    records = int(stats[k.S_RECORDS])
    seg_start = parse_segment_name(path.rstrip("/").rsplit("/", 1)[-1])
    end_at = base_offset + int(stats[k.S_END_POS])
    reason = _END_NAMES[int(stats[k.S_END])]
    detail = ""
    if reason == END_CRC_MISMATCH:  # the reference's words for it, from the one record
        bad = RecordColumns(buf, base_offset, np.array([int(stats[k.S_END_POS]) + header], np.int64),
                            path).first_crc_error()
        if bad is None:
            return CRC_DISAGREES
        detail = bad[1]
    end = ScanEnd(reason, end_at, int(stats[k.S_END_MAGIC]) if reason == END_BAD_MAGIC else None, detail=detail,
                  path=path, file_offset=end_at - (base_offset if seg_start is None else seg_start))
    table, cq = _group(pool, queues, rows, with_store_ts)
    ts = None if not records else tuple(int(stats[i]) for i in (k.S_FIRST_TS, k.S_LAST_TS, k.S_MIN_TS, k.S_MAX_TS))
    return FastSplit(records=records, blanks=int(stats[k.S_BLANKS]), end=end,
                     first_position=first if records or reason == END_CRC_MISMATCH or not find_start else None,
                     last_position=int(stats[k.S_LAST_POS]) if records else None,
                     last_size=int(stats[k.S_LAST_SIZE]), store_ts=ts, queues=table, cq=cq,
                     keys=KeyBatch(keys[:, k.K_HASH].astype(np.int32), keys[:, k.K_PHY].copy(), keys[:, k.K_TS].copy()),
                     first_entry=int(stats[k.S_FIRST_ENTRY]) if header and records else None,
                     last_entry=int(stats[k.S_LAST_ENTRY]) if header and records else None,
                     first_term=int(stats[k.S_FIRST_TERM]) if header and records else None,
                     last_term=int(stats[k.S_LAST_TERM]) if header and records else None)


def _group(pool: np.ndarray, qs: np.ndarray, rows: np.ndarray, with_store_ts: bool) -> tuple[QueueTable, CqRows]:
    """The split's queue table in (topic, queueId) order and its rows grouped by queue, vectorised: an LMQ
    split names tens of thousands of queues, none of which becomes a Python object here. The kernel's name
    pool holds the topics back to back in queue order: it is the topic column's data as it is."""
    n = len(qs)
    offsets = np.append(qs[:, k.Q_TOPIC_AT], len(pool)).astype(np.int64)
    topic = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(pool))
    qid = qs[:, k.Q_QID]
    order = key_order(topic, qid)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    grouped, starts = group_rows(rows, k.C_QUEUE, _CQ_COLUMNS_TS if with_store_ts else _CQ_COLUMNS, rank, n)
    qo, phy, size, tags = grouped[:4]
    first_row = np.empty(n, np.int64)
    first_row[order] = starts[:n]
    table = QueueTable.build(topic, qid, qs[:, k.Q_REC], qs[:, k.Q_CQ], first_row, qs[:, k.Q_LO], qs[:, k.Q_HI],
                             qs[:, k.Q_UNORD] != 0, order=order)
    return table, CqRows(qo, phy, size.astype(np.int32), tags, store_ts=grouped[4] if with_store_ts else None)


def record_after_clean_end(buf, base_offset: int, end: ScanEnd, global_start: int, global_stop: int,
                           header: int = 0) -> int | None:
    """When a walk ended at a zero header inside [global_start, global_stop), the first record (entry, in
    a DLedger data file) after it there (the zero-filled tail of a healthy segment holds none; eight zeroed
    bytes mid-segment do)."""
    if not end.is_clean or not global_start <= end.offset < global_stop:
        return None
    found = find_first_start_fast(buf, base_offset, end.offset - base_offset + 1, global_stop - base_offset, header)
    return None if found is None else base_offset + found
