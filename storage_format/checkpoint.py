"""The store's `checkpoint` file: 4096 bytes of big-endian longs, the rest zero.

4.x writes physicMsgTimestamp, logicsMsgTimestamp and indexMsgTimestamp; 5.x adds masterFlushedOffset
and confirmPhyOffset. The timestamps bound what abnormal recovery may trust (StoreCheckpoint).
"""
from __future__ import annotations

import struct
from dataclasses import asdict, dataclass

from .errors import StoreFormatError

CHECKPOINT_SIZE = 4096
RECOVER_SAFETY_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts 3 s
_LONGS = struct.Struct(">5q")
V4_FIELDS = 3
V5_FIELDS = 5


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint values; the two 5.x offsets are 0 in a 4.x store (and in a 5.x store that never
    restarted)."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        """StoreCheckpoint.getMinTimestamp: min(physic, logics) - 3000 ms, never below 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - RECOVER_SAFETY_MS)

    @property
    def min_timestamp_index(self) -> int:
        """StoreCheckpoint.getMinTimestampIndex: also bounded by the index timestamp."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    @property
    def has_v5_fields(self) -> bool:
        """True when one of the 5.x-only longs is set (only a 5.x broker writes them)."""
        return self.master_flushed_offset != 0 or self.confirm_phy_offset != 0

    def to_dict(self) -> dict:
        """Field name -> value, for the plan."""
        return asdict(self)


def parse_checkpoint(data: bytes, path: str = "checkpoint") -> Checkpoint:
    """Decode checkpoint bytes; a file shorter than the five longs is an error (the broker maps 4096)."""
    if len(data) < _LONGS.size:
        raise StoreFormatError(path, len(data), f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_SIZE}")
    return Checkpoint(*_LONGS.unpack_from(data, 0))


TIMESTAMP_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")  # bytes 0, 8, 16
PLAUSIBLE_AHEAD_MS = 24 * 3600 * 1000  # a checkpoint time past the log's last record by more than this is no record's


def implausible_timestamp(cp: Checkpoint, last_store_ts: int) -> tuple[int, str, int] | None:
    """(byte offset, field, value) of the first checkpoint time that no record of the log could have put there:
    negative, or more than a day past the last record's storeTimestamp (the broker stores record times there);
    None when all three are plausible. A checkpoint of random bytes fails it."""
    for i, name in enumerate(TIMESTAMP_FIELDS):
        value = getattr(cp, name)
        if value < 0 or value > last_store_ts + PLAUSIBLE_AHEAD_MS:
            return 8 * i, name, value
    return None


def checkpoint_bytes(cp: Checkpoint, generation: int, base: bytes | None = None) -> bytes:
    """The 4096-byte file for a generation (4: three longs, 5: five); other bytes come from `base`
    (the previous file) or are zero, so nothing the broker wrote elsewhere is lost."""
    out = bytearray(base[:CHECKPOINT_SIZE] if base else b"")
    out.extend(bytes(CHECKPOINT_SIZE - len(out)))
    values = (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
              cp.master_flushed_offset, cp.confirm_phy_offset)
    count = V5_FIELDS if generation >= 5 else V4_FIELDS
    struct.pack_into(f">{count}q", out, 0, *values[:count])
    return bytes(out)
