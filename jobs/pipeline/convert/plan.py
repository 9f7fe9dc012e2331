"""The driver's side of convert: from the listed splits to the new layout, the segment tasks and the plan a dry run
prints, in memory that grows with splits and new segments, not records (issue 32). The layout is CommitLog's
placement rule (commitlog_layout) carried from split to split: a split that no segment boundary cuts is placed from
its byte total alone; only a split holding a roll reads its records' sizes (one per new segment, a split's worth),
and so do the few lookups of single records (records whose CRC fails). The transaction ends' half records are mapped
by Spark tasks (convert.transactions): the plan holds their counts and which splits have pairs (PreparedMaps)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from storage_format.commitlog_layout import END_MARKER, layout
from storage_format.queue_table import merge_queue_tables
from storage_format.record import SCHEDULE_TOPIC
from storage_format.scan_plan import Segment

from ..io.fs import Location
from ..scan.split_records import SplitRecords
from .segments import SegmentTask

if TYPE_CHECKING:
    from ..scan.result import ScanResult

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


@dataclass(frozen=True)
class PreparedMaps:
    """What the transaction-ends stage found (convert.transactions): the COMMIT/ROLLBACK records mapped, those whose
    prepared offset points at no record of the converted part, and the listed splits that wrote pairs (the old and
    new offsets of the half records they point at that move) into `work`."""

    ends: int = 0
    outside: int = 0
    splits: frozenset[int] = frozenset()
    work: Location | None = None

    def to_dict(self) -> dict:
        return {"transaction_ends_rewritten": self.ends - self.outside, "transaction_ends_pointing_outside": self.outside}


@dataclass(frozen=True, kw_only=True)
class ConvertPlan:
    """What convert will do: each listed split's place in the new log, the new segments, and once the transaction
    ends are mapped (`prepared`), where the pairs for each segment's COMMIT/ROLLBACK records are."""

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
    prepared_records: int
    sizes_of: SizesOf
    firsts: np.ndarray  # per listed split: its first record's old offset, and where its last record ends
    old_ends: np.ndarray
    prepared: PreparedMaps = PreparedMaps()

    @property
    def segment_starts(self) -> list[int]:
        """Start offsets of the new segments that hold bytes."""
        return [s.start for s in self.segments]

    def _split_of(self, old: int) -> SplitPlace | None:
        """The listed split whose records span old offset `old` (None: none, e.g. a plain segment's)."""
        near = self.overlapping(old, old)
        return self.splits[near.start] if near else None

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

    def overlapping(self, lo: int, hi: int) -> range:
        """The listed splits holding records in old offsets [lo, hi]."""
        return range(int(np.searchsorted(self.old_ends, lo, side="right")),
                     int(np.searchsorted(self.firsts, hi, side="right")))

    def segment_tasks(self, out_dir: str, map_dir: str) -> list[SegmentTask]:
        """One task per new segment holding records (in offset order), with the listed splits in its old offset
        range whose transaction ends have pairs (their COMMIT/ROLLBACK records' prepared offsets to rewrite)."""
        tasks = []
        work = self.prepared.work.uri if self.prepared.work is not None else None
        for k, seg in enumerate(self.segments):
            nxt = self.segments[k + 1] if k + 1 < len(self.segments) else None
            count = (nxt.first_index if nxt else self.records) - seg.first_index
            near = self.overlapping(seg.first_old, nxt.first_old - 1 if nxt else 2**63 - 1)
            pairs = tuple(self.splits[i].records.split for i in near
                          if self.splits[i].records.split in self.prepared.splits)
            tasks.append(SegmentTask(start=seg.start, segment_size=self.segment_size, first_old=seg.first_old,
                                     count=count, blank_at=seg.blank_at, sources=self.data_files,
                                     prepared_splits=pairs, work=work, out_dir=out_dir, map_dir=map_dir))
        return tasks

    def to_dict(self) -> dict:
        return {"dledger_records": self.records, "new_segments": len(self.segments),
                "new_log_start": self.start, "new_log_end": self.end,
                "new_log_bytes": self.end - self.start, "blanks": self.blanks,
                "plain_segments_kept": len(self.plain_segments),
                "offset_msg_ids_changed": self.ids_changed, **self.prepared.to_dict(),
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
    return ConvertPlan(data_files=data, plain_segments=plain, splits=tuple(placing.splits),
                       segments=tuple(placing.segments), segment_size=segment_size, start=start,
                       end=placing.position if records else start, records=records, blanks=placing.blanks,
                       ids_changed=records - placing.ids_same, prepared_records=sum(r.prepared for r in listed),
                       sizes_of=sizes_of, firsts=np.array([p.records.first for p in placing.splits], np.int64),
                       old_ends=np.array([p.records.old_end for p in placing.splits], np.int64))


HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


def plan_report(plan: ConvertPlan, scan: ScanResult, left_out: int) -> dict:
    """The plan's figures plus what moves: schedule messages and the transaction topics' records of the DLedger part
    (an upgraded store's plain segments are copied unchanged: their records do not move); pending transactions are
    the whole store's (a half message in the plain part may have its op message in the DLedger part)."""
    moved = merge_queue_tables(scan.split_queues(s) for s in scan.accepted
                               if s.first_entry_index is not None).per_topic("records")
    whole = scan.records_per_queue()
    count = lambda topic, of=moved: sum(of.get(topic, {}).values())  # noqa: E731
    return {**plan.to_dict(), "negative_queue_ids": scan.negative_queue_ids.to_dict()
            if scan.negative_queue_ids is not None else None, "out_of_step_queues": scan.out_of_step_queues.to_dict()
            if scan.out_of_step_queues is not None else None, "schedule_messages_moved": count(SCHEDULE_TOPIC),
            "half_messages_moved": count(HALF_TOPIC), "op_half_messages_moved": count(OP_TOPIC),
            "pending_transactions_at_most": max(0, count(HALF_TOPIC, whole) - count(OP_TOPIC, whole)),
            "records_past_committed_position_left_out": left_out}
