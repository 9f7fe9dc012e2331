"""Column view over the valid records of one commit-log buffer: every field gathered with numpy from the
record start positions the chain walk found (storage_format.commitlog), strings as Arrow arrays, each
decoded on first use; plus the per-record checks (field lengths, body CRC, DELAY) the broker applies."""
from __future__ import annotations

import zlib
from functools import cached_property

import numpy as np
import pyarrow as pa

from .java_props import INT_BITS, java_parse_integral
from .errors import StoreFormatError
from .multi_dispatch import INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET
from .properties import DELAY, KEYS, TAGS, UNIQ_KEY, locate_properties
from .ragged import slices_to_binary
from .record import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_V2, SCHEDULE_TOPIC, TRAN_MASK
from .segment_names import file_offset


def _gather(arr: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian field of `width` bytes at each position, as a native array of `dtype`.

    One fancy index into an overlapping view (element i = the `width` bytes from byte i), so each
    field costs one read per record; a position past the end raises IndexError.
    """
    if len(pos) == 0:
        return np.zeros(0, dtype=dtype)
    big = ">" + (dtype[1:] if dtype[0] in "<>" else dtype)
    view = np.ndarray((max(len(arr) - width + 1, 0),), dtype=big, buffer=arr, strides=(1,))
    return view[pos].astype(dtype)


HEAD_DTYPE = np.dtype([("total_size", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
                       ("flag", ">i4"), ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"),
                       ("born_timestamp", ">i8")])


class RecordColumns:
    """Column view over valid records of one buffer; each field is decoded on first use.

    `positions` are buffer positions of records found by the chain walk; `first_invalid_record`
    checks that their fields add up before any field is trusted.
    """

    def __init__(self, buf: memoryview | bytes, base_offset: int, positions: np.ndarray,
                 path: str = "<buffer>") -> None:
        self.buf = buf
        self.arr = np.frombuffer(buf, dtype=np.uint8)
        self.base_offset = base_offset
        self.pos = positions
        self.path = path

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, count: int) -> "RecordColumns":
        """The first `count` records (used when a later record turns out invalid); all of them is
        this object itself, so fields already decoded are not decoded again."""
        if count >= len(self):
            return self
        return RecordColumns(self.buf, self.base_offset, self.pos[:count], self.path)

    def i32(self, rel: np.ndarray | int) -> np.ndarray:
        return _gather(self.arr, self.pos + rel if np.isscalar(rel) else rel, 4, "i4")

    def i64(self, rel: np.ndarray | int) -> np.ndarray:
        return _gather(self.arr, self.pos + rel if np.isscalar(rel) else rel, 8, "i8")

    # ---- fixed-position fields -------------------------------------------------------------
    @cached_property
    def _head(self) -> np.ndarray:
        """The fixed first 48 bytes of every record (totalSize .. bornTimestamp), one gather for all."""
        if len(self.pos) == 0:
            return np.zeros(0, dtype=HEAD_DTYPE)
        view = np.ndarray((max(len(self.arr) - HEAD_DTYPE.itemsize + 1, 0),), dtype=HEAD_DTYPE, buffer=self.arr,
                          strides=(1,))
        return view[self.pos]

    @cached_property
    def total_size(self) -> np.ndarray:
        return self._head["total_size"].astype(np.int32)

    @cached_property
    def magic(self) -> np.ndarray:
        return self._head["magic"].astype(np.uint32)

    @cached_property
    def body_crc(self) -> np.ndarray:
        return self._head["body_crc"].astype(np.int32)

    @cached_property
    def queue_id(self) -> np.ndarray:
        return self._head["queue_id"].astype(np.int32)

    @cached_property
    def flag(self) -> np.ndarray:
        return self._head["flag"].astype(np.int32)

    @cached_property
    def queue_offset(self) -> np.ndarray:
        return self._head["queue_offset"].astype(np.int64)

    @cached_property
    def physical_offset(self) -> np.ndarray:
        """The stored physicalOffset field (the broker dispatches this value)."""
        return self._head["physical_offset"].astype(np.int64)

    @cached_property
    def sys_flag(self) -> np.ndarray:
        return self._head["sys_flag"].astype(np.int32)

    @cached_property
    def born_timestamp(self) -> np.ndarray:
        return self._head["born_timestamp"].astype(np.int64)

    # ---- fields after the variable-length hosts ----------------------------------------------
    @cached_property
    def born_host_len(self) -> np.ndarray:
        return np.where(self.sys_flag & FLAG_BORNHOST_V6, 16, 4).astype(np.int64)

    @cached_property
    def store_host_len(self) -> np.ndarray:
        return np.where(self.sys_flag & FLAG_STOREHOST_V6, 16, 4).astype(np.int64)

    @cached_property
    def _store_ts_at(self) -> np.ndarray:
        return self.pos + 48 + self.born_host_len + 4

    @cached_property
    def born_port(self) -> np.ndarray:
        return self.i32(self.pos + 48 + self.born_host_len)

    @cached_property
    def store_timestamp(self) -> np.ndarray:
        return self.i64(self._store_ts_at)

    @cached_property
    def store_host_at(self) -> np.ndarray:
        return self._store_ts_at + 8

    @cached_property
    def store_port(self) -> np.ndarray:
        return self.i32(self.store_host_at + self.store_host_len)

    @cached_property
    def _reconsume_at(self) -> np.ndarray:
        return self.store_host_at + self.store_host_len + 4

    @cached_property
    def reconsume_times(self) -> np.ndarray:
        return self.i32(self._reconsume_at)

    @cached_property
    def prepared_transaction_offset(self) -> np.ndarray:
        return self.i64(self._reconsume_at + 4)

    @cached_property
    def _body_len_at(self) -> np.ndarray:
        return self._reconsume_at + 12

    @cached_property
    def body_length(self) -> np.ndarray:
        return self.i32(self._body_len_at)

    @cached_property
    def body_start(self) -> np.ndarray:
        return self._body_len_at + 4

    @cached_property
    def is_v2(self) -> np.ndarray:
        return self.magic == MAGIC_V2

    @cached_property
    def _topic_len_at(self) -> np.ndarray:
        return self.body_start + np.maximum(self.body_length, 0)

    @cached_property
    def topic_length(self) -> np.ndarray:
        """topicLength as the broker reads it: a signed byte (v1) or signed short (v2), so a v1 length byte of
        0x80-0xFF (a topic of 128-255 UTF-8 bytes, which 4.9.8 and 5.x write as `(byte) length`) is negative and
        the record invalid (checkMessageAndReturnSize's get(bytes, 0, negative) throws)."""
        at = self._topic_len_at
        one = self.arr[np.minimum(at, len(self.arr) - 1)].astype(np.int64)
        two = (one << 8) | self.arr[np.minimum(at + 1, len(self.arr) - 1)]
        return np.where(self.is_v2, np.where(two >= 0x8000, two - 0x10000, two),
                        np.where(one >= 0x80, one - 0x100, one))

    @cached_property
    def topic_start(self) -> np.ndarray:
        return self._topic_len_at + np.where(self.is_v2, 2, 1)

    @cached_property
    def _props_len_at(self) -> np.ndarray:
        return self.topic_start + self.topic_length

    @cached_property
    def properties_length(self) -> np.ndarray:
        """propertiesLength where the topic says it is; read in the buffer when a negative topicLength (an invalid
        record, found by first_layout_error) puts it before the buffer's start."""
        at = np.clip(self._props_len_at, 0, len(self.arr) - 2)
        raw = (self.arr[at].astype(np.int64) << 8) | self.arr[at + 1]
        return np.where(raw >= 0x8000, raw - 0x10000, raw)

    @cached_property
    def properties_start(self) -> np.ndarray:
        return self._props_len_at + 2

    @property
    def transaction_type(self) -> np.ndarray:
        return self.sys_flag & TRAN_MASK

    # ---- strings -----------------------------------------------------------------------------
    def _slices(self, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
        return slices_to_binary(pa.py_buffer(self.buf), starts, np.maximum(lengths, 0), valid)

    @cached_property
    def topic_binary(self) -> pa.Array:
        return self._slices(self.topic_start, self.topic_length)

    @cached_property
    def topic(self) -> pa.Array:
        """Topics as a string array; invalid UTF-8 raises StoreFormatError naming the record."""
        return self._utf8(self.topic_binary, self.topic_start, "topic")

    @cached_property
    def properties_binary(self) -> pa.Array:
        return self._slices(self.properties_start, self.properties_length)

    @cached_property
    def properties(self) -> pa.Array:
        """Raw properties strings (Java decodes invalid UTF-8 with U+FFFD; so do we)."""
        return _utf8_lenient(self.properties_binary)

    @cached_property
    def _props(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return locate_properties(self.arr, self.properties_start, self.properties_length,
                                 (TAGS, KEYS, UNIQ_KEY, DELAY, INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET))

    def property_binary(self, name: str) -> pa.Array:
        """Values of one property (null when absent or dropped by the broker's parsing rules)."""
        starts, lengths = self._props[name]
        present = starts >= 0
        # Absent values become empty slices at the record's properties start, keeping slices in order.
        return self._slices(np.where(present, starts, self.properties_start), lengths, present)

    def property_string(self, name: str) -> pa.Array:
        return _utf8_lenient(self.property_binary(name))

    @cached_property
    def _delays(self) -> tuple[np.ndarray, int | None]:
        """DELAY as Integer.parseInt reads it (any Unicode decimal digit), -1 where absent or unparsable; and
        the first SCHEDULE_TOPIC_XXXX record whose DELAY Java cannot parse (the broker rejects it; it parses
        DELAY for that topic only), or None."""
        starts, lengths = self._props[DELAY]
        out = np.full(len(self), -1, np.int64)
        bad = None
        cand = np.flatnonzero(starts >= 0)
        topics = self.topic_binary if len(cand) else None
        for i in cand.tolist():
            text = bytes(self.arr[starts[i]:starts[i] + lengths[i]]).decode("utf-8", "replace")
            value = java_parse_integral(text, INT_BITS)
            if value is not None:
                out[i] = value
            elif bad is None and topics[i].as_py() == SCHEDULE_TOPIC.encode():
                bad = i
        return out, bad

    @property
    def delay_level(self) -> np.ndarray:
        """DELAY as an int (Integer.parseInt); -1 where absent or not an int (only SCHEDULE_TOPIC_XXXX uses it)."""
        return self._delays[0]

    def host_bytes(self, which: str) -> list[bytes]:
        at = self.pos + 48 if which == "born" else self.store_host_at
        lens = self.born_host_len if which == "born" else self.store_host_len
        return [bytes(self.arr[a:a + n]) for a, n in zip(at.tolist(), lens.tolist())]

    def body(self) -> pa.Array:
        return self._slices(self.body_start, self.body_length)

    def _utf8(self, binary: pa.Array, starts: np.ndarray, what: str) -> pa.Array:
        try:
            return binary.cast(pa.large_string())
        except pa.ArrowInvalid:
            for i, value in enumerate(binary.to_pylist()):
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    at = self.base_offset + int(self.pos[i])
                    raise StoreFormatError(self.path, file_offset(self.path, at, self.base_offset),
                                           f"{what} is not valid UTF-8 (byte {exc.start} of the {what}; record at "
                                           f"commit-log offset {at})") from None
            raise

    # ---- validation --------------------------------------------------------------------------
    def first_layout_error(self) -> tuple[int, str] | None:
        """Index of the first record whose fields do not add up to its totalSize, and why."""
        if not len(self):
            return None
        computed = self.properties_start + np.maximum(self.properties_length, 0) - self.pos
        bad = ((computed != self.total_size) | (self.body_length < 0) | (self.topic_length < 0)
               | (self.properties_length < 0))
        idx = np.flatnonzero(bad)
        if not len(idx):
            return None
        i = int(idx[0])
        if self.topic_length[i] < 0:
            raw = int(self.topic_length[i])
            why = (f"a signed short: {raw}" if self.is_v2[i] else
                   f"a signed byte: {raw}; the brokers write a topic of 128-255 UTF-8 bytes with a one-byte length "
                   f"that their own reader takes as negative")
            return i, (f"topicLength {raw + (0x10000 if self.is_v2[i] else 0x100)} is negative as the broker reads it "
                       f"({why}): its checkMessageAndReturnSize throws, so the record is invalid to it")
        return i, (f"fields add up to {int(computed[i])} bytes but totalSize is {int(self.total_size[i])} "
                   f"(bodyLength {int(self.body_length[i])}, topicLength {int(self.topic_length[i])}, "
                   f"propertiesLength {int(self.properties_length[i])})")

    def first_crc_error(self) -> tuple[int, str] | None:
        """Index of the first record whose body CRC-32 (& 0x7FFFFFFF) differs from bodyCRC."""
        mv = memoryview(self.buf)
        crc = self.body_crc
        record_end = (self.pos + self.total_size).tolist()
        for i, (s, n) in enumerate(zip(self.body_start.tolist(), self.body_length.tolist())):
            if n > 0 and s + n <= record_end[i] and (zlib.crc32(mv[s:s + n]) & 0x7FFFFFFF) != crc[i]:
                return i, f"body CRC {zlib.crc32(mv[s:s + n]) & 0x7FFFFFFF} != stored bodyCRC {int(crc[i])}"
        return None

    def first_delay_error(self) -> tuple[int, str] | None:
        """A SCHEDULE_TOPIC_XXXX record whose DELAY is not an int makes the broker reject the record."""
        i = self._delays[1]
        if i is None:
            return None
        starts, lengths = self._props[DELAY]
        return i, f"DELAY property {bytes(self.arr[starts[i]:starts[i] + lengths[i]])!r} is not an integer"


def _utf8_lenient(binary: pa.Array) -> pa.Array:
    """Binary -> large_string; values that are not UTF-8 are decoded with U+FFFD as Java does."""
    try:
        return binary.cast(pa.large_string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in binary.to_pylist()],
                        type=pa.large_string())
