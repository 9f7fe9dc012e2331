"""A RocksDB database directory's files as RocksDB names them, and the one check RocksDB itself does not make: a
MANIFEST cut inside a log record (RocksDB takes the cut tail for the end and opens an older, possibly empty, view).

The MANIFEST is a RocksDB log file: 32 KiB blocks of records, each a 7-byte header (masked CRC32C, uint16
little-endian length, type: 1 full, 2 first, 3 middle, 4 last, 0 zero padding) and its payload; a block's last
< 7 bytes are zero padding. Recyclable types (5-8, 11-byte headers) are not written to a MANIFEST."""
from __future__ import annotations

import fnmatch
import struct
from dataclasses import dataclass
from typing import Final

# Files whose presence makes a directory a RocksDB database (the broker's consume-queue database, or any other).
DB_FILE_PATTERNS: Final = ("CURRENT", "IDENTITY", "MANIFEST-*", "OPTIONS-*", "*.sst")
LOG_BLOCK: Final = 32768
LOG_HEADER: Final = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HEADER = struct.Struct("<IHB")


def is_db_file(name: str) -> bool:
    """A name RocksDB gives a database's own files (DB_FILE_PATTERNS)."""
    return any(fnmatch.fnmatchcase(name, p) for p in DB_FILE_PATTERNS)


def database_files(names: list[str]) -> frozenset[str]:
    """Of a directory's plain files, those of the RocksDB database it holds (none without CURRENT): its own files,
    LOCK, write-ahead logs (*.log) and info logs (LOG, LOG.old.*)."""
    if "CURRENT" not in names:
        return frozenset()
    return frozenset(n for n in names if is_db_file(n) or n in ("LOCK", "LOG") or n.startswith("LOG.old.")
                     or n.endswith(".log"))


@dataclass(frozen=True)
class ManifestCut:
    """Where a MANIFEST's record structure breaks: the byte offset of the record that does not end, and why."""
    offset: int
    reason: str


def manifest_cut(data: bytes) -> ManifestCut | None:
    """None when `data` is whole log records (a trailing zero-filled tail is preallocation); else where it breaks."""
    at, fragmented = 0, False
    while at < len(data):
        room = LOG_BLOCK - at % LOG_BLOCK
        if room < LOG_HEADER:
            at += room  # the block's trailer
            continue
        if len(data) - at < LOG_HEADER:
            return ManifestCut(at, f"ends {len(data) - at} bytes into a record header")
        _, length, kind = _HEADER.unpack_from(data, at)
        if kind == 0 and length == 0 and not any(data[at:]):
            break  # preallocated zeros
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            return ManifestCut(at, f"record type {kind} (not a MANIFEST log record)")
        if LOG_HEADER + length > room or at + LOG_HEADER + length > len(data):
            return ManifestCut(at, f"a record of {length} bytes that the file or its 32 KiB block ends inside")
        if (kind in (_FULL, _FIRST)) == fragmented:
            return ManifestCut(at, f"record type {kind} {'inside' if fragmented else 'outside'} a fragmented record")
        fragmented = kind in (_FIRST, _MIDDLE)
        at += LOG_HEADER + length
    if fragmented:
        return ManifestCut(at, "ends inside a fragmented record (no last fragment)")
    return None
