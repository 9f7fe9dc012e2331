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
from dataclasses import replace  # noqa: E402


from jobs.pipeline.outputs.stage import plan_cq, plan_index  # noqa: E402
from jobs.pipeline.verify.index_gap import explained_gap  # noqa: E402
from jobs.pipeline.runtime.cli import (EXIT_FINDINGS, EXIT_OK, JobError, add_generation_flag, check_report,  # noqa: E402
                                       check_store, emit, parser, progress_quiet, run_process, settings_from, warn)
from jobs.pipeline.store.built_to import REPORT_VERSION  # noqa: E402
from jobs.pipeline.store.segments import list_segments  # noqa: E402
from jobs.pipeline.verify.since import EarlierVerify, add_since_flag, checked_to, earlier_verify  # noqa: E402
from jobs.pipeline.io.fs import Location  # noqa: E402
from jobs.pipeline.io.live_broker import dispatched_end, warn_if_running  # noqa: E402
from jobs.pipeline.io.workdir import fresh_work_dir  # noqa: E402
from jobs.pipeline.scan.result import ScanResult  # noqa: E402
from jobs.pipeline.scan.stage import scan_store  # noqa: E402
from jobs.pipeline.runtime import env  # noqa: E402
from jobs.pipeline.runtime.engine import TaskRunner, add_engine_flag, job_runner  # noqa: E402
from jobs.pipeline.runtime.tasks import run_tasks  # noqa: E402
from jobs.pipeline.verify.findings import Findings, detail_order  # noqa: E402
from jobs.pipeline.verify.cq import orphan_cq_task, plan_cq_checks  # noqa: E402
from jobs.pipeline.verify.index import (align_index_files, check_index, expected_headers,  # noqa: E402
                                        plan_index_checks)
from jobs.pipeline.verify.index_seed import (IndexPlan, check_queue_or_seed, plan_index_check,  # noqa: E402
                                             seed_bound, seeded_index_check)
from jobs.pipeline.verify.pointer import pointer_check  # noqa: E402
from storage_format.confirm_offset import NO_LIMIT, DispatchLimit  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402
from jobs.pipeline.store.markers import store_generation  # noqa: E402
from storage_format.index_file import empty_file_index_count  # noqa: E402
from jobs.pipeline.io.store_gate import commitlog_dir, dledger_home  # noqa: E402
from jobs.pipeline.io.workdir import removed_after  # noqa: E402
from jobs.pipeline.store.dispatch import dispatch_report, store_dispatch_limit  # noqa: E402
from jobs.pipeline.recover import timer as recovery_timer  # noqa: E402
from jobs.pipeline.store.dledger_report import add_dledger_flag, dledger_section  # noqa: E402
from jobs.pipeline.scan import crc_audit  # noqa: E402
from jobs.pipeline.verify import dledger as verify_dledger  # noqa: E402

DEFAULT_MAX_FINDINGS = 1000
CONSOLE_LINES = 25
EXPIRED_WORDS = {"consumequeue.files": "consume-queue files", "consumequeue.units": "consume-queue units",
                 "index.files": "index files", "index.entries": "index entries"}


def verify(sc: TaskRunner, store: Location, settings: BrokerSettings, work: Location, *, with_cq: bool,
           with_index: bool, split_size: int, quiet: bool,
           limit: DispatchLimit = NO_LIMIT, generation: int | None = None,
           in_flight_from: int | None = None, since: EarlierVerify | None = None) -> tuple[ScanResult, Findings, dict]:
    """Scan, then compare consume queues and index files with what the broker's dispatch (up to the
    confirm offset `limit`) implies; returns the scan, findings and counts. `in_flight_from` (a broker
    is running): differences past it are in flight, counted apart. `since` (verify --since): decode from the
    segment holding the byte before its start; what points below that segment was checked earlier, counted apart."""
    since_from = since.from_offset if since is not None else None
    scan = scan_store(sc, store, settings, work=work, with_cq=with_cq, with_keys=with_index,
                      split_size=split_size, dispatch_limit=limit.offset, quiet=quiet, generation=generation,
                      from_offset=None if since_from is None else since_from - 1)
    pointers = replace(pointer_check(scan), in_flight_from=in_flight_from)
    if since_from is not None and scan.segments:  # pointers below the scan lead into the whole log
        pointers = replace(pointers, segments=since.segments, checked_from=scan.segments[0].start)
    found = Findings()
    for problem in scan.tail_problems():
        # The broker stops dispatching at the first invalid record: what follows is unreachable.
        end = scan.end
        if in_flight_from is not None:  # a record the running broker is still appending
            found.add_in_flight("commitlog", "invalid_tail")
            continue
        found.add("commitlog", "invalid_tail", end.path or commitlog_dir(store, settings).uri,
                  offset=end.file_offset, commitlog_offset=end.offset, reason=end.reason, message=problem)
    odd = scan.negative_queue_ids
    if odd is not None:
        found.add("commitlog", "negative_queue_id", odd.path, count=odd.records, offset=odd.byte_offset,
                  commitlog_offset=odd.offset, queue_id=odd.queue_id, message=odd.describe())
    step = scan.out_of_step_queues
    if step is not None:
        found.add("commitlog", "out_of_step_queue_offset", step.path, count=len(step.queues), offset=step.byte_offset,
                  commitlog_offset=step.offset, queue=step.queue, queue_offset=step.queue_offset,
                  next_offset=step.slot, message=step.describe())
    stats: dict[str, int] = {} if in_flight_from is None else {"in_flight_from": in_flight_from}
    stats["commitlog_min_offset"] = pointers.log_min  # the store's (a --since scan starts later)
    parallelism = sc.default_parallelism
    index_plan = (plan_index_check(store.child("index"), scan, work, settings, pointers,
                                   store_generation(store, generation).generation) if with_index else None)
    seed_result = None
    if with_cq:
        cq_dir = store.child("consumequeue")
        # head expired or --since: an out-of-step queue goes on from where the store holds the scan's first unit
        tasks = plan_cq(scan, settings, work, cq_dir, target_tasks=2 * parallelism,
                        earlier=cq_dir if seed_bound(pointers) > 0 else None, place_all=False)
        checks = (plan_cq_checks(tasks, scan, pointers, found) if tasks
                  else orphan_cq_task(cq_dir, work, settings.consume_queue_file_size, pointers, found))
        seed = [index_plan.task] if index_plan is not None and index_plan.task is not None else []
        results = run_tasks(sc, seed + checks, check_queue_or_seed,  # the seed first: the longest task
                            "consume queues" + (" and index seed" if seed else ""), quiet=quiet)
        seed_result = results.pop(0) if seed else None
        for f in results:
            found.merge(f)
        stats["consumequeue_files_checked"] = found.files_checked
    if index_plan is not None:
        stats.update(_check_index(sc, store, settings, scan, work, pointers, found, index_plan, seed_result,
                                  in_flight_from, quiet))
    if settings.enable_dleger_commit_log:
        stats["dledger_index_units_checked"] = check_dledger_index(sc, store, settings, scan, found, quiet)
        stats["bad_body_crc_records"] = check_body_crcs(sc, store, settings, scan, found, quiet)
    return scan, found, stats


def _check_index(sc: TaskRunner, store: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                 pointers, found: Findings, plan: IndexPlan, seed_result: tuple[bool, int] | None,
                 in_flight_from: int | None, quiet: bool) -> dict:
    """index/ against the files the commit log implies (findings into `found`); the counts for the report, and the
    broker's own index loss when it accounts for the findings (verify.index_gap)."""
    stats: dict = {}
    index_dir = store.child("index")
    found.merge(plan.listing)
    disk = plan.disk
    before = found.files_checked
    if plan.at is not None:  # head expired, or --since: the index goes on from the store's file holding where it starts
        outcome = seeded_index_check(sc, plan, seed_result, scan, work, settings, index_dir, pointers, found, quiet)
        stats["index_files_expected"], stats["index_seed"] = outcome.files_expected, outcome.to_dict()
        if outcome.why:
            print(f"reput verify: note: {outcome.file} checked by a {outcome.checked_by}, the slower path: "
                  f"{outcome.why}", file=sys.stderr, flush=True)
    else:
        tasks = plan_index(scan, settings, work, index_dir, empty_file_index_count(plan.generation))
        headers = [h for part in run_tasks(sc, tasks, expected_headers, "index headers", quiet=quiet) for h in part]
        stats["index_files_expected"] = len(headers)
        if tasks:
            checks = plan_index_checks(tasks, headers, index_dir, disk, pointers, found)
            for f in run_tasks(sc, checks, check_index, "index files", quiet=quiet):
                found.merge(f)
        else:
            align_index_files([], disk, found)
    if in_flight_from is not None:
        index_in_flight(index_dir, found)
    gap = explained_gap(found, index_dir, scan, work)
    if gap is not None:
        stats["index_gap"] = {**gap.to_dict(), "message": gap.describe(sum(
            n for k, n in found.counts.items() if k.startswith("index.")))}
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


def index_in_flight(index_dir: Location, found: Findings) -> None:
    """A running broker is writing its newest index file, and may have files still to create: their
    differences are in flight."""
    names = [i.base_name for i in index_dir.list() if i.type.name == "File"]
    paths = {f"index/{names[-1]}"} if names else set()
    paths |= {d["path"] for d in found.details if d["kind"] == "missing_file" and d["artifact"] == "index"
              and d.get("file_number", -1) >= len(names)}
    for path in paths:
        found.move_to_in_flight("index", path)


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
    args = p.parse_args(argv)
    store, settings = check_store(args, settings_from(args))
    report_loc = check_report(args, store)
    earlier = _earlier(args, store, settings)
    live = warn_if_running("verify", store, "; differences there are counted apart, not as findings")
    with_cq = args.only != "index"
    with_index = args.only != "consumequeue" and settings.message_index_enable
    work = fresh_work_dir(store, args.work_dir, "verify")
    limit = store_dispatch_limit(store, settings, args.dledger_reading)
    sc, engine = job_runner(args, "verify")
    in_flight_from = dispatched_end(store) if live.running else None
    started = time.monotonic()
    with removed_after(work):
        work.makedirs()
        scan, found, stats = verify(sc, store, settings, work, with_cq=with_cq, with_index=with_index,
                                    split_size=args.split_size, quiet=progress_quiet(args), limit=limit,
                                    generation=args.rocketmq_version, in_flight_from=in_flight_from,
                                    since=earlier)
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
    if earlier is not None:
        report["since"] = {**earlier.to_dict(), "decoded_from": scan.segments[0].start if scan.segments else None,
                           "bytes_decoded": scan.bytes_read,
                           "earlier": dict(sorted(found.earlier.items()))}
    report["engine"] = engine.to_dict()
    dledger = dledger_section("verify", store, settings, args.dledger_reading, scan)
    if dledger is not None:
        report["dledger"] = dledger
        report["dledger"]["reading_checked"] = dledger["committed_reading"]["reading"]
    emit(args, report, lambda r: print_summary(r, args.report), report_loc)
    return EXIT_FINDINGS if found.fails() else EXIT_OK


def _earlier(args: argparse.Namespace, store: Location, settings: BrokerSettings) -> EarlierVerify | None:
    """--since: the earlier verify checked and where this one starts (None without --since)."""
    if not args.since:
        return None
    if settings.enable_dleger_commit_log:
        raise JobError("--since on a DLedger store (enableDLegerCommitLog=true) is not implemented: run a full verify")
    earlier = earlier_verify(args.since, settings, list_segments(store, settings), args.only)
    if earlier.from_offset is None:
        warn("verify", f"the store's head expired past where {earlier.report.uri} ended (offset "
                       f"{earlier.built.offset}): nothing it checked is left; a full verify")
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
        "details_kept": min(len(details), args.max_findings),
        "details_dropped": max(0, len(details) - args.max_findings) + (found.total() - len(details)),
        "per_queue": {q: dict(k) for q, k in sorted(per_queue.items())},
        "per_file": per_file,
        "findings": details[:args.max_findings],
        "seconds": round(seconds, 3),
    }


def describe(d: dict) -> str:
    """One console line for a finding: where, what, expected vs found."""
    where = d["path"]
    if "entry" in d and d["kind"] not in ("missing_file", "extra_file"):
        where += f" entry {d['entry']}"
    elif d.get("position") is not None and d["kind"] not in ("missing_file",):
        where += f" position {d['position']}"
    if d.get("slot") is not None and d["kind"] in ("slot_differs", "key_not_found", "broken_chain"):
        where += f" slot {d['slot']}"
    if d.get("byte_offset") is not None:
        where += f" (byte {d['byte_offset']})"
    what = d["kind"]
    expected, found = d.get("expected", "-"), d.get("found", "-")  # a finding may carry either, or neither
    if d.get("field"):
        what += f" {d['field']}: expected {expected}, found {found}"
    elif d.get("fields") and isinstance(expected, dict) and isinstance(found, dict):
        what += " " + ", ".join(f"{f} expected {expected.get(f)} found {found.get(f)}" for f in d["fields"])
    elif d["kind"] == "slot_differs":
        what += f": expected {expected}, found {found}"
    elif d["kind"] == "extra_entry" and "found" in d:
        what += f": {found}"
    elif d["kind"] == "missing_entry" and "expected" in d:
        what += f": expected {expected}"
    if d.get("points_at"):
        what += f" -> points at: {d['points_at']}"
    if d.get("reason"):
        what += f": {d['reason']}"
    elif d.get("detail"):
        what += f": {d['detail']}"
    return f"  {where}: {what}"


def print_summary(r: dict, report_path: str | None) -> None:
    """The console summary: what was compared, counts per kind, the first findings."""
    c = r["commitlog"]
    print(f"store {r['store']}")
    print(f"commit log: {c['message_records']} records in {c['segments']} segments, valid up to offset "
          f"{c['max_physical_offset']}")
    print(f"scan ended: {c['scan_end_detail']}")
    if "dledger" in r:
        d = r["dledger"]
        print(f"DLedger: {d['entries']} entries (index {d['first_entry_index']} .. {d['last_entry_index']}), "
              f"{r.get('dledger_index_units_checked', 0)} DLedger index units compared; reading checked: "
              f"{d['reading_checked']} ({d['committed_reading']['reason']})")
    if r["checked"]["consumequeue"]:
        print(f"consume queues: {r.get('consumequeue_files_checked', 0)} files compared")
    if r["checked"]["index"]:
        print(f"index: {r.get('index_files_expected', 0)} files expected, {r.get('index_files_on_disk', 0)} on disk, "
              f"{r.get('index_files_checked', 0)} compared")
    elif r["checked"]["index_disabled_by_config"]:
        print("index: not checked (messageIndexEnable=false)")
    if r["in_flight"]:
        print(f"in flight (a broker is running; not findings): {sum(r['in_flight'].values())} differences past "
              f"commit-log offset {r['in_flight_from']}, the last dispatched position")
    if r.get("since"):
        s = r["since"]
        done = ", ".join(f"{n} {EXPIRED_WORDS.get(k, k)}" for k, n in s["earlier"].items()) or "nothing"
        print(f"since {s['report']} (checked up to commit-log offset {s['built_to_before']}): decoded "
              f"{s['bytes_decoded']} bytes from offset {s['decoded_from']}; checked earlier, not again: {done}")
    if r["expired"]:
        print(f"expired head (not findings): the commit log starts at offset {c['min_offset']}; the broker keeps "
              + ", ".join(f"{n} {EXPIRED_WORDS.get(k, k)}" for k, n in r["expired"].items())
              + " that point below it (storage_format.clean_service)")
    if not r["findings_total"]:
        print("CONSISTENT: every checked file is what the commit log implies")
        return
    print(f"INCONSISTENT: {r['findings_total']} findings")
    for kind, n in r["finding_counts"].items():
        print(f"  {kind}: {n}")
    if r.get("index_gap"):
        print(f"  expected: {r['index_gap']['message']}")
    shown = r["findings"][:CONSOLE_LINES]
    print(f"first {len(shown)} of {r['findings_total']}:")
    for d in shown:
        print(describe(d))
    if report_path:
        print(f"details: {report_path}")
    else:
        print("details: pass --report FILE.json (or --json)")


if __name__ == "__main__":
    run_process("verify", main)
