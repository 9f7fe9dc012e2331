"""`python -m jobs.rebuild --store STORE --out OUT`: consume queues and index files from the commit log alone.

Writes OUT/consumequeue/<topic>/<queueId>/<20-digit start>, OUT/index/<yyyyMMddHHmmssSSS> and
OUT/reput-report.json, byte-identical to what the broker writes. The store is only read; OUT is built
beside itself in a staging directory, checked, then renamed into place (on object storage: written in
place and committed by the report, written last; jobs.pipeline.io.commit_marker).
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from jobs.pipeline.outputs.build import (IndexShare, build_files, name_index_files, one_stream_note,  # noqa: E402
                                       pending_name, plan_cq, plan_index, share_index_tasks)
from jobs.pipeline.runtime.cli import (EXIT_OK, add_generation_flag, emit, json_bytes, parser,  # noqa: E402
                                       progress_quiet, run_process, settings_from, time_zone, utf8_text)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.outputs.rocksdb_run import rebuild_rocksdb  # noqa: E402
from jobs.pipeline.outputs.rebuild_out import (REPORT_NAME, check_staged, full_run_sections,  # noqa: E402
                                              rebuild_scan, run_report)
from jobs.pipeline.since.inplace import rebuild_in_place  # noqa: E402
from jobs.pipeline.since.run import publish_out2  # noqa: E402
from jobs.pipeline.store.dispatch import store_dispatch_limit  # noqa: E402
from jobs.pipeline.scan.report_sections import add_dledger_flag  # noqa: E402
from jobs.pipeline.runtime.faults import pause_at  # noqa: E402
from jobs.pipeline.store.markers import store_generation  # noqa: E402
from jobs.pipeline.store.segments import list_segments  # noqa: E402
from storage_format.index_file import empty_file_index_count  # noqa: E402
from storage_format.cq_layout import is_rocksdb_type  # noqa: E402
from jobs.pipeline.io.fs import Location, location  # noqa: E402
from jobs.pipeline.io.live_broker import warn_if_running  # noqa: E402
from jobs.pipeline.io.paths import check_outside  # noqa: E402
from jobs.pipeline.io.publish import Output, output_for  # noqa: E402
from jobs.pipeline.scan.result import ScanResult  # noqa: E402
from jobs.pipeline.runtime.engine import TaskRunner, add_engine_flag, job_runner  # noqa: E402
from jobs.pipeline.runtime.tasks import run_tasks  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = parser("rebuild", "Rebuild consume queues and index files from a RocketMQ commit log, byte-exact.")
    p.add_argument("--out", help="output directory (must not exist unless --overwrite; not with --in-place)")
    p.add_argument("--only", choices=("consumequeue", "index"), help="build only this artifact")
    p.add_argument("--topics", type=utf8_text, help="comma-separated topics: build only their consume queues")
    p.add_argument("--index-name-tz", default="UTC", help="time zone of index file names (default UTC)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT atomically")
    p.add_argument("--accept-invalid-tail", action="store_true",
                   help="rebuild up to the first invalid record (as the broker dispatches) instead of refusing "
                        "a commit log that does not end cleanly")
    p.add_argument("--since", metavar="OUT1",
                   help="continue an earlier rebuild's OUT1 (only read): decode from the segment it ended in, append "
                        "to its consume queues and index, copy the rest; OUT equals a full rebuild (docs/nightly.md)")
    p.add_argument("--in-place", action="store_true",
                   help="with --since: bring OUT1 itself up to tonight (only the files that change are written; a "
                        "backup in --backup-dir, a journal; recover --resume / --rollback finish or undo a killed run)")
    p.add_argument("--backup-dir", help="with --in-place: where OUT1's replaced and deleted files are kept")
    add_generation_flag(p)
    add_dledger_flag(p)
    add_engine_flag(p, "rebuild")
    args = p.parse_args(argv)
    if args.in_place and not (args.since and args.backup_dir):
        p.error("--in-place needs --since OUT1 and --backup-dir")
    if args.in_place and args.out and args.out != args.since:
        p.error("--in-place writes OUT1 itself: drop --out (or give --since's directory)")
    if not args.in_place and not args.out:
        p.error("the following arguments are required: --out")
    args.out = args.out or args.since
    return args


def main(argv: list[str] | None = None) -> int:
    """Check what is cheap to check, then scan, build, check the staged files and publish them."""
    args = _args(argv)
    quiet = progress_quiet(args)
    store, settings = check_store(args, settings_from(args))
    out = location(args.out)
    warn_if_running("rebuild", store)
    check_outside(store, out, "--since" if args.in_place else "--out")  # --in-place's OUT is --since's directory
    report_loc = check_report(args, store)
    topics = {t for t in args.topics.split(",") if t} if args.topics else None
    tz = time_zone("--index-name-tz", args.index_name_tz)
    with_cq = args.only != "index"
    with_index = args.only != "consumequeue" and settings.message_index_enable
    limit = store_dispatch_limit(store, settings, args.dledger_reading)
    if is_rocksdb_type(settings):  # OUT/consumequeue/ a RocksDB database (outputs.rocksdb_run)
        emit(args, rebuild_rocksdb(args, store, settings, out, limit, tz, quiet), _print_human, report_loc)
        return EXIT_OK
    if args.since:  # OUT1 continued: into OUT2, or in place (since/: the checks before Spark, the run, the report)
        continued = rebuild_in_place if args.in_place else publish_out2
        emit(args, continued(args, store, settings, limit, tz, quiet), _print_human, report_loc)
        return EXIT_OK
    segments = list_segments(store, settings)  # a store's refusals by name come before OUT is locked
    staging = output_for(out, REPORT_NAME, "rebuild", args.overwrite)  # refuses an existing OUT before Spark starts
    with staging:  # the run lock is released however it ends (the engine's start refused included)
        sc, engine = job_runner(args, "rebuild", sum(s.size for s in segments), settings)
        timings: dict[str, float] = {}
        started = time.monotonic()
        scan = rebuild_scan(args, sc, store, settings, staging.work, segments, limit, with_cq, with_index, quiet,
                            timings)
        t0 = time.monotonic()
        cq_tasks = _plan_cq_tasks(scan, settings, staging, topics, 2 * sc.default_parallelism) \
            if with_cq else []
        index_tasks = _plan_index_tasks(args, scan, settings, store, staging) if with_index else []
        cq_files, firsts, task_timings = _run_builds(sc, index_tasks + cq_tasks, quiet)
        index_names = _name_index_files(staging, scan, firsts, tz) if with_index else []
        timings["build_s"] = time.monotonic() - t0
        pause_at("after-build")
        timings.update(task_timings)
        timings["build_tasks"] = len(cq_tasks) + len(index_tasks)
        check_staged(staging.dir, settings, cq_files, index_names)
        timings["total_s"] = time.monotonic() - started
        report = run_report(args, scan, settings, cq_files, index_names, timings)
        full_run_sections(report, args, store, settings, scan, limit, engine)
        staging.publish(json_bytes(report))
    emit(args, report, _print_human, report_loc)
    return EXIT_OK


def _name_index_files(staging: Output, scan: ScanResult, firsts: list[tuple[int, int | None]],
                      tz: dt.tzinfo) -> list[str]:
    """The built index files renamed from their pending names to the broker's (the store time opening each)."""
    index_dir = staging.dir.child("index")
    names = name_index_files(scan, firsts, tz)
    for no, name in sorted(names.items()):
        index_dir.child(pending_name(no)).move_to(index_dir.child(name))
    return [names[no] for no in sorted(names)]


def _plan_cq_tasks(scan: ScanResult, settings: BrokerSettings, staging: Output, topics: set[str] | None,
                   target_tasks: int) -> list:
    """Consume-queue build tasks, writing under the staged consumequeue/ directory."""
    staging.dir.child("consumequeue").makedirs()
    return plan_cq(scan, settings, staging.work, staging.dir.child("consumequeue"), topics,
                   target_tasks=target_tasks)


def _plan_index_tasks(args: argparse.Namespace, scan: ScanResult, settings: BrokerSettings, store: Location,
                      staging: Output) -> list:
    """Index build tasks, writing under the staged index/ directory; notes the 4.x empty last-file header."""
    index_dir = staging.dir.child("index")
    index_dir.makedirs()
    guess = store_generation(store, args.rocketmq_version)
    index_tasks = plan_index(scan, settings, staging.work, index_dir, empty_file_index_count(guess.generation))
    if index_tasks and not index_tasks[-1].files[-1].sources and args.rocketmq_version is None \
            and guess.generation < 5:
        print("reput rebuild: note: the last index file holds no key; its header gets indexCount 0 as a "
              "4.9.x broker leaves it (no 5.x marker in the store); pass --rocketmq-version 5 for a 5.x "
              "store, whose shutdown writes 1", file=sys.stderr)
    return index_tasks


def _run_builds(sc: TaskRunner, tasks: list,
                quiet: bool) -> tuple[dict[str, int], list[tuple[int, int | None]], dict[str, float]]:
    """Run both kinds of build task in one Spark job (the longer index tasks first, a large index file cut into
    shares that the cores build side by side: meanwhile consume-queue tasks keep the other cores busy); returns
    the consume-queue files written, the index files' first keys and the per-kind task times."""
    tasks = shared_builds(tasks, sc.default_parallelism, "rebuild")
    return build_results(run_tasks(sc, tasks, build_files, "consume queues + index files", quiet=quiet), tasks)


def shared_builds(tasks: list, cores: int, job: str) -> list:
    """The build tasks with large index files cut into shares (share_index_tasks); a note on stderr where OUT
    takes no side-by-side writes into one file (one_stream_note)."""
    note = one_stream_note(tasks)
    if note:
        print(f"reput {job}: note: {note}", file=sys.stderr)
    return share_index_tasks(tasks, cores)


def build_results(results: list,
                  tasks: list) -> tuple[dict[str, int], list[tuple[int, int | None]], dict[str, float]]:
    """What build tasks (`tasks`) returned (build_files), gathered: the consume-queue files written, the index
    files' first keys and the per-kind task times (convert runs its build tasks in its write job)."""
    cq_files: dict[str, int] = {}
    firsts: list[tuple[int, int | None]] = []
    task_seconds = {"consumequeue": 0.0, "index": 0.0}
    longest = {"consumequeue": 0.0, "index": 0.0}
    for kind, result, seconds in results:
        task_seconds[kind] += seconds
        longest[kind] = max(longest[kind], seconds)
        if kind == "index":
            firsts.extend(result)
        else:
            cq_files.update(result)
    timings = {"consumequeue_task_s": task_seconds["consumequeue"], "index_task_s": task_seconds["index"],
               "longest_consumequeue_task_s": longest["consumequeue"], "longest_index_task_s": longest["index"],
               "index_share_tasks": sum(isinstance(t, IndexShare) for t in tasks)}
    return cq_files, firsts, timings


def _print_human(r: dict) -> None:
    if "since" in r:
        s = r["since"]
        print(f"continued {s['out']} into {r['out']} in {r['timings']['total_s']:.1f}s: decoded {s['bytes_decoded']} "
              f"bytes from offset {s['decoded_from']}, reused {s['bytes_reused']}; {r['consumequeue_files']} "
              f"consume-queue files ({s['consumequeue_files_written']} written), {len(r['index_files'])} index files "
              f"({len(s['index_files_written'])} written)")
        if "in_place" in r:
            i = r["in_place"]
            print(f"in place: {i['operations']} file operations; what they replaced or deleted is in {i['backup_dir']} "
                  f"(reput recover --store {r['out']} --rollback --backup-dir {i['backup_dir']} undoes them)")
    elif r.get("rocksdb"):
        d = r["rocksdb"]
        print(f"rebuilt a RocksDB consume-queue database ({d['units']} units in {d['queues']} queues, checkpoint "
              f"{d['checkpoint']}) and {len(r['index_files'])} index files from {r['message_records']} records into "
              f"{r['out']} in {r['timings']['total_s']:.1f}s")
    else:
        print(f"rebuilt {r['consumequeue_files']} consume-queue files and {len(r['index_files'])} index files "
              f"from {r['message_records']} records into {r['out']} in {r['timings']['total_s']:.1f}s")
    print(f"scan ended: {r['scan_end_detail']}")


if __name__ == "__main__":
    run_process("rebuild", main)
