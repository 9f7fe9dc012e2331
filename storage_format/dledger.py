"""The DLedger commit log's bytes (`enableDLegerCommitLog`, OpenMessaging DLedger 0.3.1.2 under RocketMQ 4.9.8).

Entries sit in `dledger-<selfId>/data/<20-digit offset>` files of `mappedFileSizeCommitLog` bytes: a 48-byte
header, then exactly one commit-log record whose PHYSICALOFFSET is the entry's pos + 48. An entry that does not
fit with 8 bytes to spare leaves a DLedger blank (int -1, int bytes-left) and starts the next file. The DLedger
index (`dledger-<selfId>/index/`) holds one 32-byte unit per entry index. The one home of these constants.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ENTRY_HEADER_SIZE = 48  # magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize
ENTRY_MAGIC = 1  # DLedgerEntry.MAGIC in 0.3.1.2
BLANK_MAGIC = -1  # a DLedger blank: int -1, int bytes-left (these 8 counted), zeros
BLANK_HEADER_SIZE = 8  # an entry goes in a file only if its size + 8 <= the bytes left
INDEX_UNIT_SIZE = 32  # magic int, pos long, size int, index long, term long
INDEX_FILE_SIZE = 160 * 1024 * 1024  # DLedgerConfig.indexFileSize (32 x 5 Mi), not settable from the broker
DIR_PREFIX = "dledger-"  # the store directory is dledger-<dLegerSelfId>
CHECKPOINT = "checkpoint"  # text: committedIndex=<n>, endIndex=<n>

_HEADER = struct.Struct(">iiqqqiiii")
_UNIT = struct.Struct(">iqiqq")  # 32 bytes (FORMAT.md's "4 zero bytes" are not there: the golden index wins)


@dataclass(frozen=True, kw_only=True)
class EntryHeader:
    """One DLedger entry's header; `pos` is the absolute offset of the entry (its header's first byte)."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int

    @property
    def record_offset(self) -> int:
        """Where the commit-log record inside starts: the record's PHYSICALOFFSET."""
        return self.pos + ENTRY_HEADER_SIZE


def read_entry_header(buf: bytes | memoryview, at: int) -> EntryHeader:
    """The 48-byte header at byte `at` of `buf` (no checks: see the callers' rules)."""
    magic, size, index, term, pos, channel, chain_crc, body_crc, body_size = _HEADER.unpack_from(buf, at)
    return EntryHeader(magic=magic, size=size, index=index, term=term, pos=pos, channel=channel,
                       chain_crc=chain_crc, body_crc=body_crc, body_size=body_size)


def index_unit(header: EntryHeader) -> bytes:
    """The entry's 32-byte unit in the DLedger index (at byte index x 32 of the index's space)."""
    return _UNIT.pack(ENTRY_MAGIC, header.pos, header.size, header.index, header.term)


def parse_checkpoint(text: str) -> dict[str, int]:
    """`dledger-<id>/checkpoint` as DLedger writes it (java.util.Properties lines `committedIndex=<n>`)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith(("#", "!")):
            out[name.strip()] = int(value.strip())
    return out
