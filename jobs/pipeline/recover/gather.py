"""Spark side of `jobs.recover`: gather the facts the broker's recovery rules need, then execute the plan.

1. The validating scan (CRC on) runs from the start segment through `scan.scan_store`.
2. `queues_soon` reads the consume queues' load state while the scan runs (a driver thread for a local store,
   else Spark tasks); `gather_queues` cuts the re-dispatch tails from the scan's work files.
3. `storage_format.recovery.plan_sequence` decides everything from these facts (pure, tested without Spark);
   this module only names new index files, runs the --full-index scan and the --dry-run audit.
"""
from __future__ import annotations

import time
import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from storage_format import confirm_offset
from storage_format import recovery
from storage_format.checkpoint import Checkpoint
from storage_format.commitlog import segment_name
from storage_format.index_file import first_ms_named_after, format_name, last_key_of_file
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..runtime.failure import JobError
from ..io.paths import is_local
from ..io.store_gate import commitlog_dir
from .inputs import (QueueDir, cq_tails, last_cq_record_offset, list_index_files, list_queues, load_queues,
                              record_store_timestamp, segment_heads, tail_keys)
from ..store.markers import StoreMarkers
from .plan import IndexPlan, RecoveryPlan
from ..scan.result import ScanResult
from ..scan.decode import scan_store
from ..store.segments import list_segments
from ..io.workdir import read_keys

__all__ = ["RecoveryPlan", "plan_recovery", "new_index_names", "RecoveryStart", "recovery_start", "start_of"]


def new_index_names(kept: list[recovery.IndexFileInfo], count: int, tz: dt.tzinfo,
                    now_ms: int | None = None) -> list[str]:
    """Names for index files recovery creates: the wall clock, as the broker names them, but always
    after the last kept file so name order stays creation order."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    if kept and count:
        try:
            ms = max(ms, first_ms_named_after(kept[-1].name, tz))
        except ValueError as exc:
            raise recovery.RecoveryError(f"index/{kept[-1].name}: {exc}; new index files cannot be named after "
                                         f"it") from None
    return [format_name(ms + i, tz) for i in range(count)]


@dataclass(frozen=True, kw_only=True)
class ValidatedLog:
    """The commit log after the validating scan: where recovery starts, the scan, and where it ends."""

    store: Location
    settings: BrokerSettings
    generation: int
    abnormal: bool
    segments: list[Segment]
    start: recovery.StartChoice
    limit: confirm_offset.DispatchLimit
    scan: ScanResult
    work: Location
    truncation: recovery.Truncation
    split_size: int
    quiet: bool

    @property
    def last_valid(self) -> int | None:
        """Start of the last valid record the scan found."""
        return max((s.last_record_offset for s in self.scan.accepted if s.last_record_offset is not None), default=None)

    @property
    def last_dispatched(self) -> int | None:
        """Start of the last record the recovery's dispatch reaches (a confirm-offset limit may stop it early)."""
        return self.last_valid if self.limit.offset is None else self.scan.dispatch_stop().last_offset

    @property
    def dispatched_end(self) -> int | None:
        """End of the dispatched range (None when nothing valid was found and there is no limit)."""
        if self.limit.offset is not None:
            return self.scan.dispatch_stop().last_end
        return self.scan.max_physical_offset if self.last_valid is not None else None

    def dispatch_dict(self) -> dict:
        """How far the recovery's dispatch went, and why (the plan's "dispatch" part)."""
        if self.limit.offset is None:
            return self.limit.to_dict()
        return {**self.limit.to_dict(), **self.scan.dispatch_stop().to_dict()}


@dataclass(frozen=True)
class RecoveryStart:
    """Where the broker's recovery starts reading the commit log, chosen before any scan: the segments
    before `start` are never read nor changed by the recovery."""

    abnormal: bool
    segments: list[Segment]
    start: recovery.StartChoice


def recovery_start(store: Location, settings: BrokerSettings, markers: StoreMarkers, g: int) -> RecoveryStart:
    """The commit log's segments and the recovery's start segment (a few record headers read, no scan)."""
    abnormal = markers.abort is not None
    segments = list_segments(store, settings)
    if not segments:
        raise recovery.RecoveryError(f"{commitlog_dir(store, settings).uri}: the commit log has no segments (the "
                                     f"broker would delete every consume queue); nothing to recover")
    start = recovery.choose_start_segment([s.start for s in segments], segment_heads(segments), markers.checkpoint,
                                          settings, g, abnormal)
    return RecoveryStart(abnormal, segments, start)


def start_of(store: Location, settings: BrokerSettings, generation: int | None = None) -> RecoveryStart:
    """recovery_start from the store's own markers (what a job may learn before Spark starts)."""
    markers = StoreMarkers.read(store)
    return recovery_start(store, settings, markers, markers.generation(generation).generation)


def validate(sc, store: Location, settings: BrokerSettings, markers: StoreMarkers, g: int, work: Location,
             split_size: int, quiet: bool) -> ValidatedLog:
    """Choose the start segment and run the validating scan from it: the truncation point P."""
    first = recovery_start(store, settings, markers, g)
    return validate_from(sc, store, settings, markers, g, work, split_size, quiet, first.abnormal, first.segments,
                         first.start)


def validate_from(sc, store: Location, settings: BrokerSettings, markers: StoreMarkers, g: int, work: Location,
                  split_size: int, quiet: bool, abnormal: bool, segments, start: recovery.StartChoice) -> ValidatedLog:
    """The validating scan from a chosen start segment (the file-CQ rule's or RocksDB's): the truncation point P."""
    limit = confirm_offset.recovery_limit(settings, markers.checkpoint) if abnormal else confirm_offset.NO_LIMIT
    scan = scan_store(sc, store, recovery.dispatch_settings(settings, g, abnormal), split_size=split_size,
                      check_crc=settings.check_crc_on_recover, work=work, from_offset=start.offset,
                      dispatch_limit=limit.offset, label="validate", quiet=quiet, generation=g)
    acc = scan.accepted
    truncation = recovery.truncation_point(scan.end, acc[-1].end if acc else None)
    return ValidatedLog(store=store, settings=settings, generation=g, abnormal=abnormal, segments=segments,
                        start=start, limit=limit, scan=scan, work=work, truncation=truncation, split_size=split_size,
                        quiet=quiet)


@dataclass(frozen=True)
class QueuesOnDisk:
    """The consume queues on disk by key, their load state (ConsumeQueue.recover), and the entries the broker
    skips (warnings)."""

    dirs: dict[tuple[str, int], QueueDir]
    loads: dict[tuple[str, int], recovery.QueueLoad]
    warnings: list[str]


def read_queues(sc, store: Location, settings: BrokerSettings, g: int, quiet: bool) -> QueuesOnDisk:
    """List the consume queues and load them: in Spark tasks, or here with `sc` None."""
    warnings: list[str] = []
    dirs = {q.key: q for q in list_queues(store, warnings)}
    loads = load_queues(sc, list(dirs.values()), settings.consume_queue_file_size, quiet, g)
    return QueuesOnDisk(dirs, loads, warnings)


def queues_soon(sc, store: Location, settings: BrokerSettings, g: int, quiet: bool) -> Callable[[], QueuesOnDisk]:
    """read_queues, started before the validating scan needs the driver: a local store's queues are read by a
    driver thread while the scan's tasks run (a few reads per queue, no task round trip); elsewhere they are
    Spark tasks, run when asked for."""
    if is_local(store):
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reput-queue-load")
        try:
            return pool.submit(read_queues, None, store, settings, g, quiet).result  # raises its error
        finally:
            pool.shutdown(wait=False)
    return lambda: read_queues(sc, store, settings, g, quiet)


def gather_queues(log: ValidatedLog, on_disk: QueuesOnDisk,
                  warnings: list[str]) -> tuple[dict[tuple[str, int], QueueDir], recovery.QueueFacts]:
    """(consume queues on disk by key, the queue facts: load states, re-dispatch tails, a file reader); entries
    the broker skips are named in `warnings`."""
    warnings.extend(on_disk.warnings)
    queue_dirs, loads = on_disk.dirs, on_disk.loads
    tails = cq_tails(log.scan, log.work, {k: ld.max_phy for k, ld in loads.items()})
    return queue_dirs, recovery.QueueFacts(loads, tails, log.settings.consume_queue_file_size,
                                           lambda key, start: Location(queue_dirs[key].file_uri(start)).read_bytes())


def gather_index(sc, log: ValidatedLog, cp: Checkpoint, full_index: bool,
                 warnings: list[str]) -> tuple[IndexPlan, recovery.IndexFacts]:
    """The index files on disk, those kept at load, and the facts for the index mode (off, resume, full); names
    the broker skips are named in `warnings`."""
    settings = log.settings
    index_files = list_index_files(log.store, settings, warnings) if settings.message_index_enable else []
    kept, deleted = recovery.index_files_after_load([i for i, _ in index_files], cp, log.abnormal)
    uris = {i.name: u for i, u in index_files}
    if not settings.message_index_enable:
        return IndexPlan(kept=kept, deleted=deleted, uris=uris, resume=None, new_names=[]), recovery.IndexOff()
    if full_index:
        full = _full_index_scan(sc, log)
        return (IndexPlan(kept=[], deleted=kept + deleted, uris=uris, resume=None, new_names=[],
                          full_rebuild_scan=full.scan, full_rebuild_work=full.work),
                recovery.FullIndexRebuild(full.rolled_full_end_ts))
    keys = tail_keys(log.scan, log.work, kept[-1].header.end_phy_offset if kept else 0)
    return (IndexPlan(kept=kept, deleted=deleted, uris=uris, resume=None, new_names=[]),
            recovery.IndexResumeFacts(kept[-1] if kept else None, keys, settings.max_index_num))


def plan_recovery(sc, store: Location, settings: BrokerSettings, work: Location, *, split_size: int,
                  generation: int | None = None, full_index: bool = False, tz: dt.tzinfo = dt.timezone.utc,
                  quiet: bool = False, audit: bool = False,
                  on_validated: Callable[[ValidatedLog], None] | None = None) -> RecoveryPlan:
    """Read the store, run the validating scan, gather the facts and apply the broker's recovery sequence;
    writes nothing but the scan's work files. With `audit`, also validate the segments before the start
    segment (which the broker's recovery never reads) and warn about damage there. `on_validated` is told the
    validated log as soon as the truncation point is known (recover --out starts copying the kept segments)."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    markers = StoreMarkers.read(store)
    markers.checkpoint  # a damaged checkpoint stops recovery here, before any work
    gen = markers.generation(generation)
    queues_on_disk = queues_soon(sc, store, settings, gen.generation, quiet)  # read while the scan runs
    log = validate(sc, store, settings, markers, gen.generation, work, split_size, quiet)
    if on_validated is not None:
        on_validated(log)
    timings["validate_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    skipped: list[str] = []  # store entries the broker skips (and so does recovery), named as warnings
    queue_dirs, queues = gather_queues(log, queues_on_disk(), skipped)
    timings["consumequeue_plan_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    index, index_facts = gather_index(sc, log, markers.checkpoint, full_index, skipped)

    def last_cq_ts(from_offset: int) -> int | None:
        """Store time of the last scanned NOT/COMMIT record at or after an offset."""
        last = last_cq_record_offset(log.scan, log.work, from_offset)
        return record_store_timestamp(log.segments, last) if last is not None else None

    seq = recovery.plan_sequence(recovery.RecoveryFacts(
        generation=gen.generation, abnormal=log.abnormal, settings=settings, checkpoint=markers.checkpoint,
        segment_starts=tuple(s.start for s in log.segments), start_offset=log.start.offset,
        truncate_at=log.truncation.offset, last_valid_record=log.last_valid,
        last_dispatched_record=log.last_dispatched, dispatched_end=log.dispatched_end, queues=queues,
        index=index_facts, last_cq_record_ts=last_cq_ts))
    _refuse_unmodelled_cut(store, gen.generation, log, seq)
    index.resume = seq.index_resume  # None with --full-index
    if isinstance(index_facts, recovery.IndexResumeFacts):
        index.new_names = new_index_names(index.kept, len(seq.index_resume.new_files), tz)
    timings["index_plan_s"] = time.monotonic() - t0
    q = seq.queues
    return RecoveryPlan(store=store, settings=settings, generation=gen, markers=markers, abnormal=log.abnormal,
                        segments=log.segments, start=log.start, scan=log.scan, work=work, truncation=log.truncation,
                        segments_deleted=seq.segments_deleted, queue_dirs=queue_dirs, loads=queues.loads,
                        states=q.states, truncate_queues=q.truncate_queues, max_phy_before=q.max_phy_before,
                        reput_from=q.reput_from, index=index, checkpoint_after=seq.checkpoint,
                        checkpoint_why=seq.checkpoint_why, warnings=skipped + _warnings(sc, log, markers, audit),
                        timings=timings, dispatch=log.dispatch_dict())


def _refuse_unmodelled_cut(store: Location, generation: int, log: ValidatedLog, seq: recovery.SequencePlan) -> None:
    """A 5.x store without `abort` whose log the recovery would cut: 5.3.3's normal recovery validates only from the
    segment holding where its consume queues end (and dispatches what they lack), 4.9.8's from the third-last
    segment, which reput models: refused rather than a plan dropping records 5.3.3 keeps."""
    if generation < 5 or log.abnormal:
        return
    if seq.segments_deleted or log.scan.stitched.data_after_end:  # records past the cut, in later segments
        raise JobError(f"{store.uri}: shut down cleanly (no abort file), yet the recovery reput models (4.9.8's "
                       f"normal recovery, from the third-last segment) would cut its commit log at "
                       f"{log.truncation.offset} ({log.truncation.detail}); RocketMQ 5.3.3's normal recovery "
                       f"validates only from the segment holding the consume queues' end and may keep those records: "
                       f"not modelled, refused; `reput verify` names the damage, and the broker's own start decides")


def _warnings(sc, log: ValidatedLog, markers: StoreMarkers, audit: bool) -> list[str]:
    """Warnings of the plan: no checkpoint file, the --dry-run audit, records dropped after P."""
    warnings: list[str] = []
    if markers.checkpoint_raw is None:
        warnings.append("the store has no checkpoint file; the broker starts from zeros (recovery from the first "
                        "segment) and so does reput")
    if audit:
        warnings.extend(_audit(sc, log))  # the whole log, negative queue ids included
    else:
        warnings.extend(p.describe() for p in (log.scan.negative_queue_ids, log.scan.out_of_step_queues)
                        if p is not None)
    if log.scan.stitched.data_after_end:
        warnings.append(f"segments after the truncation point hold records that recovery drops: "
                        f"{', '.join(log.scan.stitched.data_after_end)}")
    return warnings


def _audit(sc, log: ValidatedLog) -> list[str]:
    """Damage the broker's recovery does not look at, in the whole commit log: an invalid record before
    the recovery's start segment (dispatch or a rebuild from the start would stop there), a record
    whose storeTimestamp is no date (the start-segment rule and index file names read it), a queueOffset out
    of its queue's step. Bytes that no broker could have written (a topic that is no directory name, a moved
    physicalOffset) raise StoreFormatError naming the record."""
    work, settings, start = log.work.child("audit"), log.settings, log.start.offset
    audit = scan_store(sc, log.store, settings, split_size=log.split_size, check_crc=settings.check_crc_on_recover,
                       work=work, with_keys=False, label="audit", quiet=log.quiet, generation=log.generation)
    found = []
    end = audit.end
    if end is not None and end.offset < start:
        found.append(f"the commit log is damaged before the recovery's start segment {segment_name(start)}: "
                     f"{end.describe()}; the broker's recovery does not read it, but a dispatch or rebuild from "
                     f"the start of the commit log would stop there")
    return found + audit.record_problems()


@dataclass(frozen=True)
class FullIndexScan:
    """--full-index: the scan whose keys the rebuild indexes, its work files, and the rolled file's end time."""

    scan: ScanResult
    work: Location
    rolled_full_end_ts: tuple[int, ...]


def _full_index_scan(sc, log: ValidatedLog) -> FullIndexScan:
    """--full-index: every index file goes; the index is rebuilt from the valid commit log [first, P)
    by the rebuild stage. The rebuild rolls away from every file but the last: the checkpoint's index
    time becomes the end of the last rolled (full) file, as the broker's flush thread would set it."""
    from ..outputs.build import plan_index

    settings, p = log.settings, log.truncation.offset
    full_scan, full_work = log.scan, log.work
    if log.start.offset != log.segments[0].start:
        full_work = log.work.child("full-index")
        full_scan = scan_store(sc, log.store, settings, split_size=log.split_size,
                               check_crc=settings.check_crc_on_recover, work=full_work, with_cq=False,
                               with_keys=True, label="index keys", quiet=log.quiet)
    if full_scan.end.offset != p:
        raise recovery.RecoveryError(f"--full-index: the commit log before the start segment has an invalid record at "
                                     f"offset {full_scan.end.offset} ({full_scan.end.reason}); the whole index cannot be "
                                     f"rebuilt from a valid commit log")
    n_files = sum(len(t.files) for t in plan_index(full_scan, settings, full_work, full_work))
    rolled: tuple[int, ...] = ()
    if n_files >= 2:
        ts = _key_store_ts(full_scan, full_work, last_key_of_file(n_files - 2, settings.max_index_num))
        if ts is not None:
            rolled = (ts,)
    return FullIndexScan(full_scan, full_work, rolled)


def _key_store_ts(scan: ScanResult, work: Location, k: int) -> int | None:
    """store time of the k-th index key (global number over the scan's splits)."""
    seen = 0
    for s in scan.accepted:
        if seen + s.keys > k:
            t = read_keys(work, s.index)
            return int(t.column("store_ts")[k - seen].as_py())
        seen += s.keys
    return None
