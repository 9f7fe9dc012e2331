"""The driver's side of convert: from the listed splits to the new layout, the segment tasks and the plan a dry run
prints, in memory that grows with splits and new segments, not records (issue 32). The layout is CommitLog's
placement rule (commitlog_layout) carried from split to split: a split that no segment boundary cuts is placed from
its byte total alone; only a split holding a roll reads its records' sizes (one per new segment, a split's worth),
and so do the few lookups of single records (transaction ends' half records, records whose CRC fails)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from storage_format.commitlog_layout import END_MARKER, layout
from storage_format.scan_plan import Segment

from .records import SplitRecords
from .segments import SegmentTask

SizesOf = Callable[[SplitRecords], np.ndarray]  # a listed split's record sizes (in memory, or its work file)


@dataclass(frozen=True)
class SplitPlace:
    """A listed split in the new log: its records, the index of its first record in the whole listing, and the
    write position before it (the segment's start, the absolute position) the placement rule carries in."""

    records: SplitRecords
    first_index: int
    segment: int
    position: int

    def offsets(self, sizes: np.ndarray, segment_size: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(old offsets, new offsets, the BLANKs written) of the split's records, from their sizes."""
        new, blanks, _ = place(sizes, segment_size, self.segment, self.position)
        return self.records.offsets_from(sizes), new, blanks


@dataclass(frozen=True)
class NewSegment:
    """A segment of the new log that holds records: its start, its first record (old offset, index) and the
    BLANK at its end (None: the log ends in it)."""

    start: int
    first_old: int
    first_index: int
    blank_at: int | None = None


def place(sizes: np.ndarray, segment_size: int, segment: int, position: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(new offsets, BLANK offsets, write end) of records placed from `position` inside the segment starting at
    `segment`: commitlog_layout.layout with the bytes already written in front as one record (it fits: a write
    position always leaves room for the end marker)."""
    if position == segment:
        lay = layout(sizes, segment_size, segment)
        return lay.offsets, lay.blanks, lay.end
    lay = layout(np.concatenate(([position - segment], sizes)).astype(np.int64), segment_size, segment)
    return lay.offsets[1:], lay.blanks, lay.end


@dataclass(frozen=True, kw_only=True)
class ConvertPlan:
    """What convert will do: each listed split's place in the new log, the new segments, the transaction ends whose
    prepared offset moves (`prepared_keys` -> `prepared_values`, sorted), and those pointing outside it."""

    data_files: tuple[Segment, ...]
    plain_segments: tuple[Segment, ...]
    splits: tuple[SplitPlace, ...]
    segments: tuple[NewSegment, ...]
    segment_size: int
    start: int
    end: int
    records: int
    blanks: int
    ids_changed: int
    end_offsets: np.ndarray
    end_prepared: np.ndarray
    prepared_keys: np.ndarray
    prepared_values: np.ndarray
    unmapped_prepared: int
    prepared_records: int
    sizes_of: SizesOf
    firsts: np.ndarray  # per listed split: its first record's old offset, and where its last record ends
    old_ends: np.ndarray

    @property
    def segment_starts(self) -> list[int]:
        """Start offsets of the new segments that hold bytes."""
        return [s.start for s in self.segments]

    def _split_at(self, old: np.ndarray) -> np.ndarray:
        """Per old offset, the index of the listed split whose records span it (-1: none, e.g. a plain segment's)."""
        k = np.searchsorted(self.firsts, old, side="right") - 1
        inside = (k >= 0) & (old < self.old_ends[np.maximum(k, 0)]) if len(self.splits) else np.zeros(len(old), bool)
        return np.where(inside, k, -1)

    def _split_of(self, old: int) -> SplitPlace | None:
        k = int(self._split_at(np.array([old], np.int64))[0])
        return self.splits[k] if k >= 0 else None

    def new_offset(self, old: int) -> int:
        """The new offset of the DLedger record at old offset `old` (a plain segment's record keeps its own)."""
        p = self._split_of(old)
        if p is None:
            return old
        olds, news, _ = p.offsets(self.sizes_of(p.records), self.segment_size)
        at = int(np.searchsorted(olds, old))
        return int(news[at]) if at < len(olds) and int(olds[at]) == old else old

    def records_after(self, old: int) -> int:
        """DLedger records after the one at old offset `old`."""
        p = self._split_of(old)
        if p is None:  # between splits: every record of the splits after it
            k = int(np.searchsorted(self.firsts, old, side="right"))
            return self.records - (self.splits[k].first_index if k < len(self.splits) else self.records)
        olds = p.records.offsets_from(self.sizes_of(p.records))
        return self.records - p.first_index - int(np.searchsorted(olds, old, side="right"))

    def segment_tasks(self, out_dir: str, map_dir: str) -> list[SegmentTask]:
        """One task per new segment holding records (in offset order), with the prepared-offset map for the
        COMMIT/ROLLBACK records in its old offset range."""
        tasks = []
        for k, seg in enumerate(self.segments):
            nxt = self.segments[k + 1] if k + 1 < len(self.segments) else None
            count = (nxt.first_index if nxt else self.records) - seg.first_index
            sel = (self.end_offsets >= seg.first_old) & (self.end_offsets < (nxt.first_old if nxt else 2**63 - 1))
            j = np.flatnonzero(np.isin(self.prepared_keys, np.unique(self.end_prepared[sel])))
            tasks.append(SegmentTask(start=seg.start, segment_size=self.segment_size, first_old=seg.first_old,
                                     count=count, blank_at=seg.blank_at, sources=self.data_files,
                                     prepared_keys=tuple(self.prepared_keys[j].tolist()),
                                     prepared_values=tuple(self.prepared_values[j].tolist()),
                                     out_dir=out_dir, map_dir=map_dir))
        return tasks

    def to_dict(self) -> dict:
        return {"dledger_records": self.records, "new_segments": len(self.segments),
                "new_log_start": self.start, "new_log_end": self.end,
                "new_log_bytes": self.end - self.start, "blanks": self.blanks,
                "plain_segments_kept": len(self.plain_segments),
                "offset_msg_ids_changed": self.ids_changed,
                "transaction_ends_rewritten": int(len(self.end_offsets)) - self.unmapped_prepared,
                "transaction_ends_pointing_outside": self.unmapped_prepared,
                "prepared_records_moved": self.prepared_records}


@dataclass
class _Placing:
    """The placement carried from split to split on the driver."""

    segment_size: int
    segment: int
    position: int
    index: int = 0
    blanks: int = 0
    ids_same: int = 0

    def __post_init__(self) -> None:
        self.splits: list[SplitPlace] = []
        self.segments: list[NewSegment] = []

    def add(self, r: SplitRecords, sizes_of: SizesOf) -> None:
        """Place one split: from its byte total when it ends inside the current segment, else from its sizes."""
        here = SplitPlace(r, self.index, self.segment, self.position)
        self.splits.append(here)
        if self.position + r.total + END_MARKER <= self.segment + self.segment_size:  # no record of it rolls
            self._open(self.segment, r.first, self.index)
            diff = self.position - r.first  # record j: new - old = diff - header x j
            self.ids_same += int(diff >= 0 and diff % r.header == 0 and diff // r.header < r.count) if r.header \
                else int(diff == 0) * r.count
            self.position += r.total
        else:
            sizes = sizes_of(r)
            olds, news, blanks = here.offsets(sizes, self.segment_size)
            starts = (news - (news - self.segment) % self.segment_size)
            for i in np.flatnonzero(np.diff(np.concatenate(([-1], starts))) != 0).tolist():
                self._open(int(starts[i]), int(olds[i]), self.index + i)
            for b in blanks.tolist():
                self._blank(int(b))
            self.ids_same += int(np.count_nonzero(olds == news))
            self.position = int(news[-1]) + int(sizes[-1])
            self.segment = int(starts[-1])
        self.index += r.count

    def _open(self, start: int, first_old: int, first_index: int) -> None:
        if not self.segments or self.segments[-1].start != start:
            self.segments.append(NewSegment(start, first_old, first_index))

    def _blank(self, at: int) -> None:
        self.blanks += 1
        k = next(i for i in range(len(self.segments) - 1, -1, -1) if self.segments[i].start <= at)
        s = self.segments[k]
        self.segments[k] = NewSegment(s.start, s.first_old, s.first_index, at)


def make_plan(segments: list[Segment], listed: list[SplitRecords], segment_size: int, sizes_of: SizesOf) -> ConvertPlan:
    """The layout of the DLedger part from the listed splits (offset order)."""
    data = tuple(s for s in segments if s.header)
    plain = tuple(s for s in segments if not s.header)
    start = data[0].start if data else 0
    placing = _Placing(segment_size, start, start)
    for r in listed:
        if r.count:
            placing.add(r, sizes_of)
    records = placing.index
    end_offsets = np.concatenate([r.end_offsets for r in listed]) if listed else np.zeros(0, np.int64)
    end_prepared = np.concatenate([r.end_prepared for r in listed]) if listed else np.zeros(0, np.int64)
    plan = ConvertPlan(data_files=data, plain_segments=plain, splits=tuple(placing.splits),
                       segments=tuple(placing.segments), segment_size=segment_size, start=start,
                       end=placing.position if records else start, records=records, blanks=placing.blanks,
                       ids_changed=records - placing.ids_same, end_offsets=end_offsets, end_prepared=end_prepared,
                       prepared_keys=np.zeros(0, np.int64), prepared_values=np.zeros(0, np.int64), unmapped_prepared=0,
                       prepared_records=sum(r.prepared for r in listed), sizes_of=sizes_of,
                       firsts=np.array([p.records.first for p in placing.splits], np.int64),
                       old_ends=np.array([p.records.old_end for p in placing.splits], np.int64))
    keys, values, unmapped = _prepared_map(plan, end_prepared, start)
    return dataclasses.replace(plan, prepared_keys=keys, prepared_values=values, unmapped_prepared=unmapped)


def _prepared_map(plan: ConvertPlan, end_prepared: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(old, new) offsets of the half records the transaction ends point at that move, sorted; and how many ends
    point at no record of the converted part (one below it, in the plain part, keeps its offset)."""
    targets = np.unique(end_prepared)
    at = plan._split_at(targets)
    keys, values, missing = [], [], targets[at < 0].tolist()
    held, where = targets[at >= 0], at[at >= 0]  # both ascending: each split's targets are one run
    cuts = np.flatnonzero(np.diff(where)) + 1
    for run in np.split(np.arange(len(held)), cuts) if len(held) else []:  # the splits holding them, each read once
        wanted = held[run].tolist()
        p = plan.splits[int(where[run[0]])]
        olds, news, _ = p.offsets(plan.sizes_of(p.records), plan.segment_size)
        found = np.searchsorted(olds, wanted)
        for t, i in zip(wanted, found.tolist()):
            if i < len(olds) and int(olds[i]) == t:
                if int(news[i]) != t:
                    keys.append(t)
                    values.append(int(news[i]))
            else:
                missing.append(t)
    outside = [t for t in missing if t >= start]  # half records in the plain part keep their offsets
    unmapped = int(np.isin(end_prepared, np.asarray(outside, np.int64)).sum()) if outside else 0
    order = np.argsort(np.asarray(keys, np.int64), kind="stable")
    return np.asarray(keys, np.int64)[order], np.asarray(values, np.int64)[order], unmapped
