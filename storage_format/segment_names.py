"""Commit-log segment file names: a segment is named by its start offset in 20 digits, and an offset inside
the commit log maps to a byte offset inside that file. Apart from the decoder so every module naming a
segment or a position in it (errors name file and byte offset) shares the one rule."""
from __future__ import annotations

import unicodedata

SEGMENT_NAME_DIGITS = 20


def segment_name(start_offset: int) -> str:
    return f"{start_offset:0{SEGMENT_NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """The start offset a segment file name stands for, or None when it is not a segment name."""
    if len(name) == SEGMENT_NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def file_offset(path: str, offset: int, base_offset: int) -> int:
    """Commit-log `offset` as a byte offset inside the segment file `path` (named by its start offset);
    relative to `base_offset` when `path` is not a segment name (a bare buffer)."""
    start = parse_segment_name(path.rstrip("/").rsplit("/", 1)[-1])
    return offset - (base_offset if start is None else start)


JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1


def java_parse_long(name: str) -> int | None:
    """Java's Long.parseLong(name) (what the broker's MappedFile and DLedger's DefaultMmapFile make of a file
    name): an optional sign, then decimal digits of any script (Character.digit), within a long; None where
    it throws NumberFormatException (a `.bak` suffix, a hex letter, an empty name, out of range)."""
    digits = name[1:] if name[:1] in ("+", "-") else name
    if not digits:
        return None
    value = 0
    for c in digits:
        d = unicodedata.decimal(c, None) if ord(c) < 0x10000 else None  # a Java char: no supplementary digits
        if d is None:
            return None
        value = value * 10 + d
    value = -value if name[0] == "-" else value
    return value if JAVA_LONG_MIN <= value <= JAVA_LONG_MAX else None

