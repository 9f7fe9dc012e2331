"""Byte-for-byte equality of two local files, read only where either holds data (SEEK_DATA/SEEK_HOLE): outside
those ranges both read as zeros. A broker's consume-queue file is 6,000,000 bytes with a few pages written and an
LMQ store has thousands of them; reading every hole would read gigabytes of zeros. Used by recover --in-place (a
file rewritten with its own bytes is left alone) and by the bench's store comparison."""
from __future__ import annotations

import os
from pathlib import Path

from .copy import data_extents

COMPARE_CHUNK = 1 << 20  # bytes per pread


def union(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of two lists of [start, stop) ranges, sorted and merged (touching ranges too)."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(a + b):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (one file under two names trivially), read in chunks up to the first
    difference, from the end backwards: recovery changes a consume-queue or index file at the end of its data, so a
    rewritten file differs within the first chunk read."""
    sa, sb = os.stat(a), os.stat(b)
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    if sa.st_size != sb.st_size:
        return False
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    try:
        for start, end in reversed(union(data_extents(fa, sa.st_size), data_extents(fb, sb.st_size))):
            while end > start:
                at = max(start, end - COMPARE_CHUNK)
                if os.pread(fa, end - at, at) != os.pread(fb, end - at, at):
                    return False
                end = at
        return True
    finally:
        os.close(fa)
        os.close(fb)
