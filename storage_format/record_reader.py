"""Single commit-log records by physical offset, as CommitLog.getData + a decode find them, and decoded
columns as `Message` objects: for queries, tests and small audits (not the hot path)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import dledger
from .commitlog import MIN_RECORD_SIZE, RecordColumns, decode_buffer
from .errors import StoreFormatError
from .record import MAGIC_V1, MAGIC_V2, Message
from .scan_plan import Segment

ReadRange = Callable[[int, int], bytes]  # (offset in the file, length) -> up to length bytes


@dataclass(frozen=True)
class RecordRead:
    """A record read by offset: the message and its totalSize, or why no valid record starts there."""

    message: Message | None
    total_size: int | None = None
    reason: str | None = None


def read_record(segment: Segment, read_range: ReadRange, offset: int) -> RecordRead:
    """The record that starts at commit-log `offset` inside `segment`, or why no valid record starts
    there (no magic, a totalSize past the segment, fields that do not add up, a moved physicalOffset).
    `read_range` reads the segment file."""
    pos = offset - segment.start
    if not 0 <= pos < segment.size:
        return RecordRead(None, reason="no commit-log segment holds this offset")
    head = bytes(read_range(pos, min(8, segment.size - pos)))
    if len(head) < 8:
        return RecordRead(None, reason="offset is at the very end of a segment")
    size, magic = int.from_bytes(head[:4], "big", signed=True), int.from_bytes(head[4:8], "big")
    if magic not in (MAGIC_V1, MAGIC_V2):
        if segment.header and int.from_bytes(head[:4], "big", signed=True) == dledger.ENTRY_MAGIC:
            return RecordRead(None, reason=f"a DLedger entry header starts here, not a record: the message "
                                           f"behind it is at offset {offset + segment.header} (entry pos + "
                                           f"{segment.header})")
        return RecordRead(None, reason=f"no record starts here (magic 0x{magic:08X})")
    if size < MIN_RECORD_SIZE or pos + size > segment.size:
        return RecordRead(None, reason=f"totalSize {size} does not fit the segment")
    buf = bytes(read_range(pos, size))
    try:
        chunk = decode_buffer(buf, offset, 0, 1, segment_end=len(buf), path=segment.path)
    except StoreFormatError as exc:
        return RecordRead(None, reason=exc.reason)
    if chunk.count != 1:
        return RecordRead(None, reason=f"not a valid record: {chunk.end.reason} {chunk.end.detail}".strip())
    msg = records_from_columns(chunk.columns)[0]
    if msg.physical_offset != offset:
        return RecordRead(None, reason=f"bytes here look like a record but its physicalOffset field is "
                                       f"{msg.physical_offset}")
    return RecordRead(msg, size)


def records_from_columns(cols: RecordColumns, with_body: bool = True) -> list[Message]:
    """Message objects from decoded columns, one Python object per record."""
    topics = cols.topic.to_pylist()
    props = cols.properties.to_pylist()
    bodies = cols.body().to_pylist() if with_body else [b""] * len(cols)
    born_hosts, store_hosts = cols.host_bytes("born"), cols.host_bytes("store")
    out = []
    for i in range(len(cols)):
        out.append(Message(
            topic=topics[i], body=bodies[i], queue_id=int(cols.queue_id[i]), queue_offset=int(cols.queue_offset[i]),
            flag=int(cols.flag[i]), sys_flag=int(cols.sys_flag[i]), born_timestamp=int(cols.born_timestamp[i]),
            born_host=born_hosts[i], born_port=int(cols.born_port[i]), store_timestamp=int(cols.store_timestamp[i]),
            store_host=store_hosts[i], store_port=int(cols.store_port[i]), reconsume_times=int(cols.reconsume_times[i]),
            prepared_transaction_offset=int(cols.prepared_transaction_offset[i]), properties=props[i] or "",
            physical_offset=int(cols.physical_offset[i]), body_crc=int(cols.body_crc[i]),
            magic_v2=bool(cols.is_v2[i])))
    return out
