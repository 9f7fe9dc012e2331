"""Message properties (`name\\x01value\\x02` ...) parsed with the broker's rules.

Rules (MessageDecoder.string2messageProperties, 4.9.x and 5.x): items are separated by \\x02; an
item's name runs to the first \\x01 after the item start; the item is kept only when the name is
non-empty and the value (after that \\x01, up to the item end) is non-empty; a later duplicate name
overwrites an earlier one. `locate_properties` applies the same rules to many records at once.
"""
from __future__ import annotations

import numpy as np

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


def locate_properties(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                      names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each wanted name, the (value start, value length) in `data` per record; start -1 if absent.

    `data` is a uint8 buffer, record r's properties are data[starts[r]:starts[r]+lengths[r]]
    (records ascending, non-overlapping). Vectorised: separator positions come from one scan of
    the touched bytes, items are matched to names by length and bytes.
    """
    n = len(starts)
    result = {name: (np.full(n, -1, np.int64), np.zeros(n, np.int64)) for name in names}
    lengths = np.maximum(lengths.astype(np.int64), 0)
    starts = starts.astype(np.int64)
    has = lengths > 0
    if n == 0 or not has.any():
        return result
    rec_idx = np.flatnonzero(has)
    r_start, r_end = starts[rec_idx], starts[rec_idx] + lengths[rec_idx]
    lo, hi = int(r_start[0]), int(r_end[-1])
    window = data[lo:hi]
    # Only bytes inside some record's properties count (gaps hold bodies/topics of other records).
    inside = np.zeros(hi - lo + 1, np.int32)
    np.add.at(inside, r_start - lo, 1)
    np.add.at(inside, r_end - lo, -1)
    inside = np.cumsum(inside[:-1]) > 0
    sep_pos = np.flatnonzero((window == PROPERTY_SEP) & inside) + lo
    kv_pos = np.flatnonzero((window == NAME_VALUE_SEP) & inside) + lo
    # Item starts: each record start, and after every \x02 that is not the record's last byte.
    owner_of_sep = np.searchsorted(r_start, sep_pos, side="right") - 1
    after = sep_pos + 1
    keep = after < r_end[owner_of_sep]
    item_start = np.concatenate([r_start, after[keep]])
    item_owner = np.concatenate([np.arange(len(rec_idx)), owner_of_sep[keep]])
    order = np.argsort(item_start, kind="stable")
    item_start, item_owner = item_start[order], item_owner[order]
    # Item end: the next \x02 at or after the start, or the record end.
    item_end = np.minimum(_next_at_or_after(sep_pos, item_start), r_end[item_owner])
    # Name/value separator: first \x01 at or after the start, searched in the whole string (Java indexOf).
    kv = _next_at_or_after(kv_pos, item_start)
    kv = np.where(kv < r_end[item_owner], kv, _NONE)
    ok = (kv > item_start) & (kv < item_end - 1)
    name_len = kv - item_start
    for name in names:
        code = np.frombuffer(name.encode(), np.uint8)
        cand = np.flatnonzero(ok & (name_len == len(code)))
        if len(cand):
            got = data[item_start[cand][:, None] + np.arange(len(code))]
            cand = cand[(got == code).all(axis=1)]
        if not len(cand):
            continue
        owners = item_owner[cand]
        last = np.ones(len(cand), bool)
        last[:-1] = owners[1:] != owners[:-1]  # later duplicates win
        cand, owners = cand[last], owners[last]
        vs, vl = result[name]
        vs[rec_idx[owners]] = kv[cand] + 1
        vl[rec_idx[owners]] = item_end[cand] - kv[cand] - 1
    return result
