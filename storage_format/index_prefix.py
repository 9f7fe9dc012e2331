"""An index file as it stood before a commit-log offset: its first entries kept, the rest undone.

A broker's index file grows in dispatch order, so the entries for records below an offset are a prefix of the file.
Cutting a file back to that prefix (slots walked back down their chains, later entries zeroed, header counts
recomputed) gives the state the broker was in when it dispatched the record at that offset; putting the keys from
there on into it (index_file.append_to_index_file) then grows it exactly as the broker did. verify uses it where the
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
    table = layout.slot_table(data)
    heads = table.astype(np.int64)
    for _ in range(used):  # a chain is at most `used` long; a damaged loop ends here too
        undo = np.flatnonzero(heads > keep)
        if not len(undo):
            break
        heads[undo] = np.clip(entries["prev"][np.minimum(heads[undo], used - 1)].astype(np.int64), 0, None)
    changed = np.flatnonzero(heads != table)
    table[changed] = heads[changed]
    undone = int(np.count_nonzero(entries["prev"][keep + 1:used] == 0))
    last = entries[keep]
    end_ts = header.begin_timestamp + (int(last["diff"]) * 1000 if keep > 1 else 0)
    header_after = IndexHeader(header.begin_timestamp, end_ts, header.begin_phy_offset, int(last["phy"]),
                               header.hash_slot_count - undone, keep + 1)
    for at in range(layout.entry_at(keep + 1), layout.entry_at(used), ZERO_CHUNK):
        end = min(at + ZERO_CHUNK, layout.entry_at(used))
        data[at:end] = bytes(end - at)
    data[:HEADER_SIZE] = header_after.to_bytes()
