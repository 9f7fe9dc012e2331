"""RocketMQ 5.x RocksDB consume queues (`storeType=defaultRocksDB`): the key and value bytes of the database's two
column families, as RocksDBConsumeQueueTable and RocksDBConsumeQueueOffsetTable (5.3.3) write them, big-endian.

`default` holds one key per unit: `int32 topicLen | 01 | topic | 01 | int32 queueId | 01 | int64 queueOffset` ->
`int64 phyOffset | int32 size | int64 tagsCode | int64 storeTimestamp`. `offset` holds per queue a "max" key (the
queue's last unit) and a lazily written "min" key: `int32 topicLen | 01 | topic | 01 | max|min | 01 | int32
queueId` -> `int64 phyOffset | int64 queueOffset`; and the dispatch checkpoint, the "max" key of topic
`CHECKPOINT_TOPIC` queue 0, whose 8-byte value is the end of the last dispatched record. `topic` is always the UTF-8
bytes of the broker's Java String (`topic.getBytes(UTF_8)`)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np

CTRL_0: Final = b"\x00"  # the low end of a queue's key range (RocksDBConsumeQueueTable.buildDeleteCQKey)
CTRL_1: Final = b"\x01"  # the separator between key fields
CTRL_2: Final = b"\x02"  # the high end of a queue's key range
DEFAULT_CF: Final = "default"
OFFSET_CF: Final = "offset"
COLUMN_FAMILIES: Final = (DEFAULT_CF, OFFSET_CF)
MAX_KIND: Final = b"max"
MIN_KIND: Final = b"min"
CHECKPOINT_TOPIC: Final = b"CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
UNIT_KEY_FIXED: Final = 4 + 1 + 1 + 4 + 1 + 8  # CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES
OFFSET_KEY_FIXED: Final = 4 + 1 + 1 + 3 + 1 + 4  # OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES
UNIT_VALUE_SIZE: Final = 8 + 4 + 8 + 8  # CQ_UNIT_SIZE
OFFSET_VALUE_SIZE: Final = 8 + 8
CHECKPOINT_VALUE_SIZE: Final = 8
# A unit value as a numpy record (packed, 28 bytes): a column family's values decode in one frombuffer.
UNIT_VALUE_DTYPE: Final = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"),
                                    ("store_timestamp", ">i8")])

_UNIT_VALUE = struct.Struct(">qiqq")
_OFFSET_VALUE = struct.Struct(">qq")
_CHECKPOINT_VALUE = struct.Struct(">q")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


class RocksCqFormatError(ValueError):
    """A key or value that is not what 5.3.3 writes (the caller names the database, column family and key)."""


@dataclass(frozen=True)
class UnitKey:
    """A `default` key: one consume-queue unit's queue and position."""
    topic: bytes
    queue_id: int
    queue_offset: int


@dataclass(frozen=True)
class Unit:
    """A `default` value: the 20-byte file unit's fields plus the record's store timestamp."""
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp: int


@dataclass(frozen=True)
class OffsetKey:
    """An `offset` key: a queue's "max" or "min" record (the checkpoint is topic CHECKPOINT_TOPIC, max, queue 0)."""
    topic: bytes
    kind: bytes
    queue_id: int


@dataclass(frozen=True)
class OffsetValue:
    """An `offset` value: a unit's commit-log offset and queue offset."""
    phy_offset: int
    queue_offset: int


def _topic_head(topic: bytes) -> bytes:
    return _INT.pack(len(topic)) + CTRL_1 + topic + CTRL_1


def _split_topic(key: bytes, fixed: int) -> tuple[bytes, int]:
    """The topic of a key and where the bytes after its trailing separator start; RocksCqFormatError if the
    length prefix, separators or total length are not the broker's."""
    if len(key) < fixed:
        raise RocksCqFormatError(f"key of {len(key)} bytes, shorter than the {fixed} fixed bytes")
    n = _INT.unpack_from(key)[0]
    if n < 0 or len(key) != fixed + n:
        raise RocksCqFormatError(f"key of {len(key)} bytes does not fit its topic length {n}")
    if key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1:
        raise RocksCqFormatError("key separators are not 0x01")
    return key[5:5 + n], 6 + n


def unit_key(topic: bytes, queue_id: int, queue_offset: int) -> bytes:
    """The `default` key of a unit."""
    return _topic_head(topic) + _INT.pack(queue_id) + CTRL_1 + _LONG.pack(queue_offset)


def parse_unit_key(key: bytes) -> UnitKey:
    """A `default` key's fields."""
    topic, at = _split_topic(key, UNIT_KEY_FIXED)
    if key[at + 4:at + 5] != CTRL_1:
        raise RocksCqFormatError("unit key: no 0x01 before the queue offset")
    return UnitKey(topic, _INT.unpack_from(key, at)[0], _LONG.unpack_from(key, at + 5)[0])


def queue_key_range(topic: bytes, queue_id: int) -> tuple[bytes, bytes]:
    """[lower, upper) of one queue's `default` keys: the broker's delete range (0x00 and 0x02 after the queueId)."""
    head = _topic_head(topic) + _INT.pack(queue_id)
    return head + CTRL_0, head + CTRL_2


def unit_value(unit: Unit) -> bytes:
    """The 28-byte `default` value of a unit."""
    return _UNIT_VALUE.pack(unit.phy_offset, unit.size, unit.tags_code, unit.store_timestamp)


def parse_unit_value(value: bytes) -> Unit:
    """A `default` value's fields."""
    if len(value) != UNIT_VALUE_SIZE:
        raise RocksCqFormatError(f"unit value of {len(value)} bytes, not {UNIT_VALUE_SIZE}")
    return Unit(*_UNIT_VALUE.unpack(value))


def unit_values(values: bytes) -> np.ndarray:
    """Many concatenated `default` values as one UNIT_VALUE_DTYPE array (no copy)."""
    if len(values) % UNIT_VALUE_SIZE:
        raise RocksCqFormatError(f"{len(values)} bytes of unit values is not a multiple of {UNIT_VALUE_SIZE}")
    return np.frombuffer(values, UNIT_VALUE_DTYPE)


def offset_key(topic: bytes, kind: bytes, queue_id: int) -> bytes:
    """The `offset` key of a queue's "max" or "min" record."""
    if kind not in (MAX_KIND, MIN_KIND):
        raise ValueError(f"offset key kind {kind!r}: not max or min")
    return _topic_head(topic) + kind + CTRL_1 + _INT.pack(queue_id)


def parse_offset_key(key: bytes) -> OffsetKey:
    """An `offset` key's fields."""
    topic, at = _split_topic(key, OFFSET_KEY_FIXED)
    kind = key[at:at + 3]
    if kind not in (MAX_KIND, MIN_KIND) or key[at + 3:at + 4] != CTRL_1:
        raise RocksCqFormatError(f"offset key kind {kind!r}: not max or min followed by 0x01")
    return OffsetKey(topic, kind, _INT.unpack_from(key, at + 4)[0])


def offset_value(value: OffsetValue) -> bytes:
    """The 16-byte `offset` value of a "max"/"min" record."""
    return _OFFSET_VALUE.pack(value.phy_offset, value.queue_offset)


def parse_offset_value(value: bytes) -> OffsetValue:
    """A "max"/"min" record's fields."""
    if len(value) != OFFSET_VALUE_SIZE:
        raise RocksCqFormatError(f"offset value of {len(value)} bytes, not {OFFSET_VALUE_SIZE}")
    return OffsetValue(*_OFFSET_VALUE.unpack(value))


CHECKPOINT_KEY: Final = offset_key(CHECKPOINT_TOPIC, MAX_KIND, 0)


def is_checkpoint_key(key: bytes) -> bool:
    """The dispatch checkpoint's `offset` key."""
    return key == CHECKPOINT_KEY


def checkpoint_value(phy_offset: int) -> bytes:
    """The checkpoint's 8-byte value: the commit-log offset dispatch has reached (end of the last dispatched record)."""
    return _CHECKPOINT_VALUE.pack(phy_offset)


def parse_checkpoint_value(value: bytes) -> int:
    """The checkpoint's commit-log offset."""
    if len(value) != CHECKPOINT_VALUE_SIZE:
        raise RocksCqFormatError(f"checkpoint value of {len(value)} bytes, not {CHECKPOINT_VALUE_SIZE}")
    return _CHECKPOINT_VALUE.unpack(value)[0]
