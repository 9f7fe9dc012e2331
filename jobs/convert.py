"""`python -m jobs.convert --store STORE --out OUT`: a DLedger store as a plain store (DLedger -> controller mode).

Writes OUT/commitlog/ (every record of the DLedger data files in the same order, placed as the broker's
CommitLog places them; the plain segments of an upgraded store copied unchanged), consume queues and index
files for the new offsets (reput's rebuild over OUT's commit log), `checkpoint`, `config/` copied, no `abort`,
the old -> new offset msgId map as Parquet (OUT/reput-msgid-map/) and OUT/reput-convert-report.json. Each
record changes only in PHYSICALOFFSET and, in COMMIT/ROLLBACK records, the prepared offset of its half record.
The store is only read; OUT is built in a staging directory and published as rebuild publishes.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime as dt  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from jobs.pipeline.outputs.build import name_index_files, pending_name  # noqa: E402
from jobs.pipeline.convert import bad_crc as bad_crc_mod  # noqa: E402
from jobs.pipeline.convert.broker_conf import (CONF_NAME, config_problems, converted_config, mode_of,  # noqa: E402
                                              store_root)
from jobs.pipeline.convert.plan import ConvertPlan, make_plan, plan_report  # noqa: E402
from jobs.pipeline.convert.remap import write_offset_maps  # noqa: E402
from jobs.pipeline.convert.msgid_map import MAP_DIR  # noqa: E402
from jobs.pipeline.convert.write import crc_splits, plain_audits, write_all, write_modes  # noqa: E402
from jobs.pipeline.convert.transactions import map_transaction_ends  # noqa: E402
from jobs.pipeline.io.fs import Location, location  # noqa: E402
from jobs.pipeline.io.workdir import fresh_work_dir, removed_after  # noqa: E402
from jobs.pipeline.io.live_broker import refuse_if_running  # noqa: E402
from jobs.pipeline.io.paths import check_outside  # noqa: E402
from jobs.pipeline.io.publish import output_for  # noqa: E402
from jobs.pipeline.runtime.cli import (EXIT_OK, JobError, add_generation_flag, emit, json_bytes, parser,  # noqa: E402
                                       progress_quiet, run_process, settings_from, time_zone, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.runtime import env  # noqa: E402
from jobs.pipeline.runtime.faults import pause_at  # noqa: E402
from jobs.pipeline.runtime.engine import add_engine_flag, job_runner  # noqa: E402
from jobs.pipeline.scan import crc_audit  # noqa: E402
from jobs.pipeline.scan.decode import ScanResult, scan_store  # noqa: E402
from jobs.pipeline.store.segments import list_segments  # noqa: E402
from jobs.pipeline.store.dispatch import store_dispatch_limit  # noqa: E402
from jobs.pipeline.store.markers import StoreMarkers  # noqa: E402
from jobs.pipeline.store.built_to import REPORT_NAMES, built_to_in, continuable  # noqa: E402
from jobs.pipeline.scan.report_sections import add_dledger_flag, dledger_section, member_choice  # noqa: E402
from jobs.rebuild import _plan_cq_tasks, _plan_index_tasks, _run_builds, build_results, shared_builds  # noqa: E402
from storage_format.checkpoint import CHECKPOINT_SIZE, Checkpoint, checkpoint_bytes, implausible_timestamp  # noqa: E402
from storage_format.java_props import decode_properties_file  # noqa: E402
from storage_format.markers import CHECKPOINT  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402

REPORT_NAME = REPORT_NAMES["convert"]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = parser("convert", "Convert a DLedger store (enableDLegerCommitLog) into a plain store with its own commit "
                          "log, consume queues and index files, for a broker in master-slave or controller mode.")
    p.add_argument("--out", help="the new store directory (must not exist unless --overwrite); it gets the broker "
                                 f"config to start it with, {CONF_NAME}")
    p.add_argument("--check-config", metavar="NEW_CONF",
                   help="instead of converting: check that NEW_CONF, the config the broker will start with, leads to "
                        "the converted store given as --store (paths, DLedger off, file sizes); exit 0 or 2 naming "
                        "the key")
    p.add_argument("--dry-run", action="store_true", help="only print the plan (records, segments, bytes, ids "
                                                          "that change, transactions and schedule messages); "
                                                          "write nothing")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT atomically")
    p.add_argument("--work-dir", help="--dry-run: where the listing's work files go (default: the system temp dir; on "
                                      "a cluster, storage the tasks share); a conversion uses OUT's staging directory")
    p.add_argument("--accept-bad-crc", action="store_true",
                   help="convert records whose body CRC fails (DLedger never checks it; a plain broker's recovery "
                        "cuts its log at the first it checks): the report lists each and what the broker will do")
    p.add_argument("--index-name-tz", default="UTC", help="time zone of index file names (default UTC)")
    add_generation_flag(p)
    add_dledger_flag(p)
    add_engine_flag(p, "convert")
    args = p.parse_args(argv)
    if not args.out and not args.check_config:
        p.error("--out is required (or --check-config)")
    return args


def plain_settings(settings: BrokerSettings) -> BrokerSettings:
    """The settings of the converted store: DLedger off, commit log at OUT/commitlog."""
    return dataclasses.replace(settings, enable_dleger_commit_log=False, store_path_commit_log=None,
                               store_path_dledger_commit_log=None, read_only_commit_log_store_paths=None)


def main(argv: list[str] | None = None) -> int:
    """Check, scan the source, list its records, lay them out; then write, rebuild over OUT, check, publish."""
    args = _args(argv)
    if args.check_config:
        return _check_config(args)
    quiet = progress_quiet(args)
    store, settings = check_store(args, settings_from(args))
    out = location(args.out)
    _refuse_source(args, store, settings)
    check_outside(store, out, "--out")
    report_loc = check_report(args, store)
    limit = store_dispatch_limit(store, settings, args.dledger_reading)
    staging = None if args.dry_run else output_for(out, REPORT_NAME, "convert", args.overwrite)
    # a dry run's listing goes to a work directory of its own, removed afterwards: the driver holds no sizes either
    dry_work = None if staging is not None else fresh_work_dir(store, args.work_dir, "convert-plan")
    with staging if staging is not None else removed_after(dry_work):  # the run lock is released however it ends
        sc, engine = job_runner(args, "convert", sum(s.size for s in list_segments(store, settings)), settings)
        timings: dict[str, float] = {}
        started = time.monotonic()
        work = staging.work if staging is not None else dry_work
        scan, plan, end = _scan_and_plan(args, sc, store, settings, limit.offset, staging, work, quiet, timings)
        dledger = dledger_section("convert", store, settings, args.dledger_reading, scan)
        left_out = scan.dispatch_stop().held_back if limit.offset is not None else 0
        t0 = time.monotonic()  # the segment writers check the body CRCs of what they copy; else an audit first
        audit = None if staging is not None and not left_out else crc_audit.audit(sc, scan, settings, quiet)
        bad_crc = _bad_crc(args, audit, scan, plan, end, staging is not None, bad_crc_mod.BY_AUDIT) \
            if audit is not None else None
        timings["crc_audit_s"] = time.monotonic() - t0
        summary = {**plan_report(plan, scan, left_out), "bad_crc_records": bad_crc}
        if left_out:
            print(f"reput convert: note: {left_out} records past the DLedger committed position (reading "
                  f"'{dledger['committed_reading']['reading']}') are not committed and are left out of OUT; pass "
                  f"--dledger-reading surviving to keep them", file=sys.stderr)
        if staging is None:
            report = {"job": "convert", "dry_run": True, "store": args.store, "out": args.out, "plan": summary,
                      "dledger": dledger, "engine": engine.to_dict(), "log_place": args.log_place,
                      "timings": {k: round(v, 3) for k, v in timings.items()}}
            emit(args, report, _print_plan, report_loc)
            return EXIT_OK
        report, checked = _write(args, sc, store, settings, scan, plan, staging, timings, quiet, left_out, end)
        if checked is not None:
            summary["bad_crc_records"] = checked
        report.update({"plan": summary, "dledger": dledger, "engine": engine.to_dict(), "log_place": args.log_place})
        timings["total_s"] = time.monotonic() - started
        report["timings"] = {k: round(v, 3) for k, v in timings.items()}
        staging.publish(json_bytes(report))
    emit(args, report, _print_human, report_loc)
    return EXIT_OK


CONVERTING_FLAGS = ("out", "dry_run", "overwrite", "accept_bad_crc", "work_dir")  # a conversion's, not a check's


def _check_config(args) -> int:
    """--check-config: the new config's paths and mode first (convert.broker_conf), then the store checks every job
    makes with it (file sizes included); one line either way (with --json the report on success). A conversion's
    flags beside it are refused, not ignored."""
    given = [f"--{f.replace('_', '-')}" for f in CONVERTING_FLAGS if getattr(args, f, None)]
    if given:
        raise JobError(f"--check-config checks a config and converts nothing: drop {', '.join(given)}")
    try:
        text = decode_properties_file(location(args.check_config).read_bytes())
    except OSError as exc:
        raise JobError(f"cannot read --check-config {args.check_config}: {getattr(exc, 'strerror', None) or exc}") \
            from None
    problems = config_problems(text, store_root(args.store))
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise JobError(f"{args.check_config}: {problems[0]}{more}")
    args.broker_config = args.check_config
    _, settings = check_store(args, settings_from(args))
    report = {"job": "convert", "check_config": args.check_config, "store": store_root(args.store), "fits": True,
              "mode": mode_of(settings, text)}
    emit(args, report, lambda r: print(f"{r['check_config']} leads to the converted store {r['store']}: root and "
                                       f"commit log there, DLedger off, file sizes as its files; mode: {r['mode']}"),
         check_report(args, location(args.store)))
    return EXIT_OK


def _refuse_source(args, store: Location, settings: BrokerSettings) -> None:
    """What convert refuses before any work: a plain store, a running broker, one that did not shut down cleanly."""
    if not settings.enable_dleger_commit_log:
        raise JobError(f"{args.store} is not a DLedger store (enableDLegerCommitLog is off and no dledger-*/data/ "
                       f"directory): nothing to convert")
    refuse_if_running(store, force=None)
    if StoreMarkers.read(store).abort is not None:
        raise JobError(f"{store.child('abort').uri} exists: the broker did not shut down cleanly, and its recovery "
                       f"decides where the log ends and what the checkpoint says; run `reput recover` first (or start "
                       f"and stop the DLedger broker once), then convert")


def _scan_and_plan(args, sc, store: Location, settings: BrokerSettings, limit: int | None, staging, work: Location,
                   quiet: bool, timings: dict) -> tuple[ScanResult, ConvertPlan, int]:
    """One decode of the source: its validity, the listing of every DLedger record (the layout's input) and, when
    writing, the consume-queue rows and index keys OUT's files are built from (offsets mapped later); then the new
    layout of the records up to the end dispatch reaches. Returns (scan, plan, that end)."""
    t0 = time.monotonic()
    writing = staging is not None
    scan = scan_store(sc, store, settings, work=work, with_cq=writing,
                      with_keys=writing and settings.message_index_enable, split_size=args.split_size,
                      dispatch_limit=limit, generation=args.rocketmq_version, quiet=quiet, with_records=True)
    timings["source_scan_s"] = time.monotonic() - t0
    problems = scan.tail_problems()
    if problems:
        raise JobError("; ".join(problems) + ". convert copies a healthy log only: run jobs.recover first")
    if scan.negative_queue_ids is not None:  # as rebuild and inspect say it (issue 36 item 4)
        warn("convert", scan.negative_queue_ids.describe())
    if scan.out_of_step_queues is not None:  # OUT's queues are written as the broker writes them (issue 35 item 5)
        warn("convert", scan.out_of_step_queues.describe())
    end = scan.dispatched_end(limit)
    t0 = time.monotonic()
    plan = make_plan([s for s in scan.segments if not s.header or s.start < end],
                     [s.listed for s in scan.accepted if s.listed is not None], settings.mapped_file_size_commitlog,
                     lambda r: r.sizes_in(work))
    plan = dataclasses.replace(plan, prepared=map_transaction_ends(sc, plan, work, quiet))
    timings["layout_s"] = time.monotonic() - t0
    return scan, plan, end


def _bad_crc(args, audit: crc_audit.CrcAudit, scan: ScanResult, plan: ConvertPlan, end: int, writing: bool,
             checked: str) -> dict:
    """Every converted record's body CRC checked (convert.bad_crc): a failing one refuses the conversion unless
    --accept-bad-crc, which goes on and says so; the report's form."""
    return bad_crc_mod.verdict(audit, {s.path: s.header for s in scan.segments}, plan, end, args.accept_bad_crc,
                               writing, checked)


def _write(args, sc, store: Location, settings: BrokerSettings, scan: ScanResult, plan: ConvertPlan, staging,
           timings: dict, quiet: bool, left_out: int, end: int) -> tuple[dict, dict | None]:
    """Everything written into the staging directory, checked; returns the report's body and, when the segment
    writers checked the body CRCs (convert.write), the report's `bad_crc_records`. Consume queues and
    index files come from the source scan's work files with the offsets mapped as the build tasks read them
    (`convert.remap`), planned from the source scan as rebuild plans them, and built in the segment writes' Spark
    job; only when records were left out past the committed position (the source scan's summaries then describe
    records OUT does not hold) are they built from a read-back scan of OUT after the writes (noted on stderr,
    named in the report)."""
    t0 = time.monotonic()
    plain = plain_settings(settings)
    from_source = left_out == 0
    args.only, args.topics = None, None
    builds = _source_builds(args, sc, store, plain, scan, plan, staging, quiet) if from_source else []
    job = write_all(sc, store, plan, staging, builds, quiet, crc_splits(scan) if from_source else None,
                    plain_audits(scan, settings) if from_source else [])
    written, copies = job.written, job.copies
    cq_files, firsts, task_timings = build_results(job.build_results, builds)
    timings.update({"segment_task_s": sum(w.seconds for w in written),
                    "longest_segment_task_s": max((w.seconds for w in written), default=0.0)})
    timings["write_s"] = time.monotonic() - t0
    checked = None if job.audit is None else _bad_crc(args, job.audit, scan, plan, end, True,
                                                       bad_crc_mod.BY_WRITERS)
    pause_at("after-write")
    t0 = time.monotonic()
    expect_end = plan.end if plan.records else scan.max_physical_offset
    if sum(w.records for w in written) != plan.records:
        raise JobError(f"{sum(w.records for w in written)} records written, {plan.records} planned; nothing published")
    out_scan = scan
    if not from_source:
        out_scan, (cq_files, firsts, task_timings) = _read_back_builds(args, sc, store, plain, scan, plan, staging,
                                                                      expect_end, quiet)
    timings.update(task_timings)
    index_names = _name_index_files(args, out_scan, firsts, staging) if plain.message_index_enable else []
    timings["rebuild_s"] = time.monotonic() - t0
    last_ts = max((s.last_store_ts for s in out_scan.accepted if s.last_store_ts is not None), default=None)
    cp_source = _write_checkpoint(store, staging.dir, expect_end, last_ts)
    source_conf = decode_properties_file(location(args.broker_config).read_bytes()) if args.broker_config else None
    staging.dir.child(CONF_NAME).write_bytes(converted_config(source_conf, store_root(args.out), plain).encode("latin-1"))
    copied = [c[1].rsplit("/", 1)[1] for c in copies]
    _check_out(staging.dir, plain, cq_files, index_names, [w.name for w in written] + copied)
    built = built_to_in(staging.dir.child("commitlog"), expect_end)  # OUT's own log: the new offsets
    return {**continuable(built, None, staging.dir, args.index_name_tz), "job": "convert",
            "created": dt.datetime.now(dt.timezone.utc).isoformat(), "store": args.store,
            "out": args.out, "settings": plain.to_dict(), "segments_written": [w.name for w in written],
            "plain_segments_copied": copied, "message_records": out_scan.message_records,
            "max_physical_offset": expect_end, "prepared_offsets_rewritten": sum(w.prepared_rewritten for w in written),
            "consumequeue_files": len(cq_files), "index_files": index_names, "checkpoint": cp_source,
            "broker_config": CONF_NAME, "msgid_map": MAP_DIR, "segment_writes": write_modes(written),
            "queues_and_index_built_from": FROM_SOURCE if from_source else FROM_READ_BACK,
            "environment": env.in_effect()}, checked


def _source_builds(args, sc, store: Location, plain: BrokerSettings, scan: ScanResult, plan: ConvertPlan,
                   staging, quiet: bool) -> list:
    """OUT's consume-queue and index build tasks from the source scan, reading its work files with the offsets
    mapped; planned before the offsets move, so an error names the source's file and byte offset."""
    cq_tasks = _plan_cq_tasks(scan, plain, staging, None, 2 * sc.default_parallelism)
    index_tasks = _plan_index_tasks(args, scan, plain, store, staging) if plain.message_index_enable else []
    moved = write_offset_maps(sc, plan, staging.work, quiet)
    return shared_builds([dataclasses.replace(t, moved=moved) for t in index_tasks + cq_tasks],
                         sc.default_parallelism, "convert")


def _read_back_builds(args, sc, store: Location, plain: BrokerSettings, scan: ScanResult, plan: ConvertPlan, staging,
                      expect_end: int, quiet: bool):
    """Records were left out past the committed position: OUT's commit log read back (checked against the plan) and
    its consume queues and index files built from that scan. Returns (OUT's scan, the builds' results)."""
    print("reput convert: note: consume queues and index files are built from a second scan of OUT's commit log "
          "(records past the committed position were left out); slower than mapping the source scan's work files",
          file=sys.stderr)
    out_scan = scan_store(sc, staging.dir, plain, work=staging.work, with_cq=True, with_keys=plain.message_index_enable,
                          split_size=args.split_size, generation=args.rocketmq_version, quiet=quiet)
    records = out_scan.message_records
    if out_scan.tail_problems() or out_scan.max_physical_offset != expect_end \
            or records != plan.records + _plain_records(scan):
        raise JobError(f"the written commit log does not read back as planned (end {out_scan.max_physical_offset}, "
                       f"expected {expect_end}; records {records}); nothing published")
    cq_tasks = _plan_cq_tasks(out_scan, plain, staging, None, 2 * sc.default_parallelism)
    index_tasks = _plan_index_tasks(args, out_scan, plain, store, staging) if plain.message_index_enable else []
    return out_scan, _run_builds(sc, index_tasks + cq_tasks, quiet)


def _name_index_files(args, out_scan: ScanResult, firsts, staging) -> list[str]:
    """The built index files renamed from their pending names to the broker's time names, in order."""
    index_dir = staging.dir.child("index")
    names = name_index_files(out_scan, firsts, time_zone("--index-name-tz", args.index_name_tz))
    for no, name in sorted(names.items()):
        index_dir.child(pending_name(no)).move_to(index_dir.child(name))
    return [names[no] for no in sorted(names)]


FROM_SOURCE = "the source scan, offsets mapped"
FROM_READ_BACK = "a read-back scan of OUT (records past the committed position were left out)"


def _plain_records(scan: ScanResult) -> int:
    return sum(s.records for s in scan.accepted if s.first_entry_index is None)


def _write_checkpoint(store: Location, out: Location, end: int, last_ts: int | None) -> str:
    """The source's checkpoint (its store timestamps do not change), or one made from the last record's
    storeTimestamp when the source has none or holds a time no record could have put there (named in a warning:
    issue 36 item 5); for every source the 5.x offsets masterFlushedOffset and confirmPhyOffset (bytes 24-39) are
    the new log's end: 5.3.3 in controller mode then loads OUT with no correction of its confirm offset, and 4.x
    never reads those bytes."""
    cp = StoreMarkers.read(store).found_checkpoint
    ts = last_ts or 0
    odd = implausible_timestamp(cp, ts) if cp is not None else None
    at_end = {"master_flushed_offset": end, "confirm_phy_offset": end}
    if cp is None or odd is not None:
        out.child(CHECKPOINT).write_bytes(checkpoint_bytes(Checkpoint(ts, ts, ts, **at_end), 5))
        if cp is None:
            return f"made from the last record's storeTimestamp (the source has no checkpoint); {OFFSETS_AT_END}"
        why = (f"{store.child(CHECKPOINT).uri} at byte offset {odd[0]}: {odd[1]} is {odd[2]}, which no record of "
               f"the log put there (the last storeTimestamp is {ts})")
        warn("convert", f"{why}; OUT's checkpoint is made from the last record's storeTimestamp instead")
        return f"made from the last record's storeTimestamp (the source's is damaged: {why}); {OFFSETS_AT_END}"
    base = store.child(CHECKPOINT).read_bytes()[:CHECKPOINT_SIZE]
    out.child(CHECKPOINT).write_bytes(checkpoint_bytes(dataclasses.replace(cp, **at_end), 5, base))
    return f"copied (store timestamps); {OFFSETS_AT_END}"


OFFSETS_AT_END = "masterFlushedOffset and confirmPhyOffset set to the new log's end"


def _check_out(staging: Location, settings: BrokerSettings, cq_files: dict, index_names: list[str],
               segments: list[str]) -> None:
    """Consume queues and index files as rebuild checks them, every segment at its size, no abort."""
    prefix = staging.path.rstrip("/") + "/"
    found = {i.path[len(prefix):]: i.size for i in staging.walk_files()
             if i.path[len(prefix):].split("/")[0] in ("commitlog", "consumequeue", "index", "abort")}
    expect = {f"commitlog/{n}": settings.mapped_file_size_commitlog for n in segments}
    expect.update({f"consumequeue/{rel}": settings.consume_queue_file_size for rel in cq_files})
    expect.update({f"index/{n}": settings.index_file_size for n in index_names})
    if found != expect:
        differ = sorted(k for k in set(found) | set(expect) if found.get(k) != expect.get(k))[:5]
        raise JobError(f"staged output failed its check ({differ}); nothing published")


def _print_plan(r: dict) -> None:
    p = r["plan"]
    for line in member_choice(r["dledger"]) if r.get("dledger") else []:
        print(f"NOTE: {line}")
    print(f"convert plan for {r['store']} -> {r['out']}: {p['dledger_records']} DLedger records into "
          f"{p['new_segments']} new segments ({p['new_log_bytes']} bytes from offset {p['new_log_start']}), "
          f"{p['plain_segments_kept']} plain segments kept")
    print(f"offset msgIds that change: {p['offset_msg_ids_changed']}; COMMIT/ROLLBACK prepared offsets rewritten: "
          f"{p['transaction_ends_rewritten']}; schedule messages moved: {p['schedule_messages_moved']}; half "
          f"messages moved: {p['half_messages_moved']} (pending transactions at most "
          f"{p['pending_transactions_at_most']}); records past the committed position left out: "
          f"{p['records_past_committed_position_left_out']}")


def _print_human(r: dict) -> None:
    print(f"converted {r['message_records']} records into {r['out']}: {len(r['segments_written'])} segments "
          f"written, {len(r['plain_segments_copied'])} plain segments copied, {r['consumequeue_files']} "
          f"consume-queue files, {len(r['index_files'])} index files in {r['timings']['total_s']:.1f}s")
    print(f"old offset msgIds map to new ones in {r['out']}/{MAP_DIR}/ (query --msg-id accepts old ids)")


if __name__ == "__main__":
    run_process("convert", main)
