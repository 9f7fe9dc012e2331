"""Where a store's records sit: plain commit-log segments, DLedger data files, or both (the upgraded mixed
layout), planned as one list of `scan_plan.Segment`s in offset order that the split planner and decoders read.

A broker switched to DLedger mode keeps its old `commitlog/` segments below `dividedCommitlogOffset` (the
first DLedger data file's start: DLedger data starts at the segment boundary after the last plain record),
and reads everything from there on from `dledger-<selfId>/data/`. Pure functions over file listings.
"""
from __future__ import annotations

from dataclasses import dataclass

from .dledger import ENTRY_HEADER_SIZE
from .errors import StoreFormatError
from .scan_plan import Segment
from .segment_names import parse_segment_name


@dataclass(frozen=True)
class LogFile:
    """A file in a commit-log directory: its base name, size and full path."""

    name: str
    size: int
    path: str


def _segments(files: list[LogFile], file_size: int, header: int, what: str) -> list[Segment]:
    out = []
    for f in files:
        start = parse_segment_name(f.name)
        if start is None:
            continue
        if f.size != file_size:
            raise StoreFormatError(f.path, min(f.size, file_size),
                                   f"{what} is {f.size} bytes, expected {file_size} (mappedFileSizeCommitLog; the "
                                   f"broker refuses to load it); pass the broker's config with --broker-config")
        out.append(Segment(start, f.size, f.path, header))
    return sorted(out, key=lambda s: s.start)


def plan_log(plain: list[LogFile], dledger: list[LogFile] | None, file_size: int) -> list[Segment]:
    """The store's segments in offset order. `dledger` None: a plain store. Otherwise plain segments must lie
    wholly below the first DLedger data file (dividedCommitlogOffset): the broker never reads a plain segment
    at or above it, so one there is refused, named, rather than silently left out."""
    plain_segs = _segments(plain, file_size, 0, "segment")
    if dledger is None:
        return plain_segs
    data = _segments(dledger, file_size, ENTRY_HEADER_SIZE, "DLedger data file")
    if data and plain_segs:
        divided = data[0].start
        above = [s for s in plain_segs if s.start + s.size > divided]
        if above:
            raise StoreFormatError(above[0].path, 0,
                                   f"plain commit-log segment reaches {above[0].start + above[0].size}, past the "
                                   f"first DLedger data file {data[0].path} (dividedCommitlogOffset {divided}): the "
                                   f"broker reads DLedger data from there on; reput does not guess which is right")
    return plain_segs + data


def divided_offset(segments: list[Segment]) -> int | None:
    """dividedCommitlogOffset: where DLedger data begins after plain segments (None: not a mixed layout)."""
    if not any(s.header == 0 for s in segments):
        return None
    return next((s.start for s in segments if s.header), None)
