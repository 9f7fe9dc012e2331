"""The broker's start-up recovery as pure planning over decoded facts (no I/O, no Spark).

Rules as in DefaultMessageStore.load/recover/start of 4.9.8 and 5.3.3, checked against the golden
`*-recovered` stores:

* Start segment (abnormal): walk back from the last segment to the first whose first record has a
  message magic (4.x: V1 only; 5.x: V1 or V2), a non-zero storeTimestamp and storeTimestamp <=
  checkpoint.min_timestamp (min_timestamp_index with messageIndexEnable && messageIndexSafe);
  segment 0 if none. Normal recovery starts at the third-last segment.
* Truncation point P (processOffset): the first invalid record from the start segment on; a BLANK
  that ends the last segment also ends the log there. Segments starting after P are deleted; the
  segment holding P keeps its bytes (logical truncation).
* Consume queues (ConsumeQueue.recover / putMessagePositionInfo / truncateDirtyLogicFiles): loaded
  state = the run of valid units from the third-last file; every record of [start, P) is
  re-dispatched with the skip rule offset + size <= the queue's maxPhysicOffset and the
  "repeatedly" rule; when the largest maxPhysicOffset over all queues is >= P, trailing files whose
  first unit is at or past P are deleted and the write position is cut before the first unit >= P
  (the bytes after it stay).
* Index (IndexService.load/buildIndex): files with endTimestamp > checkpoint.indexMsgTimestamp are
  deleted; indexing resumes in the last kept file, skipping records whose offset < its endPhyOffset,
  so the record at that offset is indexed a second time; a full last file makes the next
  dispatched record open a new file inheriting its end.
* 4.x only: after recovery, start() re-dispatches [max maxPhysicOffset over queues, P) through the
  ReputMessageService; 5.x starts reput at the commit log's max offset.
* Checkpoint: physicMsgTimestamp unchanged (nothing is appended); logicsMsgTimestamp = store time of
  the last dispatched NOT/COMMIT record; indexMsgTimestamp = end time of the last full index file
  the dispatch rolled away from (the flush thread writes it), else unchanged; 5.x confirmPhyOffset =
  start offset of the last valid record found (the start segment's offset if none).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import numpy as np

from .checkpoint import Checkpoint
from .commitlog import END_BLANK, RecordColumns, ScanEnd
from .confirm_offset import RecoveredConfirm
from .consume_queue import CQ_DTYPE, CQ_UNIT_SIZE, PRE_BLANK_SIZE, keep_first_of_each_offset, unpack_entries
from .index_file import IndexHeader, IndexState
from .record import MAGIC_V1, MAGIC_V2
from .scan_plan import END_NO_NEXT_SEGMENT
from .settings import BrokerSettings

SEGMENT_HEAD_BYTES = 76  # enough for magic, sysFlag and the storeTimestamp after an IPv6 born host
END_OF_LOG = "end_of_log"


class RecoveryError(Exception):
    """The store is in a state the broker's recovery rules do not cover (reported, never guessed)."""


# ---------------------------------------------------------------------------------------------
# start segment


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


# ---------------------------------------------------------------------------------------------
# truncation point and segments


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


# ---------------------------------------------------------------------------------------------
# consume queues


def _first_invalid_unit(units: np.ndarray) -> int:
    """Index of the first unit that is not (phy >= 0 and size > 0), or len(units)."""
    bad = np.flatnonzero((units["phy"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)


@dataclass(frozen=True)
class QueueLoad:
    """A consume queue as ConsumeQueue.recover leaves it at load: its files, where the next unit
    goes (logical byte offset) and maxPhysicOffset (-1 when no valid unit was seen)."""

    topic: str
    queue_id: int
    files: tuple[int, ...]
    write_offset: int
    max_phy: int
    removed_at_load: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        """(topic, queueId)."""
        return self.topic, self.queue_id


def dropped_at_load(files: list[tuple[int, int]], generation: int) -> tuple[int, ...]:
    """Files of one queue (start, size) that MappedFileQueue.doLoad deletes instead of mapping: 5.x deletes a
    0-byte LAST file (a crash right after creating it) and the queue writes it again; 4.x refuses it."""
    ordered = sorted(files)
    if generation >= 5 and ordered and ordered[-1][1] == 0:
        return (ordered[-1][0],)
    return ()


def load_queue(topic: str, queue_id: int, files: list[int], read_file: Callable[[int], bytes],
               file_size: int) -> QueueLoad:
    """ConsumeQueue.recover: walk valid units from the third-last file; files wholly past the end
    of that run are deleted (MappedFileQueue.truncateDirtyFiles)."""
    files = sorted(files)
    if not files:
        return QueueLoad(topic, queue_id, (), 0, -1)
    idx = max(0, len(files) - 3)
    max_phy = -1
    process = files[idx]
    while True:
        units = unpack_entries(read_file(files[idx]))
        k = _first_invalid_unit(units)
        if k:
            max_phy = int(units["phy"][k - 1]) + int(units["size"][k - 1])
        process = files[idx] + k * CQ_UNIT_SIZE
        if k * CQ_UNIT_SIZE < file_size or idx + 1 >= len(files):
            break
        idx += 1
    kept = tuple(f for f in files if f <= process)
    removed = tuple(f for f in files if f > process)
    return QueueLoad(topic, queue_id, kept, process, max_phy, removed)


@dataclass(frozen=True)
class QueueEntries:
    """Consume-queue entries of one queue in dispatch order (commit-log order)."""

    queue_offset: np.ndarray
    phy: np.ndarray
    size: np.ndarray
    tags: np.ndarray

    def __len__(self) -> int:
        return len(self.phy)

    def take(self, mask: np.ndarray) -> "QueueEntries":
        """The rows selected by a mask or slice."""
        return QueueEntries(self.queue_offset[mask], self.phy[mask], self.size[mask], self.tags[mask])

    @staticmethod
    def empty() -> "QueueEntries":
        """No entries."""
        z = np.zeros(0, np.int64)
        return QueueEntries(z, z, z.astype(np.int32), z)


@dataclass
class QueueState:
    """A queue while recovery dispatches into it: files, write offset, maxPhysicOffset, and the
    units written so far (logical offset -> unit) plus a pre-blank run of a first-created file."""

    load: QueueLoad
    files: list[int]
    write_offset: int
    max_phy: int
    file_size: int
    created: list[int] = field(default_factory=list)
    first_created: int | None = None  # start of the file created as the queue's first one
    pre_blank_until: int = 0  # logical end of the pre-blank units in that file
    written_at: list[np.ndarray] = field(default_factory=list)
    written: list[QueueEntries] = field(default_factory=list)
    truncated_files: list[int] = field(default_factory=list)
    cut: dict | None = None  # where truncation cut the last file, when units past P stay behind
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, load: QueueLoad, file_size: int) -> "QueueState":
        """The state right after load, before any dispatch."""
        return cls(load, list(load.files), load.write_offset, load.max_phy, file_size)

    @property
    def name(self) -> str:
        """`topic/queueId`, for messages."""
        return f"{self.load.topic}/{self.load.queue_id}"

    def _file_of(self, logical: int) -> int:
        """Start of the file holding a logical offset."""
        return logical - logical % self.file_size

    def _ensure_file(self, logical_expected: int) -> None:
        """MappedFileQueue.getLastMappedFile(startOffset): create the file the next unit needs."""
        if not self.files:
            start = self._file_of(logical_expected)
            self.files.append(start)
            self.created.append(start)
            self.first_created = start
            self.write_offset = start
        elif self.write_offset >= self.files[-1] + self.file_size:
            start = self.files[-1] + self.file_size
            self.files.append(start)
            self.created.append(start)
            self.write_offset = start

    def dispatch(self, e: QueueEntries) -> int:
        """putMessagePositionInfo for each entry in order; returns how many units were written."""
        if not len(e):
            return 0
        e = e.take(e.phy.astype(np.int64) + e.size.astype(np.int64) > self.max_phy)
        if not len(e):
            return 0
        qo = e.queue_offset.astype(np.int64)
        consecutive = bool(keep_first_of_each_offset(qo).all()) and bool((np.diff(qo) == 1).all())
        if self.files:
            fast = consecutive and int(qo[0]) * CQ_UNIT_SIZE == self.write_offset and int(qo[0]) != 0
        else:
            fast = consecutive  # an empty queue: the first unit creates its file (with pre-blank)
        if fast:
            return self._write_run(e)
        return self._write_one_by_one(e)

    def _write_run(self, e: QueueEntries) -> int:
        """Vectorised path: units at consecutive queue offsets that continue the queue."""
        first = int(e.queue_offset[0]) * CQ_UNIT_SIZE
        self._ensure_file(first)
        if self.first_created is not None and self.write_offset == self.first_created and first != self.first_created:
            self.pre_blank_until = first  # fillPreBlank up to the first unit's slot
            self.write_offset = first
        logical = first + np.arange(len(e), dtype=np.int64) * CQ_UNIT_SIZE
        last_file = self._file_of(int(logical[-1]))
        while self.files[-1] < last_file:
            self.write_offset = self.files[-1] + self.file_size
            self._ensure_file(self.write_offset)
        self.written_at.append(logical)
        self.written.append(e)
        self.write_offset = int(logical[-1]) + CQ_UNIT_SIZE
        self.max_phy = int(e.phy[-1]) + int(e.size[-1])
        return len(e)

    def _write_one_by_one(self, e: QueueEntries) -> int:
        """The broker's per-unit rules where units repeat, jump or restart at queue offset 0."""
        at: list[int] = []
        take: list[int] = []
        for i in range(len(e)):
            qo = int(e.queue_offset[i])
            end = int(e.phy[i]) + int(e.size[i])
            if end <= self.max_phy:
                continue
            expected = qo * CQ_UNIT_SIZE
            self._ensure_file(expected)
            if self.first_created is not None and qo != 0 and self.write_offset == self.first_created:
                self.pre_blank_until = expected
                self.write_offset = expected
            if qo != 0:
                if expected < self.write_offset:
                    continue  # "Build consume queue repeatedly"
                if expected != self.write_offset:
                    self.warnings.append(f"{self.name}: unit for queue offset {qo} written at logical offset "
                                         f"{self.write_offset} (the broker's 'logic queue order maybe wrong' case)")
            at.append(self.write_offset)
            take.append(i)
            self.write_offset += CQ_UNIT_SIZE
            self.max_phy = end
        if take:
            idx = np.asarray(take, dtype=np.int64)
            self.written_at.append(np.asarray(at, dtype=np.int64))
            self.written.append(QueueEntries(e.queue_offset[idx], e.phy[idx], e.size[idx], e.tags[idx]))
        return len(take)

    def unit_view(self, file_start: int, read_file: Callable[[int], bytes]) -> np.ndarray:
        """The file's units as they are now: crash-time bytes (or zeros) with written units on top."""
        return render_units(self, file_start, read_file)

    def truncate(self, phy_offset: int, read_file: Callable[[int], bytes]) -> None:
        """ConsumeQueue.truncateDirtyLogicFiles(P): drop trailing files whose first unit is at or past
        P, then cut the write position before the first unit >= P (or invalid) of the last file."""
        self.max_phy = phy_offset
        while self.files:
            last = self.files[-1]
            units = self.unit_view(last, read_file)
            if int(units["phy"][0]) >= phy_offset:
                self.files.pop()
                if last in self.created:
                    raise RecoveryError(f"{self.name}: a file written by recovery would be truncated")
                self.truncated_files.append(last)
                continue
            rest = units[1:]
            bad = np.flatnonzero((rest["phy"] < 0) | (rest["size"] <= 0) | (rest["phy"] >= phy_offset))
            k = 1 + (int(bad[0]) if len(bad) else len(rest))
            self.max_phy = int(units["phy"][k - 1]) + int(units["size"][k - 1])
            self.write_offset = last + k * CQ_UNIT_SIZE
            if k < len(units) and int(units["phy"][k]) >= phy_offset and int(units["size"][k]) > 0:
                self.cut = {"file": last, "units_kept": k, "first_unit_left_behind": int(units["phy"][k])}
            return
        self.write_offset = 0
        self.first_created = None

    def written_entries(self) -> tuple[np.ndarray, QueueEntries]:
        """(logical offsets, entries) of every unit written, in write order."""
        if not self.written:
            return np.zeros(0, np.int64), QueueEntries.empty()
        return (np.concatenate(self.written_at),
                QueueEntries(*(np.concatenate([getattr(w, f) for w in self.written])
                               for f in ("queue_offset", "phy", "size", "tags"))))

    def changed_files(self) -> list[int]:
        """Files whose bytes differ from the crash-time store (units written or newly created)."""
        at, _ = self.written_entries()
        touched = set((at - at % self.file_size).tolist()) | set(self.created)
        return sorted(f for f in touched if f in self.files)

    def deleted_files(self) -> list[int]:
        """Files gone after recovery: removed at load or by truncation (and not created again)."""
        return sorted((set(self.load.removed_at_load) | set(self.truncated_files)) - set(self.files))


def render_units(state: QueueState, file_start: int, read_file: Callable[[int], bytes]) -> np.ndarray:
    """Units of one file after recovery: crash-time bytes (zeros for a new file), the pre-blank run of
    a first-created file, then every written unit at its logical offset."""
    n = state.file_size // CQ_UNIT_SIZE
    if file_start in state.created:
        units = np.zeros(n, dtype=CQ_DTYPE)
    else:
        units = unpack_entries(read_file(file_start)).copy()
    if state.first_created == file_start and state.pre_blank_until > file_start:
        units["size"][:(state.pre_blank_until - file_start) // CQ_UNIT_SIZE] = PRE_BLANK_SIZE
    at, e = state.written_entries()
    sel = (at >= file_start) & (at < file_start + state.file_size)
    if sel.any():
        slot = (at[sel] - file_start) // CQ_UNIT_SIZE
        units["phy"][slot], units["size"][slot], units["tags"][slot] = e.phy[sel], e.size[sel], e.tags[sel]
    return units


def render_queue_file(state: QueueState, file_start: int, read_file: Callable[[int], bytes]) -> bytes:
    """Full bytes of one changed consume-queue file."""
    return render_units(state, file_start, read_file).tobytes()


# ---------------------------------------------------------------------------------------------
# index


@dataclass(frozen=True)
class IndexFileInfo:
    """An index file on disk: its name and header."""

    name: str
    header: IndexHeader
    empty_on_disk: bool = False  # a 0-byte file (crash leftover): the broker maps it at full size, zero-filled


def index_files_after_load(files: list[IndexFileInfo], cp: Checkpoint, abnormal: bool) -> tuple[list[IndexFileInfo], list[IndexFileInfo]]:
    """IndexService.load: in name order; after an unclean shutdown files whose endTimestamp >
    checkpoint.indexMsgTimestamp are deleted. Returns (kept, deleted)."""
    ordered = sorted(files, key=lambda f: f.name)
    if not abnormal:
        return ordered, []
    kept = [f for f in ordered if f.header.end_timestamp <= cp.index_msg_timestamp]
    deleted = [f for f in ordered if f.header.end_timestamp > cp.index_msg_timestamp]
    return kept, deleted


@dataclass(frozen=True)
class KeyBatch:
    """Index keys in dispatch order (key hash, record offset, store time)."""

    key_hash: np.ndarray
    phy: np.ndarray
    store_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.key_hash)

    def take(self, sel: np.ndarray | slice) -> "KeyBatch":
        """The rows selected by a mask or slice."""
        return KeyBatch(self.key_hash[sel], self.phy[sel], self.store_ts[sel])

    @staticmethod
    def concat(batches: list["KeyBatch"]) -> "KeyBatch":
        """Batches joined in order."""
        if not batches:
            z = np.zeros(0, np.int64)
            return KeyBatch(z.astype(np.int32), z, z)
        return KeyBatch(np.concatenate([b.key_hash for b in batches]), np.concatenate([b.phy for b in batches]),
                        np.concatenate([b.store_ts for b in batches]))


@dataclass(frozen=True)
class DispatchPass:
    """One run of dispatched records: recovery's [start, P) or 4.x start()'s re-dispatch [R, P).

    `keys` must hold every key of the pass's records at or after the index end offset known when the
    pass begins (earlier keys are skipped anyway); `last_record_offset` is None for an empty pass.
    """

    name: str
    first_offset: int
    last_record_offset: int | None
    keys: KeyBatch


@dataclass
class IndexTarget:
    """One index file recovery writes: the kept file it appends to, or a new file with what it inherits."""

    appends_to: str | None
    inherited: IndexState
    keys: list[KeyBatch] = field(default_factory=list)
    count: int = 1  # indexCount after the puts so far (starts at 1)
    end_ts: int = 0
    end_phy: int = 0

    def all_keys(self) -> KeyBatch:
        """Every key put into this file by recovery, in order."""
        return KeyBatch.concat(self.keys)


@dataclass
class IndexResume:
    """What recovery does to the index: files appended to / created, rolls, re-indexed boundary."""

    targets: list[IndexTarget]
    rolled_full_end_ts: list[int]
    boundary_reindexed: list[dict]

    @property
    def new_files(self) -> list[IndexTarget]:
        """Files recovery creates."""
        return [t for t in self.targets if t.appends_to is None]

    @property
    def appended(self) -> IndexTarget | None:
        """The kept file recovery appends keys to, if any."""
        return next((t for t in self.targets if t.appends_to is not None and t.keys and len(t.all_keys())), None)


def resume_index(last_kept: IndexFileInfo | None, passes: list[DispatchPass], max_entries: int) -> IndexResume:
    """IndexService.buildIndex over the dispatched passes, starting from the last kept file."""
    cur = None
    if last_kept is not None:
        h = last_kept.header.as_loaded()
        cur = IndexTarget(last_kept.name, IndexState(h.end_timestamp, h.end_phy_offset), [], h.index_count,
                          h.end_timestamp, h.end_phy_offset)
    targets: list[IndexTarget] = [cur] if cur is not None else []
    rolled: list[int] = []
    boundary: list[dict] = []

    def roll() -> IndexTarget:
        """getAndCreateLastIndexFile: a new file inheriting the current end (flushing a full one)."""
        nonlocal cur
        if cur is not None and cur.count >= max_entries:
            rolled.append(cur.end_ts)
        inherit = IndexState(cur.end_ts, cur.end_phy) if cur is not None else IndexState()
        new = IndexTarget(None, inherit, [], 1, max(inherit.end_timestamp, 0), max(inherit.end_phy_offset, 0))
        targets.append(new)
        cur = new
        return new

    for p in passes:
        if p.last_record_offset is None:
            continue
        if cur is None or cur.count >= max_entries:
            roll()
        skip_below = cur.end_phy
        keys = p.keys.take((p.keys.phy >= skip_below) & (p.keys.phy >= p.first_offset)) if len(p.keys) else p.keys
        if len(keys) and int(keys.phy[0]) == skip_below and skip_below > 0:
            boundary.append({"pass": p.name, "record_offset": skip_below,
                             "keys": int((keys.phy == skip_below).sum())})
        done = 0
        while done < len(keys):
            if cur.count >= max_entries:
                roll()
            n = min(max_entries - cur.count, len(keys) - done)
            part = keys.take(slice(done, done + n))
            cur.keys.append(part)
            cur.count += n
            cur.end_ts, cur.end_phy = int(part.store_ts[-1]), int(part.phy[-1])
            done += n
        last_key_phy = int(keys.phy[-1]) if len(keys) else None
        if cur.count >= max_entries and (last_key_phy is None or p.last_record_offset > last_key_phy):
            roll()  # the next dispatched record finds the file full and opens a new one
    return IndexResume(targets, rolled, boundary)


# ---------------------------------------------------------------------------------------------
# checkpoint


def checkpoint_after(cp: Checkpoint, generation: int, abnormal: bool, last_cq_record_ts: int | None,
                     rolled_full_end_ts: list[int], last_valid_record_offset: int | None,
                     start_offset: int, log_end: int,
                     confirm: RecoveredConfirm | None = None) -> tuple[Checkpoint, dict[str, str]]:
    """The checkpoint a broker leaves after this recovery, a start and a clean shutdown, with why.
    `confirm` (5.x) is the confirm offset from confirm_offset.py; without it, the plain rule."""
    why: dict[str, str] = {"physic_msg_timestamp": "unchanged: recovery appends nothing to the commit log, "
                                                   "so the commit-log flush never moves it"}
    logics = cp.logics_msg_timestamp
    if last_cq_record_ts is not None:
        logics = last_cq_record_ts
        why["logics_msg_timestamp"] = ("store time of the last re-dispatched NOT/COMMIT record (set on every "
                                       "consume-queue put, including skipped ones)")
    else:
        why["logics_msg_timestamp"] = "unchanged: no NOT/COMMIT record was re-dispatched"
    index = cp.index_msg_timestamp
    if rolled_full_end_ts:
        index = rolled_full_end_ts[-1]
        why["index_msg_timestamp"] = ("endTimestamp of the last full index file recovery rolled away from (the "
                                      "index flush thread stores it when it flushes a full file)")
    else:
        why["index_msg_timestamp"] = "unchanged: recovery did not roll away from a full index file"
    out = replace(cp, logics_msg_timestamp=logics, index_msg_timestamp=index)
    if generation >= 5:
        why["master_flushed_offset"] = "unchanged (only set in controller / slave roles)"
        if confirm is not None:
            why["confirm_phy_offset"] = confirm.why
            return replace(out, confirm_phy_offset=confirm.offset), why
        if abnormal:
            offset = last_valid_record_offset if last_valid_record_offset is not None else start_offset
        else:
            offset = last_valid_record_offset if last_valid_record_offset is not None else log_end
        out = replace(out, confirm_phy_offset=offset)
        why["confirm_phy_offset"] = ("start offset of the last valid record the recovery scan found "
                                     "(CommitLog.setConfirmOffset(lastValidMsgPhyOffset))")
    return out, why


# ---------------------------------------------------------------------------------------------
# 4.x start(): re-dispatch from the consume queues' max physical offset


def post_start_reput_from(generation: int, queue_max_phy: Iterable[int], log_min_offset: int, log_end: int) -> int:
    """Where ReputMessageService starts after recovery: 4.x the largest maxPhysicOffset of any queue
    (not below the commit log's min offset); 5.x the commit log's max offset."""
    if generation >= 5:
        return log_end
    best = max([log_min_offset, *queue_max_phy])
    return max(best, 0)
