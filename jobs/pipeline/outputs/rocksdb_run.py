"""`rebuild` of a store whose consume queues live in RocksDB (`storeType=defaultRocksDB`): OUT/consumequeue/ is a
RocksDB database that RocketMQ 5.3.3 opens as its own, OUT/index/ and the run report as a file-queue rebuild writes
them, staged beside OUT and published as every OUT (io.publish).

The decode is the file queues' (its LMQ rules RocksDB's: scan.decode picks storage_format.rocksdb_dispatch's by the
settings); units tasks (outputs.rocksdb_units) write one SST file per key range beside the index tasks; the driver
writes the `offset` family (a "max" record per queue, CHECKPOINT_TOPIC at the end of the last record that got a unit,
no "min" record) and ingests every file into a fresh database (io.rocksdb_writer), whose files and key counts are
checked before it is published."""
from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path

from storage_format.index_file import empty_file_index_count
from storage_format.rocksdb_cq import (CHECKPOINT_KEY, DEFAULT_CF, MAX_KIND, OFFSET_CF, OffsetValue, checkpoint_value,
                                       offset_key, offset_value)
from storage_format.rocksdb_files import is_db_file
from storage_format.settings import BrokerSettings

from ..io.commit_marker import MARKER
from ..io.fs import Location
from ..io.paths import is_local
from ..io.publish import Output, output_for
from ..io.rocksdb_writer import FORMAT_VERSION, SstFile, binding, build_database, write_sst
from ..runtime.cli import JobError, json_bytes
from ..runtime.engine import TaskRunner, job_runner
from ..runtime.faults import pause_at
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from ..store.dispatch import DispatchLimit
from ..store.segments import list_segments
from .rebuild_out import REPORT_NAME, full_run_sections, rebuild_scan, run_report
from .rocksdb_units import UnitsPart, UnitsTask, build_units, plan_units
from .build import build_files, name_index_files, pending_name, plan_index, share_index_tasks

ROCKSDB_GENERATION = 5  # RocksDB consume queues are 5.x's (5.2.0 on): its index-file rules apply
DB_DIR = "consumequeue"
NOT_IMPLEMENTED = "reput does not implement it"


def refuse_unimplemented(args: argparse.Namespace, out: Location) -> None:
    """What a rebuild of a RocksDB store does not do, refused by name before anything runs."""
    if args.since or args.in_place:
        raise JobError(f"--since with storeType=defaultRocksDB: continuing an earlier OUT's RocksDB consume-queue "
                       f"database; {NOT_IMPLEMENTED} (rebuild without --since)")
    if args.topics:
        raise JobError(f"--topics with storeType=defaultRocksDB: a database holding some topics' units, whose "
                       f"checkpoint says every record was dispatched; {NOT_IMPLEMENTED}")
    if args.only != "index" and not is_local(out):
        raise JobError(f"--out {out.uri}: a RocksDB consume-queue database is built on a local filesystem, not on "
                       f"object storage or HDFS; {NOT_IMPLEMENTED} (use --only index there)")


@dataclass(frozen=True, kw_only=True)
class BuiltDatabase:
    """The database staged in OUT/consumequeue/: its SST files and what they hold."""

    files: tuple[SstFile, ...]
    units: int
    rows: int  # consume-queue rows decoded (units + rows another unit of the same key replaced)
    queues: int  # "max" records
    checkpoint: int | None  # CHECKPOINT_TOPIC's value (None: no unit, no key)
    tasks: int

    def to_dict(self) -> dict:
        return {"database": f"{DB_DIR}/", "column_families": [DEFAULT_CF, OFFSET_CF], "format_version": FORMAT_VERSION,
                "units": self.units, "rows": self.rows, "queues": self.queues, "min_records": 0,
                "checkpoint": self.checkpoint, "unit_tasks": self.tasks,
                "sst_files": [f.to_dict() for f in self.files]}


def rebuild_rocksdb(args: argparse.Namespace, store: Location, settings: BrokerSettings, out: Location,
                    limit: DispatchLimit, tz: dt.tzinfo, quiet: bool) -> dict:
    """Scan, build the units and index files in one job, build the database, check, publish; the run report."""
    refuse_unimplemented(args, out)
    with_cq = args.only != "index"
    if with_cq:
        binding()  # the reput[rocksdb] extra missing: one line naming it, before anything runs
    with_index = args.only != "consumequeue" and settings.message_index_enable
    segments = list_segments(store, settings)  # a store's refusals by name come before OUT is locked
    staging = output_for(out, REPORT_NAME, "rebuild", args.overwrite)  # refuses an existing OUT before Spark starts
    with staging:
        sc, engine = job_runner(args, "rebuild", sum(s.size for s in segments), settings)
        timings: dict[str, float] = {}
        started = time.monotonic()
        scan = rebuild_scan(args, sc, store, settings, staging.work, segments, limit, with_cq, with_index, quiet,
                            timings, with_store_ts=True)
        t0 = time.monotonic()
        parts, index_names = _run_builds(sc, scan, settings, staging, with_cq, with_index, tz, quiet, timings)
        built = _database(parts, staging) if with_cq else None
        timings["build_s"] = time.monotonic() - t0
        pause_at("after-build")
        check_staged(staging.dir, settings, built, index_names)
        timings["total_s"] = time.monotonic() - started
        report = _report(args, scan, settings, parts, built, index_names, timings)
        full_run_sections(report, args, store, settings, scan, limit, engine)
        staging.publish(json_bytes(report))
    return report


def _run_builds(sc: TaskRunner, scan: ScanResult, settings: BrokerSettings, staging: Output, with_cq: bool,
                with_index: bool, tz: dt.tzinfo, quiet: bool, timings: dict) -> tuple[list[UnitsPart], list[str]]:
    """The units tasks and the index tasks in one job (index tasks first: the longer ones); the units tasks' parts
    and the index files' names (renamed from their pending names)."""
    index_dir = staging.dir.child("index")
    index_tasks = []
    if with_index:
        index_dir.makedirs()
        index_tasks = plan_index(scan, settings, staging.work, index_dir, empty_file_index_count(ROCKSDB_GENERATION))
    units_tasks = []
    if with_cq:
        sst_dir = Path(staging.work.path) / "rocksdb"
        sst_dir.mkdir(parents=True, exist_ok=True)
        units_tasks = plan_units(scan, staging.work, sst_dir, 2 * sc.default_parallelism)
    tasks = share_index_tasks(index_tasks, sc.default_parallelism) + units_tasks
    results = run_tasks(sc, tasks, build_rocksdb_or_index, "RocksDB units + index files", quiet=quiet)
    parts = [r for kind, r, _ in results if kind == "rocksdb"]
    firsts = [f for kind, r, _ in results if kind == "index" for f in r]
    for kind in ("rocksdb", "index"):
        seconds = [s for k, _, s in results if k == kind]
        timings[f"{kind}_task_s"] = sum(seconds)
        timings[f"longest_{kind}_task_s"] = max(seconds, default=0.0)
    timings["build_tasks"] = len(tasks)
    names = name_index_files(scan, firsts, tz) if with_index else {}
    for no, name in sorted(names.items()):
        index_dir.child(pending_name(no)).move_to(index_dir.child(name))
    return parts, [names[no] for no in sorted(names)]


def build_rocksdb_or_index(task) -> tuple[str, object, float]:
    """One task of the job: a key range's units (("rocksdb", UnitsPart, seconds)) or an index task (build_files)."""
    if isinstance(task, UnitsTask):
        part = build_units(task)
        return "rocksdb", part, part.seconds
    return build_files(task)


def _database(parts: list[UnitsPart], staging: Output) -> BuiltDatabase:
    """The `offset` family's SST file (a "max" record per queue, the checkpoint), then the database of both."""
    parts = sorted(parts, key=lambda p: p.number)  # key-range order
    items = [(offset_key(topic.encode("utf-8"), MAX_KIND, int(qid)), offset_value(OffsetValue(int(phy), int(qo))))
             for p in parts for topic, qid, phy, qo in zip(p.max_topic, p.max_queue_id, p.max_phy,
                                                            p.max_queue_offset)]
    units = sum(p.units for p in parts)
    checkpoint = max((p.end for p in parts), default=0) if units else None
    if checkpoint is not None:
        items.append((CHECKPOINT_KEY, checkpoint_value(checkpoint)))
    items.sort()
    work = Path(staging.work.path) / "rocksdb"
    work.mkdir(parents=True, exist_ok=True)
    offset_sst = work / "offset.sst"
    write_sst(offset_sst, OFFSET_CF, [([k for k, _ in items], [v for _, v in items])])
    ssts = {DEFAULT_CF: [Path(p.sst) for p in parts if p.sst], OFFSET_CF: [offset_sst] if items else []}
    files = build_database(Path(staging.dir.path) / DB_DIR, ssts, work / "log")
    built = BuiltDatabase(files=tuple(files), units=units, rows=sum(p.rows for p in parts),
                          queues=len(items) - (checkpoint is not None), checkpoint=checkpoint, tasks=len(parts))
    held = {cf: sum(f.entries for f in files if f.column_family == cf) for cf in (DEFAULT_CF, OFFSET_CF)}
    if held != {DEFAULT_CF: units, OFFSET_CF: len(items)}:
        raise JobError(f"the staged RocksDB database failed its check: its SST files hold {held[DEFAULT_CF]} units "
                       f"and {held[OFFSET_CF]} offset records, the tasks wrote {units} and {len(items)}")
    return built


def check_staged(staging: Location, settings: BrokerSettings, built: BuiltDatabase | None,
                 index_names: list[str]) -> None:
    """Every planned index file is there with the configured size; consumequeue/ holds the database's own files
    only (its SST files as built, an empty WAL, RocksDB's CURRENT, IDENTITY, LOCK, MANIFEST and OPTIONS); nothing
    else is there."""
    expect = {f"index/{n}": settings.index_file_size for n in index_names}
    prefix = staging.path.rstrip("/") + "/"
    found, db = {}, {}
    for info in staging.walk_files():
        rel = info.path[len(prefix):]
        if rel.startswith(f"{DB_DIR}/") and "/" not in rel[len(DB_DIR) + 1:]:
            db[rel[len(DB_DIR) + 1:]] = info.size
        elif not rel.startswith("_work/") and rel not in (REPORT_NAME, MARKER):
            found[rel] = info.size
    ssts = {f.name: f.size for f in built.files} if built else {}
    odd = sorted(n for n, size in db.items() if not (ssts.get(n) == size or n == "LOCK"
                                                     or (n.endswith(".log") and size == 0)
                                                     or (is_db_file(n) and not n.endswith(".sst"))))
    missing = sorted(set(ssts) - set(db)) + ([] if built is None or "CURRENT" in db else ["CURRENT"])
    if found != expect or odd or missing or (built is None and db):
        extra = sorted(set(found) - set(expect))[:5] + [f"{DB_DIR}/{n}" for n in odd[:5]]
        gone = sorted(set(expect) - set(found))[:5] + [f"{DB_DIR}/{n}" for n in missing[:5]]
        raise JobError(f"staged output failed its check (missing {gone}, unexpected {extra})")


def _report(args: argparse.Namespace, scan: ScanResult, settings: BrokerSettings, parts: list[UnitsPart],
            built: BuiltDatabase | None, index_names: list[str], timings: dict) -> dict:
    """The rebuild's run report (rebuild_out.run_report), its consume-queue part the database's: units per queue,
    and the `rocksdb` section."""
    report = run_report(args, scan, settings, {}, index_names, timings)
    per_queue: dict[str, dict[str, int]] = {}
    for p in parts:
        for topic, qid, n in zip(p.max_topic, p.max_queue_id.tolist(), p.units_per_queue.tolist()):
            per_queue.setdefault(topic, {})[str(qid)] = n
    report["consumequeue_entries_per_topic_queue"] = per_queue
    report["consumequeue_layout"] = "rocksdb"
    report["rocksdb"] = built.to_dict() if built is not None else None
    return report
