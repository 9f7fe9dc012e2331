"""`rebuild --since OUT1` from start to the staged OUT2: the checks before Spark starts, then decode, consume queues,
index, copies and the staged files' check (the report is the rebuild job's, with a `since` section)."""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
import time
from dataclasses import dataclass

from storage_format.settings import BrokerSettings

from ..io.background_copy import BackgroundCopy, CopyItem
from ..io.fs import Location, location
from ..io.paths import is_local, same_or_inside
from ..io.publish import Output
from ..outputs.stage import build_files, plan_cq, share_index_tasks
from ..recover.inputs import list_queues
from ..recover.write import copy_counts, copy_notices, copy_task_files, copy_tasks
from ..runtime.cli import JobError, warn
from ..runtime.faults import pause_at
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from ..scan.stage import check_tail, scan_store
from ..store.markers import store_generation
from ..store.segments import list_segments
from .previous import PreviousOutput, previous_output
from .index import IndexWork, name_written, plan_index_work
from .stage import SinceResult, check_no_lost_files, expired_queue_uris, queue_copies


def since_checks(args: argparse.Namespace, store: Location, settings: BrokerSettings, out: Location) -> PreviousOutput:
    """Everything --since can check before Spark starts: the flags, OUT1's report, the store still holding the
    bytes OUT1 was built from."""
    for flag in ("only", "topics"):
        if getattr(args, flag):
            raise JobError(f"--since and --{flag}: --since continues a full rebuild; drop --{flag}")
    earlier = location(args.since)
    if not args.in_place and (same_or_inside(out, earlier) or same_or_inside(earlier, out)):
        raise JobError(f"--out {args.out} must be outside --since {args.since} and must not contain it: OUT1 is only "
                       f"read; write OUT2 beside it")
    prev = previous_output(earlier, settings, list_segments(store, settings))
    if args.in_place and prev.report["job"] != "rebuild":
        raise JobError(f"--in-place: --since {args.since} is a {prev.report['job']} OUT, a store a broker may start "
                       f"on (its checkpoint and files are the broker's to change): write OUT2 beside it with --out")
    if prev.index_name_tz != args.index_name_tz:
        raise JobError(f"--index-name-tz {args.index_name_tz}: OUT1's index files are named in "
                       f"{prev.index_name_tz}; pass --index-name-tz {prev.index_name_tz}")
    return prev


@dataclass
class SinceRun:
    """What rebuild_since hands the report: the scan, what was written and reused, the timings."""

    scan: ScanResult
    result: SinceResult
    min_offset: int
    timings: dict


def rebuild_since(sc, args: argparse.Namespace, store: Location, settings: BrokerSettings, staging: Output,
                  prev: PreviousOutput, limit_offset: int | None, tz: dt.tzinfo, quiet: bool,
                  copy_rest: bool = True) -> SinceRun:
    """Decode from the segment OUT1 ended in and stage OUT2: consume queues, index, copies of the rest (none with
    `copy_rest` False: --in-place stages only the files that change, since.inplace switches them into OUT1)."""
    timings: dict[str, float] = {}
    started = t0 = time.monotonic()
    result, warnings = SinceResult(), []
    precopy = _index_precopy(prev, staging, settings)
    with precopy.copy if precopy else contextlib.nullcontext():
        scan = scan_store(sc, store, settings, work=staging.work, with_cq=True,
                          with_keys=settings.message_index_enable, split_size=args.split_size,
                          dispatch_limit=limit_offset, generation=args.rocketmq_version,
                          from_offset=prev.built.offset - 1, quiet=quiet, segments=prev.segments)
        timings["decode_s"] = time.monotonic() - t0
        timings.update(scan.task_timings())
        pause_at("after-decode")
        check_tail(scan, args.accept_invalid_tail, "rebuild")
        t0 = time.monotonic()
        early = precopy.finish() if precopy else []
    min_offset = prev.segments[0].start
    index = _index_work(args, store, prev, scan, staging, settings, min_offset, tz, warnings,
                        {precopy.name: precopy.path} if precopy else None)
    _build(sc, scan, settings, staging, prev, index, result, quiet)
    timings["build_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    earlier = prev.out.child("consumequeue")
    old = {q.key: q for q in _old_queues(prev, warnings)}
    check_no_lost_files(old, result.cq_written, earlier)
    expired = expired_queue_uris(sc, old, result.cq_written, staging.dir.child("consumequeue"),
                                 settings.consume_queue_file_size, min_offset, quiet) if min_offset > 0 else set()
    result.cq_files.update(result.cq_written)
    copies = queue_copies(old, set(result.cq_written), expired, result)
    if index is not None:
        name_written(staging.dir.child("index"), index.pending)
        result.take_index(index)
        copies += index.copies
    timings["expiry_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    if not copy_rest:  # in place: a file stays where it is, but one that changes its name (OUT1's trailing empty
        copies = [c for c in copies if Location(c[1]).name != c[0].rsplit("/", 1)[1]]  # index file) is staged anew
    done = run_tasks(sc, copy_tasks(copies, staging.dir, set()), copy_task_files, "copy OUT1",
                     total_bytes=sum(n for *_, n in copies), quiet=quiet) if copies else []
    result.copied = copy_counts(early + [r for rs in done for r in rs])
    timings["copy_s"] = time.monotonic() - t0
    pause_at("after-build")
    for w in warnings:
        warn("rebuild", w)
    _notes(result, min_offset)
    timings["total_s"] = time.monotonic() - started
    return SinceRun(scan, result, min_offset, timings)


def _build(sc, scan: ScanResult, settings: BrokerSettings, staging: Output, prev: PreviousOutput,
           index: IndexWork | None, result: SinceResult, quiet: bool) -> None:
    """The consume-queue files the decoded records reach, joined to OUT1's, and the index files' tasks beside them
    in one job (as a rebuild's)."""
    cq_dir = staging.dir.child("consumequeue")
    cq_dir.makedirs()
    tasks = plan_cq(scan, settings, staging.work, cq_dir, None, 2 * sc.default_parallelism,
                    earlier=prev.out.child("consumequeue"), earlier_tags_kept=prev.report["job"] == "recover")
    if index is not None:
        tasks = share_index_tasks(index.tasks, sc.default_parallelism) + tasks
    joins = []
    for kind, written, _ in run_tasks(sc, tasks, build_files, "consume queues + index files", quiet=quiet):
        if kind == "consumequeue":
            result.cq_written.update(written.written)
            joins += written.copies
    result.cq_prefixes = copy_counts(joins)


@dataclass
class IndexPrecopy:
    """OUT1's last index file copied into the work directory by a thread while the commit log is decoded: the task
    appending the new keys to it then moves the copy into place (the copy was a third of that task)."""

    name: str
    copy: BackgroundCopy
    item: CopyItem
    path: Location

    def finish(self) -> list[tuple[str, int, str | None]]:
        """The copy made (its error raised here): how it was made, for the report's copies."""
        return self.copy.finish([self.item]).results


def _index_precopy(prev: PreviousOutput, staging: Output, settings: BrokerSettings) -> IndexPrecopy | None:
    """The precopy of OUT1's last index file (by name), where OUT1 and OUT2 are local and the index is built."""
    index_dir = prev.out.child("index")
    if not (settings.message_index_enable and is_local(prev.out) and is_local(staging.dir) and index_dir.is_dir()):
        return None
    names = [i.base_name for i in index_dir.list() if i.base_name.isdigit()]
    if not names:
        return None
    name = max(names)
    dest = staging.work.child("precopied")
    item = CopyItem(f"index/{name}", index_dir.child(name).uri, 0)
    copy = BackgroundCopy(dest)
    copy.add([item])
    return IndexPrecopy(name, copy, item, dest.child("index", name))


def _notes(result: SinceResult, min_offset: int) -> None:
    """On stderr: what the clean service's rules left out, and a copy that fell back to the slower path."""
    if result.expired_cq or result.expired_index:
        print(f"reput rebuild: note: the commit log's head expired since OUT1 (its min offset is now {min_offset}): "
              f"{len(result.expired_cq)} consume-queue files and {len(result.expired_index)} index files of OUT1 "
              f"that the broker's clean service deletes are left out (the report's since.expired)", file=sys.stderr,
              flush=True)
    for line in copy_notices(result.copied):
        print(f"reput rebuild: note: {line}", file=sys.stderr, flush=True)
    for line in copy_notices(result.cq_prefixes):
        print(f"reput rebuild: note: OUT1's units ahead of the new ones in written consume-queue files: {line}",
              file=sys.stderr, flush=True)


def _index_work(args: argparse.Namespace, store: Location, prev: PreviousOutput, scan: ScanResult,
                staging: Output, settings: BrokerSettings, min_offset: int, tz: dt.tzinfo,
                warnings: list[str], precopied: dict[str, Location] | None) -> IndexWork | None:
    """OUT1's index continued (since.index), None with messageIndexEnable=false."""
    if not settings.message_index_enable:
        return None
    generation = store_generation(store, args.rocketmq_version).generation
    return plan_index_work(prev, scan, staging.work, settings, staging.dir.child("index"), generation, min_offset,
                           tz, warnings, precopied)


def _old_queues(prev: PreviousOutput, warnings: list[str]):
    """OUT1's consume queues as listed (an OUT1 without consumequeue/ holds none)."""
    if not prev.out.child("consumequeue").is_dir():
        return []
    return list_queues(prev.out, warnings)
