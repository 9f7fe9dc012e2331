"""Does an index file's header agree with its own entries? IndexFile.putKey writes both: each put writes its entry at
position indexCount, counts it, sets endPhyOffset and endTimestamp to its record's, and the first put also sets
beginPhyOffset and beginTimestamp; hashSlotCount counts the puts into an empty slot. `rebuild --since` checks the
index file it continues: one flipped header byte there would go on into every later file and its name."""
from __future__ import annotations

import struct
from typing import Callable

from .index_build import time_diff
from .index_file import ENTRY_SIZE, HEADER_FIELD_OFFSETS, IndexHeader, IndexLayout

_ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex


def header_problem(header: IndexHeader, layout: IndexLayout,
                   read: Callable[[int, int], bytes]) -> tuple[int, str] | None:
    """(byte offset of the field, what its entries say) for the first header field the file's own entries contradict,
    or None. `read(offset, size)` reads the file (three entries are read)."""
    count = header.as_loaded().index_count
    at = HEADER_FIELD_OFFSETS
    if count > layout.max_entries:
        return at["indexCount"], f"indexCount {count} is more than the file's {layout.max_entries} entry positions"
    if count < layout.max_entries and any(bytes(read(layout.entry_at(count), ENTRY_SIZE))):
        return at["indexCount"], f"indexCount {count}, but entry {count} is written"
    if count == 1:
        return None
    last = _ENTRY.unpack(bytes(read(layout.entry_at(count - 1), ENTRY_SIZE)))
    if last == (0, 0, 0, 0):
        return at["indexCount"], f"indexCount {count}, but entry {count - 1} (the last) is empty"
    if last[1] != header.end_phy_offset:
        return at["endPhyOffset"], (f"endPhyOffset {header.end_phy_offset}, but the last entry ({count - 1}) points "
                                    f"at {last[1]}")
    first = _ENTRY.unpack(bytes(read(layout.entry_at(1), ENTRY_SIZE)))
    if first[1] != header.begin_phy_offset:
        return at["beginPhyOffset"], (f"beginPhyOffset {header.begin_phy_offset}, but the first entry points at "
                                      f"{first[1]}")
    diff = time_diff(header.end_timestamp, header.begin_timestamp)
    if count > 2 and last[2] != diff:
        return at["endTimestamp"], (f"endTimestamp {header.end_timestamp} is {diff} s after beginTimestamp "
                                    f"{header.begin_timestamp}, but the last entry's timeDiff is {last[2]}")
    if not 1 <= header.hash_slot_count <= count - 1:
        return at["hashSlotCount"], f"hashSlotCount {header.hash_slot_count} for {count - 1} entries"
    return None

