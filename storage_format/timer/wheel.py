"""`timerwheel`: 1,209,600 slots of 32 bytes (TimerWheel, Slot), exactly 38,707,200 bytes; any other non-zero
length makes the broker's TimerWheel constructor throw. A slot holds its time / precisionMs, the first and last
timer-log positions of its unit chain, a unit count and an unused magic; it is live for a time t only when its
stored time equals t / precisionMs."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

TTL_DAYS = 7  # TimerMessageStore.TIMER_WHEEL_TTL_DAY
SLOTS_TOTAL = TTL_DAYS * 24 * 3600  # slotsTotal, fixed regardless of precision
WHEEL_SLOTS = SLOTS_TOTAL * 2
SLOT_SIZE = 32
WHEEL_SIZE = WHEEL_SLOTS * SLOT_SIZE  # 38,707,200
PRECISIONS = (100, 200, 500, 1000)

_SLOT = struct.Struct(">qqqii")
SLOT_DTYPE = np.dtype([("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"),
                       ("magic", ">i4")])
assert SLOT_DTYPE.itemsize == SLOT_SIZE == _SLOT.size


def precision_ms(configured: int) -> int:
    """MessageStoreConfig.setTimerPrecisionMs: rounded down to 100, 200, 500 or 1000 (below 100: 100)."""
    for lower, upper in zip(PRECISIONS, PRECISIONS[1:]):
        if configured < upper:
            return lower
    return PRECISIONS[-1]


def slot_index(time_ms: int, precision: int) -> int:
    """TimerWheel.getSlotIndex (Java long division and %, times are positive)."""
    return (time_ms // precision) % WHEEL_SLOTS


@dataclass(frozen=True)
class Slot:
    """One slot as stored: time is in units of precisionMs."""

    time: int = 0
    first_pos: int = 0
    last_pos: int = 0
    num: int = 0
    magic: int = 0

    def time_ms(self, precision: int) -> int:
        """The slot's time in milliseconds."""
        return self.time * precision


EMPTY = Slot()


def encode_slot(s: Slot) -> bytes:
    """The 32 bytes of a slot."""
    return _SLOT.pack(s.time, s.first_pos, s.last_pos, s.num, s.magic)


def decode_slot(data: bytes, index: int) -> Slot:
    """The slot at an index."""
    return Slot(*_SLOT.unpack_from(data, index * SLOT_SIZE))


def slots(data: bytes) -> np.ndarray:
    """Every slot of a whole wheel as SLOT_DTYPE rows (a view, no copy)."""
    return np.frombuffer(data, SLOT_DTYPE, count=len(data) // SLOT_SIZE)


def used_slots(data: bytes) -> np.ndarray:
    """Indices of slots with any non-zero byte (the wheel is sparse)."""
    words = np.frombuffer(data, np.uint64, count=len(data) // 8).reshape(-1, SLOT_SIZE // 8)
    return np.flatnonzero(words.any(axis=1))


def with_slots(data: bytes, edits: dict[int, Slot]) -> bytes:
    """A copy of the wheel with some slots replaced."""
    out = bytearray(data)
    for i, s in sorted(edits.items()):
        out[i * SLOT_SIZE:(i + 1) * SLOT_SIZE] = encode_slot(s)
    return bytes(out)
