"""Byte-for-byte comparison of two stores' files (the broker's against reput's), by group: consume
queues by path, index files by content in name order (the broker names new ones by its clock), the
checkpoint, the abort marker and the commit-log segments by name.

Files are compared on the union of their data ranges (SEEK_DATA/SEEK_HOLE): outside it both read as
zeros. A broker's consume-queue file is 6,000,000 bytes with a few pages written, and an LMQ store has
thousands of them; reading every hole would read gigabytes of zeros.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

GROUPS = ("consumequeue", "index", "checkpoint", "abort", "commitlog")
BLOCK = 8 << 20


def _data_ranges(fd: int, size: int) -> list[tuple[int, int]]:
    """The [start, stop) ranges of a file that may hold data (all of it where holes cannot be asked for)."""
    out, pos = [], 0
    try:
        while pos < size:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            stop = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, min(stop, size)))
            pos = stop
    except OSError as e:
        if e.errno == errno.ENXIO:  # no data at or after pos: the rest is a hole
            return out
        return [(0, size)]  # this filesystem cannot say: compare everything
    return out


def union(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of two lists of [start, stop) ranges, sorted and merged."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(a + b):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (the same file, by hard link, trivially)."""
    sa, sb = a.stat(), b.stat()
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    if sa.st_size != sb.st_size:
        return False
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        ranges = union(_data_ranges(fa.fileno(), sa.st_size), _data_ranges(fb.fileno(), sb.st_size))
        for start, stop in ranges:
            pos = start
            while pos < stop:
                n = min(BLOCK, stop - pos)
                if os.pread(fa.fileno(), n, pos) != os.pread(fb.fileno(), n, pos):
                    return False
                pos += n
    return True


@dataclass
class StoreComparison:
    """Per group compared: the differences found (empty = identical); notes that are not differences."""

    differences: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not any(self.differences.values())

    def summary(self) -> str:
        """One line: identical (with the file counts) or the first differences per group."""
        counts = ", ".join(f"{g} {n}" for g, n in self.files.items())
        if self.identical:
            return f"byte-identical ({counts} files)"
        bad = "; ".join(f"{g}: {', '.join(d[:3])}{' ...' if len(d) > 3 else ''}"
                        for g, d in self.differences.items() if d)
        return f"DIFFER ({bad})"

    def to_dict(self) -> dict:
        return {"identical": self.identical, "differences": self.differences, "notes": self.notes,
                "files": self.files}


def _files(root: Path, sub: str) -> dict[str, Path]:
    """Regular files under root/sub by path relative to root/sub."""
    base = root / sub
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*")) if p.is_file()} if base.is_dir() else {}


def _by_path(a: dict[str, Path], b: dict[str, Path]) -> list[str]:
    """Names missing on one side and names whose bytes differ."""
    out = [f"only in broker: {n}" for n in sorted(a.keys() - b.keys())]
    out += [f"only in reput: {n}" for n in sorted(b.keys() - a.keys())]
    out += [n for n in sorted(a.keys() & b.keys()) if not same_bytes(a[n], b[n])]
    return out


def compare_stores(broker: Path, reput: Path, groups: tuple[str, ...] = GROUPS) -> StoreComparison:
    """Compare the groups of two store directories byte for byte."""
    result = StoreComparison()
    for group in groups:
        if group == "consumequeue" or group == "commitlog":
            a, b = _files(broker, group), _files(reput, group)
            result.differences[group] = _by_path(a, b)
            result.files[group] = len(a)
        elif group == "index":
            a, b = _files(broker, group), _files(reput, group)
            la, lb = [a[n] for n in sorted(a)], [b[n] for n in sorted(b)]
            diff = [] if len(la) == len(lb) else [f"{len(la)} files against {len(lb)}"]
            diff += [f"{x.name} / {y.name}" for x, y in zip(la, lb) if not same_bytes(x, y)]
            result.differences[group] = diff
            result.files[group] = len(a)
            if not diff and sorted(a) != sorted(b):
                result.notes.append(f"index file names differ (compared by content in name order): "
                                    f"{sorted(a)} / {sorted(b)}")
        elif group in ("checkpoint", "abort"):
            a, b = broker / group, reput / group
            if a.exists() != b.exists():
                result.differences[group] = [f"{group} only in {'broker' if a.exists() else 'reput'}"]
            else:
                result.differences[group] = [] if not a.exists() or same_bytes(a, b) else [group]
            result.files[group] = int(a.exists())
        else:
            raise ValueError(f"unknown group {group!r}; choose from {GROUPS}")
    return result
