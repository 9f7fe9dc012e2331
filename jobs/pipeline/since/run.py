"""`rebuild --since OUT1`: the checks before Spark starts, then decode from the segment OUT1 ended in, consume queues,
index, copies of the rest; for OUT2 the staged files' check and the publish (--in-place stages into OUT1 itself and
switches the files in: since.inplace). The report is since.report's."""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
import time
from dataclasses import dataclass

from storage_format import recovery
from storage_format.confirm_offset import DispatchLimit
from storage_format.index_file import HEADER_FIELD_OFFSETS
from storage_format.index_header_check import header_problem
from storage_format.settings import BrokerSettings

from ..io.background_copy import BackgroundCopy, CopyItem
from ..io.fs import Location, location
from ..io.paths import is_local, same_or_inside
from ..io.publish import Output, output_for
from ..io.run_lock import held_beside
from ..outputs.index_continuation import ContinuedIndex, IndexWork, continue_files, name_written
from ..outputs.rebuild_out import REPORT_NAME, check_staged
from ..outputs.build import build_files, plan_cq, share_index_tasks
from ..recover.inputs import list_index_files, list_queues
from ..recover.write import copy_counts, copy_notices, copy_task_files, copy_tasks
from ..runtime.cli import JobError, json_bytes, warn
from ..runtime.engine import job_runner
from ..runtime.faults import pause_at
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from ..scan.decode import check_tail, scan_store
from ..store.markers import store_generation
from ..store.segments import list_segments
from .out1 import Out1, checked_out1
from .queues import Queues, check_no_lost_files, expired_queue_uris, queue_copies
from .report import SinceResult, SinceRun, since_report


def check_flags(args: argparse.Namespace) -> None:
    """--since continues a full rebuild: no --only, no --topics."""
    for flag in ("only", "topics"):
        if getattr(args, flag):
            raise JobError(f"--since and --{flag}: --since continues a full rebuild; drop --{flag}")


def since_checks(args: argparse.Namespace, store: Location, settings: BrokerSettings) -> Out1:
    """OUT1's report, the store still holding the bytes OUT1 was built from, its index files' time zone."""
    out1 = checked_out1(location(args.since), settings, list_segments(store, settings))
    if out1.index_name_tz != args.index_name_tz:
        raise JobError(f"--index-name-tz {args.index_name_tz}: OUT1's index files are named in "
                       f"{out1.index_name_tz}; pass --index-name-tz {out1.index_name_tz}")
    return out1


def publish_out2(args: argparse.Namespace, store: Location, settings: BrokerSettings, limit: DispatchLimit,
                 tz: dt.tzinfo, quiet: bool) -> dict:
    """rebuild --since OUT1 --out OUT2: everything checked before Spark starts (OUT2 beside OUT1, OUT1 itself, OUT2
    refused if it exists), then OUT2 staged, checked as every OUT and published with its report; returns it."""
    check_flags(args)
    out, out1_dir = location(args.out), location(args.since)
    if same_or_inside(out, out1_dir) or same_or_inside(out1_dir, out):
        raise JobError(f"--out {args.out} must be outside --since {args.since} and must not contain it: OUT1 is only "
                       f"read; write OUT2 beside it")
    with _out1_held(out1_dir):  # an --in-place run on OUT1 does not change it under this one
        out1 = since_checks(args, store, settings)
        staging = output_for(out, REPORT_NAME, "rebuild", args.overwrite)  # refuses an existing OUT before Spark
        with staging:  # the run lock is released however it ends (the engine's start refused included)
            sc, engine = job_runner(args, "rebuild", out1.bytes_to_decode, settings)
            run = rebuild_since(sc, args, store, settings, staging, out1, limit.offset, tz, quiet)
            check_staged(staging.dir, settings, dict.fromkeys(run.result.cq_files, 0), run.result.index_names)
            report = since_report(args, run, settings, limit, out1)
            report["engine"] = engine.to_dict()
            staging.publish(json_bytes(report))
    return report


def _out1_held(out1_dir: Location):
    """OUT1's run lock (the one an --in-place run on it holds), on a local filesystem; elsewhere none (and none for
    a missing OUT1, which the checks refuse: its lock file would make its parent)."""
    if is_local(out1_dir) and not out1_dir.is_dir():
        return contextlib.nullcontext()
    return held_beside(out1_dir, "rebuild", "--since")


def rebuild_since(sc, args: argparse.Namespace, store: Location, settings: BrokerSettings, staging: Output,
                  out1: Out1, limit_offset: int | None, tz: dt.tzinfo, quiet: bool,
                  copy_unchanged: bool = True) -> SinceRun:
    """Decode from the segment OUT1 ended in and stage OUT2: consume queues, index, copies of OUT1's files that stay
    as they are (none with `copy_unchanged` False: --in-place stages only the files that change)."""
    timings: dict[str, float] = {}
    started = t0 = time.monotonic()
    result, warnings = SinceResult(), []
    precopy = _index_precopy(out1, staging, settings)
    with precopy.copy if precopy else contextlib.nullcontext():
        scan = scan_store(sc, store, settings, work=staging.work, with_cq=True,
                          with_keys=settings.message_index_enable, split_size=args.split_size,
                          dispatch_limit=limit_offset, generation=args.rocketmq_version,
                          from_offset=out1.built.offset - 1, quiet=quiet, segments=out1.segments)
        timings["decode_s"] = time.monotonic() - t0
        timings.update(scan.task_timings())
        pause_at("after-decode")
        check_tail(scan, args.accept_invalid_tail, "rebuild")
        t0 = time.monotonic()
        early = precopy.finish() if precopy else []
    min_offset = out1.segments[0].start
    index = _index_work(args, store, out1, scan, staging, settings, min_offset, tz, warnings,
                        {precopy.name: precopy.path} if precopy else None)
    _build(sc, scan, settings, staging, out1, index, result, quiet)
    timings["build_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    copies = _out1_copies(sc, out1, scan_written=result.cq_written, staging=staging, settings=settings,
                          min_offset=min_offset, result=result, warnings=warnings, quiet=quiet)
    if index is not None:
        name_written(staging.dir.child("index"), index.pending)
        result.take_index(index)
        copies += index.copies
    timings["expiry_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    if not copy_unchanged:
        copies = [c for c in copies if _renamed(c)]
    done = run_tasks(sc, copy_tasks(copies, staging.dir, set()), copy_task_files, "copy OUT1",
                     total_bytes=sum(c.size for c in copies), quiet=quiet) if copies else []
    result.copied = copy_counts(early + [r for rs in done for r in rs])
    timings["copy_s"] = time.monotonic() - t0
    pause_at("after-build")
    for w in warnings:
        warn("rebuild", w)
    _notes(result, min_offset)
    timings["total_s"] = time.monotonic() - started
    return SinceRun(scan, result, min_offset, timings)


def _renamed(copy: CopyItem) -> bool:
    """A copy whose file changes its name (OUT1's trailing empty index file, named anew): --in-place stages it."""
    return Location(copy.src).name != copy.rel.rsplit("/", 1)[1]


def _out1_copies(sc, out1: Out1, *, scan_written: dict[str, int], staging: Output, settings: BrokerSettings,
                 min_offset: int, result: SinceResult, warnings: list[str], quiet: bool) -> list[CopyItem]:
    """OUT1's consume-queue files OUT2 holds as they are (checked against what the scan built; the clean service's
    deletions left out, counted in `result`)."""
    out1_queues: Queues = {q.key: q for q in _out1_queues(out1, warnings)}
    check_no_lost_files(out1_queues, scan_written, out1.dir.child("consumequeue"))
    expired = expired_queue_uris(sc, out1_queues, scan_written, staging.dir.child("consumequeue"),
                                 settings.consume_queue_file_size, min_offset, quiet) if min_offset > 0 else set()
    result.cq_files.update(scan_written)
    return queue_copies(out1_queues, set(scan_written), expired, result)


def _build(sc, scan: ScanResult, settings: BrokerSettings, staging: Output, out1: Out1,
           index: IndexWork | None, result: SinceResult, quiet: bool) -> None:
    """The consume-queue files the decoded records reach, joined to OUT1's, and the index files' tasks beside them
    in one job (as a rebuild's)."""
    cq_dir = staging.dir.child("consumequeue")
    cq_dir.makedirs()
    tasks = plan_cq(scan, settings, staging.work, cq_dir, None, 2 * sc.default_parallelism,
                    continues=out1.dir.child("consumequeue"), keep_tags=out1.report["job"] == "recover", since=True)
    if index is not None:
        tasks = share_index_tasks(index.tasks, sc.default_parallelism) + tasks
    joins = []
    for kind, written, _ in run_tasks(sc, tasks, build_files, "consume queues + index files", quiet=quiet):
        if kind == "consumequeue":
            result.cq_written.update(written.written)
            joins += written.copies
    result.cq_prefixes = copy_counts(joins)


@dataclass(frozen=True)
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


def _index_precopy(out1: Out1, staging: Output, settings: BrokerSettings) -> IndexPrecopy | None:
    """The precopy of OUT1's last index file (by name), where OUT1 and OUT2 are local and the index is built."""
    index_dir = out1.dir.child("index")
    if not (settings.message_index_enable and is_local(out1.dir) and is_local(staging.dir) and index_dir.is_dir()):
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


def _index_work(args: argparse.Namespace, store: Location, out1: Out1, scan: ScanResult, staging: Output,
                settings: BrokerSettings, min_offset: int, tz: dt.tzinfo, warnings: list[str],
                precopied: dict[str, Location] | None) -> IndexWork | None:
    """OUT1's index continued by the new keys (outputs.index_continuation), None with messageIndexEnable=false.
    `precopied`: OUT1's files copied already (by name), which a task appending to them moves into place."""
    if not settings.message_index_enable:
        return None
    generation = store_generation(store, args.rocketmq_version).generation
    listed = list_index_files(out1.dir, settings, warnings)
    _check_index_end(out1, listed, settings)
    continued = ContinuedIndex([i for i, _ in listed], {info.name: uri for info, uri in listed}, out1.built.offset)
    return continue_files(continued, scan, staging.work, settings, staging.dir.child("index"), generation,
                          min_offset, tz, precopied)


def _check_index_end(out1: Out1, listed: list[tuple[recovery.IndexFileInfo, str]], settings: BrokerSettings) -> None:
    """OUT1's last index file, which the new keys continue, must have a header its own entries agree with
    (index_header_check: one flipped byte would go on into every later file and its name) and hold entries of
    records before OUT1's end only (a broker started on a recover or convert OUT since indexes past it)."""
    last = max(listed, key=lambda f: f[0].name, default=None)
    if last is not None and not last[0].empty_on_disk:
        damaged = header_problem(last[0].header, settings.index_layout, Location(last[1]).read_range)
        if damaged is not None:
            raise JobError(f"--since {out1.dir.uri}: {last[1]} at byte offset {damaged[0]}: {damaged[1]}: the index "
                           f"file --since continues was changed or damaged since it was published; run a full rebuild")
    if last is None or last[0].header.index_count <= 1 or last[0].header.end_phy_offset < out1.built.offset:
        return
    raise JobError(f"--since {out1.dir.uri}: {last[1]} at byte offset {HEADER_FIELD_OFFSETS['endPhyOffset']}: its "
                   f"endPhyOffset {last[0].header.end_phy_offset} lies at or past OUT1's end by its report "
                   f"({out1.built.offset}): indexed on since (a broker started on OUT1?); run a full rebuild")


def _out1_queues(out1: Out1, warnings: list[str]):
    """OUT1's consume queues as listed (an OUT1 without consumequeue/ holds none)."""
    if not out1.dir.child("consumequeue").is_dir():
        return []
    return list_queues(out1.dir, warnings)
