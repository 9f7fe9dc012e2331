"""The scan's contracts: what one decode task gets (SplitTask), what it sends back (SplitSummary), and the
stitched whole the later stages read (ScanResult, DispatchStop). Kept apart from the Spark plumbing in scan.py."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from storage_format.commitlog import ScanEnd
from storage_format.errors import StoreFormatError
from storage_format.multi_dispatch import MultiDispatchRules, is_lmq
from storage_format.scan_plan import END_NO_NEXT_SEGMENT, Segment, Split, SplitWalk, Stitched
from storage_format.settings import BrokerSettings
from storage_format.queue_table import MergedQueues, QueueTable, merge_queue_tables

from ..io.fs import Location
from ..io.workdir import read_queue_table
from ..runtime.driver_memory import DriverMemory, check_driver_memory


@dataclass(frozen=True, kw_only=True)
class SplitTask:
    """What one decode task needs: its split, where to start, and what to write."""

    split: Split
    settings: BrokerSettings
    exact_start: int | None = None  # segment-relative offset to walk from (after a failed stitch)
    check_crc: bool = False
    work: Location | None = None  # write cq-<i>.arrow / keys-<i>.arrow here
    tables: Location | None = None  # without `work`: write the split's queue table (queues-<i>.arrow) here
    keep_queues: bool = True  # False: the queue table is dropped once its facts are noted (a job that never reads it)
    with_cq: bool = True
    with_keys: bool = True
    dispatch_limit: int | None = None  # confirm offset: only records ending at or below it are dispatched
    lmq: MultiDispatchRules | None = None  # multi-dispatch rules, None when the config turns it off
    kernel: bool = True  # try the compiled one-pass decoder first (storage_format.kernels.split_decode)
    with_records: bool = False  # list each DLedger record (offset, size, transaction end) in the summary (convert)
    with_store_ts: bool = False  # the consume-queue rows carry their records' storeTimestamp (RocksDB units)


@dataclass(kw_only=True)
class SplitSummary:
    """A decode task's result: small, sent to the driver."""

    index: int
    first_offset: int | None
    end: ScanEnd
    records: int = 0
    blanks: int = 0
    bytes_read: int = 0
    min_store_ts: int | None = None
    max_store_ts: int | None = None
    first_store_ts: int | None = None
    last_store_ts: int | None = None
    last_record_offset: int | None = None
    last_record_end: int | None = None
    # Per (topic, queueId): records, consume-queue rows and their offset range, whether they step by 1; None once
    # the task has written it to the work directory (ScanResult.split_queues reads it back).
    queues: QueueTable | None = field(default_factory=QueueTable.empty)
    cq_rows: int = 0  # the split's consume-queue rows
    min_queue_offset: int | None = None  # the smallest queueOffset among them
    negative_queue_records: int = 0  # valid records whose queueId is negative, and their "topic/queueId"s
    negative_queues: tuple[str, ...] = ()
    keys: int = 0
    last_key: tuple[int, int] | None = None  # (store_ts, phy) of the split's last index key
    error: StoreFormatError | None = None
    # Offset of the first record found after a zero header that ended the walk inside this split
    # (the zero-filled tail of a healthy segment holds none; eight zeroed bytes mid-segment do).
    record_after_end: int | None = None
    # Offset of the first record whose storeTimestamp is no date (years 1-9999): it cannot name an index file.
    undated_record: int | None = None
    # Under a dispatch limit (confirm offset): the last record dispatched, the first one held back and
    # how many valid records of the split are held back (they get no consume-queue entry or index key).
    last_dispatched_offset: int | None = None
    last_dispatched_end: int | None = None
    first_held_back: int | None = None
    held_back: int = 0
    # Offset of a record with both multi-dispatch properties while enableMultiDispatch is not configured.
    lmq_unconfigured: int | None = None
    # DLedger data: the entry index of the split's first and last entry (None in a plain segment).
    first_entry_index: int | None = None
    last_entry_index: int | None = None
    first_entry_term: int | None = None  # and their terms
    last_entry_term: int | None = None
    # Which decoder produced this summary (DECODER_*), and why the reference decoded a split the compiled
    # kernel was asked to take (its fallback reason; "" when the kernel took it or was not asked).
    decoder: str = ""
    fallback: str = ""
    # With SplitTask.with_records, a DLedger split's records up to the dispatch limit (scan.split_records.SplitRecords).
    listed: object | None = None
    seconds: float = 0.0  # the decode task's time for this split (the bench's scale-out model reads it)

    def walk(self) -> SplitWalk:
        return SplitWalk(split_index=self.index, first_offset=self.first_offset, end=self.end, records=self.records,
                         blanks=self.blanks, first_entry=self.first_entry_index, last_entry=self.last_entry_index,
                         first_term=self.first_entry_term, last_term=self.last_entry_term)


DECODER_KERNEL = "kernel"  # the compiled one-pass decoder (storage_format.kernels.split_decode)
DECODER_REFERENCE = "reference"  # the numpy reference decoder (storage_format.commitlog)
DECODER_NO_START = "no record start"  # the kernel found no record starting in the split (a zero tail, or
# the middle of a large record): nothing to decode, the reference states where the walk ends
DECODER_SPARSE = "sparse"  # no bytes to decode: the split lies in a segment's unwritten (sparse) tail


@dataclass(frozen=True, kw_only=True)
class NegativeQueueIds:
    """Valid records with a negative queueId (the first named by file and byte offset). No broker assigns one:
    its send path replaces a negative queueId with a random queue (SendMessageProcessor), so such a record is
    damaged or was not written by a broker. The store's dispatch takes any int (findConsumeQueue) and writes
    consumequeue/<topic>/<queueId>/, `-1/` included, which reads back at start-up; reput writes the same."""

    records: int
    queues: tuple[str, ...]  # "topic/queueId"
    path: str  # the first such record's segment (or DLedger data file)
    byte_offset: int
    offset: int  # its commit-log offset
    queue_id: int

    def describe(self) -> str:
        """The one line a job prints (and verify's finding message)."""
        more = f" (and {self.records - 1} more)" if self.records > 1 else ""
        return (f"the record at {self.path} at byte offset {self.byte_offset} (commit-log offset {self.offset}) has "
                f"queueId {self.queue_id}{more}, which no broker assigns (its send path replaces a negative queueId "
                f"with a random queue): a damaged record, or not written by a broker; the broker's dispatch still "
                f"files it under consumequeue/<topic>/<queueId>/ ({', '.join(self.queues[:5])}"
                f"{', ...' if len(self.queues) > 5 else ''}), and so does reput")

    def to_dict(self) -> dict:
        """The run report's form."""
        return {"records": self.records, "queues": list(self.queues), "first": f"{self.path} at byte offset "
                f"{self.byte_offset}", "first_offset": self.offset, "first_queue_id": self.queue_id}


SHOWN_QUEUES = 5  # out-of-step queues named in the one line


@dataclass(frozen=True, kw_only=True)
class OutOfStepQueues:
    """Queues (but those multi-dispatch fills, whose offsets are shared) with a record whose queueOffset is not the
    queue's next slot. ConsumeQueue.putMessagePositionInfo skips an entry below the write position ("Build
    consume queue repeatedly") and appends any other AT the write position ("[BUG]logic queue order maybe
    wrong"), so the queue's later entries sit elsewhere than their stored offsets say; reput writes the same."""

    queues: tuple[str, ...]  # "topic/queueId", every out-of-step queue
    path: str  # the first out-of-step record's segment (or DLedger data file)
    byte_offset: int
    offset: int  # its commit-log offset
    queue: str
    queue_offset: int  # what the record says
    slot: int  # the queue's write position when it came
    skipped: bool  # below the write position: the broker writes no entry for it

    def describe(self) -> str:
        """The one line a job prints (and verify's finding message)."""
        more = f" (and {len(self.queues) - 1} more queues: {', '.join(self.queues[1:SHOWN_QUEUES])}" \
               f"{', ...' if len(self.queues) > SHOWN_QUEUES else ''})" if len(self.queues) > 1 else ""
        did = ("skips it (\"Build consume queue repeatedly\")" if self.skipped
               else f"appends it at offset {self.slot} (\"[BUG]logic queue order maybe wrong\")")
        return (f"the record at {self.path} at byte offset {self.byte_offset} (commit-log offset {self.offset}) has "
                f"queueOffset {self.queue_offset} where {self.queue}'s next offset is {self.slot}{more}: a damaged "
                f"record; the broker's consume queue {did} and its later entries follow from there, not from "
                f"their stored offsets; reput writes the same")

    def to_dict(self) -> dict:
        """The run report's form."""
        return {"queues": list(self.queues), "first": f"{self.path} at byte offset {self.byte_offset}",
                "first_offset": self.offset, "first_queue": self.queue, "queue_offset": self.queue_offset,
                "next_offset": self.slot, "skipped": self.skipped}


@dataclass(kw_only=True)
class ScanResult:
    """Segments, splits, the stitched scan and the summaries of the splits the scan accepted; the valid records
    whose queueId is negative, when there are any (scan.decode finds the first one's file and byte offset)."""

    segments: list[Segment]
    splits: list[Split]
    stitched: Stitched
    summaries: dict[int, SplitSummary]
    negative_queue_ids: NegativeQueueIds | None = None
    out_of_step_queues: OutOfStepQueues | None = None  # found when consume-queue rows were written (queue_order)
    work: Location | None = None  # where the decode tasks wrote their files (queue tables included)
    driver_memory: DriverMemory | None = None  # the driver's memory setting, checked when the queues are counted
    _merged: MergedQueues | None = field(default=None, repr=False)

    @property
    def accepted(self) -> list[SplitSummary]:
        return [self.summaries[i] for i in self.stitched.accepted]

    @property
    def end(self) -> ScanEnd:
        return self.stitched.end

    @property
    def message_records(self) -> int:
        return sum(s.records for s in self.accepted)

    def task_timings(self) -> dict[str, float]:
        """The decode tasks' time: their sum over the splits decoded, and the longest split."""
        seconds = [s.seconds for s in self.summaries.values()]
        return {"decode_task_s": round(sum(seconds), 3), "longest_decode_task_s": round(max(seconds, default=0.0), 3)}

    @property
    def max_physical_offset(self) -> int:
        """End of the last valid record (where the broker would append next)."""
        ends = [s.last_record_end for s in self.accepted if s.last_record_end is not None]
        return max(ends) if ends else (self.segments[0].start if self.segments else 0)

    def decoders(self) -> dict:
        """The run report's count of splits per decoder and of kernel fallbacks per reason (each split's
        final decode: a re-walked split counts once)."""
        per: dict[str, int] = {}
        fallbacks: dict[str, int] = {}
        for s in self.summaries.values():
            per[s.decoder] = per.get(s.decoder, 0) + 1
            if s.fallback:
                fallbacks[s.fallback] = fallbacks.get(s.fallback, 0) + 1
        return {"splits": dict(sorted(per.items())), "fallbacks": dict(sorted(fallbacks.items())),
                "fallback_splits": sum(fallbacks.values())}

    def entry_range(self) -> tuple[int, int] | None:
        """First and last DLedger entry index of the valid log (None: no DLedger entries)."""
        firsts = [s.first_entry_index for s in self.accepted if s.first_entry_index is not None]
        lasts = [s.last_entry_index for s in self.accepted if s.last_entry_index is not None]
        return (min(firsts), max(lasts)) if firsts else None

    def last_entry_term(self) -> int | None:
        """The term of the valid log's last DLedger entry (None: no DLedger entries)."""
        terms = [s.last_entry_term for s in self.accepted if s.last_entry_term is not None]
        return terms[-1] if terms else None

    @property
    def dledger_entries(self) -> int:
        """Valid DLedger entries (records in DLedger data files)."""
        return sum(s.records for s in self.accepted if s.first_entry_index is not None)

    def split_queues(self, summary: SplitSummary, start: int = 0, stop: int | None = None) -> QueueTable:
        """A split's queue table (rows [start, stop)): from its summary, or from the work directory its task wrote
        it to."""
        if summary.queues is not None:
            return summary.queues if start == 0 and stop is None else summary.queues.slice(start, stop)
        if self.work is None:
            raise RuntimeError("the scan did not keep its queue tables (scan_store keep_queues=False)")
        return read_queue_table(self.work, summary.index, start, stop)

    def queue_table(self) -> MergedQueues:
        """The accepted splits' queue tables merged per (topic, queueId), folded one split at a time (once: kept)."""
        if self._merged is None:
            merged = merge_queue_tables(self.split_queues(s) for s in self.accepted)
            check_driver_memory(len(merged), len(self.splits), self.driver_memory)  # kept only once it fits
            self._merged = merged
        return self._merged

    def records_per_queue(self) -> dict[str, dict[int, int]]:
        """Records per topic and queueId (queues only multi-dispatch names have none)."""
        return self.queue_table().per_topic("records")

    def lmq_entries_per_queue(self) -> dict[str, dict[int, int]]:
        """Consume-queue entries multi-dispatch gives each `%LMQ%` queue (before the broker skips a repeat)."""
        q = self.queue_table()
        return q.per_topic("cq_rows", np.array([is_lmq(t) for t in q.topic.to_pylist()], bool))

    def segment_of(self, offset: int) -> Segment:
        """The segment (or DLedger data file) holding commit-log offset `offset`."""
        return next(g for g in self.segments if g.start <= offset < g.start + g.size)

    def tail_problems(self) -> list[str]:
        """Why the commit log does not end cleanly (an invalid record before the zero-filled tail, or
        data in segments past the end); empty for a healthy store."""
        problems = []
        end = self.end
        if end is not None and not end.is_clean and end.reason != END_NO_NEXT_SEGMENT:
            problems.append(f"the commit log ends with an invalid record: {end.describe()}")
        if self.stitched.data_after_end:
            problems.append(f"segments hold records after the end of the valid commit log: "
                            f"{', '.join(self.stitched.data_after_end)}")
        follows = self.record_after_end()
        if follows is not None:
            seg = self.segment_of(follows)
            problems.append(f"valid records follow the end of the commit log ({end.describe()}), the first at "
                            f"{seg.path} at byte offset {follows - seg.start} (commit-log offset {follows})")
        return problems

    def undated_record(self) -> tuple[Segment, int] | None:
        """(segment, commit-log offset) of the first valid record whose storeTimestamp is no date
        (years 1-9999), if any."""
        at = next((s.undated_record for s in self.accepted if s.undated_record is not None), None)
        if at is None:
            return None
        return self.segment_of(at), at

    def undated_problem(self) -> str | None:
        """The undated record, described for operators."""
        found = self.undated_record()
        if found is None:
            return None
        seg, at = found
        return (f"the record at {seg.path} at byte offset {at - seg.start} (commit-log offset {at}) has a "
                f"storeTimestamp outside years 1-9999")

    def record_problems(self) -> list[str]:
        """What the scan found in records it accepted that a later dispatch would trip on or an operator must
        know: the undated record, the negative queue ids and the out-of-step queues, described for operators."""
        found = [self.undated_problem(), self.negative_queue_ids, self.out_of_step_queues]
        return [f if isinstance(f, str) else f.describe() for f in found if f is not None]

    def record_after_end(self) -> int | None:
        """The first record (found by the physicalOffset rule) past the end of the scan, in the end's
        segment or later; None when only zeros or garbage follow."""
        if self.end is None:
            return None
        found = [s.record_after_end for s in self.accepted if s.record_after_end is not None]
        done = set(self.stitched.accepted)
        found += [s.first_offset for i, s in self.summaries.items()
                  if i not in done and s.records and s.first_offset is not None and s.first_offset > self.end.offset]
        return min(found, default=None)

    @property
    def bytes_read(self) -> int:
        return sum(s.bytes_read for s in self.summaries.values())

    def dispatched_end(self, limit: int | None) -> int:
        """Where dispatch ended: the log's end without a dispatch limit, else the end of the last record dispatched
        (0: none was)."""
        return self.max_physical_offset if limit is None else self.dispatch_stop().last_end or 0

    def dispatch_stop(self) -> DispatchStop:
        """How far dispatch went under the scan's dispatch limit (every record when there is none)."""
        acc = self.accepted
        last = max((s.last_dispatched_offset for s in acc if s.last_dispatched_offset is not None), default=None)
        end = max((s.last_dispatched_end for s in acc if s.last_dispatched_end is not None), default=None)
        held = [s.first_held_back for s in acc if s.first_held_back is not None]
        return DispatchStop(last, end, min(held, default=None), sum(s.held_back for s in acc))


@dataclass(frozen=True)
class DispatchStop:
    """Under a dispatch limit: the last record dispatched (offset, end), the first valid record held back
    (the one straddling or past the confirm offset) and how many valid records were held back."""

    last_offset: int | None
    last_end: int | None
    first_held_back: int | None
    held_back: int

    def to_dict(self) -> dict:
        """The report form."""
        return {"last_dispatched_record": self.last_offset, "dispatched_up_to": self.last_end,
                "first_record_not_dispatched": self.first_held_back, "records_not_dispatched": self.held_back}
