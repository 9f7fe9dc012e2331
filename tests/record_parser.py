"""An independent reader of commit-log records written from the format with struct alone, not with
storage_format.commitlog, so that the encoder and the decoder cannot share a mistake."""
from __future__ import annotations

import struct
from dataclasses import replace

from storage_format.record import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, Message

_FIXED = struct.Struct(">iIIiiqqiq")  # up to bornTimestamp: 48 bytes


def parse_record(buf: bytes, pos: int) -> tuple[Message, int, int]:
    """Decode one message record at buf[pos]: (message, totalSize, bytes actually consumed)."""
    total, magic, crc, qid, flag, qoff, phys, sysf, born_ts = _FIXED.unpack_from(buf, pos)
    assert magic in (MAGIC_V1, MAGIC_V2), hex(magic)
    p = pos + 48
    bl = 16 if sysf & 0x10 else 4
    born_host = bytes(buf[p:p + bl])
    (born_port,) = struct.unpack_from(">i", buf, p + bl)
    p += bl + 4
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    sl = 16 if sysf & 0x20 else 4
    store_host = bytes(buf[p:p + sl])
    (store_port,) = struct.unpack_from(">i", buf, p + sl)
    p += sl + 4
    reconsume, prep, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    body = bytes(buf[p:p + body_len])
    p += body_len
    if magic == MAGIC_V2:
        (tl,) = struct.unpack_from(">H", buf, p)
        p += 2
    else:
        tl = buf[p]
        p += 1
    topic = bytes(buf[p:p + tl]).decode("utf-8")
    p += tl
    (pl,) = struct.unpack_from(">h", buf, p)
    p += 2
    props = bytes(buf[p:p + pl]).decode("utf-8")
    p += pl
    msg = Message(
        topic=topic, body=body, queue_id=qid, queue_offset=qoff, flag=flag, sys_flag=sysf,
        born_timestamp=born_ts, born_host=born_host, born_port=born_port, store_timestamp=store_ts,
        store_host=store_host, store_port=store_port, reconsume_times=reconsume,
        prepared_transaction_offset=prep, properties=props, physical_offset=phys, body_crc=crc,
        magic_v2=magic == MAGIC_V2,
    )
    return msg, total, p - pos


def walk_segment(buf: bytes, base: int) -> tuple[list[tuple[int, Message, int]], int | None]:
    """Follow the totalSize chain: [(position, message, totalSize)], and the BLANK position (or None)."""
    out = []
    pos = 0
    while pos + 8 <= len(buf):
        total, magic = struct.unpack_from(">iI", buf, pos)
        if magic == MAGIC_BLANK:
            assert total == len(buf) - pos, "a BLANK record's totalSize is the rest of the segment"
            return out, pos
        if total == 0 and magic == 0:
            break
        msg, total, used = parse_record(buf, pos)
        assert used == total, f"record at {base + pos}: fields add up to {used}, totalSize {total}"
        assert msg.physical_offset == base + pos
        out.append((pos, msg, total))
        pos += total
    assert not any(buf[pos:]), "bytes after the last record are zero"
    return out, None


def as_input(msg: Message) -> Message:
    """A parsed record as encoder input: derived fields left for the encoder to compute."""
    return replace(msg, body_crc=None, magic_v2=None, physical_offset=-1)
