"""LMQ / multi-dispatch: the extra consume-queue entries a record's INNER_MULTI_DISPATCH names.

With `enableMultiDispatch=true` the broker writes, after a record's own consume-queue entry, one ordinary
entry (same physical offset, size and tagsCode) per queue named in INNER_MULTI_DISPATCH, at the offset the
same position of INNER_MULTI_QUEUE_OFFSET gives (ConsumeQueue.multiDispatchLmqQueue). Both values are
split with Java's `split(",")` (trailing empty items dropped); both must be non-blank and of equal length,
else the record gets no extra entry. `%LMQ%` names use queueId 0 when `enableLmq=true`, any other name the
record's own queueId. Version differences (read from the 4.9.8 and 5.3.3 sources):

* 4.9.x dispatches whatever record carries the two properties, whatever its topic.
* 5.x dispatches only records whose topic is not `%RETRY%*`, `rmq_sys_*` or `SCHEDULE_TOPIC_XXXX`
  (MultiDispatchUtils.isNeedHandleMultiDispatch) and skips names containing '/' before parsing their offset.

An offset item `Long.parseLong` rejects makes the broker's dispatch thread fail on that record again and
again (it never gets past it): such a store is refused, naming the record. Where an entry lands in its
queue (the write position when offsets were used up without an entry) is `consume_queue.place_units`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .java_props import LONG_BITS, java_parse_integral
from .record import SCHEDULE_TOPIC

INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_PREFIX = "%LMQ%"
LMQ_QUEUE_ID = 0
SEPARATOR = ","
RETRY_PREFIX = "%RETRY%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# Character.isWhitespace: Unicode space/line/paragraph separators except the no-break ones, plus these controls.
JAVA_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                   "\u2008\u2009\u200a\u2028\u2029\u205f\u3000")


class MultiDispatchError(ValueError):
    """A record the broker's dispatch cannot get past; `record` is its index in the given columns."""

    def __init__(self, record: int, reason: str) -> None:
        super().__init__(reason)
        self.record = record


@dataclass(frozen=True)
class MultiDispatchRules:
    """Which broker rules apply: the generation that wrote the store (4 or 5) and its two settings."""

    generation: int
    enable_lmq: bool
    enable_multi_dispatch: bool
    # False when 4 is only the default guess (nothing in the store said which): then a record only 5.x
    # writes (an empty INNER_MULTI_QUEUE_OFFSET item) is refused instead of read with 4.x rules.
    generation_known: bool = True
    # RocksDB consume queues (storeType=defaultRocksDB, storage_format.rocksdb_dispatch): names holding '/' get units.
    keep_separator_names: bool = False


@dataclass(frozen=True)
class LmqEntries:
    """Extra consume-queue entries, in dispatch order (record order, then name order within a record)."""

    record: np.ndarray  # int64: index of the record the entry copies (phy, size, tagsCode)
    queue: pa.Array  # large_string: the named queue's topic
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64: the stored offset
    seq: np.ndarray  # int64: 1-based position of the name in its record (0 is the record's own entry)

    def __len__(self) -> int:
        return len(self.record)


def is_lmq(name: str) -> bool:
    """MixAll.isLmq: a `%LMQ%` queue name."""
    return name.startswith(LMQ_PREFIX)


def names_entry(properties: dict[str, str], own_queue_id: int, topic: str, queue_id: int, queue_offset: int) -> bool:
    """The record's INNER_MULTI_DISPATCH names `topic` and INNER_MULTI_QUEUE_OFFSET gives it `queue_offset`, in the
    queue multi-dispatch puts that entry in (LMQ_QUEUE_ID for a `%LMQ%` name, else the record's own: lmq_entries): a
    consume-queue unit there is one of the record's multi-dispatch entries, not a misplaced one."""
    names = (properties.get(INNER_MULTI_DISPATCH) or "").split(SEPARATOR)
    offsets = (properties.get(INNER_MULTI_QUEUE_OFFSET) or "").split(SEPARATOR)
    return queue_id == (LMQ_QUEUE_ID if is_lmq(topic) else own_queue_id) and any(
        name == topic and i < len(offsets) and offsets[i].strip() == str(queue_offset) for i, name in enumerate(names))


def java_split(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """`split(",")` of every value as (owner row, items): Java drops trailing empty items (so "a,b," has two
    items and ",," none); a null value has no items."""
    parts = pc.split_pattern(values.cast(pa.large_string()), SEPARATOR)
    lengths = pc.fill_null(pc.list_value_length(parts), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(parts)
    owner = np.repeat(np.arange(len(values), dtype=np.int64), lengths)
    position = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    filled = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    last = np.full(len(values), -1, np.int64)  # position of each row's last non-empty item
    np.maximum.at(last, owner[filled], position[filled])
    keep = position <= last[owner]
    return owner[keep], flat.filter(pa.array(keep))


def non_blank(values: pa.Array) -> np.ndarray:
    """StringUtils.isNotBlank per value (null and all-whitespace are blank)."""
    trimmed = pc.utf8_trim(values.cast(pa.large_string()), characters=JAVA_WHITESPACE)
    return pc.fill_null(pc.greater(pc.binary_length(trimmed), 0), False).to_numpy(zero_copy_only=False)


def dispatching_topic(topics: pa.Array, generation: int) -> np.ndarray:
    """Records whose topic allows multi-dispatch: every topic in 4.x; in 5.x not %RETRY%*, rmq_sys_*
    or SCHEDULE_TOPIC_XXXX (MixAll.topicAllowsLMQ)."""
    if generation < 5:
        return np.ones(len(topics), bool)
    excluded = pc.or_(pc.or_(pc.starts_with(topics, RETRY_PREFIX), pc.starts_with(topics, SYSTEM_TOPIC_PREFIX)),
                      pc.equal(topics, SCHEDULE_TOPIC))
    return ~pc.fill_null(excluded, False).to_numpy(zero_copy_only=False)


def _parse_offsets(items: pa.Array, owner: np.ndarray) -> np.ndarray:
    """Long.parseLong of every item; the first item it rejects raises MultiDispatchError."""
    plain = pc.match_substring_regex(items, r"^[+-]?[0-9]{1,18}$").to_numpy(zero_copy_only=False)
    out = np.zeros(len(items), np.int64)
    if plain.all():
        return pc.cast(pc.utf8_ltrim(items, characters="+"), pa.int64()).to_numpy()
    texts = items.to_pylist()
    for i, text in enumerate(texts):
        value = int(text) if plain[i] else java_parse_integral(text, LONG_BITS)  # Long.parseLong
        if value is None:
            raise MultiDispatchError(int(owner[i]), f"{INNER_MULTI_QUEUE_OFFSET} item {text!r} is not a long: the "
                                                    f"broker's dispatch fails on this record every time it "
                                                    f"retries it and never gets past it")
        out[i] = value
    return out


def lmq_entries(names: pa.Array, offsets: pa.Array, topics: pa.Array, queue_id: np.ndarray,
                rules: MultiDispatchRules) -> LmqEntries:
    """The extra entries of records that get a consume-queue entry of their own (pass only those):
    `names`/`offsets` are their INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET values (null if absent)."""
    n = len(names)
    if rules.enable_multi_dispatch and rules.generation < 5 and not rules.generation_known:
        slot = first_empty_offset_slot(offsets)
        if slot is not None:
            raise MultiDispatchError(slot, f"{INNER_MULTI_QUEUE_OFFSET} {offsets[slot].as_py()!r} has an empty "
                                           f"item, which only RocketMQ 5.x writes, but nothing in the store root "
                                           f"says 5.x (abort PID, abort.bak, checkpoint fields) and 4.x rules "
                                           f"would apply: say which with --rocketmq-version")
    cand = np.zeros(n, bool)
    if rules.enable_multi_dispatch and n:
        cand = non_blank(names) & non_blank(offsets) & dispatching_topic(topics, rules.generation)
    rows = np.flatnonzero(cand)
    name_owner, name_items = java_split(names.take(pa.array(rows)))
    off_owner, off_items = java_split(offsets.take(pa.array(rows)))
    counts_equal = np.bincount(name_owner, minlength=len(rows)) == np.bincount(off_owner, minlength=len(rows))
    take = counts_equal[name_owner]  # Java: a count mismatch means no extra entry for the record at all
    owner, name_items, off_items = name_owner[take], name_items.filter(pa.array(take)), \
        off_items.filter(pa.array(counts_equal[off_owner]))
    first = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(rows)))[:-1]]).astype(np.int64)
    seq = np.arange(len(owner), dtype=np.int64) - first[owner] + 1
    if rules.generation >= 5 and not rules.keep_separator_names:  # file queues skip names holding File.separator
        keep = ~pc.match_substring(name_items, "/").to_numpy(zero_copy_only=False)
        owner, seq, name_items, off_items = owner[keep], seq[keep], name_items.filter(pa.array(keep)), \
            off_items.filter(pa.array(keep))
    record = rows[owner]
    parsed = _parse_offsets(off_items, record)
    lmq = pc.starts_with(name_items, LMQ_PREFIX).to_numpy(zero_copy_only=False) & rules.enable_lmq
    qid = np.where(lmq, LMQ_QUEUE_ID, np.asarray(queue_id)[record]).astype(np.int32)
    return LmqEntries(record.astype(np.int64), name_items.cast(pa.large_string()), qid, parsed, seq)


def first_empty_offset_slot(offsets: pa.Array) -> int | None:
    """Index of the first record whose INNER_MULTI_QUEUE_OFFSET has an empty item (e.g. "5,4,"): only 5.x
    writes those (it gives non-%LMQ% names no offset); 4.x gives every name one. None if there is none."""
    if not len(offsets):
        return None
    text = offsets.cast(pa.large_string())
    empty = pc.or_(pc.or_(pc.match_substring(text, ",,"), pc.starts_with(text, ",")), pc.ends_with(text, ","))
    hits = np.flatnonzero(pc.fill_null(empty, False).to_numpy(zero_copy_only=False))
    return int(hits[0]) if len(hits) else None


def rules_for(enable_multi_dispatch: bool | None, enable_lmq: bool | None, generation: int,
              generation_known: bool = True) -> MultiDispatchRules | None:
    """The rules a broker with these settings follows; None when multi-dispatch is off or not configured."""
    if not enable_multi_dispatch:
        return None
    return MultiDispatchRules(generation, bool(enable_lmq), True, generation_known)


def queues_per_record(entries: LmqEntries, n: int) -> pa.Array:
    """The queues each of `n` records is multi-dispatched to (`entries.record` indexes them), in name
    order: list<string>, null for a record without any."""
    counts = np.bincount(entries.record, minlength=n) if len(entries) else np.zeros(n, np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    order = np.argsort(entries.record, kind="stable")
    values = entries.queue.take(pa.array(order)).cast(pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(counts == 0))
