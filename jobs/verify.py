"""`python -m jobs.verify --store STORE [--broker-config FILE] [--report FILE.json]`: are the store's
consume queues and index files what its commit log implies?

Decodes the commit log like the rebuild, builds every consume-queue and index file's bytes in memory
and compares them with the files in STORE (nothing in STORE is written; work files go to a temporary
directory outside it, removed afterwards). Exit status: 0 consistent, 1 inconsistencies found,
2 could not run. A summary goes to the console, every detail to the JSON report.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import argparse  # noqa: E402
import sys  # noqa: E402
import datetime as dt  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402


from jobs.pipeline.outputs.build import plan_cq, plan_index  # noqa: E402
from jobs.pipeline.verify.index_gap import explained_gap  # noqa: E402
from jobs.pipeline.runtime.cli import (EXIT_FINDINGS, EXIT_OK, JobError, add_generation_flag, emit,  # noqa: E402
                                       parser, progress_quiet, run_process, settings_from, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.store.built_to import REPORT_VERSION  # noqa: E402
from jobs.pipeline.store.segments import list_segments  # noqa: E402
from jobs.pipeline.store.identity import store_identity  # noqa: E402
from jobs.pipeline.verify.out_dir import add_files_flag, out_dir  # noqa: E402
from jobs.pipeline.verify.text import describe, print_summary  # noqa: E402,F401 (describe: tests)
from jobs.pipeline.verify.since import (OTHER_STORE_FLAG, EarlierVerify, add_since_flag, checked_to,  # noqa: E402
                                        earlier_verify)
from jobs.pipeline.io.fs import Location  # noqa: E402
from jobs.pipeline.io.live_broker import dispatched_end, warn_if_running  # noqa: E402
from jobs.pipeline.io.workdir import fresh_work_dir  # noqa: E402
from jobs.pipeline.scan.result import ScanResult  # noqa: E402
from jobs.pipeline.scan.decode import scan_store  # noqa: E402
from jobs.pipeline.runtime import env  # noqa: E402
from jobs.pipeline.runtime.engine import TaskRunner, add_engine_flag, job_runner  # noqa: E402
from jobs.pipeline.runtime.tasks import run_tasks  # noqa: E402
from jobs.pipeline.verify.findings import Findings, detail_order  # noqa: E402
from jobs.pipeline.verify.rocksdb_store import plan_rocksdb, rocksdb_section  # noqa: E402
from jobs.pipeline.verify.stage import check_stage_task  # noqa: E402
from jobs.pipeline.io.store_gate import store_cq_layout  # noqa: E402
from jobs.pipeline.verify.cq import orphan_cq_task, plan_cq_checks  # noqa: E402
from jobs.pipeline.verify.index_files import (IndexCheckTask, align_index_files, expected_headers,  # noqa: E402
                                              index_in_flight, plan_index_checks)
from jobs.pipeline.verify.index_seed import IndexPlan, plan_index_check, seed_bound, seeded_index_check  # noqa: E402
from jobs.pipeline.verify.pointer import pointer_check  # noqa: E402
from jobs.pipeline.verify.restart import RestartRecord, restart_record  # noqa: E402
from storage_format.confirm_offset import NO_LIMIT, DispatchLimit  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402
from jobs.pipeline.store.markers import store_generation  # noqa: E402
from storage_format.index_file import empty_file_index_count  # noqa: E402
from jobs.pipeline.io.store_gate import commitlog_dir, dledger_home  # noqa: E402
from jobs.pipeline.io.workdir import removed_after  # noqa: E402
from jobs.pipeline.store.dispatch import store_dispatch_limit  # noqa: E402
from jobs.pipeline.recover import timer as recovery_timer  # noqa: E402
from jobs.pipeline.scan.report_sections import add_dledger_flag, dispatch_report, dledger_section  # noqa: E402
from jobs.pipeline.scan import crc_audit  # noqa: E402
from jobs.pipeline.verify import dledger_index as verify_dledger  # noqa: E402
from jobs.pipeline.verify import dledger_v5 as verify_v5  # noqa: E402

DEFAULT_MAX_FINDINGS = 1000
ROCKSDB_RECOVERY = ("RocksDB-mode crash recovery (5.3.3 deletes the index files newer than the checkpoint's "
                    "indexMsgTimestamp and re-indexes only from the segment its RocksDB start rule picks)")


def verify(sc: TaskRunner, store: Location, settings: BrokerSettings, work: Location, *, with_cq: bool,
           with_index: bool, split_size: int, quiet: bool,
           limit: DispatchLimit = NO_LIMIT, generation: int | None = None,
           in_flight_from: int | None = None, since: EarlierVerify | None = None,
           files: Location | None = None) -> tuple[ScanResult, Findings, dict]:
    """Scan, then compare consume queues and index files with what the broker's dispatch (up to the
    confirm offset `limit`) implies; returns the scan, findings and counts. `in_flight_from` (a broker
    is running): differences past it are in flight, counted apart. `since` (verify --since): decode from the
    segment holding the byte before its start; what points below that segment was checked earlier, counted apart.
    `files`: where the consume queues and index files are (the store's own by default; verify --files OUT, built to
    `in_flight_from`: nothing writes it, so only the log past there is in flight)."""
    out_built_to = in_flight_from if files is not None else None
    files = files or store
    since_from = since.from_offset if since is not None else None
    layout = store_cq_layout(files, settings) if with_cq else None
    rocks_units = layout is not None and layout.reads_database  # RocksDB units hold their records' timestamps
    scan = scan_store(sc, store, settings, work=work, with_cq=with_cq, with_keys=with_index,
                      split_size=split_size, dispatch_limit=limit.offset, quiet=quiet, generation=generation,
                      from_offset=None if since_from is None else since_from - 1, with_store_ts=rocks_units)
    pointers = replace(pointer_check(scan), in_flight_from=in_flight_from)
    if since_from is not None and scan.segments:  # pointers below the scan lead into the whole log
        pointers = replace(pointers, segments=since.segments, checked_from=scan.segments[0].start)
    found = log_findings(scan, store, settings, in_flight_from)
    stats: dict[str, int] = {} if in_flight_from is None else {"in_flight_from": in_flight_from}
    stats["commitlog_min_offset"] = pointers.log_min  # the store's (a --since scan starts later)
    index_plan = (plan_index_check(files.child("index"), scan, work, settings, pointers,
                                   store_generation(store, generation).generation, out_built_to)
                  if with_index else None)
    rocks = (plan_rocksdb(sc, store, settings, scan, work, files.child(layout.db_dir), pointers.log_min, found)
             if rocks_units else None)  # RocksDB consume queues: the database
    index = (_plan_index_stage(sc, files, settings, scan, work, pointers, index_plan, quiet, with_cq,
                               None if rocks is None else rocks.fam.checkpoint or 0)
             if index_plan is not None else None)
    queue_checks: list = rocks.tasks if rocks is not None else []
    if rocks is None and with_cq:
        queue_checks = _plan_queue_checks(sc, files, settings, scan, work, pointers, found)
    seed = [index_plan.task] if index_plan is not None and index_plan.task is not None else []
    index_checks = index.checks if index is not None else []
    label = ", ".join(n for n, t in (("RocksDB consume queues" if rocks is not None else "consume queues",
                                      queue_checks), ("index seed", seed), ("index files", index_checks)) if t)
    # one job: the seed and the index files first (the longest tasks), the queue checks beside them
    results = run_tasks(sc, seed + index_checks + queue_checks, check_stage_task, label or "comparisons", quiet=quiet)
    seed_result = results[0] if seed else None
    cut = len(seed) + len(index_checks)
    index_results, queue_results = results[len(seed):cut], results[cut:]
    if rocks is not None:
        stats["rocksdb"] = rocksdb_section(rocks, queue_results, scan, found)
    elif with_cq:
        for f in queue_results:
            found.merge(f)
        stats["consumequeue_files_checked"] = found.files_checked
    if index is not None:
        grown = (None if out_built_to is None
                 else bool(scan.segments) and scan.dispatched_end(limit.offset) > out_built_to)
        stats.update(_check_index(sc, files, settings, scan, work, pointers, found, index, index_results, seed_result,
                                  in_flight_from, quiet, grown))
    if settings.enable_dleger_commit_log:
        stats.update(_dledger_checks(sc, store, files, settings, scan, work, found, generation, with_index, quiet))
    return scan, found, stats


def _plan_queue_checks(sc: TaskRunner, files: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                       pointers, found: Findings) -> list:
    """The consume-queue files' checks: the rebuild's tasks, paired with the files in `files`; every file there an
    extra when the commit log implies no queue."""
    cq_dir = files.child("consumequeue")
    # head expired or --since: an out-of-step queue goes on from where the store holds the scan's first unit
    tasks = plan_cq(scan, settings, work, cq_dir, target_tasks=2 * sc.default_parallelism,
                    continues=cq_dir if seed_bound(pointers) > 0 else None, place_all=False)
    return (plan_cq_checks(tasks, scan, pointers, found) if tasks
            else orphan_cq_task(cq_dir, work, settings.consume_queue_file_size, pointers, found))


def _dledger_checks(sc: TaskRunner, store: Location, files: Location, settings: BrokerSettings, scan: ScanResult,
                    work: Location, found: Findings, generation: int | None, with_index: bool, quiet: bool) -> dict:
    """A DLedger store's own checks (its index units, body CRCs), then what verify knows of a 5.x DLedger broker
    (verify.dledger_v5: its double-indexed records set apart, a crash's dispatch lag named)."""
    return {"dledger_index_units_checked": check_dledger_index(sc, store, settings, scan, found, quiet),
            "bad_body_crc_records": check_body_crcs(sc, store, settings, scan, found, quiet),
            **verify_v5.explain(store, files, settings, scan, work, found, generation, with_index)}


def log_findings(scan: ScanResult, store: Location, settings: BrokerSettings, in_flight_from: int | None) -> Findings:
    """What the scan found in the commit log itself: an invalid tail (the broker stops dispatching there: what follows
    is unreachable; in flight while a broker still appends), negative queue ids, queue offsets out of step."""
    found = Findings()
    for problem in scan.tail_problems():
        end = scan.end
        if in_flight_from is not None:  # a record the running broker is still appending
            found.add_in_flight("commitlog", "invalid_tail")
            continue
        found.add("commitlog", "invalid_tail", end.path or commitlog_dir(store, settings).uri,
                  byte_offset=end.file_offset, commitlog_offset=end.offset, reason=end.reason, message=problem)
    odd = scan.negative_queue_ids
    if odd is not None:
        found.add("commitlog", "negative_queue_id", odd.path, count=odd.records, byte_offset=odd.byte_offset,
                  commitlog_offset=odd.offset, queue_id=odd.queue_id, message=odd.describe())
    step = scan.out_of_step_queues
    if step is not None:
        found.add("commitlog", "out_of_step_queue_offset", step.path, count=len(step.queues),
                  byte_offset=step.byte_offset, commitlog_offset=step.offset, queue=step.queue,
                  queue_offset=step.queue_offset, next_offset=step.slot, message=step.describe())
    return found


@dataclass(frozen=True, kw_only=True)
class IndexStage:
    """The index check as planned before the comparison stage: the findings of listing and pairing the store's files
    (merged after the queues' so that the report keeps its order), the record the broker's starts may index again,
    the files expected and the checks the stage's job runs (none when seeded: seeded_index_check runs its own)."""

    plan: IndexPlan
    found: Findings
    restart: RestartRecord | None
    files_expected: int | None
    checks: list[IndexCheckTask]
    rocksdb_checkpoint: int | None


def _plan_index_stage(sc: TaskRunner, files: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                      pointers, plan: IndexPlan, quiet: bool, with_cq: bool,
                      rocksdb_checkpoint: int | None) -> IndexStage:
    """The expected index files' headers (a short job) and their checks paired with the store's files.
    `rocksdb_checkpoint`: a RocksDB store's dispatch checkpoint (its starts re-dispatch past it)."""
    found = Findings()
    found.merge(plan.listing)
    restart = restart_record(scan, work, files.child("consumequeue"), settings.consume_queue_file_size,
                             plan.generation, with_cq, rocksdb_checkpoint)
    stage = dict(plan=plan, found=found, restart=restart, rocksdb_checkpoint=rocksdb_checkpoint)
    if plan.at is not None:  # head expired, or --since: the index goes on from the store's file holding where it starts
        return IndexStage(**stage, files_expected=None, checks=[])
    index_dir = files.child("index")
    tasks = plan_index(scan, settings, work, index_dir, empty_file_index_count(plan.generation))
    headers = [h for part in run_tasks(sc, tasks, expected_headers, "index headers", quiet=quiet) for h in part]
    if not tasks:
        align_index_files([], plan.disk, found)
    checks = (plan_index_checks(tasks, headers, index_dir, plan.disk, pointers, found, restart, plan.out_built_to)
              if tasks else [])
    return IndexStage(**stage, files_expected=len(headers), checks=checks)


def _check_index(sc: TaskRunner, files: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                 pointers, found: Findings, stage: IndexStage, results: list[Findings], seed_result: tuple[bool, int] | None,
                 in_flight_from: int | None, quiet: bool, out_grown: bool | None = None) -> dict:
    """index/ against the files the commit log implies (findings into `found`): the stage's results, or the seeded
    check; the counts for the report, the broker's own index loss when it accounts for the findings
    (verify.index_gap), and the record the broker's starts indexed again when they did (verify.restart; what they
    put is counted apart). `out_grown` (verify --files OUT): whether the log goes on past OUT's end (else nothing of
    the index is in flight)."""
    stats: dict = {}
    index_dir = files.child("index")
    plan, restart = stage.plan, stage.restart
    before = found.files_checked
    found.merge(stage.found)
    if plan.at is not None:
        outcome = seeded_index_check(sc, plan, seed_result, scan, work, settings, index_dir, pointers, found,
                                     quiet, restart)
        stats["index_files_expected"], stats["index_seed"] = outcome.files_expected, outcome.to_dict()
        if outcome.why:
            print(f"reput verify: note: {outcome.file} checked by a {outcome.checked_by}, the slower path: "
                  f"{outcome.why}", file=sys.stderr, flush=True)
    else:
        stats["index_files_expected"] = stage.files_expected
        for f in results:
            found.merge(f)
    if in_flight_from is not None and out_grown is not False:
        index_in_flight(index_dir, found, out=out_grown is not None)
    gap = explained_gap(found, index_dir, scan, work)
    if gap is not None:
        stats["index_gap"] = {**gap.to_dict(), "message": gap.describe(sum(
            n for k, n in found.counts.items() if k.startswith("index.")), ROCKSDB_RECOVERY
            if stage.rocksdb_checkpoint is not None else "DLedger recovery")}
    if restart is not None and found.restarts:
        stats["restart_record"] = restart.to_dict()
    stats["index_files_on_disk"] = sum(1 for i in index_dir.list() if i.type.name == "File")
    stats["index_files_checked"] = found.files_checked - before
    return stats


def check_body_crcs(sc: TaskRunner, store: Location, settings: BrokerSettings, scan: ScanResult, found: Findings,
                    quiet: bool) -> int:
    """Every valid record's body CRC in a DLedger store (scan.crc_audit): DLedger serves a failing one, a plain
    broker's recovery cuts its log there (convert refuses it); a finding each. Returns how many fail."""
    audit = crc_audit.audit(sc, scan, settings, quiet)
    root = store.path.rstrip("/") + "/"
    for bad in audit.listed:
        rel = bad.path[len(root):] if bad.path.startswith(root) else bad.path
        found.add("commitlog", "bad_body_crc", rel, byte_offset=bad.byte_offset, commitlog_offset=bad.offset,
                  reason=bad.detail, message=f"{bad.path} at byte offset {bad.byte_offset}: the record fails its body "
                  f"CRC check; DLedger serves it, a plain broker's recovery cuts its log there (convert refuses it)")
    if audit.count > len(audit.listed):
        found.counts["commitlog.bad_body_crc"] += audit.count - len(audit.listed)
    return audit.count


def check_dledger_index(sc: TaskRunner, store: Location, settings: BrokerSettings, scan: ScanResult,
                        found: Findings, quiet: bool) -> int:
    """dledger-<id>/index/ against the entries in the data files; returns the units compared."""
    home = dledger_home(store, settings)
    rel = f"{home.name}/index"
    files = verify_dledger.check_files(home, rel, scan, found)
    checks = verify_dledger.plan_unit_checks(scan, files, rel)
    before = found.files_checked
    for f in run_tasks(sc, checks, verify_dledger.check_units, "DLedger index", quiet=quiet):
        found.merge(f)
    checked, found.files_checked = found.files_checked - before, before
    rng = scan.entry_range()
    if rng is not None:
        verify_dledger.unit_after_last(files, rel, rng[1], found)
    return checked


def main(argv: list[str] | None = None) -> int:
    p = parser("verify", "Check a RocketMQ store's consume queues and index files against its commit log.")
    p.add_argument("--only", choices=("consumequeue", "index"), help="check only this artifact")
    p.add_argument("--work-dir", help="where the temporary work files go (default: the system temp dir); "
                                      "must be outside the store")
    p.add_argument("--max-findings", type=int, default=DEFAULT_MAX_FINDINGS,
                   help=f"detailed findings kept in the report (default {DEFAULT_MAX_FINDINGS}; counts are "
                        f"always complete; at most 20 per file and kind)")
    add_generation_flag(p)
    add_dledger_flag(p)
    add_engine_flag(p, "verify")
    add_since_flag(p)
    add_files_flag(p)
    args = p.parse_args(argv)
    store, settings = check_store(args, settings_from(args))
    report_loc = check_report(args, store)
    earlier = _earlier(args, store, settings)
    target = out_dir(args, store, settings)
    live = warn_if_running("verify", store, "; differences there are counted apart, not as findings")
    with_cq = args.only != "index"
    with_index = args.only != "consumequeue" and settings.message_index_enable
    work = fresh_work_dir(store, args.work_dir, "verify")
    limit = store_dispatch_limit(store, settings, args.dledger_reading)
    sc, engine = job_runner(args, "verify", settings=settings)
    # --files OUT: the log past OUT's end is not built yet (counted apart as a running broker's tail is)
    in_flight_from = target.built_to if target is not None else dispatched_end(store) if live.running else None
    started = time.monotonic()
    with removed_after(work):
        work.makedirs()
        scan, found, stats = verify(sc, store, settings, work, with_cq=with_cq, with_index=with_index,
                                    split_size=args.split_size, quiet=progress_quiet(args), limit=limit,
                                    generation=args.rocketmq_version, in_flight_from=in_flight_from,
                                    since=earlier, files=target.dir if target is not None else None)
    timer = None
    if args.only is None and scan.max_physical_offset is not None and not live.running:
        timer = recovery_timer.check_at_rest(store, settings, scan.max_physical_offset,
                                             store_generation(store, args.rocketmq_version).generation)
        recovery_timer.add_findings(timer, found)
    report = build_report(args, store, settings, scan, found, stats, with_cq, with_index,
                          time.monotonic() - started)
    if timer is not None:
        report["timer"] = timer.to_dict()
    report["dispatch"] = dispatch_report("verify", limit, scan)
    report["report_version"] = REPORT_VERSION
    report["built_to"] = checked_to(scan.segments, scan.dispatched_end(limit.offset) if scan.segments else None,
                                    in_flight_from)
    report["store_identity"] = store_identity(store, scan.segments, (report["built_to"] or {}).get("file")).to_dict()
    if earlier is not None:
        report["since"] = {**earlier.to_dict(), "decoded_from": scan.segments[0].start if scan.segments else None,
                           "bytes_decoded": scan.bytes_read,
                           "earlier": dict(sorted(found.earlier.items()))}
    report["engine"] = engine.to_dict()
    if target is not None:
        report["files"] = target.to_dict()
    dledger = dledger_section("verify", store, settings, args.dledger_reading, scan)
    if dledger is not None:
        report["dledger"] = dledger
        report["dledger"]["reading_checked"] = dledger["committed_reading"]["reading"]
    emit(args, report, lambda r: print_summary(r, args.report), report_loc)
    return EXIT_FINDINGS if found.fails() else EXIT_OK


def _earlier(args: argparse.Namespace, store: Location, settings: BrokerSettings) -> EarlierVerify | None:
    """--since: the earlier verify checked and where this one starts (None without --since)."""
    if not args.since:
        if args.since_other_store:
            raise JobError(f"{OTHER_STORE_FLAG} goes with --since REPORT (it accepts a report made on another store)")
        return None
    if settings.enable_dleger_commit_log:
        raise JobError("--since on a DLedger store (enableDLegerCommitLog=true) is not implemented: run a full verify")
    if store_cq_layout(store, settings).reads_database:
        raise JobError(f"--since on a store with RocksDB consume queues (storeType={settings.store_type}) is not "
                       f"implemented: run a full verify")
    earlier = earlier_verify(args.since, store, settings, list_segments(store, settings), args.only,
                             args.since_other_store)
    if earlier.from_offset is None:
        warn("verify", f"the store's head expired past where {earlier.report.uri} ended (offset "
                       f"{earlier.built.offset}): nothing it checked is left; a full verify")
    if earlier.other_store is not None:
        warn("verify", f"{OTHER_STORE_FLAG}: {earlier.report.uri} was made on another store "
                       f"({earlier.other_store['differs']}): what it checked before offset {earlier.built.offset} "
                       f"counts as checked here without being read (the report's since.other_store)")
    return earlier


def build_report(args: argparse.Namespace, store: Location, settings: BrokerSettings, scan: ScanResult,
                 found: Findings, stats: dict, with_cq: bool, with_index: bool, seconds: float) -> dict:
    """The JSON report; keys are a stable interface for scripts."""
    details = sorted(found.details, key=detail_order)
    per_file = found.per_file()
    per_queue: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path, kinds in per_file.items():
        parts = path.split("/")
        if parts[0] == "consumequeue" and len(parts) == 4:
            for kind, n in kinds.items():
                per_queue[f"{parts[1]}/{parts[2]}"][kind] += n
    end = scan.end
    return {
        "job": "verify",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "store": store.uri,
        "status": "inconsistent" if found.total() else "consistent",
        "exit_code": EXIT_FINDINGS if found.fails() else EXIT_OK,
        "checked": {"consumequeue": with_cq, "index": with_index,
                    "index_disabled_by_config": not settings.message_index_enable},
        "settings": settings.to_dict(),
        "log_place": args.log_place,  # where the records were read (outside --store: storePathCommitLog, ...)
        "cq_layout": getattr(args, "cq_layout", None),  # where the consume queues are, what that leaves unread
        "environment": env.in_effect(),
        "commitlog": {
            "segments": len(scan.segments),
            "min_offset": stats.get("commitlog_min_offset", 0),
            "message_records": scan.message_records,
            "max_physical_offset": scan.max_physical_offset,
            "scan_end": end.as_list() if end else None,
            "scan_end_detail": end.describe() if end else None,
            "segments_with_data_after_end": scan.stitched.data_after_end,
            "decoders": scan.decoders(),
        },
        **{k: v for k, v in stats.items() if k != "commitlog_min_offset"},
        "finding_counts": dict(sorted(found.counts.items())),
        "findings_total": found.total(),
        "in_flight": dict(sorted(found.in_flight.items())),
        "expired": dict(sorted(found.expired.items())),
        "restart_reindex": dict(sorted(found.restarts.items())),
        "details_kept": min(len(details), args.max_findings),
        "details_dropped": max(0, len(details) - args.max_findings) + (found.total() - len(details)),
        "per_queue": {q: dict(k) for q, k in sorted(per_queue.items())},
        "per_file": per_file,
        "findings": details[:args.max_findings],
        "seconds": round(seconds, 3),
    }


if __name__ == "__main__":
    run_process("verify", main)
