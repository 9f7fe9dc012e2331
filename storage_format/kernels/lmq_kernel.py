"""Multi-dispatch (LMQ) rules of the compiled split decoder, over a record's bytes.

multi_dispatch.lmq_entries' rules per generation, a record at a time: whether a record with its own
consume-queue entry gets extra entries (both INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET non-blank,
its topic allowed in 5.x, equal item counts under Java's `split(",")`), and its items one by one. Inlined
into split_kernel's walk, which adds the entries to its queue table. Whatever these helpers cannot settle
for sure (a value blank only if non-ASCII characters are Unicode whitespace, an offset item that is no
plain decimal of at most 18 digits, an empty offset item under a guessed 4.x generation, both properties
while enableMultiDispatch is unset) makes the record the reference's, which reads or refuses it. The
broker constants are passed in (`lmq`, `lmq_text`, built by split_decode from multi_dispatch), so this
module defines none of them.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

# Slots of the `lmq` argument.
L_MODE, L_GENERATION, L_ENABLE_LMQ, L_GENERATION_KNOWN, L_SEPARATOR, L_FILE_SEPARATOR, L_LMQ_QUEUE_ID = range(7)
L_LMQ_AT, L_LMQ_LEN, L_RETRY_AT, L_RETRY_LEN, L_SYSTEM_AT, L_SYSTEM_LEN = range(7, 13)  # prefixes in lmq_text
N_LMQ = 13
# L_MODE: the properties mean nothing (enableMultiDispatch=false), the rules apply, or the config leaves
# enableMultiDispatch unset (a record carrying both properties is the reference's: it refuses the store).
MODE_OFF, MODE_ON, MODE_UNCONFIGURED = 0, 1, 2
WHITE_TABLE = 128  # lmq_text[:128]: 1 where an ASCII byte is Java whitespace (Character.isWhitespace)
LEAVE = -1  # multi_dispatch_items: the record is the reference's


@njit(inline="always")
def _blank(a, lo, hi, text):
    """StringUtils.isBlank of a present value a[lo:hi]: 1 blank, 0 not, -1 unsure (no ASCII byte but
    whitespace, and some non-ASCII bytes: Unicode whitespace is the reference's to judge)."""
    wide = False
    for p in range(lo, hi):
        c = a[p]
        if c >= 0x80:
            wide = True
        elif text[c] == 0:
            return 0
    return -1 if wide else 1


@njit(inline="always")
def _starts_with(a, lo, hi, text, at, n):
    """a[lo:hi] starts with text[at:at+n]."""
    if hi - lo < n:
        return False
    for k in range(n):
        if a[lo + k] != text[at + k]:
            return False
    return True


@njit(inline="always")
def _split_count(a, lo, hi, sep):
    """How many items Java's split(sep) gives for a[lo:hi] (a non-empty value): trailing empty items dropped."""
    n, kept, start = 0, 0, lo
    for p in range(lo, hi + 1):
        if p == hi or a[p] == sep:
            n += 1
            if p > start:
                kept = n
            start = p + 1
    return kept


@njit(inline="always")
def _has_empty_item(a, lo, hi, sep):
    """An empty item in a[lo:hi] split on sep (",," inside, or a leading or trailing sep): only 5.x writes those."""
    if a[lo] == sep or a[hi - 1] == sep:
        return True
    for p in range(lo + 1, hi):
        if a[p] == sep and a[p - 1] == sep:
            return True
    return False


@njit(inline="always")
def multi_dispatch_items(a, topic_at, topic_len, own_entry, n_lo, n_hi, o_lo, o_hi, schedule, lmq, lmq_text):
    """Over how many (name, offset) items a record is multi-dispatched: 0 for none (no own consume-queue
    entry, a blank property, a 5.x topic that allows no LMQ, unequal counts), LEAVE when the kernel leaves
    it to the reference. n_lo/n_hi and o_lo/o_hi: the two values' ranges (-1 where absent)."""
    mode = lmq[L_MODE]
    if mode == MODE_OFF or (n_lo < 0 and o_lo < 0):
        return 0
    if mode == MODE_UNCONFIGURED:
        return LEAVE if n_lo >= 0 and o_lo >= 0 else 0
    if not own_entry:
        return 0
    sep = lmq[L_SEPARATOR]
    if lmq[L_GENERATION] < 5 and lmq[L_GENERATION_KNOWN] == 0 and o_lo >= 0 and _has_empty_item(a, o_lo, o_hi, sep):
        return LEAVE  # the reference refuses the store (only 5.x writes that; say which generation)
    if n_lo < 0 or o_lo < 0:
        return 0
    bn, bo = _blank(a, n_lo, n_hi, lmq_text), _blank(a, o_lo, o_hi, lmq_text)
    if bn == 1 or bo == 1:
        return 0
    if bn < 0 or bo < 0:
        return LEAVE
    if lmq[L_GENERATION] >= 5:
        hi = topic_at + topic_len
        if (_starts_with(a, topic_at, hi, lmq_text, lmq[L_RETRY_AT], lmq[L_RETRY_LEN])
                or _starts_with(a, topic_at, hi, lmq_text, lmq[L_SYSTEM_AT], lmq[L_SYSTEM_LEN])
                or (topic_len == schedule.shape[0] and _starts_with(a, topic_at, hi, schedule, 0, topic_len))):
            return 0
    n = _split_count(a, n_lo, n_hi, sep)
    return n if n == _split_count(a, o_lo, o_hi, sep) else 0


@njit(inline="always")
def item_end(a, p, hi, sep):
    """End of the item starting at p in a value ending at hi (the next separator, or hi)."""
    while p < hi and a[p] != sep:
        p += 1
    return p


@njit(inline="always")
def skipped_name(a, lo, hi, lmq):
    """5.x skips a name holding File.separator before reading its offset."""
    if lmq[L_GENERATION] < 5:
        return False
    for p in range(lo, hi):
        if a[p] == lmq[L_FILE_SEPARATOR]:
            return True
    return False


@njit(inline="always")
def item_queue_id(a, lo, hi, own_qid, lmq, lmq_text):
    """The queueId of name a[lo:hi]: the LMQ queueId for a %LMQ% name with enableLmq, else the record's own."""
    if lmq[L_ENABLE_LMQ] and _starts_with(a, lo, hi, lmq_text, lmq[L_LMQ_AT], lmq[L_LMQ_LEN]):
        return lmq[L_LMQ_QUEUE_ID]
    return own_qid


@njit(inline="always")
def parse_offset(a, lo, hi):
    """Long.parseLong of an ASCII [+-]digits item of at most 18 digits: (value, True); (0, False) for
    anything else (Unicode digits, 19 digits, an empty item, no number): the reference reads or refuses it."""
    p = lo + 1 if lo < hi and (a[lo] == 0x2D or a[lo] == 0x2B) else lo
    if p >= hi or hi - p > 18:
        return np.int64(0), False
    v = np.int64(0)
    for q in range(p, hi):
        if not 0x30 <= a[q] <= 0x39:
            return np.int64(0), False
        v = v * 10 + (a[q] - 0x30)
    return (-v if a[lo] == 0x2D else v), True
