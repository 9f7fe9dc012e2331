"""An index file as it stood before a commit-log offset: its first entries kept, the rest undone.

A broker's index file grows in dispatch order, so the entries for records below an offset are a prefix of the file.
Cutting a file back to that prefix (slots walked back down their chains, later entries zeroed, header counts
recomputed) gives the state the broker was in when it dispatched the record at that offset; putting the keys from
there on into it (index_build.append_to_index_file) then grows it exactly as the broker did. verify uses it where the
commit log no longer holds the prefix's records (its head expired) or they were checked earlier (verify --since).
"""
from __future__ import annotations

import mmap

import numpy as np

from .index_file import HEADER_SIZE, IndexHeader, IndexLayout


ZERO_CHUNK = 8 << 20


def entries_below(data: bytes | bytearray | mmap.mmap, layout: IndexLayout, bound: int) -> int:
    """How many of the file's entries, from position 1 on, point below commit-log `bound` (entries lie in dispatch
    order, so their offsets ascend: the header's end answers for a file wholly below it, else a binary search reads
    a few entries, never the whole file)."""
    header = IndexHeader.from_bytes(data[:HEADER_SIZE])
    used = layout.used_positions(header)
    if used <= 1 or header.end_phy_offset < bound:
        return used - 1
    lo, hi = 1, used  # the first position at or past the bound lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        at = layout.entry_at(mid) + 4  # keyHash, then phyOffset
        if int.from_bytes(data[at:at + 8], "big", signed=True) < bound:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def cut_index_file(data: bytearray | mmap.mmap, layout: IndexLayout, keep: int) -> None:
    """Undo every entry after the first `keep` (>= 1) in place: each slot's head walked back down its chain to the
    newest kept entry (0 when none), later entries zeroed, indexCount, hashSlotCount (a put into an empty slot counts
    once: the undone entries whose prevIndex is 0 are taken off) and the end fields (the last kept entry's offset; its
    store time to the entry's whole seconds, as its timeDiff holds it: the next put overwrites both). Reads the slots
    and the undone entries only."""
    header = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
    used = layout.used_positions(header)
    if keep >= used - 1:
        return
    if keep < 1:
        raise ValueError("an index file cut keeps at least its first entry (before it, the file did not exist)")
    entries = layout.entries(data)
    header_after = cut_head(data, layout, header, entries[keep], entries["prev"][keep + 1:used], keep)
    for at in range(layout.entry_at(keep + 1), layout.entry_at(used), ZERO_CHUNK):
        end = min(at + ZERO_CHUNK, layout.entry_at(used))
        data[at:end] = bytes(end - at)
    data[:HEADER_SIZE] = header_after.to_bytes()


def cut_head(head: bytearray | mmap.mmap, layout: IndexLayout, header: IndexHeader, last: np.void,
             undone_prev: np.ndarray, keep: int) -> IndexHeader:
    """The slot table of `head` (a file, or its header and slots alone) walked back to the first `keep` entries, and
    the header after the cut (cut_index_file's rule): `last` is entry `keep`, `undone_prev` the prevIndex of the
    entries after it (positions keep + 1 ... the header's last)."""
    table = layout.slot_table(head)
    undo = np.flatnonzero(table > keep)
    top = keep + len(undone_prev)  # the last used position: a head past it walks from it (a damaged file)
    prev = np.maximum(undone_prev.astype(np.int64), 0)  # a negative prevIndex ends its chain
    start = table[undo].astype(np.int64)
    walk = start.copy()
    live = np.arange(len(walk))  # the walks still past the kept entries
    for _ in range(top + 1):  # a chain is at most `top + 1` long; a damaged loop ends here too
        if not len(live):
            break
        step = prev[np.minimum(walk[live], top) - keep - 1]
        walk[live] = step
        live = live[step > keep]
    changed = walk != start
    table[undo[changed]] = walk[changed]
    undone = int(np.count_nonzero(undone_prev == 0))
    return header_after_cut(header, last, keep, header.hash_slot_count - undone)


def header_after_cut(header: IndexHeader, last: np.void, keep: int, hash_slot_count: int) -> IndexHeader:
    """The header of a file cut back to its first `keep` entries, `last` being entry `keep`: indexCount keep + 1, the
    end fields the last kept entry's (its store time to whole seconds, as its timeDiff holds it), the begin fields
    kept, hashSlotCount as given."""
    end_ts = header.begin_timestamp + (int(last["diff"]) * 1000 if keep > 1 else 0)
    return IndexHeader(header.begin_timestamp, end_ts, header.begin_phy_offset, int(last["phy"]), hash_slot_count,
                       keep + 1)
