"""`python -m jobs.recover --store STORE --out OUT`: a RocketMQ store after an unclean shutdown, recovered
offline with Spark exactly as the broker's own start-up recovery would leave it.

Modes: `--out OUT` writes the recovered store to OUT (STORE is only read); `--dry-run` prints (and with
`--report FILE` writes) the plan: a summary for people, JSON with `--json`; `--in-place --backup-dir DIR`
applies the plan to STORE with a backup and a journal (`--resume` / `--rollback` finish or undo a run that was killed). `--full-index`
rebuilds the whole index instead of resuming it. Exit status 0 = done (or nothing to do), 2 = error.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

from jobs.pipeline.recover import inplace, interrupted  # noqa: E402
from jobs.pipeline.recover.journal import BACKUP_APART  # noqa: E402
from jobs.pipeline.recover.patches import split_patches, stage_patches  # noqa: E402
from jobs.pipeline.recover.staging import staging_area  # noqa: E402
from jobs.pipeline.recover import text  # noqa: E402
from jobs.pipeline.runtime import interrupt  # noqa: E402
from jobs.pipeline.runtime.failure import Interrupted  # noqa: E402
from jobs.pipeline.runtime.faults import pause_at  # noqa: E402
from jobs.pipeline.runtime.cli import (EXIT_OK, JobError, json_bytes, parser, print_json, progress_quiet,  # noqa: E402
                                       run_process, settings_from, time_zone, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.io.fs import Location, location  # noqa: E402
from jobs.pipeline.io.live_broker import broker_lock, refuse_if_running  # noqa: E402
from jobs.pipeline.io.paths import check_outside, is_local  # noqa: E402
from jobs.pipeline.io.publish import output_for  # noqa: E402
from jobs.pipeline.io.background_copy import BackgroundCopy  # noqa: E402
from jobs.pipeline.io.copy import link_refusal  # noqa: E402
from jobs.pipeline.store.built_to import REPORT_NAMES, continuable  # noqa: E402
from jobs.pipeline.scan.report_sections import add_dledger_flag  # noqa: E402
from jobs.pipeline.recover.dledger import dledger_output  # noqa: E402
from jobs.pipeline.recover.dledger_mode import named_lines, plan_dledger_store  # noqa: E402
from jobs.pipeline.io.run_lock import IN_PLACE_LOCK, RunLock, held  # noqa: E402
from jobs.pipeline.io.workdir import removed_after  # noqa: E402
from jobs.pipeline.recover import timer as recovery_timer  # noqa: E402
from jobs.pipeline.recover.rocksdb_store import next_start_line, plan_rocksdb_recovery, rocksdb_output  # noqa: E402
from jobs.pipeline.io.store_gate import store_cq_layout  # noqa: E402
from jobs.pipeline.recover.gather import RecoveryPlan, plan_recovery as _plan_recovery, start_of  # noqa: E402
from jobs.pipeline.recover.write import (copy_notices, kept_segment_copies, likely_segment_copies,  # noqa: E402
                                         plan_output, queue_file_copies, unchanged_segment_copies,
                                         warm_index_kernels, write_output)
from jobs.pipeline.runtime.engine import add_engine_flag, job_runner  # noqa: E402
from storage_format.recovery import RecoveryError  # noqa: E402
from storage_format.store_layout import commitlog_path  # noqa: E402

REPORT_NAME = REPORT_NAMES["recover"]


def _args(argv: list[str] | None):
    """Command line, with the mode combinations checked."""
    p = parser("recover", "Recover a RocketMQ store after an unclean shutdown (abort file present), the "
                          "way the broker's start-up recovery does, but offline and in parallel.")
    p.add_argument("--out", help="write the recovered store here (must not exist unless --overwrite)")
    p.add_argument("--dry-run", action="store_true", help="only print the plan (a summary; JSON with --json); write no store files")
    p.add_argument("--plan", dest="report", help=argparse.SUPPRESS)  # the old name of --report
    p.add_argument("--in-place", action="store_true", help="apply the plan to STORE itself (needs --backup-dir)")
    p.add_argument("--backup-dir", help="with --in-place: every file changed or deleted is copied here first")
    p.add_argument("--resume", action="store_true", help="finish an interrupted --in-place run (no Spark)")
    p.add_argument("--rollback", action="store_true",
                   help="restore STORE from --backup-dir (during or after an --in-place run; no Spark)")
    p.add_argument("--repair-timer", action="store_true",
                   help="5.x: also repair the timer message store where the recovery cuts records it references "
                        "(cut the timer log, repair the wheel and timercheck; docs/timer.md); with --out, "
                        "--in-place or --dry-run")
    p.add_argument("--full-index", action="store_true",
                   help="rebuild the whole index from the valid commit log instead of resuming it")
    add_dledger_flag(p)
    add_engine_flag(p, "recover")
    p.add_argument("--rocketmq-version", type=int, choices=(4, 5),
                   help="RocketMQ generation that wrote the store (default: detected from abort/abort.bak/checkpoint)")
    p.add_argument("--index-name-tz", default="UTC", help="time zone of new index file names (default UTC)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT atomically")
    p.add_argument("--link-sealed-segments", action="store_true",
                   help="with --out: hard-link the sealed commit-log segments (all kept but the last, which the "
                        "broker never writes again) into OUT instead of copying them; OUT and STORE then share "
                        "those files (same filesystem only; see docs/recovery.md)")
    p.add_argument("--force", action="store_true",
                   help="plan (--dry-run) or write --out even though a running broker holds the store's lock "
                        "(the result describes a store that is still changing; never for --in-place)")
    p.add_argument("--work-dir", help="directory for the scan's intermediate files (default: beside OUT, in the "
                                      "store for --in-place, a temporary directory for --dry-run)")
    p.add_argument("--work", dest="work_dir", help=argparse.SUPPRESS)  # the old name of --work-dir
    args = p.parse_args(argv)
    if args.resume or args.rollback:
        if args.resume and args.rollback:
            p.error("--resume and --rollback exclude each other")
        if args.rollback and not args.backup_dir:
            p.error("--rollback needs --backup-dir")
        return args
    if args.out and args.in_place:
        p.error("--out and --in-place exclude each other")
    if not (args.out or args.in_place or args.dry_run):
        p.error("choose --out OUT, --in-place --backup-dir DIR, or --dry-run")
    if args.in_place and not args.backup_dir:
        p.error("--in-place needs --backup-dir")
    if args.link_sealed_segments and not args.out:
        p.error("--link-sealed-segments goes with --out (--in-place copies nothing, --dry-run writes nothing)")
    if args.repair_timer and args.rocketmq_version == 4:
        p.error("--repair-timer: a 4.x store has no timer message store")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the job, turning recovery-rule refusals into one-line errors."""
    args = _args(argv)
    try:
        return _run(args)
    except RecoveryError as exc:
        raise JobError(str(exc)) from None
    except (Interrupted, SystemExit):
        raise
    except BaseException as exc:  # a run that writes into the store says what it left there, not "nothing published"
        if not (isinstance(exc, KeyboardInterrupt) or interrupt.signalled()) or not (
                args.in_place or args.resume or args.rollback):
            raise
        raise Interrupted(interrupted.left_in_store(args.store, args.resume, args.rollback, args.backup_dir)) from None


def _run(args) -> int:
    """Dispatch to resume/rollback, dry run, OUT or in-place."""
    store = location(args.store)
    if args.in_place or args.resume or args.rollback:
        inplace.local_store(store.uri)  # refuses a store not on a local filesystem first
    if args.resume or args.rollback:
        refuse_if_running(store, args.force, forceable=False)
        path = inplace.local_store(store.uri)
        with held(_store_lock(path)):
            result = inplace.resume(path) if args.resume else inplace.rollback(path, Path(args.backup_dir).resolve())
        if args.json:
            print_json(result)
        else:
            _print_lines((text.resume_lines if args.resume else text.rollback_lines)(result, str(path)))
        return EXIT_OK
    store, settings = check_store(args, settings_from(args))
    args.dledger = settings.enable_dleger_commit_log  # DLedger mode: the broker's DLedger-mode recovery
    args.rocksdb = store_cq_layout(store, settings).reads_database  # RocksDB consume queues
    if args.rocksdb and args.dledger:
        raise JobError("enableDLegerCommitLog=true with RocksDB consume queues: reput does not implement its recovery")
    if args.repair_timer:
        if args.dledger:
            raise JobError(f"--repair-timer: {args.store} is a DLedger-mode store; the timer store check and repair "
                           f"are implemented for plain commit logs only")
        recovery_timer.precheck(store, settings)
    args.broker = refuse_if_running(store, args.force, forceable=not args.in_place)
    if args.broker.running:
        warn("recover", f"{args.broker.describe()} (--force): the plan describes a store that is still changing")
    tz = time_zone("--index-name-tz", args.index_name_tz)
    args.report_loc = check_report(args, store)
    if args.work_dir:
        check_outside(store, location(args.work_dir), "--work-dir", may_contain=True)
    kw = dict(split_size=args.split_size, generation=args.rocketmq_version, full_index=args.full_index, tz=tz,
              quiet=progress_quiet(args))
    if args.dledger:
        kw["dledger_reading"] = args.dledger_reading
    elif args.dledger_reading:
        raise JobError(f"--dledger-reading {args.dledger_reading}: {args.store} is not a DLedger-mode store")
    if is_local(store):  # a store part-way through an interrupted switch is neither as it was nor recovered
        inplace.check_not_interrupted(inplace.local_store(store.uri))
    if args.dry_run:
        return _dry_run(args, store, settings, kw)
    if args.out:
        return _to_out(args, store, location(args.out), settings, kw, tz)
    with held(_store_lock(inplace.local_store(store.uri))):  # let go after an interrupt once Spark has stopped
        return _in_place(args, store, settings, kw, tz)


def _store_lock(path: Path) -> RunLock:
    """One in-place run (or --resume / --rollback) per store at a time."""
    return RunLock(path / IN_PLACE_LOCK, "recover", f"the store {path} (--in-place)")


def _planner(args):
    """(plan function, output function) for the store's mode; both also run the 5.x timer store's check
    (warnings on stderr) and --repair-timer's plan and files."""
    if args.dledger:
        return _dledger_plan, dledger_output
    repair = args.repair_timer
    # RocksDB consume queues: the database is never written (recover.rocksdb_store)
    planned, made = (plan_rocksdb_recovery, rocksdb_output) if args.rocksdb else (_plan_recovery, plan_output)

    def plan(sc, store: Location, settings, work: Location, **kw) -> RecoveryPlan:
        """The plain recovery's plan with the timer check attached."""
        p = planned(sc, store, settings, work, **kw)
        outcome = recovery_timer.attach(p, repair)
        for w in outcome.warnings if outcome is not None else ():
            warn("recover", w)
        if args.rocksdb:
            print(f"reput recover: note: {next_start_line(p.to_dict())}", file=sys.stderr, flush=True)
        return p

    def output(p: RecoveryPlan, with_copies: bool):
        """The plain recovery's output with the repaired timer files in place of their copies."""
        out = made(p, with_copies=with_copies)
        recovery_timer.apply_to_output(p, out)
        return out
    return plan, output


def _dledger_plan(sc, store: Location, settings, work: Location, **kw):
    """DLedger mode: its recovery's plan; timer files, if any, are copied unchecked, and the plan says so."""
    plan = plan_dledger_store(sc, store, settings, work, **kw)
    for line in named_lines(plan):
        print(f"reput recover: note: {line}", file=sys.stderr, flush=True)
    if recovery_timer.read_timer_files(store).present:
        note = ("the 5.x timer store (timerlog/, timerwheel, config/timercheck) is copied unchecked: the timer "
                "check and --repair-timer cover plain commit logs only")
        plan.warnings.append(f"timer: {note}")
        warn("recover", f"timer: {note}")
    return plan


def _write_plan(args, summary: dict) -> None:
    """Write the plan JSON where --report says (first noting a running broker, --force)."""
    if args.broker.running:  # stated first
        rest = dict(summary)
        summary.clear()
        summary.update(broker_running=args.broker.describe(), **rest)
        summary.setdefault("warnings", []).insert(0, f"{args.broker.describe()}: the store is still changing")
    if args.report_loc is not None:
        args.report_loc.write_bytes(json_bytes(summary))


def _own_work(args, default: Callable[[], Location]) -> Location:
    """A fresh directory for the scan's intermediate files (inside --work-dir when given, else `default()`);
    removed afterwards."""
    if args.work_dir:
        return location(args.work_dir).child(f"reput-recover-work-{uuid.uuid4().hex[:12]}")
    work = default()
    work.delete_tree()  # leftovers of a killed run
    return work


def _dry_run(args, store: Location, settings, kw) -> int:
    """Plan only: print (and write) the plan; no store files are written."""
    sc, args.engine_choice = job_runner(args, "recover", settings=settings)
    work = _own_work(args, lambda: location(tempfile.mkdtemp(prefix="reput-recover-work-")))
    with removed_after(work):
        plan = _planner(args)[0](sc, store, settings, work, audit=True, **kw)
        summary = plan.to_dict()
        summary["engine"] = args.engine_choice.to_dict()
        summary["log_place"] = args.log_place
    _write_plan(args, summary)
    if args.json:
        print_json(summary)
    else:
        _print_lines(text.plan_lines(summary, broker=_broker_state(store)))
    return EXIT_OK


def _broker_state(store: Location) -> str | None:
    """Whether a broker holds the store's lock right now (local stores; None where nobody can tell)."""
    if not is_local(store):
        return None
    lock = broker_lock(store)
    if lock.running:
        return f"RUNNING: {lock.describe()}; the tail after the last dispatched position is in flight"
    return f"not running ({lock.path} is not locked)"


def _print_lines(lines: list[str]) -> None:
    """The console form, one line each."""
    print("\n".join(lines))


def _to_out(args, store: Location, out: Location, settings, kw, tz) -> int:
    """Write the recovered store to OUT through a staging directory renamed into place (on object storage:
    in place, committed by the report written last). On local filesystems a background thread copies what
    recovery does not change while it validates and plans: the segments before the start segment from
    before Spark starts, the rest of the kept segments once validation has found P, then every other copy."""
    check_outside(store, out, "--out")
    if args.link_sealed_segments:
        _check_link(args, store, out, settings)
    staging = output_for(out, REPORT_NAME, "recover", args.overwrite)  # refuses an existing OUT before Spark starts
    if settings.message_index_enable and not args.full_index:
        warm_index_kernels()  # the driver renders the new index files
    with staging, _background(args, store, out, staging.dir) as background:
        if background is not None:
            first = start_of(store, settings, args.rocketmq_version)
            # the segments before the start segment are never changed; those from it on are copied as they are
            # when P lies in the last one, unless a broker still writes them (--force: copied once P is known)
            if args.broker.running:
                background.add(unchanged_segment_copies(first, settings, args.link_sealed_segments))
            else:  # the small consume-queue files last: what is left of them when the plan is made, the job
                # copies itself beside the thread's last segment (BackgroundCopy.finish)
                background.add(likely_segment_copies(first, settings, args.link_sealed_segments)
                               + queue_file_copies(store))
            kw = dict(kw, on_validated=lambda log: background.add(kept_segment_copies(log,
                                                                                      args.link_sealed_segments)))
        sc, args.engine_choice = job_runner(args, "recover", settings=settings)
        started = time.monotonic()
        with removed_after(_own_work(args, lambda: staging.work)) as work:
            planner, outputs = _planner(args)
            plan = planner(sc, store, settings, work, **kw)
            t0 = time.monotonic()
            output = outputs(plan, with_copies=True)
            names = write_output(sc, plan, output, staging.dir, args.json, tz, link_sealed=args.link_sealed_segments,
                                 background=background)
            plan.timings["write_s"] = time.monotonic() - t0
            _check_written(staging.dir, output, names)
            for line in copy_notices(output.copied):
                warn("recover", line)
            summary = plan.to_dict()
            summary["engine"] = args.engine_choice.to_dict()
            summary["log_place"] = args.log_place
            summary["copies"] = output.copied
            if output.early:
                summary["copies_while_planning"] = output.early
            if names:
                summary["index"]["to_create"] = names
            summary["out"] = out.uri
            summary["settings"] = settings.to_dict()  # what a later rebuild --since checks its settings against
            summary.update(continuable(*plan.continued_to(), staging.dir, args.index_name_tz))
            summary["timings"]["total_s"] = round(time.monotonic() - started, 3)
            work.delete_tree()
            staging.publish(json_bytes(summary))
    _write_plan(args, summary)
    _report(args, plan, summary, f"recovered store written to {out.uri}")
    return EXIT_OK


def _background(args, store: Location, out: Location, dest: Location) -> BackgroundCopy | contextlib.nullcontext:
    """The thread that copies into OUT while recovery plans: local store and OUT, plain commit log (a DLedger
    store's data files are written by its own output; elsewhere the copies are Spark tasks, spread over the
    cluster's executors)."""
    if args.dledger or args.rocksdb or not (is_local(store) and is_local(out)):
        return contextlib.nullcontext()
    return BackgroundCopy(dest)


def _check_link(args, store: Location, out: Location, settings) -> None:
    """--link-sealed-segments: refused (before Spark starts) for a DLedger-mode store and where a hard link
    cannot be made: OUT on another filesystem than the commit log, or either not local."""
    if args.dledger:
        raise JobError(f"--link-sealed-segments: {args.store} is a DLedger-mode store; hard links cover plain "
                       f"commit-log segments only (its data files are copied)")
    logs = location(commitlog_path(settings)) if commitlog_path(settings) else store.child("commitlog")
    why = link_refusal(logs, out.parent)
    if why:
        raise JobError(f"--link-sealed-segments: {why}; recover without it (the segments are then copied)")


def _check_written(root: Location, output, index_names: list[str]) -> None:
    """Every file the plan renders or copies is in the staged OUT."""
    prefix = root.path.rstrip("/") + "/"
    found = {i.path[len(prefix):] for i in root.walk_files()}
    expect = set(output.rendered) | {c.rel for c in output.copies} | {f"index/{n}" for n in index_names}
    missing = sorted(expect - found)
    if missing:
        raise JobError(f"staged output is missing {len(missing)} files, e.g. {missing[:3]}")


def _in_place(args, store: Location, settings, kw, tz) -> int:
    """Stage, back up, journal and switch the store itself (see jobs.pipeline.recover.inplace)."""
    if commitlog_path(settings):
        raise JobError(f"--in-place: storePathCommitLog={commitlog_path(settings)} keeps the commit log outside "
                       f"the store, which the in-place switch does not cover; recover with --out instead")
    path = inplace.local_store(store.uri)
    backup = Path(args.backup_dir).resolve()
    check_outside(Location(str(path)), Location(str(backup)), "--backup-dir", why=BACKUP_APART)
    inplace.check_not_interrupted(path)
    try:
        return _switch_in_place(args, store, settings, kw, tz, path, backup)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: after a completed switch the store is recovered
        if isinstance(exc, Interrupted) and exc.note != inplace.not_begun("the store") \
                or not inplace.switched(path, backup):
            raise
        raise Interrupted(f"{path} was recovered in place: its switch had completed (backup in {backup}); "
                          f"the report was not printed") from None


def _switch_in_place(args, store: Location, settings, kw, tz, path: Path, backup: Path) -> int:
    """_in_place once the store and DIR are checked: plan, stage, switch, report."""
    sc, args.engine_choice = job_runner(args, "recover", settings=settings)
    started = time.monotonic()
    work = _own_work(args, lambda: Location(str(path / ".reput-recover.work")))
    with removed_after(work), contextlib.ExitStack() as staged:
        planner, outputs = _planner(args)
        plan = planner(sc, Location(str(path)), settings, work, **kw)
        summary = plan.to_dict()
        summary["engine"] = args.engine_choice.to_dict()
        summary["log_place"] = args.log_place
        _write_plan(args, summary)
        if not plan.changes:
            _report(args, plan, summary, f"{path} is clean: the broker's recovery rules change nothing")
            return EXIT_OK
        staging = staged.enter_context(staging_area(path))  # gone again if the run stops before its journal
        t0 = time.monotonic()
        patches, output = split_patches(outputs(plan, with_copies=False), path)  # changed spans only
        patch_bytes: dict[str, tuple[bytes, bytes]] = {}
        patched = stage_patches(path, staging, patches, patch_bytes)
        names = write_output(sc, plan, output, Location(str(staging)), args.json, tz)
        summary["timings"]["write_s"] = round(time.monotonic() - t0, 3)
        work.delete_tree()  # the scan's files (in the store but for --work-dir) are not needed by the switch
        t0 = time.monotonic()  # switch_s: compares, fsyncs, backup, journal, renames
        rendered = output.rendered + [f"index/{n}" for n in names]
        ops = inplace.build_ops(path, staging, rendered, output.deleted, patched=patched,
                                hashed=not inplace.same_filesystem(path, backup))  # hard links need no hashes
        if names:
            summary["index"]["to_create"] = names
        broker = broker_lock(store)  # again: a broker started while this run planned would see its files change
        if broker.running:
            raise JobError(f"a broker took the store's lock while this run planned ({broker.describe()}); "
                           f"{inplace.not_begun('the store')}: stop the broker first")
        manifest = inplace.switch(path, staging, backup, ops, summary, patch_bytes)
        summary["timings"]["switch_s"] = round(time.monotonic() - t0, 3)
        pause_at("after-switch")
    summary["timings"]["total_s"] = round(time.monotonic() - started, 3)
    summary["in_place"] = {"backup_dir": str(backup), "operations": len(manifest["ops"]), "backup": manifest["backup"]}
    if manifest["backup"]["copied"]:
        warn("recover", f"--backup-dir {backup} is on another filesystem than the store: "
                        f"{manifest['backup']['copied']} files backed up by copying them (the slower path; on the "
                        f"store's filesystem they are hard-linked)")
    _report(args, plan, summary, f"{path} recovered in place ({len(ops)} file operations; backup in {backup})")
    return EXIT_OK


def _report(args, plan: RecoveryPlan, summary: dict, headline: str) -> None:
    """Human (or JSON) summary of what was done."""
    if args.json:
        print_json(summary)
    else:
        _print_lines(text.result_lines(summary, headline))


if __name__ == "__main__":
    run_process("recover", main)
