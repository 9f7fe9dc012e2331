"""`python -m jobs.inspect --store STORE [--json]`: what is in a store's commit log, computed with Spark."""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # spark-submit jobs/inspect.py: make the repo root importable, and drop
    # jobs/ itself from the path (jobs/inspect.py would shadow the standard library's inspect)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.pipeline.cli import (EXIT_OK, add_generation_flag, parser, print_json, run_main,  # noqa: E402
                              settings_from)
from jobs.pipeline.fs import location  # noqa: E402
from jobs.pipeline.store_gate import store_settings  # noqa: E402
from jobs.pipeline.scan import ScanResult, scan_store  # noqa: E402
from jobs.pipeline.session import get_spark  # noqa: E402


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
        "problems": result.tail_problems(),
        "segments": len(result.segments),
        "segments_with_data_after_end": result.stitched.data_after_end,
        "bytes_read": result.bytes_read,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser("inspect", "Summarise a RocketMQ store's commit log (records, queues, where the data ends).")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_generation_flag(p)
    args = p.parse_args(argv)
    settings = settings_from(args)
    settings = store_settings(location(args.store), settings, args.broker_config is not None)
    spark = get_spark("inspect", args.master)
    result = scan_store(spark, location(args.store), settings, with_keys=False,
                        split_size=args.split_size, generation=args.rocketmq_version,
                        quiet=args.json)
    report = summary(result)
    if args.json:
        print_json(report)
    else:
        _print_human(report)
    return EXIT_OK


def _print_human(r: dict) -> None:
    print(f"message records      {r['message_records']}")
    print(f"blank records        {r['blank_end_of_file_records']}")
    print(f"max physical offset  {r['max_physical_offset']}")
    print(f"store timestamps     {r['first_store_timestamp']} .. {r['last_store_timestamp']}")
    print(f"scan ended           {r['scan_end_detail']}")
    for topic, queues in r["records_per_topic_queue"].items():
        print(f"  {topic}: " + ", ".join(f"q{q}={n}" for q, n in queues.items()))
    lmq = [(f"{t}/{q}", n) for t, qs in r["lmq_entries_per_queue"].items() for q, n in qs.items()]
    if lmq:
        top = ", ".join(f"{name}={n}" for name, n in sorted(lmq, key=lambda x: (-x[1], x[0]))[:LMQ_SHOWN])
        print(f"LMQ queues           {len(lmq)} with {sum(n for _, n in lmq)} entries; largest: {top}")
    for problem in r["problems"]:
        print(f"WARNING: {problem}")


if __name__ == "__main__":
    run_main("inspect", main)
