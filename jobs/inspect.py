"""`python -m jobs.inspect --store STORE [--json]`: what is in a store's commit log, computed with Spark."""
from __future__ import annotations

import contextlib
import sys

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

from jobs.pipeline.runtime.cli import (EXIT_OK, add_generation_flag, emit, parser, progress_quiet,  # noqa: E402
                                       run_process, settings_from, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.scan.report_sections import add_dledger_flag, dledger_section  # noqa: E402
from jobs.pipeline.io.live_broker import warn_if_running  # noqa: E402
from jobs.pipeline.io.rocksdb_db import open_store_database  # noqa: E402
from jobs.pipeline.io.store_gate import store_cq_layout  # noqa: E402
from jobs.pipeline.store.rocksdb_summary import DatabaseCounts, count_database  # noqa: E402
from jobs.pipeline.scan.result import ScanResult  # noqa: E402
from jobs.pipeline.scan.queue_order import out_of_step_names  # noqa: E402
from jobs.pipeline.scan.decode import scan_store  # noqa: E402
from jobs.pipeline.runtime.engine import add_engine_flag, job_runner, local_cores  # noqa: E402
from jobs.pipeline.runtime.contract import under_spark_submit  # noqa: E402
from jobs.pipeline.runtime import env  # noqa: E402
from jobs.pipeline.io.fs import Location  # noqa: E402
from jobs.pipeline.io.workdir import fresh_work_dir, removed_after  # noqa: E402


LMQ_SHOWN = 5  # LMQ queues named in the human summary (a store can have 100,000s; --json lists all)


def summary(result: ScanResult) -> dict:
    """The inspect report; keys are a stable interface for scripts."""
    acc = result.accepted
    first = [s.min_store_ts for s in acc if s.min_store_ts is not None]
    last = [s.max_store_ts for s in acc if s.max_store_ts is not None]
    end = result.end
    return {
        "message_records": result.message_records,
        "blank_end_of_file_records": sum(s.blanks for s in acc),
        "max_physical_offset": result.max_physical_offset,
        "first_store_timestamp": min(first) if first else None,
        "last_store_timestamp": max(last) if last else None,
        "records_per_topic_queue": {t: {str(q): n for q, n in qs.items()}
                                    for t, qs in result.records_per_queue().items()},
        "lmq_entries_per_queue": {t: {str(q): n for q, n in qs.items()}
                                  for t, qs in result.lmq_entries_per_queue().items()},
        "scan_end": end.as_list() if end else None,
        "scan_end_detail": end.describe() if end else None,
        "problems": result.tail_problems() + ([result.negative_queue_ids.describe()]
                                              if result.negative_queue_ids is not None else []) + _step_problem(result),
        "segments": len(result.segments),
        "segments_with_data_after_end": result.stitched.data_after_end,
        "bytes_read": result.bytes_read,
    }


def _step_problem(result) -> list[str]:
    """Queues whose queueOffsets do not step by 1 (a damaged record), by name: verify and rebuild name the record."""
    names = out_of_step_names(result)
    if not names:
        return []
    return [f"queueOffsets of {len(names)} queue{'s' if len(names) > 1 else ''} ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''}) do not step by 1 in commit-log order (a damaged record): the "
            f"broker's consume queue skips or moves such entries; verify names the record by file and byte offset"]


def main(argv: list[str] | None = None) -> int:
    p = parser("inspect", "Summarise a RocketMQ store's commit log (records, queues, where the data ends).")
    add_generation_flag(p)
    add_dledger_flag(p)
    add_engine_flag(p, "inspect")
    p.add_argument("--work-dir", help="where the decode tasks put their splits' queue tables (default: the system "
                                      "temp dir with a local master; on a cluster, storage the executors share)")
    args = p.parse_args(argv)
    store, settings = check_store(args, settings_from(args))
    warn_if_running("inspect", store)
    report_loc = check_report(args, store)
    database = _database_counts(store, settings)  # before Spark: a database that cannot be read stops the job here
    tables = _tables_dir(args, store)
    sc, engine = job_runner(args, "inspect", settings=settings)
    with removed_after(tables) if tables is not None else contextlib.nullcontext():  # the report reads the tables
        result = scan_store(sc, store, settings, with_keys=False, split_size=args.split_size,
                            generation=args.rocketmq_version, quiet=progress_quiet(args), tables=tables)
        report = summary(result)
    report["queue_tables"] = "work directory" if tables is not None else f"driver ({TABLES_TO_DRIVER})"
    report["engine"] = engine.to_dict()
    report["log_place"] = args.log_place  # where the records were read (outside --store: storePathCommitLog, ...)
    report["cq_layout"] = args.cq_layout  # where the consume queues are, what that leaves unread
    if database is not None:
        report["rocksdb"] = database.to_dict(result.max_physical_offset)
    dledger = dledger_section("inspect", store, settings, args.dledger_reading, result)
    if dledger is not None:
        report["dledger"] = dledger
    emit(args, report, _print_human, report_loc)
    return EXIT_OK


def _database_counts(store: Location, settings) -> DatabaseCounts | None:
    """A RocksDB store's consume-queue database counted (store.rocksdb_summary); None for file consume queues."""
    layout = store_cq_layout(store, settings)
    if not layout.reads_database:
        return None
    with open_store_database(store, layout.db_dir) as db:
        return count_database(db)


def _tables_dir(args, store: Location) -> Location | None:
    """Where the splits' queue tables go: --work-dir, else the system temp dir when driver and tasks share this
    machine (a local master outside spark-submit); on a cluster without --work-dir they come to the driver (its
    memory then grows with queues x splits), which a note says."""
    master = args.master or env.value("REPUT_SPARK_MASTER")
    submitted = under_spark_submit()
    if args.work_dir or (local_cores(master) is not None and not submitted):
        return fresh_work_dir(store, args.work_dir, "inspect")
    if not submitted:  # under spark-submit stderr joins stdout (a --json report would not parse): the report says it
        print(f"reput inspect: note: {TABLES_TO_DRIVER}", file=sys.stderr)
    return None


TABLES_TO_DRIVER = ("no --work-dir on a cluster: every split's queue table comes to the driver, whose memory grows "
                    "with queues x splits; pass --work-dir on storage the executors share")


def _print_human(r: dict) -> None:
    print(f"message records      {r['message_records']}")
    print(f"blank records        {r['blank_end_of_file_records']}")
    print(f"max physical offset  {r['max_physical_offset']}")
    print(f"store timestamps     {r['first_store_timestamp']} .. {r['last_store_timestamp']}")
    print(f"scan ended: {r['scan_end_detail']}")
    if "dledger" in r:
        d = r["dledger"]
        print(f"DLedger entries      {d['entries']} (index {d['first_entry_index']} .. {d['last_entry_index']}) in "
              f"{d['data_files']} data files" + (f" after {d['plain_segments']} plain segments (dividedCommitlogOffset "
                                                  f"{d['divided_commitlog_offset']})" if d['plain_segments'] else ""))
        print(f"DLedger last entry   index {d['last_entry_index']}, term {d['last_entry_term']}; committedIndex "
              f"{(d['checkpoint'] or {}).get('committedIndex')} (the DLedger checkpoint)")
        print(f"DLedger reading      {d['committed_reading']['reading']}; past committedIndex: "
              f"{d['entries_past_committed_index']}")
    for topic, queues in r["records_per_topic_queue"].items():
        print(f"  {topic}: " + ", ".join(f"q{q}={n}" for q, n in queues.items()))
    print(f"consume queues       {r['cq_layout']['layout']}" + (f" ({r['cq_layout']['database_dir']}/)"
                                                                if r['cq_layout']['database_dir'] else ""))
    if "rocksdb" in r:
        _print_rocksdb(r["rocksdb"], r["max_physical_offset"])
    lmq = [(f"{t}/{q}", n) for t, qs in r["lmq_entries_per_queue"].items() for q, n in qs.items()]
    if lmq:
        top = ", ".join(f"{name}={n}" for name, n in sorted(lmq, key=lambda x: (-x[1], x[0]))[:LMQ_SHOWN])
        print(f"LMQ queues           {len(lmq)} with {sum(n for _, n in lmq)} entries; largest: {top}")
    for problem in r["problems"]:
        warn("inspect", problem)



def _print_rocksdb(d: dict, log_end: int) -> None:
    """The RocksDB database's counts (inspect's human summary)."""
    print(f"RocksDB units        {d['units']} in {d['queues']} queues of {d['topics']} topics; \"max\" records "
          f"{d['max_records']}, \"min\" records {d['min_records']}")
    if d["checkpoint"] is None:
        print("RocksDB checkpoint   absent (CHECKPOINT_TOPIC reads 0): a clean start dispatches only records past "
              "offset 0, the record at offset 0 gets no unit")
    else:
        print(f"RocksDB checkpoint   {d['checkpoint']} (CHECKPOINT_TOPIC), {d['checkpoint_behind_log_end']} bytes "
              f"behind the commit log's end {log_end}")
    if d["units_past_max"]:
        print(f"RocksDB dirty tail   {d['units_past_max']} units past their queue's \"max\" record (never read)")
    if d["queues_without_max"]:
        print(f"RocksDB no \"max\"     {len(d['queues_without_max'])} queues with units: "
              f"{', '.join(d['queues_without_max'][:LMQ_SHOWN])}")
    if d["unreferenced_files"]:
        print(f"RocksDB unreferenced {', '.join(d['unreferenced_files'])} (not in the database's MANIFEST: not read)")


if __name__ == "__main__":
    run_process("inspect", main)
