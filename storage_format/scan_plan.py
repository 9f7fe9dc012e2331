"""Cut a commit log into byte-range splits, and stitch per-split walks into the broker's one scan.

The broker reads the commit log as one chain: records follow each other by totalSize, a BLANK record
sends reading to the next segment, and the first invalid record ends everything. Splits are walked in
parallel, each starting at its segment's start or at the first record it finds by the physicalOffset
rule; `stitch` then accepts a split only when it starts exactly where the chain before it ended.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from .commitlog import END_BAD_ENTRY, END_BLANK, END_FILE, END_STOP, ScanEnd, segment_name
from .dledger import sequence_problem
from .errors import SettingsError

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024  # bytes of commit log per decode task
MAX_SPLITS = 200_000  # 25 TB in default splits; more is a split size given without its unit
TASKS_PER_WORKER = 4  # a short scan's splits per worker (balanced_split_size)
MIN_BALANCED_SPLIT = 16 << 20  # below this a split's fixed cost (a task, its work files) outweighs the balance
END_NO_NEXT_SEGMENT = "no_next_segment"
END_MISSING_SEGMENT = "missing_segment"
END_ERROR = "error"  # the split could not be decoded (its summary carries the error)


SEGMENT_PLAIN = "plain"  # records follow each other (commitlog/)
SEGMENT_DLEDGER = "dledger"  # each record sits behind a DLedger entry header (dledger-<id>/data/)


@dataclass(frozen=True)
class Segment:
    """One commit-log segment file: its start offset (from the name), size and path. `header` is the bytes
    in front of each record: 0 in a plain segment, the DLedger entry header in a DLedger data file (the
    record at entry pos + header, the next entry at pos + entry size, a DLedger blank ends the file)."""

    start: int
    size: int
    path: str
    header: int = 0

    @property
    def kind(self) -> str:
        return SEGMENT_DLEDGER if self.header else SEGMENT_PLAIN


@dataclass(frozen=True)
class Split:
    """Byte range [start, stop) of a segment (segment-relative): the records that begin in it."""

    index: int
    segment: Segment
    start: int
    stop: int

    @property
    def global_start(self) -> int:
        return self.segment.start + self.start

    @property
    def global_stop(self) -> int:
        return self.segment.start + self.stop

    @property
    def at_segment_start(self) -> bool:
        return self.start == 0


@dataclass(frozen=True, kw_only=True)
class SplitWalk:
    """What a split's walk found: the first record offset (None if none) and how the walk ended."""

    split_index: int
    first_offset: int | None
    end: ScanEnd
    records: int = 0
    blanks: int = 0
    first_entry: int | None = None  # DLedger entry index of the first and last entry walked (None: plain)
    last_entry: int | None = None
    first_term: int | None = None  # and their terms
    last_term: int | None = None


@dataclass
class Stitched:
    """The broker's scan assembled from split walks."""

    accepted: list[int] = field(default_factory=list)  # split indexes whose records are valid
    redo: dict[int, int] = field(default_factory=dict)  # split index -> exact offset to walk from
    end: ScanEnd | None = None  # where the whole scan stopped and why
    data_after_end: list[str] = field(default_factory=list)  # segments with data past the end
    failed: int | None = None  # a split the chain reaches that could not be decoded

    @property
    def complete(self) -> bool:
        return not self.redo


def balanced_split_size(segments: list[Segment], split_size: int, workers: int) -> int:
    """The split size a scan uses: `split_size`, or less where the log it reads is too short to give every worker
    TASKS_PER_WORKER splits of it (a night's scan of three segments on two workers: two tasks at once, then one
    alone while the other worker waits), never below MIN_BALANCED_SPLIT."""
    if split_size <= 0 or workers <= 0:
        return split_size
    want = TASKS_PER_WORKER * workers
    total = sum(s.size for s in segments)
    if total // split_size >= want:
        return split_size
    return min(split_size, max(MIN_BALANCED_SPLIT, -(-total // want)))


def check_split_count(segments: list[Segment], split_size: int) -> None:
    """Refuse a split size that cuts the log into more than MAX_SPLITS splits (a size given without its unit: each
    split is a task's state on the driver and files in the work directory), before any is made."""
    count = sum(1 if split_size <= 0 else max(1, -(-seg.size // split_size)) for seg in segments)
    if count > MAX_SPLITS:
        raise SettingsError(f"--split-size {split_size}: {count:,} splits of {split_size:,} bytes over "
                            f"{sum(s.size for s in segments):,} bytes of commit-log files (at most {MAX_SPLITS:,}); "
                            f"sizes are bytes unless suffixed, e.g. 128m (the default)")


def plan_splits(segments: list[Segment], split_size: int) -> list[Split]:
    """Splits of at most `split_size` bytes, in commit-log order (0 = one split per segment)."""
    splits: list[Split] = []
    for seg in segments:
        step = seg.size if split_size <= 0 else split_size
        start = 0
        while True:
            stop = min(seg.size, start + step)
            splits.append(Split(len(splits), seg, start, stop))
            start = stop
            if start >= seg.size:
                break
    return splits


def stitch(splits: list[Split], walks: dict[int, SplitWalk]) -> Stitched:
    """Follow the chain across splits; a split whose first record is not where the chain continues
    is put in `redo` with the exact offset to walk from (its physicalOffset match was false)."""
    out = Stitched()
    if not splits:
        return out
    expect = splits[0].segment.start
    last_entry = last_term = None  # the chain's last DLedger entry: the next must follow it (dledger.sequence_problem)
    for sp in splits:
        walk = walks[sp.index]
        seg = sp.segment
        if out.end is not None:
            if walk.records and sp.at_segment_start:
                out.data_after_end.append(seg.path)
            continue
        if sp.at_segment_start and expect != seg.start:
            if expect < seg.start:
                missing = posixpath.join(posixpath.dirname(seg.path), segment_name(expect))
                out.end = ScanEnd(END_MISSING_SEGMENT, expect, detail=f"no segment starts at {expect}; "
                                                                      f"next segment is {seg.path}",
                                  path=missing, file_offset=0)
            else:
                out.end = ScanEnd(END_MISSING_SEGMENT, expect, path=seg.path, file_offset=0,
                                  detail=f"segment {seg.path} overlaps the previous one, which ends at {expect}")
            if walk.records:
                out.data_after_end.append(seg.path)
            continue
        if expect >= sp.global_stop:
            continue  # the chain jumps over this split (a long record, or a blank tail)
        if walk.end.reason == END_ERROR:
            out.end = walk.end
            out.failed = sp.index
            continue
        if walk.first_offset != expect:
            out.redo[sp.index] = expect
            return out
        why = None if walk.first_entry is None else sequence_problem(walk.first_entry, walk.first_term, last_entry,
                                                                     last_term)
        if why is not None:
            out.end = ScanEnd(END_BAD_ENTRY, expect, path=seg.path, file_offset=expect - seg.start, detail=why)
            continue
        if walk.last_entry is not None:
            last_entry, last_term = walk.last_entry, walk.last_term
        out.accepted.append(sp.index)
        end = walk.end
        if end.reason == END_STOP:
            expect = end.offset
        elif end.reason in (END_BLANK, END_FILE):
            expect = seg.start + seg.size
        else:
            out.end = end
    if out.end is None:
        out.end = ScanEnd(END_NO_NEXT_SEGMENT, expect, detail="the last segment ended; no further segment")
    return out
