"""IndexFile.putKey of the broker, transcribed statement by statement over a bytearray: the model the index
builders are checked against, with its own layout (IndexHeader / IndexFile), not storage_format's constants."""
from __future__ import annotations

import struct

# Header: beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount.
HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex
SLOTS, MAX = 8, 40
INT_MAX = 2**31 - 1


def empty_file(begin_ts: int = 0, begin_phy: int = 0) -> bytearray:
    """A new index file as the broker creates it: header with indexCount 1, zero slots and entries;
    a rolled file starts with its predecessor's end timestamp and offset as begin and end."""
    return bytearray(HEADER.pack(begin_ts, begin_ts, begin_phy, begin_phy, 0, 1)
                     + bytes(SLOTS * 4 + MAX * ENTRY.size))


def put_key_reference(data: bytearray, kh: int, phy: int, ts: int) -> bool:
    """IndexFile.putKey, transcribed statement by statement (the test's independent model)."""
    begin_ts, _, begin_phy, _, slot_count, count = HEADER.unpack_from(data)
    if count >= MAX:
        return False
    slot_at = HEADER.size + (kh % SLOTS) * 4
    (slot_value,) = struct.unpack_from(">i", data, slot_at)
    if slot_value <= 0 or slot_value > count:
        slot_value = 0
    diff = ts - begin_ts
    diff = int(diff / 1000) if abs(diff) < 2**52 else (abs(diff) // 1000) * (1 if diff > 0 else -1)
    diff = 0 if begin_ts <= 0 else min(max(diff, 0), INT_MAX)
    ENTRY.pack_into(data, HEADER.size + SLOTS * 4 + count * ENTRY.size, kh, phy, diff, slot_value)
    struct.pack_into(">i", data, slot_at, count)
    if count <= 1:
        begin_ts, begin_phy = ts, phy
    HEADER.pack_into(data, 0, begin_ts, ts, begin_phy, phy, slot_count + (slot_value == 0), count + 1)
    return True
