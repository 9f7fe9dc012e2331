"""RocksDB consume queues (`storeType=defaultRocksDB`, RocketMQ 5.3.3): which units and `offset` records the
broker's dispatch writes, and what its next start re-dispatches; pure functions over numpy arrays and record bytes.

The units are the file queues' entries (`consume_queue`: NOT/COMMIT records only, tagsCode with the delivery time
in SCHEDULE_TOPIC_XXXX) plus the record's storeTimestamp, keyed by the STORED queue offset (no write position:
RocksDBConsumeQueueTable puts one key per (topic, queueId, queueOffset), a later put of a key replaces it). LMQ units
follow RocksDBConsumeQueueStore.dispatchLMQ, not ConsumeQueue.multiDispatchLmqQueue:

* the gate is `enableLmq` (file queues: `enableMultiDispatch`), with DispatchRequest.containsLMQ's checks (topic
  allows LMQ, both properties non-blank) and the same `split(",")` length check (a `%RETRY%...` name last has an
  empty offset item that split drops: no LMQ unit at all for that record);
* a name holding '/' gets its unit (it is key bytes, not a directory); `%LMQ%` names use queueId 0;
* units sit at the stored offset.

The scan applies these rules (`rocksdb_lmq_rules`) when the settings say `storeType=defaultRocksDB`. Per queue the
`offset` family holds a "max" record: the (phyOffset, queueOffset) of the queue's last unit in dispatch order. The
dispatch checkpoint (CHECKPOINT_TOPIC) is the end of the last record that got a unit; absent, the broker reads 0.

At its next start (CommitLog.recoverNormally / recoverAbnormally with the database's checkpoint as
maxPhyOffsetOfConsumeQueue) the broker re-dispatches: after a clean shutdown, from the newest segment (but the first)
whose start is <= the checkpoint, only records at offsets > the checkpoint (so a record starting exactly at the
checkpoint is never dispatched: the offset-0 loss of a deleted database); after a crash (`abort`), every record from
the newest segment whose first record has a message magic and a PHYSICALOFFSET <= the checkpoint (segment 0 if none).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from .multi_dispatch import MultiDispatchRules
from .record import MAGIC_V1, MAGIC_V2
from .kernels.record_fields import store_timestamps_at
from .record_columns import HEAD_DTYPE, RecordColumns
from .segment_names import segment_name

HEAD_BYTES: Final = HEAD_DTYPE.itemsize  # a segment's first record up to its PHYSICALOFFSET and sysFlag
TIMESTAMP_BYTES: Final = 80  # enough of a record for its storeTimestamp after an IPv6 born host
NORMAL, ABNORMAL = "normal", "abnormal"


def rocksdb_lmq_rules(enable_lmq: bool | None) -> MultiDispatchRules | None:
    """The scan's multi-dispatch rules for RocksDB consume queues: on with `enableLmq` alone, 5.x topic rules, names
    holding '/' kept; None (no LMQ units) without enableLmq."""
    if not enable_lmq:
        return None
    return MultiDispatchRules(generation=5, enable_lmq=True, enable_multi_dispatch=True, generation_known=True,
                              keep_separator_names=True)


def store_timestamps(segment: np.ndarray, positions: np.ndarray, compiled: bool = True) -> np.ndarray:
    """storeTimestamp of the records at `positions` of one segment's bytes (after the born host, 4 or 16 bytes):
    the compiled loop (kernels.record_fields), or with `compiled=False` its numpy reference; a position whose field
    lies past the bytes' end raises IndexError either way."""
    positions = np.asarray(positions, np.int64)
    if not compiled:
        return RecordColumns(segment, 0, positions).store_timestamp
    out = np.empty(len(positions), np.int64)
    bad = store_timestamps_at(np.asarray(segment, np.uint8).reshape(-1), positions, out)
    if bad >= 0:
        raise IndexError(f"record at byte {int(positions[bad])}: its storeTimestamp lies past the {len(segment)} "
                         f"bytes read")
    return out


@dataclass(frozen=True)
class QueueUnits:
    """One queue's units as dispatch leaves them: one per stored queue offset (the last put wins), in key order."""

    queue_offset: np.ndarray  # int64, ascending
    phy: np.ndarray  # int64
    size: np.ndarray  # int32
    tags: np.ndarray  # int64
    max_at: int  # index (into these arrays) of the unit the "max" record names; -1 for none
    store_ts: np.ndarray | None = None  # int64, where the rows carried their records' storeTimestamp

    def __len__(self) -> int:
        return len(self.queue_offset)


def queue_units(queue_offset: np.ndarray, phy: np.ndarray, size: np.ndarray, tags: np.ndarray,
                store_ts: np.ndarray | None = None) -> QueueUnits:
    """A queue's units from its consume-queue rows in dispatch order: per queue offset the last row; the "max"
    record names the last row (RocksDBConsumeQueueOffsetTable keeps the latest dispatch's offsets). `store_ts`: the
    rows' storeTimestamp, when they carry it (kept with the units)."""
    qo = np.asarray(queue_offset, np.int64)
    if not len(qo):
        z = np.zeros(0, np.int64)
        return QueueUnits(z, z, np.zeros(0, np.int32), z, -1, None if store_ts is None else z)
    rev = np.arange(len(qo))[::-1]  # np.unique keeps the first occurrence: of the reversed rows, the last put
    uniq, first = np.unique(qo[rev], return_index=True)
    take = rev[first]
    max_at = int(np.searchsorted(uniq, qo[-1]))
    return QueueUnits(uniq, np.asarray(phy, np.int64)[take], np.asarray(size, np.int32)[take],
                      np.asarray(tags, np.int64)[take], max_at,
                      None if store_ts is None else np.asarray(store_ts, np.int64)[take])


@dataclass(frozen=True)
class SegmentHead:
    """A segment's first record as isMappedFileMatchedRecover reads it in RocksDB mode: magic and PHYSICALOFFSET."""

    start: int
    magic: int
    phy_offset: int


def read_segment_head(data: bytes, start: int) -> SegmentHead:
    """Magic and PHYSICALOFFSET of the record at the start of a segment (any bytes accepted)."""
    head = np.frombuffer(bytes(data[:HEAD_BYTES]).ljust(HEAD_BYTES, b"\0"), HEAD_DTYPE)[0]
    return SegmentHead(start, int(head["magic"]), int(head["physical_offset"]))


@dataclass(frozen=True)
class NextStart:
    """What the broker's next start re-dispatches into the database: `rule` NORMAL (no abort: records at offsets >
    `checkpoint` from segment `segment`) or ABNORMAL (abort: every record from segment `segment`)."""

    rule: str
    checkpoint: int  # the database's CHECKPOINT_TOPIC (0 when absent, as the broker reads it)
    segment: int  # start offset of the segment the recovery begins at
    why: str

    @property
    def from_offset(self) -> int:
        """The first commit-log offset whose record is dispatched (exclusive bound for NORMAL: see redispatched)."""
        return self.segment if self.rule == ABNORMAL else max(self.segment, self.checkpoint)

    def redispatched(self, offsets: np.ndarray) -> np.ndarray:
        """Which records (by commit-log offset) the next start dispatches into the database."""
        offsets = np.asarray(offsets, np.int64)
        return offsets >= self.segment if self.rule == ABNORMAL else (offsets > self.checkpoint) & (
            offsets >= self.segment)

    def describe(self, log_end: int) -> str:
        """One line: where the next start re-dispatches from and how many bytes of the log that covers."""
        start = self.from_offset
        what = ("every record" if self.rule == ABNORMAL
                else f"the records after offset {self.checkpoint} (the database's checkpoint)")
        return (f"the broker re-dispatches from commit-log file {segment_name(self.segment)} at its next start "
                f"({self.rule} recovery: {what}; {max(0, log_end - start)} bytes up to the log's end {log_end})")

    def to_dict(self, log_end: int) -> dict:
        return {"rule": self.rule, "checkpoint": self.checkpoint, "segment": segment_name(self.segment),
                "segment_offset": self.segment, "from_offset": self.from_offset,
                "bytes": max(0, log_end - self.from_offset), "why": self.why, "message": self.describe(log_end)}


def next_start(abnormal: bool, checkpoint: int | None, segment_starts: list[int],
               heads_newest_first) -> NextStart:
    """The broker's next start over the database's checkpoint (None: absent, read as 0). `heads_newest_first` (lazy
    SegmentHeads) is consumed only by the abnormal rule, until a segment matches."""
    cp = checkpoint or 0
    if not segment_starts:
        return NextStart(ABNORMAL if abnormal else NORMAL, cp, 0, "the commit log has no segments")
    if not abnormal:
        later = [s for s in segment_starts[1:] if s <= cp]
        seg = later[-1] if later else segment_starts[0]
        return NextStart(NORMAL, cp, seg, f"recoverNormally: the newest segment starting at or before the "
                                          f"checkpoint {cp} (the first segment if none)")
    for head in heads_newest_first:
        if head.magic in (MAGIC_V1, MAGIC_V2) and head.phy_offset <= cp:
            return NextStart(ABNORMAL, cp, head.start, f"recoverAbnormally: the newest segment whose first record's "
                                                      f"PHYSICALOFFSET {head.phy_offset} <= the checkpoint {cp}")
    return NextStart(ABNORMAL, cp, segment_starts[0], f"recoverAbnormally: no segment's first record has a "
                                                      f"PHYSICALOFFSET <= the checkpoint {cp}: the first segment")


UNIT_FIELDS: Final = (("phy", "phyOffset"), ("size", "size"), ("tags", "tagsCode"), ("ts", "storeTimestamp"))


@dataclass(frozen=True)
class QueueComparison:
    """One queue's units in the database against those the commit log implies, as positions into either side."""

    differ: np.ndarray  # (expected index, database index) pairs whose values differ: shape (n, 2)
    missing: np.ndarray  # expected indexes the database lacks
    extra: np.ndarray  # database indexes the commit log implies none for
    matched: int  # units equal on both sides


def compare_units(exp_qo: np.ndarray, exp_values: dict[str, np.ndarray], db_qo: np.ndarray,
                  db_values: dict[str, np.ndarray]) -> QueueComparison:
    """Merge two key-ordered unit lists of one queue by queue offset and compare the values (UNIT_FIELDS' keys)."""
    common, ei, di = np.intersect1d(exp_qo, db_qo, assume_unique=True, return_indices=True)
    bad = np.zeros(len(common), bool)
    for key, _ in UNIT_FIELDS:
        bad |= np.asarray(exp_values[key])[ei] != np.asarray(db_values[key])[di]
    missing = np.setdiff1d(np.arange(len(exp_qo)), ei, assume_unique=True)
    extra = np.setdiff1d(np.arange(len(db_qo)), di, assume_unique=True)
    return QueueComparison(np.stack([ei[bad], di[bad]], axis=1), missing, extra, int((~bad).sum()))


MAX_OK, MAX_PENDING, MAX_DIFFERS = "ok", "pending", "differs"
Position = tuple[int, int]  # (phyOffset, queueOffset) as an `offset` record holds them


@dataclass(frozen=True)
class QueueTail:
    """What a queue's "max" record is checked against: its last unit in dispatch order, its last unit whose record
    ends before the database's checkpoint (what the database says it dispatched), and whether the next start
    dispatches any of its records (None: no such unit)."""

    last: Position | None
    kept: Position | None
    redispatched: bool

    @staticmethod
    def of(phy: np.ndarray, queue_offset: np.ndarray, start: NextStart) -> "QueueTail":
        """From a queue's rows in dispatch order and the next start."""
        phy = np.asarray(phy, np.int64)
        last = (int(phy[-1]), int(queue_offset[-1])) if len(phy) else None
        kept_rows = np.flatnonzero(phy < start.checkpoint)
        kept = (int(phy[kept_rows[-1]]), int(queue_offset[kept_rows[-1]])) if len(kept_rows) else None
        return QueueTail(last, kept, bool(start.redispatched(phy).any()))

    def then(self, other: "QueueTail") -> "QueueTail":
        """This part of a queue joined with another part (dispatch order: by phyOffset; on a tie `other`'s)."""
        def newest(a: Position | None, b: Position | None) -> Position | None:
            return max((p for p in (b, a) if p is not None), key=lambda p: p[0], default=None)
        return QueueTail(newest(self.last, other.last), newest(self.kept, other.kept),
                         self.redispatched or other.redispatched)


def max_verdict(tail: QueueTail, db_max: Position | None) -> str:
    """The queue's "max" record against its units: MAX_OK when it names the last unit; MAX_PENDING when it names
    the last unit the next start does not dispatch again (or is absent and every unit is re-dispatched), which
    that start rewrites; MAX_DIFFERS otherwise."""
    if db_max == tail.last:
        return MAX_OK
    if tail.redispatched and db_max == tail.kept:
        return MAX_PENDING
    return MAX_DIFFERS


def consequence_of_missing(topic: str, queue_id: int, queue_offset: int, phy: int) -> str:
    """What a unit the database lacks, and that no start dispatches again, means to consumers."""
    return (f"consumers skip the message at commit-log offset {phy} ({topic}/{queue_id} queue offset "
            f"{queue_offset}): the database has no unit for it and the broker's next start does not dispatch it")
