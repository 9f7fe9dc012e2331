"""Where the broker's recovery starts and where the commit log ends (DefaultMessageStore.recover*).

* Start segment (abnormal): walk back from the last segment to the first whose first record has a
  message magic (4.x: V1 only; 5.x: V1 or V2), a non-zero storeTimestamp and storeTimestamp <=
  checkpoint.min_timestamp (min_timestamp_index with messageIndexEnable && messageIndexSafe);
  segment 0 if none. Normal recovery starts at the third-last segment.
* Truncation point P (processOffset): the first invalid record from the start segment on; a BLANK
  that ends the last segment also ends the log there. Segments starting after P are deleted; the
  segment holding P keeps its bytes (logical truncation).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

import numpy as np

from ..checkpoint import Checkpoint
from ..commitlog import END_BLANK, RecordColumns, ScanEnd
from ..errors import RecoveryError
from ..record import MAGIC_V1, MAGIC_V2
from ..scan_plan import END_NO_NEXT_SEGMENT
from ..settings import BrokerSettings

SEGMENT_HEAD_BYTES = 76  # enough for magic, sysFlag and the storeTimestamp after an IPv6 born host
END_OF_LOG = "end_of_log"


@dataclass(frozen=True)
class SegmentHead:
    """The first record header of a segment, as isMappedFileMatchedRecover reads it."""

    start: int
    magic: int
    store_timestamp: int


def read_segment_head(data: bytes, start: int) -> SegmentHead:
    """Magic and storeTimestamp of the record at the start of a segment (any bytes accepted)."""
    data = bytes(data[:SEGMENT_HEAD_BYTES]).ljust(SEGMENT_HEAD_BYTES, b"\0")
    head = RecordColumns(data, start, np.zeros(1, np.int64))  # the decoder's field offsets, unchecked
    return SegmentHead(start, int(head.magic[0]), int(head.store_timestamp[0]))


@dataclass(frozen=True)
class StartChoice:
    """Where recovery starts validating and re-dispatching, and why."""

    offset: int
    reason: str
    looked_at: list[dict] = field(default_factory=list)


def start_bound(cp: Checkpoint, settings: BrokerSettings) -> tuple[int, str]:
    """The storeTimestamp a start segment's first record must not exceed, and its name."""
    if settings.message_index_enable and settings.message_index_safe:
        return cp.min_timestamp_index, "min(physic, logics) - 3000 ms, and <= indexMsgTimestamp (messageIndexSafe)"
    return cp.min_timestamp, "min(physicMsgTimestamp, logicsMsgTimestamp) - 3000 ms"


def head_matches(head: SegmentHead, bound: int, generation: int) -> tuple[bool, str]:
    """isMappedFileMatchedRecover for one segment: (matches, why)."""
    magics = (MAGIC_V1, MAGIC_V2) if generation >= 5 else (MAGIC_V1,)
    if head.magic not in magics:
        return False, f"first record has magic 0x{head.magic:08X}, not a message"
    if head.store_timestamp == 0:
        return False, "first record has storeTimestamp 0"
    if head.store_timestamp > bound:
        return False, f"first record storeTimestamp {head.store_timestamp} > {bound}"
    return True, f"first record storeTimestamp {head.store_timestamp} <= {bound}"


def choose_start_segment(segment_starts: list[int], heads_newest_first: Iterable[SegmentHead], cp: Checkpoint,
                         settings: BrokerSettings, generation: int, abnormal: bool) -> StartChoice:
    """The broker's start segment. `heads_newest_first` may be lazy: it is consumed only until a
    segment matches (abnormal recovery); normal recovery starts at the third-last segment."""
    if not segment_starts:
        raise RecoveryError("the commit log has no segments")
    if not abnormal:
        s = segment_starts[max(0, len(segment_starts) - 3)]
        return StartChoice(s, "normal recovery (no abort file) validates from the third-last segment")
    bound, what = start_bound(cp, settings)
    looked: list[dict] = []
    for head in heads_newest_first:
        ok, why = head_matches(head, bound, generation)
        looked.append({"segment": head.start, "matches": ok, "why": why})
        if ok:
            return StartChoice(head.start, f"last segment whose first record is older than the checkpoint "
                                           f"bound {bound} ({what}): {why}", looked)
    return StartChoice(segment_starts[0], f"no segment's first record is at or before the checkpoint bound {bound} "
                                          f"({what}); recovery starts at the first segment", looked)


@dataclass(frozen=True)
class Truncation:
    """processOffset: the commit log's new end, why the scan stopped there, and the bad record."""

    offset: int
    reason: str
    detail: str
    invalid_record_offset: int | None

    def to_dict(self) -> dict:
        """The plan form of the truncation point."""
        return {"offset": self.offset, "reason": self.reason, "detail": self.detail,
                "invalid_record_offset": self.invalid_record_offset}


def dispatch_settings(settings: BrokerSettings, generation: int, abnormal: bool) -> BrokerSettings:
    """The settings the abnormal recovery's own dispatch runs with. 4.x runs it inside load(), before the
    schedule service has loaded its delay levels (maxDelayLevel is still 0), so a SCHEDULE_TOPIC_XXXX
    record it dispatches gets the TAGS hash (0 without TAGS) as tagsCode, not its delivery time - in its
    own queue and in every queue it multi-dispatches to. 5.x loads the levels first."""
    if generation >= 5 or not abnormal:
        return settings
    return replace(settings, message_delay_level="")


def truncation_point(end: ScanEnd, last_walk_end: ScanEnd | None) -> Truncation:
    """The truncation point from where the validating scan ended.

    `end` is the stitched end of the scan; `last_walk_end` is how the walk of the last accepted
    split ended (a BLANK ending the last segment stops the broker at the blank itself).
    """
    if end.is_invalid:
        return Truncation(end.offset, end.reason, end.describe(), end.offset)
    if end.reason == END_NO_NEXT_SEGMENT:
        if last_walk_end is not None and last_walk_end.reason == END_BLANK:
            return Truncation(last_walk_end.offset, END_OF_LOG, "a BLANK record ends the last segment; the "
                                                                "broker's scan stops at the blank", None)
        return Truncation(end.offset, END_OF_LOG, "the last record ends exactly at the end of the last segment",
                          None)
    raise RecoveryError(f"the scan stopped at offset {end.offset} ({end.reason}: {end.detail}); the broker's "
                        f"recovery does not define what happens there")


def segments_to_delete(segment_starts: list[int], truncate_at: int) -> list[int]:
    """MappedFileQueue.truncateDirtyFiles: segments starting after P go; the one holding P (or
    starting exactly at P) stays with its bytes."""
    return [s for s in segment_starts if s > truncate_at]
