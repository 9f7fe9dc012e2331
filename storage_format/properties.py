"""Message properties (`name\\x01value\\x02` ...) parsed with the broker's rules.

Rules (MessageDecoder.string2messageProperties, 4.9.x and 5.x): items are separated by \\x02; an
item's name runs to the first \\x01 after the item start; the item is kept only when the name is
non-empty and the value (after that \\x01, up to the item end) is non-empty; a later duplicate name
overwrites an earlier one. `locate_properties` applies the same rules to many records at once;
`parse_properties_arrow` and `split_keys_arrow` turn whole Arrow columns into maps / KEYS token lists.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .java_hash import arrow_buffers, java_hash_ragged
from .ragged import plain_array, slices_to_binary

NAME_VALUE_SEP = 0x01
PROPERTY_SEP = 0x02

TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"


_NONE = np.iinfo(np.int64).max


def _next_at_or_after(sorted_pos: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the first element of `sorted_pos` >= it, or a huge sentinel."""
    padded = np.append(sorted_pos, _NONE)
    return padded[np.searchsorted(sorted_pos, queries, side="left")]


def parse_properties(raw: str | None) -> dict[str, str]:
    """Scalar reference parser: the broker's map of a record's properties string."""
    out: dict[str, str] = {}
    if not raw:
        return out
    length, index = len(raw), 0
    while index < length:
        new_index = raw.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = raw.find("\x01", index)
            if index < kv < new_index - 1:
                out[raw[index:kv]] = raw[kv + 1:new_index]
        index = new_index + 1
    return out


def split_keys(keys: str | None) -> list[str]:
    """KEYS as the index splits it: on single spaces, empty tokens dropped, duplicates kept."""
    if not keys:
        return []
    return [k for k in keys.split(" ") if k]


def _items_named(name: str, c_data: np.ndarray, items: np.ndarray, heads: np.ndarray,
                 item_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(item indexes, value starts) of the items that hold `name` with a non-empty value: their bytes spell
    the name, then \x01, then at least one value byte before the item end. `heads` is each item's first
    four bytes as a big-endian int (a quick filter for names of four bytes or more)."""
    code = name.encode()
    if not code or NAME_VALUE_SEP in code or PROPERTY_SEP in code:
        raise ValueError(f"property name {name!r} must be non-empty and hold no separator")
    m = len(code)
    if m >= 4:
        k, first = np.flatnonzero(heads == int.from_bytes(code[:4], "big")), 4
    else:
        k, first = np.arange(len(items)), 0
    for j in range(first, m):
        k = k[c_data[items[k] + j] == code[j]]
    k = k[c_data[items[k] + m] == NAME_VALUE_SEP]
    value_at = items[k] + m + 1
    return k[value_at < item_end[k]], value_at[value_at < item_end[k]]  # non-empty value


def locate_properties(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                      names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each wanted name, the (value start, value length) in `data` per record; start -1 if absent.

    `data` is a uint8 buffer, record r's properties are data[starts[r]:starts[r]+lengths[r]]
    (records ascending, non-overlapping). Vectorised over a compact copy of the properties bytes:
    item starts come from one scan for \x02; an item holds a wanted name when its bytes spell the
    name followed by \x01 (names hold neither separator, so that \x01 is the item's first) and a
    non-empty value follows, the broker's conditions for keeping an item.
    """
    n = len(starts)
    result = {name: (np.full(n, -1, np.int64), np.zeros(n, np.int64)) for name in names}
    lengths = np.maximum(lengths.astype(np.int64), 0)
    starts = starts.astype(np.int64)
    has = lengths > 0
    if n == 0 or not has.any():
        return result
    rec_idx = np.flatnonzero(has)
    r_start = starts[rec_idx]
    compact = slices_to_binary(pa.py_buffer(np.ascontiguousarray(data)), r_start, lengths[rec_idx])
    c_off = np.frombuffer(compact.buffers()[1], np.int64)[compact.offset:compact.offset + len(compact) + 1]
    total = int(c_off[-1])
    pad = 2 + max((len(name.encode()) for name in names), default=0)
    c_data = np.zeros(total + pad, np.uint8)  # zero padding: reads just past the end see no separator
    c_data[:total] = np.frombuffer(compact.buffers()[2], np.uint8, count=total, offset=int(c_off[0]))
    c_off = c_off - c_off[0]
    c_start, c_end = c_off[:-1], c_off[1:]
    sep_pos = np.flatnonzero(c_data[:total] == PROPERTY_SEP)
    # Item starts: each record start, and after every \x02 that is not the record's last byte; sorted,
    # so an item ends where the next item of its record begins (minus its \x02) or at the record end.
    is_end = np.zeros(total + 1, bool)
    is_end[c_end] = True
    after = sep_pos + 1
    after = after[~is_end[after]]
    keyed = np.sort(np.concatenate([c_start << 1, (after << 1) | 1]))  # low bit: 0 = record start
    items = keyed >> 1
    owner_of = np.cumsum((keyed & 1) == 0) - 1  # record (among non-empty ones) of each item
    next_start = np.append(items[1:], total)
    next_is_item = np.append((keyed[1:] & 1) == 1, False)  # the next item is in the same record
    rec_end = c_end[owner_of]
    item_end = np.where(next_is_item, next_start - 1,
                        rec_end - (c_data[np.maximum(rec_end - 1, 0)] == PROPERTY_SEP))  # a trailing \x02
    heads = np.ndarray((len(c_data) - 3,), dtype=">u4", buffer=c_data, strides=(1,))[items]  # 4 bytes each
    for name in names:
        k, value_at = _items_named(name, c_data, items, heads, item_end)
        if not len(k):
            continue
        owner = owner_of[k]
        last = np.ones(len(k), bool)
        last[:-1] = owner[1:] != owner[:-1]  # later duplicates win
        k, owner, value_at = k[last], owner[last], value_at[last]
        rec = rec_idx[owner]
        vs, vl = result[name]
        vs[rec] = starts[rec] + (value_at - c_start[owner])
        vl[rec] = item_end[k] - value_at
    return result


# ---------------------------------------------------------------- whole-column forms (Arrow in, Arrow out)


def _text_columns(arr: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, bool]:
    """(array, uint8 data, n + 1 offsets, valid mask, is text) of a string/binary column, nulls as empty."""
    arr = plain_array(arr)
    is_text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type)
    valid = np.ones(len(arr), bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    if arr.null_count:
        arr = arr.fill_null(pa.scalar("", pa.string()).cast(arr.type))
    data, offsets = arrow_buffers(arr)
    return arr, data, offsets, valid, is_text


def _slices(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, is_text: bool) -> pa.Array:
    """Byte slices of `data` (ascending, non-overlapping) as large_string (text input) or large_binary.
    Cuts at the ASCII separators \\x01, \\x02 and space never split a UTF-8 character, so slices of
    text are viewed as text without validating them again."""
    out = slices_to_binary(pa.py_buffer(data), starts, lengths)
    return out.view(pa.large_string()) if is_text else out


def key_tokens(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KEYS tokens of many strings at once, as the index splits them (`split(" ")`, empty tokens dropped):
    maximal runs of non-space bytes of each string data[offsets[i]:offsets[i+1]], as (owner string,
    start, end) with start/end positions in `data`, in string order then position order."""
    base = int(offsets[0])
    region, rel = data[base:int(offsets[-1])], offsets - base
    n_bytes = len(region)
    if n_bytes == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    word = region != 0x20
    boundary = np.zeros(n_bytes + 1, bool)
    boundary[rel] = True  # string starts/ends break tokens
    prev_word = np.zeros(n_bytes, bool)
    prev_word[1:] = word[:-1]
    prev_word[boundary[:-1]] = False
    next_word = np.zeros(n_bytes, bool)
    next_word[:-1] = word[1:]
    next_word[boundary[1:]] = False
    starts = np.flatnonzero(word & ~prev_word)
    ends = np.flatnonzero(word & ~next_word) + 1
    owner = np.searchsorted(rel, starts, side="right") - 1
    return owner.astype(np.int64), starts.astype(np.int64) + base, ends.astype(np.int64) + base


def split_keys_arrow(arr: pa.Array | pa.ChunkedArray) -> pa.LargeListArray:
    """Vectorised `split_keys` over a column of KEYS values: list<large_string> (list<large_binary> for
    binary input) of each row's tokens, duplicates kept; a null row gives a null list."""
    arr, data, offsets, valid, is_text = _text_columns(arr)
    owner, starts, ends = key_tokens(data, offsets)
    list_offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=len(arr)), out=list_offsets[1:])
    values = _slices(data, starts, ends - starts, is_text)
    mask = None if valid.all() else pa.array(~valid)
    return pa.LargeListArray.from_arrays(pa.array(list_offsets), values, mask=mask)


def _last_of_each_name(owner: np.ndarray, names: pa.Array) -> np.ndarray:
    """Positions (ascending) of the items that survive "a later duplicate name wins" within each row.
    Items are sorted by (row, name length, name hash, position): equal names become neighbours and all
    but the last of a run are dropped; neighbours with equal hashes are compared byte by byte, and a
    hash collision (never seen in practice) falls back to an exact Arrow group-by."""
    data, offsets = arrow_buffers(names)
    length = np.diff(offsets)
    position = np.arange(len(owner), dtype=np.int64)
    hashes = java_hash_ragged(data, offsets)
    order = np.lexsort((position, hashes, length, owner))
    earlier, later = order[:-1], order[1:]
    same = (owner[earlier] == owner[later]) & (length[earlier] == length[later]) & (hashes[earlier] == hashes[later])
    if not same.any():
        return position
    earlier, later = earlier[same], later[same]
    size = length[earlier]
    first = np.zeros(len(size), np.int64)
    np.cumsum(size[:-1], out=first[1:])
    step = np.arange(int(size.sum()), dtype=np.int64) - np.repeat(first, size)
    differs = data[np.repeat(offsets[earlier], size) + step] != data[np.repeat(offsets[later], size) + step]
    if np.add.reduceat(differs, first).any():  # equal hash, different bytes: group exactly instead
        items = pa.table({"owner": owner, "name": names, "item": position})
        winners = items.group_by(["owner", "name"], use_threads=False).aggregate([("item", "max")])
        return np.sort(winners.column("item_max").to_numpy())
    keep = np.ones(len(owner), bool)
    keep[earlier] = False
    return position[keep]


def parse_properties_arrow(arr: pa.Array | pa.ChunkedArray) -> pa.MapArray:
    """Vectorised `parse_properties` over a column of raw properties strings: one map per row with every
    item the broker keeps (non-empty name and value, a later duplicate name wins), in the order of each
    name's winning item; keys/values large_string (large_binary for binary input); null row -> null map."""
    arr, data, offsets, valid, is_text = _text_columns(arr)
    n = len(arr)
    base = int(offsets[0])
    region, rel = data[base:int(offsets[-1])], offsets - base
    row_start, row_end = rel[:-1], rel[1:]
    seps = np.flatnonzero(region == PROPERTY_SEP)
    # Item starts: each non-empty row's start, and after every \x02 that is not its row's last byte.
    sep_row = np.searchsorted(row_start, seps, side="right") - 1
    after = seps + 1
    item_start = np.sort(np.concatenate([row_start[row_end > row_start], after[after < row_end[sep_row]]]))
    owner = np.searchsorted(row_start, item_start, side="right") - 1
    item_end = np.minimum(_next_at_or_after(seps, item_start), row_end[owner])
    # Name/value separator: the first \x01 after the item start (Java's indexOf over the whole string);
    # the item is kept when it lies inside the item with a non-empty name and value.
    kv = _next_at_or_after(np.flatnonzero(region == NAME_VALUE_SEP), item_start)
    keep = (kv > item_start) & (kv < item_end - 1)
    item_start, item_end, owner, kv = item_start[keep], item_end[keep], owner[keep], kv[keep]
    names = slices_to_binary(pa.py_buffer(region), item_start, kv - item_start)
    win = _last_of_each_name(owner, names)
    keys = names.take(pa.array(win))
    keys = keys.view(pa.large_string()) if is_text else keys
    values = _slices(region, kv[win] + 1, item_end[win] - kv[win] - 1, is_text)
    map_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(owner[win], minlength=n), out=map_offsets[1:])
    mask = None if valid.all() else pa.array(~valid)
    return pa.MapArray.from_arrays(pa.array(map_offsets), keys, values, mask=mask)
