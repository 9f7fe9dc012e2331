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


def entries_below(data: bytes | bytearray | mmap.mmap, layout: IndexLayout, bound: int) -> int:
    """How many of the file's entries, from position 1 on, lie before the first one at or past commit-log `bound`."""
    header = IndexHeader.from_bytes(data[:HEADER_SIZE])
    used = layout.used_positions(header)
    phy = layout.entries(data)["phy"][1:used]
    past = np.flatnonzero(phy >= bound)
    return int(past[0]) if len(past) else used - 1


def cut_index_file(data: bytearray | mmap.mmap, layout: IndexLayout, keep: int) -> None:
    """Undo every entry after the first `keep` (>= 1) in place: each slot's head walked back down its chain to the
    newest kept entry (0 when none), later entries zeroed, indexCount, hashSlotCount (a put into an empty slot counts
    once: the kept entries whose prevIndex is 0) and the end fields (the last kept entry's offset; its store time
    to the entry's whole seconds, as its timeDiff holds it: the next put overwrites both)."""
    header = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
    used = layout.used_positions(header)
    if keep >= used - 1:
        return
    if keep < 1:
        raise ValueError("an index file cut keeps at least its first entry (before it, the file did not exist)")
    entries = layout.entries(data)
    prev = entries["prev"].astype(np.int64)
    table = layout.slot_table(data)
    heads = table.astype(np.int64)
    for _ in range(used):  # a chain is at most `used` long; a damaged loop ends here too
        undo = heads > keep
        if not undo.any():
            break
        heads[undo] = np.clip(prev[np.minimum(heads[undo], used - 1)], 0, None)
    changed = np.flatnonzero(heads != table)
    table[changed] = heads[changed]
    last = entries[keep]
    at = layout.entry_at(keep + 1)
    data[at:layout.entry_at(used)] = bytes(layout.entry_at(used) - at)
    kept_prev = prev[1:keep + 1]
    # the first put set the begin fields to its own key; its timeDiff was taken against the header before that
    end_ts = header.begin_timestamp + (int(last["diff"]) * 1000 if keep > 1 else 0)
    data[:HEADER_SIZE] = IndexHeader(header.begin_timestamp, end_ts, header.begin_phy_offset, int(last["phy"]),
                                     int(np.count_nonzero(kept_prev == 0)), keep + 1).to_bytes()
