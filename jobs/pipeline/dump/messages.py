"""One commit-log record read by its physical offset, and how it is shown: the JSON form (`message_dict`)
and the console lines, shared by jobs.query and jobs.dump (random access, no Spark)."""
from __future__ import annotations

import base64
import zlib

from storage_format.msg_id import encode_offset_msg_id
from storage_format.properties import UNIQ_KEY, parse_properties
from storage_format.record import (FLAG_COMPRESSED, TRAN_COMMIT, TRAN_MASK, TRAN_NOT, TRAN_PREPARED,
                                   TRAN_ROLLBACK, Message)
from storage_format.record_reader import RecordRead, read_record
from storage_format.record_text import host_text, iso_utc
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..store.segments import list_segments

PREVIEW_CHARS = 120
TRAN_NAMES = {TRAN_NOT: "NOT", TRAN_PREPARED: "PREPARED", TRAN_COMMIT: "COMMIT", TRAN_ROLLBACK: "ROLLBACK"}
COMPRESSION_TYPES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}  # 5.x: (sysFlag >> 8) & 7; 4.x: always zlib


class RecordReader:
    """Reads single records by physical offset, like CommitLog.getData + a decode."""

    def __init__(self, store: Location, settings: BrokerSettings) -> None:
        self.settings = settings
        self.segments: list[Segment] = list_segments(store, settings)
        self._cache: dict[int, RecordRead] = {}

    def read(self, offset: int) -> tuple[Message | None, str | None]:
        """The record at `offset`, or None and why it cannot be read there."""
        got = self.read_record(offset)
        return got.message, got.reason

    def read_record(self, offset: int) -> RecordRead:
        """The record at `offset` with its totalSize, or why it cannot be read there."""
        if offset not in self._cache:
            seg = next((s for s in self.segments if s.start <= offset < s.start + s.size), None)
            self._cache[offset] = (RecordRead(None, reason="no commit-log segment holds this offset") if seg is None
                                   else read_record(seg, Location(seg.path).read_range, offset))
        return self._cache[offset]


def body_of(msg: Message) -> tuple[bytes, str | None, str | None]:
    """(body as the application sees it, compression used or None, why it stays compressed or None)."""
    if not msg.sys_flag & FLAG_COMPRESSED:
        return msg.body, None, None
    kind = COMPRESSION_TYPES[(msg.sys_flag >> 8) & 0x7]
    try:
        if kind == "zlib":
            return zlib.decompress(msg.body), kind, None
        if kind == "lz4":
            import lz4.frame  # optional: only for 5.x producers that chose LZ4
            return lz4.frame.decompress(msg.body), kind, None
        import zstandard  # optional: only for 5.x producers that chose ZSTD
        return zstandard.ZstdDecompressor().decompressobj().decompress(msg.body), kind, None
    except ImportError:
        return msg.body, kind, f"{kind} body left compressed (install the Python {kind} package to decode it)"
    except Exception as exc:  # a damaged body must not stop the listing
        return msg.body, kind, f"{kind} body does not decompress: {exc}"


def preview(body: bytes, chars: int = PREVIEW_CHARS) -> str:
    """The start of a body as one printable line (UTF-8, undecodable bytes and controls as '.')."""
    text = body[:chars * 4].decode("utf-8", "replace")
    text = "".join(c if c.isprintable() and c != "\ufffd" else "." for c in text)
    return text[:chars] + ("..." if len(text) > chars else "")


def message_dict(msg: Message, show_body: bool) -> dict:
    """One found message for the JSON output and the console."""
    props = parse_properties(msg.properties)
    body, compression, problem = body_of(msg)
    out = {
        "physical_offset": msg.physical_offset,
        "offset_msg_id": encode_offset_msg_id(msg.store_host, msg.store_port, msg.physical_offset),
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "store_timestamp": msg.store_timestamp,
        "store_time": iso_utc(msg.store_timestamp),
        "born_timestamp": msg.born_timestamp,
        "born_time": iso_utc(msg.born_timestamp),
        "store_host": host_text(msg.store_host, msg.store_port),
        "born_host": host_text(msg.born_host, msg.born_port),
        "sys_flag": msg.sys_flag,
        "transaction_type": TRAN_NAMES[msg.sys_flag & TRAN_MASK],
        "flag": msg.flag,
        "reconsume_times": msg.reconsume_times,
        "prepared_transaction_offset": msg.prepared_transaction_offset,
        "body_crc": msg.body_crc,
        "magic_version": 2 if msg.magic_v2 else 1,
        "properties": props,
        "stored_body_length": len(msg.body),
        "body_compression": compression,
        "body_length": len(body),
        "body_preview": preview(body),
    }
    if problem:
        out["body_note"] = problem
    if show_body:
        try:
            out["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(body).decode("ascii")
    return out


def message_lines(m: dict, show_body: bool = False) -> list[str]:
    """The console form of one `message_dict`: a few lines, offsets and ids first."""
    props = "  ".join(f"{k}={v}" for k, v in m["properties"].items())
    comp = (f", {m['body_compression']} {m['stored_body_length']} -> {m['body_length']} bytes"
            if m["body_compression"] else "")
    lines = [f"- offset {m['physical_offset']}  msgId {m['offset_msg_id']}  uniqKey {m['properties'].get(UNIQ_KEY, '-')}",
             f"  topic {m['topic']}  queue {m['queue_id']}  queueOffset {m['queue_offset']}  "
             f"type {m['transaction_type']}  sysFlag 0x{m['sys_flag']:X}  reconsumeTimes {m['reconsume_times']}",
             f"  stored {m['store_time']} ({m['store_timestamp']}) on {m['store_host']}; "
             f"born {m['born_time']} ({m['born_timestamp']}) on {m['born_host']}",
             f"  properties {props}",
             f"  body {m['body_length']} bytes{comp}: {m['body_preview']}"]
    if m.get("body_note"):
        lines.append(f"  note: {m['body_note']}")
    if show_body:
        lines.append("  body: " + m.get("body", "(base64) " + m.get("body_base64", "")))
    return lines
