"""A rebuild's OUT before it is published: its staged files checked against the files planned, and its run report
(a full rebuild's; a `rebuild --since` run's is this one less the whole-store counts, with its own part:
since.report)."""
from __future__ import annotations

import argparse
import datetime as dt
import time

from storage_format.settings import BrokerSettings

from ..io.commit_marker import MARKER
from ..io.fs import Location
from ..runtime import env
from ..runtime.cli import JobError
from ..runtime.engine import EngineChoice, TaskRunner
from ..runtime.faults import pause_at
from ..scan.decode import check_tail, scan_store
from ..scan.report_sections import dispatch_report, dledger_section
from ..scan.result import ScanResult
from ..store.dispatch import DispatchLimit
from ..store.built_to import REPORT_NAMES, REPORT_VERSION, built_to

REPORT_NAME = REPORT_NAMES["rebuild"]


def rebuild_scan(args: argparse.Namespace, sc: TaskRunner, store: Location, settings: BrokerSettings, work: Location,
                 segments: list, limit: DispatchLimit, with_cq: bool, with_index: bool, quiet: bool,
                 timings: dict[str, float], with_store_ts: bool = False) -> ScanResult:
    """A rebuild's decode of the store into `work` (the staging directory's work files), timed into `timings`, then
    the after-decode pause point and the log's tail checked as rebuild checks it (file or RocksDB consume queues;
    `with_store_ts`: the rows carry their records' storeTimestamp, which RocksDB units hold)."""
    t0 = time.monotonic()
    scan = scan_store(sc, store, settings, work=work, with_cq=with_cq, with_keys=with_index,
                      split_size=args.split_size, dispatch_limit=limit.offset, generation=args.rocketmq_version,
                      quiet=quiet, segments=segments, with_store_ts=with_store_ts)
    timings["decode_s"] = time.monotonic() - t0
    timings.update(scan.task_timings())
    pause_at("after-decode")
    check_tail(scan, args.accept_invalid_tail, "rebuild")
    return scan


def check_staged(staging: Location, settings: BrokerSettings, cq_files: dict, index_names: list[str]) -> None:
    """Every planned file is there with the configured size, and nothing else is."""
    expect = {f"consumequeue/{rel}": settings.consume_queue_file_size for rel in cq_files}
    expect.update({f"index/{n}": settings.index_file_size for n in index_names})
    prefix = staging.path.rstrip("/") + "/"
    found = {}
    for info in staging.walk_files():
        rel = info.path[len(prefix):]
        if not rel.startswith("_work/") and rel not in (REPORT_NAME, MARKER):
            found[rel] = info.size
    if found != expect:
        missing = sorted(set(expect) - set(found))[:5]
        extra = sorted(set(found) - set(expect))[:5]
        wrong = sorted(k for k in expect if k in found and found[k] != expect[k])[:5]
        raise JobError(f"staged output failed its check (missing {missing}, unexpected {extra}, wrong size {wrong})")


def built_to_section(scan: ScanResult, limit: int | None) -> dict | None:
    """What OUT was built to: the end of the last record dispatched (up to the dispatch limit) and the bytes before."""
    built = built_to(scan.segments, scan.dispatched_end(limit))
    return built.to_dict() if built is not None else None


def full_run_sections(report: dict, args: argparse.Namespace, store: Location, settings: BrokerSettings,
                      scan: ScanResult, limit: DispatchLimit, engine: EngineChoice) -> dict:
    """A full rebuild's report (file or RocksDB consume queues) completed: what was dispatched, where OUT was built
    to, the engine and, for a DLedger store, its section."""
    report["dispatch"] = dispatch_report("rebuild", limit, scan)
    report["built_to"] = built_to_section(scan, limit.offset)
    report["engine"] = engine.to_dict()
    dledger = dledger_section("rebuild", store, settings, args.dledger_reading, scan)
    if dledger is not None:
        report["dledger"] = dledger
    return report


def run_report(args: argparse.Namespace, scan: ScanResult, settings: BrokerSettings, cq_files: dict,
               index_names: list[str], timings: dict) -> dict:
    """The rebuild's run report: what it read, what it built (files and entries per queue), its settings, timings."""
    per_queue: dict[str, dict[str, int]] = {}
    for rel, n in cq_files.items():
        topic, qid, _ = rel.rsplit("/", 2)
        per_queue.setdefault(topic, {}).setdefault(qid, 0)
        per_queue[topic][qid] += n
    return {
        "job": "rebuild",
        "report_version": REPORT_VERSION,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "store": args.store,
        "out": args.out,
        "only": args.only,
        "topics": args.topics,
        "settings": settings.to_dict(),
        "log_place": args.log_place,  # where the records were read (outside --store: storePathCommitLog, ...)
        "cq_layout": getattr(args, "cq_layout", None),  # the store's consume-queue layout, what it leaves unread
        "segments": len(scan.segments),
        "splits": len(scan.splits),
        "decoders": scan.decoders(),
        "environment": env.in_effect(),
        "bytes_read": scan.bytes_read,
        "message_records": scan.message_records,
        "max_physical_offset": scan.max_physical_offset,
        "scan_end": scan.end.as_list() if scan.end else None,
        "scan_end_detail": scan.end.describe() if scan.end else None,
        "segments_with_data_after_end": scan.stitched.data_after_end,
        "negative_queue_ids": scan.negative_queue_ids.to_dict() if scan.negative_queue_ids is not None else None,
        "out_of_step_queues": scan.out_of_step_queues.to_dict() if scan.out_of_step_queues is not None else None,
        "consumequeue_files": len(cq_files),
        "consumequeue_entries_per_topic_queue": per_queue,
        "index_files": index_names,
        "index_name_time_zone": args.index_name_tz,
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
