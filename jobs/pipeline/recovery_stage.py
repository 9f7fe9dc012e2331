"""Spark side of `jobs.recover`: gather the facts the broker's recovery rules need, then plan.

1. The validating scan (CRC on) runs from the start segment through `scan.scan_store`.
2. Consume-queue load state (ConsumeQueue.recover at start-up) is read in Spark tasks, a group of
   queues per task; only small per-queue facts come back.
3. The re-dispatch tails - consume-queue entries past each queue's maxPhysicOffset and index keys past
   the last kept index file's end - are cut from the scan's per-split Arrow files; in a real crash
   they are a few seconds of traffic, so they are what reaches the driver, never the whole log.
4. `storage_format.recovery` turns these facts into the plan.
"""
from __future__ import annotations

import time
import datetime as dt
from dataclasses import dataclass, field, replace

import numpy as np

from storage_format import confirm_offset
from storage_format import recovery as rules
from storage_format.checkpoint import Checkpoint, parse_checkpoint
from storage_format.commitlog import parse_segment_name, segment_name
from storage_format.consume_queue import file_name
from storage_format.errors import StoreFormatError
from storage_format.index_file import HEADER_SIZE, IndexHeader, first_ms_named_after, format_name, is_name
from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT, GenerationGuess, detect_generation
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from .fs import Location
from .store_gate import commitlog_dir
from .build import plan_cq
from .scan import ScanResult, list_segments, scan_store
from .workdir import read_cq, read_keys
from .tasks import run_tasks

QUEUES_PER_LOAD_TASK = 256
LOOKED_AT_SHOWN = 8  # start-segment candidates listed in the plan (newest first)


# ---------------------------------------------------------------------------------------------
# store listing


@dataclass(frozen=True)
class QueueDir:
    """One consume queue on disk: topic, queue id and its files (start offset, size)."""

    topic: str
    queue_id: int
    uri: str
    files: tuple[tuple[int, int], ...]

    @property
    def key(self) -> tuple[str, int]:
        """(topic, queueId)."""
        return self.topic, self.queue_id

    def file_uri(self, start: int) -> str:
        """URI of one file of the queue."""
        return f"{self.uri}/{file_name(start)}"


def list_queues(store: Location) -> list[QueueDir]:
    """consumequeue/<topic>/<queueId>/<20-digit files>; other names are not the broker's and are skipped."""
    root = store.child("consumequeue")
    out = []
    for t in root.list():
        if t.type.name != "Directory":
            continue
        tdir = root.child(t.base_name)
        for q in tdir.list():
            if q.type.name != "Directory" or not q.base_name.lstrip("-").isdigit():
                continue
            qdir = tdir.child(q.base_name)
            files = tuple((parse_segment_name(f.base_name), f.size) for f in qdir.list()
                          if f.type.name == "File" and parse_segment_name(f.base_name) is not None)
            out.append(QueueDir(t.base_name, int(q.base_name), qdir.uri, tuple(sorted(files))))
    return out


def list_index_files(store: Location, settings: BrokerSettings) -> list[tuple[rules.IndexFileInfo, str]]:
    """Index files (name, header) with their URI; a file of the wrong size is an error, except a 0-byte
    one (zeros, as the broker maps it)."""
    root = store.child("index")
    out = []
    for info in root.list():
        if info.type.name != "File" or not is_name(info.base_name):
            continue
        loc = root.child(info.base_name)
        if info.size == 0:  # a crash leftover: IndexFile maps it at full size, zero-filled, and loads it
            out.append((rules.IndexFileInfo(info.base_name, IndexHeader(index_count=0), True), loc.uri))
            continue
        if info.size != settings.index_file_size:
            raise StoreFormatError(loc.uri, info.size, f"index file is {info.size} bytes, expected "
                                                       f"{settings.index_file_size} (maxHashSlotNum, maxIndexNum)")
        header = IndexHeader.from_bytes(bytes(loc.read_range(0, HEADER_SIZE)))
        out.append((rules.IndexFileInfo(info.base_name, header), loc.uri))
    return out


# ---------------------------------------------------------------------------------------------
# consume-queue load state (Spark tasks)


@dataclass(frozen=True)
class LoadTask:
    """A group of queues whose load state one Spark task reads."""
    queues: tuple[QueueDir, ...]
    file_size: int
    generation: int = 4


def _load_queues(task: LoadTask) -> list[rules.QueueLoad] | StoreFormatError:
    """ConsumeQueue.recover for a group of queues (runs in a Spark task); bad files are returned as errors."""
    out = []
    try:
        for q in task.queues:
            dropped = rules.dropped_at_load(list(q.files), task.generation)
            files = [(start, size) for start, size in q.files if start not in dropped]
            for start, size in files:
                if size != task.file_size:
                    raise StoreFormatError(q.file_uri(start), size, f"consume-queue file is {size} bytes, expected "
                                                                    f"{task.file_size} (mappedFileSizeConsumeQueue); "
                                                                    f"the broker refuses to load it")
            ld = rules.load_queue(q.topic, q.queue_id, [s for s, _ in files],
                                  lambda s, q=q: Location(q.file_uri(s)).read_bytes(), task.file_size)
            out.append(replace(ld, removed_at_load=ld.removed_at_load + dropped) if dropped else ld)
    except StoreFormatError as err:
        return err
    return out


def load_queues(spark, queues: list[QueueDir], file_size: int, quiet: bool,
                generation: int = 4) -> dict[tuple[str, int], rules.QueueLoad]:
    """Load state of every queue, computed in Spark tasks; a bad file is raised here."""
    tasks = [LoadTask(tuple(queues[i:i + QUEUES_PER_LOAD_TASK]), file_size, generation)
             for i in range(0, len(queues), QUEUES_PER_LOAD_TASK)]
    out: dict[tuple[str, int], rules.QueueLoad] = {}
    for result in run_tasks(spark, tasks, _load_queues, "consume-queue state", quiet=quiet):
        if isinstance(result, StoreFormatError):
            raise result
        out.update({ld.key: ld for ld in result})
    return out


# ---------------------------------------------------------------------------------------------
# re-dispatch tails from the scan's work files


@dataclass(frozen=True)
class TailTask:
    """One split's consume-queue rows to cut the re-dispatch tail from."""
    work: Location
    split_index: int
    queues: tuple[tuple[str, int, int, int, int], ...]  # topic, queue, first row, rows, maxPhysicOffset


def _cq_tail(task: TailTask) -> dict[tuple[str, int], tuple[np.ndarray, ...]]:
    """Entries of one split whose end is past their queue's maxPhysicOffset (runs in a Spark task)."""
    table = read_cq(task.work, task.split_index)
    out = {}
    for topic, qid, row, rows, max_phy in task.queues:
        t = table.slice(row, rows)
        phy = t.column("phy").to_numpy()
        size = t.column("size").to_numpy()
        sel = phy.astype(np.int64) + size > max_phy
        if sel.any():
            out[(topic, qid)] = tuple(t.column(c).to_numpy()[sel] for c in ("queue_offset", "phy", "size", "tags"))
    return out


def cq_tails(spark, scan: ScanResult, work: Location, max_phy: dict[tuple[str, int], int],
             quiet: bool) -> dict[tuple[str, int], rules.QueueEntries]:
    """Per queue, in commit-log order, the scanned entries the broker would not skip."""
    tasks = []
    for s in scan.accepted:
        qs = tuple((t, q, st.first_row, st.cq_rows, max_phy.get((t, q), -1))
                   for (t, q), st in sorted(s.queues.items()) if st.cq_rows)
        if qs:
            tasks.append(TailTask(work, s.index, qs))
    parts: dict[tuple[str, int], list[tuple[np.ndarray, ...]]] = {}
    for result in run_tasks(spark, tasks, _cq_tail, "re-dispatch tails", quiet=quiet):
        for key, arrays in result.items():
            parts.setdefault(key, []).append(arrays)
    return {k: rules.QueueEntries(*(np.concatenate([p[i] for p in v]) for i in range(4))) for k, v in parts.items()}


def last_cq_record_offset(scan: ScanResult, work: Location, from_offset: int) -> int | None:
    """Offset of the last scanned NOT/COMMIT record at or after `from_offset` (newest split first)."""
    for s in reversed(scan.accepted):
        if not any(st.cq_rows for st in s.queues.values()):
            continue
        phy = read_cq(work, s.index).column("phy").to_numpy()
        phy = phy[phy >= from_offset]
        if len(phy):
            return int(phy.max())
        if s.last_record_offset is not None and s.last_record_offset < from_offset:
            return None
    return None


def tail_keys(scan: ScanResult, work: Location, from_phy: int) -> rules.KeyBatch:
    """Index keys of scanned records at or after `from_phy`, in dispatch order (newest splits only)."""
    batches = []
    for s in reversed(scan.accepted):
        if s.last_key is None or not s.keys:
            if s.last_record_offset is not None and s.last_record_offset < from_phy:
                break
            continue
        if s.last_key[1] < from_phy:
            break
        t = read_keys(work, s.index)
        phy = t.column("phy").to_numpy()
        sel = phy >= from_phy
        batches.append(rules.KeyBatch(t.column("key_hash").to_numpy()[sel].astype(np.int32), phy[sel],
                                      t.column("store_ts").to_numpy()[sel]))
    return rules.KeyBatch.concat(batches[::-1])


def record_store_timestamp(segments: list[Segment], offset: int) -> int:
    """storeTimestamp of the record at a commit-log offset (one small read)."""
    seg = next(s for s in segments if s.start <= offset < s.start + s.size)
    data = bytes(Location(seg.path).read_range(offset - seg.start, rules.SEGMENT_HEAD_BYTES))
    return rules.read_segment_head(data, offset).store_timestamp


# ---------------------------------------------------------------------------------------------
# the plan


@dataclass
class StoreMarkers:
    """The store root's marker files as found."""

    abort: bytes | None
    abort_bak: bytes | None
    checkpoint_raw: bytes | None
    checkpoint: Checkpoint

    @classmethod
    def read(cls, store: Location) -> "StoreMarkers":
        """abort, abort.bak and checkpoint of a store root (a missing checkpoint reads as zeros)."""
        def opt(name: str) -> bytes | None:
            """A root file's bytes, or None when absent."""
            loc = store.child(name)
            return loc.read_bytes() if loc.exists() else None
        raw = opt(CHECKPOINT)
        cp = parse_checkpoint(raw, store.child(CHECKPOINT).uri) if raw is not None else Checkpoint()
        return cls(opt(ABORT), opt(ABORT_BAK), raw, cp)


@dataclass
class IndexPlan:
    """Index files after recovery: kept, deleted, appended to, created (with their keys)."""

    kept: list[rules.IndexFileInfo]
    deleted: list[rules.IndexFileInfo]
    uris: dict[str, str]
    resume: rules.IndexResume | None  # None with --full-index
    new_names: list[str]
    full_rebuild_scan: ScanResult | None = None
    full_rebuild_work: Location | None = None


@dataclass
class RecoveryPlan:
    """Everything `jobs.recover` decided, with the facts behind it; `to_dict` is the dry-run output."""

    store: Location
    settings: BrokerSettings
    generation: GenerationGuess
    markers: StoreMarkers
    abnormal: bool
    segments: list[Segment]
    start: rules.StartChoice
    scan: ScanResult
    work: Location
    truncation: rules.Truncation
    segments_deleted: list[int]
    queue_dirs: dict[tuple[str, int], QueueDir]
    loads: dict[tuple[str, int], rules.QueueLoad]
    states: dict[tuple[str, int], rules.QueueState]
    truncate_queues: bool
    max_phy_before: int
    reput_from: int
    index: IndexPlan
    checkpoint_after: Checkpoint
    checkpoint_why: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    dispatch: dict = field(default_factory=dict)  # how far the recovery's dispatch went, and why

    # ---- derived views ---------------------------------------------------------------------------
    def cq_rel(self, key: tuple[str, int], start: int) -> str:
        """Store-relative path of a consume-queue file."""
        return f"consumequeue/{key[0]}/{key[1]}/{file_name(start)}"

    def cq_changes(self) -> tuple[list[str], list[str], list[str]]:
        """(files rewritten, files created, files deleted) as store-relative paths."""
        rewritten, created, deleted = [], [], []
        for key, st in sorted(self.states.items()):
            for f in st.changed_files():
                (created if f in st.created else rewritten).append(self.cq_rel(key, f))
            deleted += [self.cq_rel(key, f) for f in st.deleted_files()]
        for key, ld in sorted(self.loads.items()):
            if key not in self.states:
                deleted += [self.cq_rel(key, f) for f in ld.removed_at_load]
        return rewritten, created, deleted

    @property
    def checkpoint_changes(self) -> bool:
        """True when the checkpoint file must be (re)written."""
        return self.markers.checkpoint_raw is None or self.markers.checkpoint != self.checkpoint_after

    @property
    def index_changes(self) -> bool:
        """True when recovery deletes, appends to or creates index files."""
        if self.index.resume is None:
            return True
        r = self.index.resume
        return bool(self.index.deleted or r.appended or r.new_files)

    @property
    def changes(self) -> bool:
        """True when recovery changes any file of the store."""
        rewritten, created, deleted = self.cq_changes()
        return bool(self.abnormal or self.segments_deleted or rewritten or created or deleted or self.index_changes
                    or self.checkpoint_changes)

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (the --dry-run output)."""
        rewritten, created, deleted = self.cq_changes()
        cp0, cp1 = self.markers.checkpoint, self.checkpoint_after
        t = self.truncation
        holding = next((s for s in self.segments if s.start <= t.offset < s.start + s.size), None)
        idx = self.index
        index_dict: dict = {"files_before": len(idx.kept) + len(idx.deleted),
                            "checkpoint_index_msg_timestamp": cp0.index_msg_timestamp}
        if idx.resume is not None:
            r = idx.resume
            app = r.appended
            index_dict.update({
                "mode": "resume (broker rules)",
                "deleted_newer_than_checkpoint": [f.name for f in idx.deleted] if self.abnormal else [],
                "last_kept": idx.kept[-1].name if idx.kept else None,
                "appended_to": None if app is None else {"file": app.appends_to, "entries": len(app.all_keys())},
                "to_create": [{"file": n, "entries": len(t_.all_keys()),
                               "inherits_end_timestamp": t_.inherited.end_timestamp,
                               "inherits_end_phy_offset": t_.inherited.end_phy_offset}
                              for n, t_ in zip(idx.new_names, r.new_files)],
                "boundary_records_indexed_again": r.boundary_reindexed,
            })
        else:
            index_dict.update({"mode": "full rebuild (--full-index)", "deleted": [f.name for f in idx.deleted],
                               "to_create": idx.new_names,
                               "keys": sum(s.keys for s in idx.full_rebuild_scan.accepted)})
        return {
            "job": "recover",
            "store": self.store.uri,
            "generation": self.generation.label,
            "generation_evidence": self.generation.evidence,
            "state": "unclean (abort file present)" if self.abnormal else "clean (no abort file)",
            "recovery": "abnormal" if self.abnormal else "normal",
            "changes": self.changes,
            "checkpoint": {
                "before": cp0.to_dict(), "after": cp1.to_dict(), "why": self.checkpoint_why,
                "min_timestamp": cp0.min_timestamp, "min_timestamp_index": cp0.min_timestamp_index,
            },
            "start_segment": {"offset": self.start.offset, "name": segment_name(self.start.offset),
                              "reason": self.start.reason, "segments_looked_at": len(self.start.looked_at),
                              "looked_at": self.start.looked_at[:LOOKED_AT_SHOWN]},
            "validation": {"from_offset": self.start.offset, "crc": self.settings.check_crc_on_recover,
                           "splits": len(self.scan.splits), "records": self.scan.message_records,
                           "segments": len(self.scan.segments)},
            "truncation": {**t.to_dict(), "segment": None if holding is None else segment_name(holding.start),
                           "position_in_segment": None if holding is None else t.offset - holding.start},
            "commitlog": {"segments": len(self.segments), "to_delete": [segment_name(s) for s in self.segments_deleted],
                          "note": "the segment holding the truncation point keeps its bytes (logical truncation)"},
            "consumequeue": {
                "queues": len(self.loads),
                "max_phy_offset_before": self.max_phy_before,
                "truncate_dirty_logic_files": self.truncate_queues,
                "to_rewrite": rewritten, "to_create": created, "to_delete": deleted,
                "to_cut": [{"file": self.cq_rel(k, s.cut["file"]), "units_kept": s.cut["units_kept"],
                            "first_unit_left_behind_phy_offset": s.cut["first_unit_left_behind"]}
                           for k, s in sorted(self.states.items()) if s.cut],
                "cut_note": "a cut moves the queue's write position before the first unit at or past the "
                            "truncation point; the bytes after it stay on disk, as the broker leaves them",
                "queues_redispatched": sorted(f"{k[0]}/{k[1]}" for k, s in self.states.items() if s.written),
                "warnings": [w for s in self.states.values() for w in s.warnings],
            },
            "index": index_dict,
            "dispatch": self.dispatch,
            "post_start_redispatch": {
                "from_offset": self.reput_from, "to_offset": t.offset,
                "rule": ("4.x start(): ReputMessageService from the consume queues' max physical offset"
                         if self.generation.generation < 5 else
                         "5.x start(): ReputMessageService from the commit log's max offset (nothing re-dispatched)"),
            },
            "markers": {"abort": "removed" if self.abnormal else "absent",
                        "abort.bak": ("crash-time abort content (5.x createTempFile backs it up)"
                                      if self.abnormal and self.generation.generation >= 5 else "unchanged")},
            "warnings": self.warnings,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def detect(markers: StoreMarkers, override: int | None) -> GenerationGuess:
    """The generation given on the command line, or detected from the marker files."""
    if override is not None:
        return GenerationGuess(override, [f"given on the command line ({override}.x)"])
    checkpoint = markers.checkpoint if markers.checkpoint_raw is not None else None
    return detect_generation(markers.abort, markers.abort_bak is not None, checkpoint)


def _heads(segments: list[Segment]):
    """First record headers of the segments, newest first, read lazily."""
    for seg in reversed(segments):
        data = bytes(Location(seg.path).read_range(0, rules.SEGMENT_HEAD_BYTES))
        yield rules.read_segment_head(data, seg.start)


def new_index_names(kept: list[rules.IndexFileInfo], count: int, tz: dt.tzinfo, now_ms: int | None = None) -> list[str]:
    """Names for index files recovery creates: the wall clock, as the broker names them, but always
    after the last kept file so name order stays creation order."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    if kept and count:
        try:
            ms = max(ms, first_ms_named_after(kept[-1].name, tz))
        except ValueError as exc:
            raise rules.RecoveryError(f"index/{kept[-1].name}: {exc}; new index files cannot be named after it") from None
    return [format_name(ms + i, tz) for i in range(count)]


def plan_recovery(spark, store: Location, settings: BrokerSettings, work: Location, *, split_size: int,
                  generation: int | None = None, full_index: bool = False, tz: dt.tzinfo = dt.timezone.utc,
                  quiet: bool = False, audit: bool = False) -> RecoveryPlan:
    """Read the store, run the validating scan, apply the broker's recovery rules; writes nothing
    but the scan's work files. With `audit`, also validate the segments before the start segment
    (which the broker's recovery never reads) and warn about damage there."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    markers = StoreMarkers.read(store)
    gen = detect(markers, generation)
    g = gen.generation
    abnormal = markers.abort is not None
    segments = list_segments(store, settings)
    if not segments:
        raise rules.RecoveryError(f"{commitlog_dir(store, settings).uri}: the commit log has no segments (the broker "
                                  f"would delete every consume queue); nothing to recover")
    starts = [s.start for s in segments]
    start = rules.choose_start_segment(starts, _heads(segments), markers.checkpoint, settings, g, abnormal)
    limit = confirm_offset.recovery_limit(settings, markers.checkpoint) if abnormal else confirm_offset.NO_LIMIT
    scan = scan_store(spark, store, rules.dispatch_settings(settings, g, abnormal), split_size=split_size,
                      check_crc=settings.check_crc_on_recover, work=work, from_offset=start.offset,
                      dispatch_limit=limit.offset, label="validate", quiet=quiet, generation=g)
    timings["validate_s"] = time.monotonic() - t0
    acc = scan.accepted
    last_walk = acc[-1].end if acc else None
    truncation = rules.truncation_point(scan.end, last_walk)
    p = truncation.offset
    last_valid = max((s.last_record_offset for s in acc if s.last_record_offset is not None), default=None)
    stop = scan.dispatch_stop()
    last_record = last_valid if limit.offset is None else stop.last_offset  # the last record dispatched

    t0 = time.monotonic()
    queue_dirs = {q.key: q for q in list_queues(store)}
    cq_file_size = settings.consume_queue_file_size
    loads = load_queues(spark, list(queue_dirs.values()), cq_file_size, quiet, g)
    max_phy_before = max((ld.max_phy for ld in loads.values()), default=-1)
    truncate = max_phy_before >= p
    tails = cq_tails(spark, scan, work, {k: ld.max_phy for k, ld in loads.items()}, quiet)

    def reader(key: tuple[str, int]):
        """Reads crash-time files of one queue by start offset."""
        q = queue_dirs[key]
        return lambda start: Location(q.file_uri(start)).read_bytes()

    states: dict[tuple[str, int], rules.QueueState] = {}

    def state(key: tuple[str, int]) -> rules.QueueState:
        """The queue's recovery state, created on first use."""
        if key not in states:
            ld = loads.get(key) or rules.QueueLoad(key[0], key[1], (), 0, -1)
            states[key] = rules.QueueState.start(ld, cq_file_size)
        return states[key]

    if abnormal:  # recoverAbnormally dispatches [start, P); recoverNormally dispatches nothing
        for key, entries in tails.items():
            state(key).dispatch(entries)
    if truncate:
        for key, ld in loads.items():
            if ld.max_phy > p:  # only queues holding a unit past P change; the rest keep their state
                state(key).truncate(p, reader(key))
    queue_max = {k: ld.max_phy for k, ld in loads.items()}
    queue_max.update({k: st.max_phy for k, st in states.items()})
    reput_from = rules.post_start_reput_from(g, queue_max.values(), segments[0].start, p)
    passes_cq_from = None
    if reput_from < p:
        if reput_from < start.offset:
            raise rules.RecoveryError(
                f"the consume queues end at commit-log offset {reput_from}, before the validated range that "
                f"starts at segment {segment_name(start.offset)}: after start the 4.x broker re-dispatches "
                f"[{reput_from}, {p}), which reput does not model; rebuild the consume queues with jobs.rebuild")
        passes_cq_from = reput_from
        for key, entries in tails.items():
            e = entries.take(entries.phy >= reput_from)
            if len(e):
                state(key).dispatch(e)
    timings["consumequeue_plan_s"] = time.monotonic() - t0

    # checkpoint: the last NOT/COMMIT record dispatched (recovery pass, then 4.x's start re-dispatch)
    cq_from = start.offset if abnormal else passes_cq_from
    last_cq = last_cq_record_offset(scan, work, cq_from) if cq_from is not None else None
    last_cq_ts = record_store_timestamp(segments, last_cq) if last_cq is not None else None

    t0 = time.monotonic()
    index_files = list_index_files(store, settings) if settings.message_index_enable else []
    infos = [i for i, _ in index_files]
    kept, deleted = rules.index_files_after_load(infos, markers.checkpoint, abnormal)
    uris = {i.name: u for i, u in index_files}
    warnings: list[str] = []
    if not settings.message_index_enable:
        index = IndexPlan(kept, deleted, uris, rules.IndexResume([], [], []), [])
        rolled: list[int] = []
    elif full_index:
        index, rolled = _plan_full_index(spark, store, settings, segments, start, scan, work, p, kept, deleted, uris,
                                         split_size, quiet)
    else:
        e = kept[-1].header.end_phy_offset if kept else 0
        keys = tail_keys(scan, work, e)
        passes = []
        if abnormal:
            passes.append(rules.DispatchPass("recovery", start.offset, last_record, keys))
        if g < 5 and reput_from < p:
            passes.append(rules.DispatchPass("post-start re-dispatch", reput_from,
                                             last_record if last_record is not None and last_record >= reput_from
                                             else None, keys))
        resume = rules.resume_index(kept[-1] if kept else None, passes, settings.max_index_num)
        index = IndexPlan(kept, deleted, uris, resume, new_index_names(kept, len(resume.new_files), tz))
        rolled = resume.rolled_full_end_ts
    timings["index_plan_s"] = time.monotonic() - t0

    dispatched_end = stop.last_end if limit.offset is not None else (
        scan.max_physical_offset if last_valid is not None else None)
    confirm = (confirm_offset.confirm_after_abnormal(settings, markers.checkpoint, segments[0].start, start.offset,
                                                     last_valid, dispatched_end) if abnormal else
               confirm_offset.confirm_after_normal(settings, markers.checkpoint, segments[0].start, p, last_valid))
    cp_after, why = rules.checkpoint_after(markers.checkpoint, g, abnormal, last_cq_ts, rolled, last_valid,
                                           start.offset, p, confirm)
    if markers.checkpoint_raw is None:
        warnings.append("the store has no checkpoint file; the broker starts from zeros (recovery from the first "
                        "segment) and so does reput")
    if audit:
        warnings.extend(_audit(spark, store, settings, work.child("audit"), start.offset, split_size, quiet, g))
    if scan.stitched.data_after_end:
        warnings.append(f"segments after the truncation point hold records that recovery drops: "
                        f"{', '.join(scan.stitched.data_after_end)}")
    return RecoveryPlan(store, settings, gen, markers, abnormal, segments, start, scan, work, truncation,
                        rules.segments_to_delete(starts, p), queue_dirs, loads, states, truncate, max_phy_before,
                        reput_from, index, cp_after, why, warnings, timings,
                        {**limit.to_dict(), **stop.to_dict()} if limit.offset is not None else limit.to_dict())


def _audit(spark, store: Location, settings: BrokerSettings, work: Location, start: int, split_size: int,
           quiet: bool, g: int) -> list[str]:
    """Damage the broker's recovery does not look at, in the whole commit log: an invalid record before
    the recovery's start segment (dispatch or a rebuild from the start would stop there), or a record
    whose storeTimestamp is no date (the start-segment rule and index file names read it). Bytes that
    no broker could have written (a topic that is no directory name, a moved physicalOffset, a gap in a
    queue's offsets) raise StoreFormatError naming the record."""
    audit = scan_store(spark, store, settings, split_size=split_size, check_crc=settings.check_crc_on_recover,
                       work=work, with_keys=False, label="audit", quiet=quiet, generation=g)
    plan_cq(audit, settings, work, work)  # raises on a gap in a queue's offsets
    found = []
    end = audit.end
    if end is not None and end.offset < start:
        found.append(f"the commit log is damaged before the recovery's start segment {segment_name(start)}: "
                     f"{end.describe()}; the broker's recovery does not read it, but a dispatch or rebuild from "
                     f"the start of the commit log would stop there")
    undated = audit.undated_problem()
    if undated:
        found.append(undated)
    return found


def _plan_full_index(spark, store, settings, segments, start, scan, work, p, kept, deleted, uris, split_size, quiet):
    """--full-index: every index file goes; the index is rebuilt from the valid commit log [first, P)
    by the rebuild stage. The rebuild rolls away from every file but the last: the checkpoint's index
    time becomes the end of the last rolled (full) file, as the broker's flush thread would set it."""
    from .build import plan_index

    full_scan, full_work = scan, work
    if start.offset != segments[0].start:
        full_work = work.child("full-index")
        full_scan = scan_store(spark, store, settings, split_size=split_size, check_crc=settings.check_crc_on_recover,
                               work=full_work, with_cq=False, with_keys=True, label="index keys", quiet=quiet)
    if full_scan.end.offset != p:
        raise rules.RecoveryError(f"--full-index: the commit log before the start segment has an invalid record at "
                                  f"offset {full_scan.end.offset} ({full_scan.end.reason}); the whole index cannot be "
                                  f"rebuilt from a valid commit log")
    n_files = sum(len(t.files) for t in plan_index(full_scan, settings, full_work, full_work))
    rolled = []
    if n_files >= 2:
        ts = _key_store_ts(full_scan, full_work, (n_files - 1) * (settings.max_index_num - 1) - 1)
        if ts is not None:
            rolled.append(ts)
    return IndexPlan([], kept + deleted, uris, None, [], full_scan, full_work), rolled


def _key_store_ts(scan: ScanResult, work: Location, k: int) -> int | None:
    """store time of the k-th index key (global number over the scan's splits)."""
    seen = 0
    for s in scan.accepted:
        if seen + s.keys > k:
            t = read_keys(work, s.index)
            return int(t.column("store_ts")[k - seen].as_py())
        seen += s.keys
    return None
