"""Byte-for-byte comparison of two stores' files (the broker's against reput's), by group: consume
queues by path, index files by content in name order (the broker names new ones by its clock), the
checkpoint, the abort marker and the commit-log segments by name.

Files are compared by `jobs.pipeline.io.compare.same_bytes`, on the union of their data ranges only (a broker's
consume-queue file is 6,000,000 bytes with a few pages written, and an LMQ store has thousands of them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jobs.pipeline.io.compare import same_bytes

GROUPS = ("consumequeue", "index", "checkpoint", "abort", "commitlog")


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
