"""Commit-log encoder: `Message` objects -> RocketMQ record bytes and full-size segment files.

Used to make sample stores, test inputs and benchmark stores; the layout follows CommitLog's
`DefaultAppendMessageCallback` (4.9.8 / 5.3.3) byte for byte, including BLANK records and segment rolls.
The record layout here is written from the broker's source on purpose, not from storage_format.commitlog:
it is the independent writer the decoder's round-trip tests check against (and it is itself checked
against the golden stores' bytes), so a mistake in one does not hide in the other.
"""
from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from storage_format.commitlog import segment_name
from storage_format.record import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    TRAN_MASK,
    TRAN_PREPARED,
    TRAN_ROLLBACK,
    Message,
)

BLANK_MIN_LENGTH = 8  # CommitLog.END_FILE_MIN_BLANK_LENGTH: a segment always keeps room for a BLANK header
TOPIC_V2_THRESHOLD = 127  # 5.x writes MESSAGE_VERSION_V2 when topic.length() > Byte.MAX_VALUE
MAX_PROPERTIES_LENGTH = 0x7FFF  # stored as a signed short
LOCK_FILE_CONTENT = b"lock"
DEFAULT_CHUNK = 8 * 1024 * 1024

# Fixed head of a record up to and including bodyLength, one layout per (born IPv6, store IPv6):
# totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag, bornTimestamp,
# bornHost, bornPort, storeTimestamp, storeHost, storePort, reconsumeTimes, preparedTxOffset, bodyLength.
_HEADS: dict[tuple[bool, bool], struct.Struct] = {
    (b6, s6): struct.Struct(
        ">iIIiiqqiq" + ("16s" if b6 else "4s") + "iq" + ("16s" if s6 else "4s") + "iiqi"
    )
    for b6 in (False, True)
    for s6 in (False, True)
}
_BLANK = struct.Struct(">iI")
# DLedger (OpenMessaging DLedger 0.3.1.2, FORMAT.md "DLedger commit log"), written here from the format, not from
# storage_format.dledger: entry magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize; then the body.
DLEDGER_HEADER = struct.Struct(">iiqqqiiii")
DLEDGER_ENTRY_MAGIC = 1
DLEDGER_BLANK = struct.Struct(">ii")  # int -1, int bytes-left (these 8 counted), zeros to the file's end
DLEDGER_INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term: 32 bytes at index x 32
DLEDGER_INDEX_FILE_SIZE = 160 * 1024 * 1024
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
_NO_QUEUE_OFFSET = (TRAN_PREPARED, TRAN_ROLLBACK)


@lru_cache(maxsize=65536)
def topic_encoding(topic: str) -> tuple[bytes, bool]:
    """UTF-8 bytes of a topic and whether 5.x would store it as v2 (Java `String.length()` > 127)."""
    utf16_units = len(topic) + sum(1 for ch in topic if ord(ch) > 0xFFFF)
    return topic.encode("utf-8"), utf16_units > TOPIC_V2_THRESHOLD


@lru_cache(maxsize=65536)
def _topic_field(topic: str, magic_v2: bool | None) -> tuple[bytes, int]:
    """The stored topic field (length prefix + UTF-8 bytes) and the record magic that goes with it."""
    topic_b, auto_v2 = topic_encoding(topic)
    v2 = auto_v2 if magic_v2 is None else bool(magic_v2)
    n = len(topic_b)
    if n > (0x7FFF if v2 else 0xFF):
        raise ValueError(f"topic of {n} UTF-8 bytes does not fit a {'v2 2-byte' if v2 else 'v1 1-byte'} length")
    # v1: Java writes (byte) length, so 128..255 bytes read back negative in Java's own v1 reader.
    prefix = _USHORT.pack(n) if v2 else bytes((n,))
    return prefix + topic_b, (MAGIC_V2 if v2 else MAGIC_V1)


def host_sys_flag(msg: Message) -> int:
    """The message's sysFlag with the IPv6 host bits set from its host lengths, as the encoder stores it."""
    flags = msg.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)
    return flags | (FLAG_BORNHOST_V6 if len(msg.born_host) == 16 else 0) | (
        FLAG_STOREHOST_V6 if len(msg.store_host) == 16 else 0)


# A measured record: everything needed to place and pack it, computed once.
# (totalSize, head struct, magic, bodyCRC, sysFlag, topic field, properties bytes)
_Measured = tuple[int, struct.Struct, int, int, int, bytes, bytes]


def _measure(msg: Message) -> _Measured:
    """Validate one message and compute its stored size and derived header fields."""
    topic_field, magic = _topic_field(msg.topic, msg.magic_v2)
    nb, ns = len(msg.born_host), len(msg.store_host)
    if nb not in (4, 16) or ns not in (4, 16):
        raise ValueError(
            f"topic {msg.topic!r}: host addresses must be 4 (IPv4) or 16 (IPv6) bytes, "
            f"got born {nb} and store {ns}"
        )
    props_b = msg.properties.encode("utf-8")
    if len(props_b) > MAX_PROPERTIES_LENGTH:
        raise ValueError(
            f"topic {msg.topic!r}: properties are {len(props_b)} bytes; the 2-byte length holds at most "
            f"{MAX_PROPERTIES_LENGTH} (the broker rejects such a message)"
        )
    body = msg.body
    crc = (zlib.crc32(body) & 0x7FFFFFFF) if msg.body_crc is None else (msg.body_crc & 0xFFFFFFFF)
    sys_flag = host_sys_flag(msg)
    head = _HEADS[(nb == 16, ns == 16)]
    total = head.size + len(body) + len(topic_field) + 2 + len(props_b)
    return total, head, magic, crc, sys_flag, topic_field, props_b


def _pack(buf: bytearray, pos: int, msg: Message, m: _Measured, physical_offset: int, queue_offset: int) -> None:
    """Write a measured record at `buf[pos:pos + totalSize]`."""
    total, head, magic, crc, sys_flag, topic_field, props_b = m
    body = msg.body
    nbody = len(body)
    try:
        head.pack_into(
            buf, pos, total, magic, crc, msg.queue_id, msg.flag, queue_offset, physical_offset, sys_flag,
            msg.born_timestamp, msg.born_host, msg.born_port, msg.store_timestamp, msg.store_host,
            msg.store_port, msg.reconsume_times, msg.prepared_transaction_offset, nbody,
        )
    except struct.error as exc:
        raise ValueError(f"topic {msg.topic!r}: a header field is out of its Java range: {exc}") from None
    p = pos + head.size
    buf[p:p + nbody] = body
    p += nbody
    n = len(topic_field)
    buf[p:p + n] = topic_field
    p += n
    n = len(props_b)
    _SHORT.pack_into(buf, p, n)
    buf[p + 2:p + 2 + n] = props_b


def record_size(msg: Message) -> int:
    """Stored size (totalSize) of a message's record, as CommitLog.calMsgLength computes it."""
    return _measure(msg)[0]


def encode_record(msg: Message, physical_offset: int) -> bytes:
    """The exact bytes the broker stores for `msg` at global commit-log offset `physical_offset`.

    The queue offset is taken from `msg.queue_offset` as given; the IPv6 sysFlag bits follow the host
    lengths, bodyCRC is computed unless `msg.body_crc` is set, v2 magic follows the 5.x topic rule
    unless `msg.magic_v2` is set.
    """
    m = _measure(msg)
    buf = bytearray(m[0])
    _pack(buf, 0, msg, m, physical_offset, msg.queue_offset)
    return bytes(buf)


@dataclass
class WriteSummary:
    """What a SegmentWriter wrote: segment files, record and BLANK counts, where the log ends."""

    directory: str | None
    segment_size: int
    segments: list[str] = field(default_factory=list)
    records: int = 0
    blank_records: int = 0
    first_offset: int = 0
    max_physical_offset: int = 0  # end of the last record = the broker's maxPhyOffset
    preallocated: str | None = None

    def to_dict(self) -> dict:
        """Plain-dict form for JSON summaries."""
        return {
            "directory": self.directory,
            "segment_size": self.segment_size,
            "segments": list(self.segments),
            "records": self.records,
            "blank_records": self.blank_records,
            "first_offset": self.first_offset,
            "max_physical_offset": self.max_physical_offset,
            "preallocated": self.preallocated,
        }


class SegmentWriter:
    """Appends records to a commit-log directory with the broker's segment rules.

    Segments are named by their 20-digit start offset and are exactly `segment_size` bytes, zero past
    the last record. A record (or whole batch) needing `size + 8 > remaining` gets a BLANK record
    (totalSize = remaining, BLANK magic, 8 bytes) and goes to the next segment. Physical offsets are
    always assigned; queue offsets are assigned per (topic, queueId) when `assign_queue_offsets`
    (PREPARED/ROLLBACK records get 0 and do not advance the counter), else taken from the messages.
    The broker keys its counters by the string `topic-queueId`; that differs from a (topic, queueId)
    key only for negative queue ids, which no broker writes.
    The writer sets `physical_offset` (and an assigned `queue_offset`) on each appended Message.
    `directory=None` is a dry run: offsets are assigned, nothing is written.
    Bytes go through one reusable bytearray chunk per open segment; the untouched tail of a segment is
    left to `truncate`, which reads back as zeros.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None,
        segment_size: int,
        *,
        start_offset: int = 0,
        assign_queue_offsets: bool = True,
        queue_offsets: Mapping[tuple[str, int], int] | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        dledger_first_index: int | None = None,
        dledger_term: int = 0,
    ) -> None:
        """Open a writer whose first segment starts at `start_offset` (a multiple of `segment_size`).
        With `dledger_first_index` it writes DLedger data files instead (DLedgerMmapFileStore.appendAsLeader):
        each record behind a 48-byte entry header (entry indexes from that one, `dledger_term`), its
        physicalOffset = entry pos + 48, an entry that does not fit with 8 bytes to spare leaving a DLedger
        blank; a batch is one entry per message. `self.units` collects each entry's DLedger index unit."""
        self.dledger_index = dledger_first_index
        self.dledger_term = dledger_term
        self.units = bytearray()
        if segment_size <= BLANK_MIN_LENGTH:
            raise ValueError(f"segment_size must exceed {BLANK_MIN_LENGTH} bytes, got {segment_size}")
        if start_offset < 0 or start_offset % segment_size:
            raise ValueError(f"start_offset {start_offset} is not a multiple of segment_size {segment_size}")
        self._dir = None if directory is None else Path(directory)
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
        self.segment_size = segment_size
        self.assign_queue_offsets = assign_queue_offsets
        self.queue_offsets: dict[tuple[str, int], int] = dict(queue_offsets or {})
        self._seg_base = start_offset
        self._pos = 0  # write position inside the current segment
        self._chunk = bytearray(min(chunk_size, segment_size)) if self._dir is not None else bytearray()
        self._chunk_start = 0  # segment position of self._chunk[0]
        self._file = None
        self._closed = False
        self.summary = WriteSummary(
            directory=None if self._dir is None else str(self._dir),
            segment_size=segment_size,
            first_offset=start_offset,
            max_physical_offset=start_offset,
        )

    # -- public API -------------------------------------------------------------------------------

    def append(self, msg: Message) -> int:
        """Append one record; returns its physical offset."""
        if self._closed:
            raise ValueError("SegmentWriter is closed")
        m = _measure(msg)
        size = m[0] + self._header
        if size + BLANK_MIN_LENGTH > self.segment_size - self._pos:
            self._roll(size)
        return self._place(msg, m)

    @property
    def _header(self) -> int:
        return 0 if self.dledger_index is None else DLEDGER_HEADER.size

    def append_batch(self, msgs: Sequence[Message]) -> list[int]:
        """Append a batch that must sit whole in one segment (a BLANK ends the segment if it does not fit)."""
        if self._closed:
            raise ValueError("SegmentWriter is closed")
        if self.dledger_index is not None:  # DLedgerCommitLog.putMessages: one entry per message
            return [self.append(msg) for msg in msgs]
        measured = [_measure(msg) for msg in msgs]
        total = sum(m[0] for m in measured)
        if total + BLANK_MIN_LENGTH > self.segment_size - self._pos:
            self._roll(total)
        return [self._place(msg, m) for msg, m in zip(msgs, measured)]

    def close(self, *, preallocate_next: bool = False) -> WriteSummary:
        """Finish the current segment (zero tail to full size); optionally add one empty pre-allocated segment."""
        if self._closed:
            return self.summary
        if self._pos > 0:
            self._finish_segment()
            next_base = self._seg_base + self.segment_size
        else:
            next_base = self._seg_base
        if preallocate_next:
            name = segment_name(next_base)
            if self._dir is not None:
                with open(self._dir / name, "wb") as f:
                    f.truncate(self.segment_size)
            self.summary.preallocated = name
        self._closed = True
        return self.summary

    def __enter__(self) -> "SegmentWriter":
        """Context manager: the writer itself; leaving without an error closes it."""
        return self

    def abort(self) -> None:
        """Stop without finishing: close the open segment file as it is (used when an append failed)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._closed = True

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close on success, abort (leave the partial segment) on an exception."""
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- internals --------------------------------------------------------------------------------

    def _place(self, msg: Message, m: _Measured) -> int:
        """Assign offsets and pack a record at the current position (known to fit the segment)."""
        size = m[0] + self._header
        entry_pos = self._seg_base + self._pos
        phys = entry_pos + self._header
        if self.assign_queue_offsets:
            if (m[4] & TRAN_MASK) in _NO_QUEUE_OFFSET:
                qoff = 0
            else:
                key = (msg.topic, msg.queue_id)
                qoff = self.queue_offsets.get(key, 0)
                self.queue_offsets[key] = qoff + 1
            msg.queue_offset = qoff
        else:
            qoff = msg.queue_offset
        msg.physical_offset = phys
        if self._dir is not None:
            rel = self._pos - self._chunk_start
            if rel + size > len(self._chunk):
                self._flush_chunk()
                rel = 0
                if size > len(self._chunk):
                    self._chunk = bytearray(size)
            if self._header:
                DLEDGER_HEADER.pack_into(self._chunk, rel, DLEDGER_ENTRY_MAGIC, size, self.dledger_index,
                                         self.dledger_term, entry_pos, 0, 0, 0, m[0])
            _pack(self._chunk, rel + self._header, msg, m, phys, qoff)
        if self._header:
            self.units += (DLEDGER_INDEX_UNIT.pack(DLEDGER_ENTRY_MAGIC, entry_pos, size, self.dledger_index,
                                                      self.dledger_term))
            self.dledger_index += 1
        self._pos += size
        self.summary.records += 1
        self.summary.max_physical_offset = entry_pos + size
        return phys

    def _roll(self, needed: int) -> None:
        """End the current segment with a BLANK record and move to the next one."""
        if self._pos == 0:
            raise ValueError(
                f"a record or batch of {needed} bytes can never fit a {self.segment_size}-byte segment "
                f"(needs {needed + BLANK_MIN_LENGTH} with the BLANK reserve)"
            )
        remaining = self.segment_size - self._pos
        if self._dir is not None:
            rel = self._pos - self._chunk_start
            if rel + BLANK_MIN_LENGTH > len(self._chunk):
                self._flush_chunk()
                rel = 0
            if self._header:
                DLEDGER_BLANK.pack_into(self._chunk, rel, -1, remaining)
            else:
                _BLANK.pack_into(self._chunk, rel, remaining, MAGIC_BLANK)
        self._pos += BLANK_MIN_LENGTH
        self.summary.blank_records += 1
        self._finish_segment()
        self._seg_base += self.segment_size
        self._pos = 0
        self._chunk_start = 0

    def _open_segment(self) -> None:
        """Create the file of the current segment and record its name."""
        name = segment_name(self._seg_base)
        self._file = open(self._dir / name, "wb")  # noqa: SIM115 - closed in _finish_segment
        self.summary.segments.append(name)

    def _flush_chunk(self) -> None:
        """Write the chunk's used bytes to the segment file and restart the chunk at the current position."""
        used = self._pos - self._chunk_start
        if self._file is None:
            self._open_segment()
        if used:
            self._file.write(memoryview(self._chunk)[:used])
        self._chunk_start = self._pos

    def _finish_segment(self) -> None:
        """Flush and size the current segment to exactly `segment_size` bytes (zero tail)."""
        if self._dir is None:
            self.summary.segments.append(segment_name(self._seg_base))
            return
        self._flush_chunk()
        self._file.truncate(self.segment_size)
        self._file.close()
        self._file = None


def write_store(
    store_dir: str | os.PathLike,
    messages: Iterable[Message | Sequence[Message]],
    segment_size: int,
    *,
    start_offset: int = 0,
    assign_queue_offsets: bool = True,
    preallocate_next: bool = False,
    write_lock: bool = True,
) -> WriteSummary:
    """Write `store_dir/commitlog/` from messages (a list/tuple item is a batch) plus the `lock` file."""
    root = Path(store_dir)
    root.mkdir(parents=True, exist_ok=True)
    writer = SegmentWriter(
        root / "commitlog", segment_size, start_offset=start_offset, assign_queue_offsets=assign_queue_offsets
    )
    append, append_batch = writer.append, writer.append_batch
    try:
        for item in messages:
            if isinstance(item, Message):
                append(item)
            else:
                append_batch(item)
    except BaseException:
        writer.abort()
        raise
    summary = writer.close(preallocate_next=preallocate_next)
    if write_lock:
        (root / "lock").write_bytes(LOCK_FILE_CONTENT)
    return summary


def write_dledger_index(home: Path, units: bytes, first_index: int) -> None:
    """`home/index/`: the units of entries first_index, first_index + 1, ... at entry index x 32, in files of
    160 MiB named by their start offset (sparse: the zeros are not written)."""
    (home / "index").mkdir(parents=True, exist_ok=True)
    at = first_index * DLEDGER_INDEX_UNIT.size
    file_start = at - at % DLEDGER_INDEX_FILE_SIZE
    while True:
        with open(home / "index" / segment_name(file_start), "wb") as f:
            f.seek(at - file_start)
            take = min(len(units), file_start + DLEDGER_INDEX_FILE_SIZE - at)
            f.write(units[:take])
            f.truncate(DLEDGER_INDEX_FILE_SIZE)
        units, at, file_start = units[take:], at + take, file_start + DLEDGER_INDEX_FILE_SIZE
        if not units:
            return


def write_dledger_checkpoint(home: Path, committed_index: int, end_index: int) -> None:
    """`home/checkpoint` as DLedger stores it (java.util.Properties text)."""
    (home / "checkpoint").write_text(f"#{home.name}\ncommittedIndex={committed_index}\nendIndex={end_index}\n")


@dataclass
class DledgerWriteSummary:
    """What write_dledger_store wrote: the plain part (None without one) and the DLedger part."""

    plain: WriteSummary | None
    dledger: WriteSummary
    divided_offset: int | None  # dividedCommitlogOffset: where DLedger data begins after plain segments
    first_index: int
    last_index: int


def write_dledger_store(
    store_dir: str | os.PathLike,
    messages: Iterable[Message | Sequence[Message]],
    segment_size: int,
    *,
    self_id: str = "n0",
    plain_messages: Iterable[Message | Sequence[Message]] | None = None,
    start_offset: int = 0,
    first_index: int = 0,
    assign_queue_offsets: bool = True,
    write_index: bool = True,
    committed_index: int | None = None,
    write_lock: bool = True,
) -> DledgerWriteSummary:
    """A DLedger-mode store: `dledger-<self_id>/data/` entry files of `segment_size` bytes, the member's DLedger
    index (units at entry index x 32, 160 MiB sparse files) and checkpoint (committedIndex: the last entry
    unless given). With `plain_messages`, the upgraded mixed layout: those go to `commitlog/` first, the last
    plain segment is closed with a plain BLANK at its write position, and DLedger data starts at the next
    segment boundary (dividedCommitlogOffset) with queue offsets carried on, as 4.9.8 does on upgrade."""
    root = Path(store_dir)
    root.mkdir(parents=True, exist_ok=True)
    plain_summary, offsets = None, {}
    if plain_messages is not None:
        plain = SegmentWriter(root / "commitlog", segment_size, start_offset=start_offset,
                              assign_queue_offsets=assign_queue_offsets)
        for item in plain_messages:
            plain.append(item) if isinstance(item, Message) else plain.append_batch(item)
        if plain._pos:
            plain._roll(0)  # the BLANK at the write position; the next segment boundary follows
        plain._closed = True
        plain_summary, offsets = plain.summary, plain.queue_offsets
        start_offset = plain._seg_base
    home = root / f"dledger-{self_id}"
    writer = SegmentWriter(home / "data", segment_size, start_offset=start_offset,
                           assign_queue_offsets=assign_queue_offsets, queue_offsets=offsets,
                           dledger_first_index=first_index)
    for item in messages:
        writer.append(item) if isinstance(item, Message) else writer.append_batch(item)
    summary = writer.close()
    last = writer.dledger_index - 1
    if write_index:
        write_dledger_index(home, bytes(writer.units), first_index)
    write_dledger_checkpoint(home, last if committed_index is None else committed_index, last)
    if write_lock:
        (root / "lock").write_bytes(LOCK_FILE_CONTENT)
    return DledgerWriteSummary(plain_summary, summary, start_offset if plain_summary else None, first_index, last)
