"""Verify's shared pieces: what a pointer on disk points at (PointerCheck). The comparisons live by the
file kind they check: jobs.pipeline.verify.cq (consume queues) and jobs.pipeline.verify.index_files (index
files); the kinds of findings they report are registered in jobs.pipeline.verify.findings.

Both build each file's bytes exactly as the rebuild does (jobs.pipeline.outputs.build) and compare them with the
store's files instead of writing anything; tasks return findings (small dicts, capped per file and kind,
with full counts), never file bytes.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from storage_format.commitlog import HEAD_DTYPE
from storage_format.consume_queue import PRE_BLANK_SIZE
from storage_format.multi_dispatch import names_entry
from storage_format.properties import parse_properties
from storage_format.record import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from storage_format.record_reader import read_record
from storage_format.scan_plan import Segment

from ..io.fs import Location
from ..scan.result import ScanResult


@dataclass(frozen=True)
class PointerCheck:
    """Tells what a phyOffset on disk points at, by reading the record header there (a few bytes)."""

    segments: tuple[Segment, ...]
    valid_end: int  # end of the last valid record: the broker's max physical offset
    in_flight_from: int | None = None  # a running broker: records from here on may not be dispatched yet
    checked_from: int = 0  # verify --since: the earlier verify checked what points below this offset

    @property
    def log_min(self) -> int:
        """The commit log's min offset (its first segment's start): what lies below it expired."""
        return self.segments[0].start if self.segments else 0

    def expired(self, phy: np.ndarray) -> np.ndarray:
        """Which pointers lead into the commit log's expired head (0 <= phy < its min offset)."""
        return (phy >= 0) & (phy < self.log_min)

    def checked_earlier(self, phy: np.ndarray) -> np.ndarray:
        """Which pointers lead below the offset this check starts at, into what the earlier verify checked."""
        return (phy >= self.log_min) & (phy < self.checked_from)

    def in_flight(self, phy: int) -> bool:
        """Is a record at `phy` still in flight (a running broker may not have dispatched it)?"""
        return self.in_flight_from is not None and phy >= self.in_flight_from

    def classify(self, phy: int, size: int | None = None, queue: tuple[str, int, int] | None = None) -> str:
        """`record`, `record_size_mismatch`, `record_other_position` (the record is another queue's, or at another
        offset, and no multi-dispatch entry of it names `queue`: topic, queueId, queueOffset), `filler`, `blank`,
        `not_a_record`, `past_end`, `before_start` or `missing_segment`."""
        if size == PRE_BLANK_SIZE and phy == 0:
            return "filler"
        if phy < self.log_min:
            return "before_start"
        if phy >= self.valid_end or (size is not None and size > 0 and phy + size > self.valid_end):
            return "past_end"
        i = bisect.bisect_right([s.start for s in self.segments], phy) - 1
        seg = self.segments[i] if i >= 0 and phy < self.segments[i].start + self.segments[i].size else None
        if seg is None:
            return "missing_segment"
        pos = phy - seg.start
        raw = bytes(Location(seg.path).read_range(pos, min(HEAD_DTYPE.itemsize, seg.size - pos)))
        if len(raw) < 8:
            return "not_a_record"
        head = np.frombuffer(raw.ljust(HEAD_DTYPE.itemsize, b"\0"), HEAD_DTYPE)[0]  # the decoder's field offsets
        if head["magic"] == MAGIC_BLANK:
            return "blank"
        if (head["magic"] not in (MAGIC_V1, MAGIC_V2) or len(raw) < HEAD_DTYPE.itemsize
                or head["physical_offset"] != phy):
            return "not_a_record"
        if size is not None and head["total_size"] != size:
            return "record_size_mismatch"
        if queue is not None and not self._belongs(seg, phy, queue):
            return "record_other_position"
        return "record"

    @staticmethod
    def _belongs(seg: Segment, phy: int, queue: tuple[str, int, int]) -> bool:
        """The record at `phy` has a unit at `queue` (topic, queueId, queueOffset): its own, or one of its
        multi-dispatch / LMQ entries (multi_dispatch.names_entry), as the broker's dispatch puts them."""
        msg = read_record(seg, Location(seg.path).read_range, phy).message
        if msg is None:
            return False
        topic, queue_id, queue_offset = queue
        return (msg.topic, msg.queue_id, msg.queue_offset) == queue or names_entry(
            parse_properties(msg.properties), msg.queue_id, topic, queue_id, queue_offset)


def pointer_check(scan: ScanResult) -> PointerCheck:
    """What disk pointers are checked against: the scanned segments and the valid end."""
    return PointerCheck(tuple(scan.segments), scan.max_physical_offset)
