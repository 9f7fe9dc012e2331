"""`python -m jobs.dump --store STORE ...`: the store's files as operators know them from `mqadmin queryCq` /
`printMsgByQueue` and `kafka-dump-log --deep-iteration`, read directly (no Spark):

  --topic T --queue Q [--from N] [--count K]   consume-queue entries with the records they point at
  --offset O [--count K]                       commit-log records (headers and properties) from an offset
  --index-file NAME [--from P --count K]       one index file: header, slot use, chain lengths (and entries)

Plain text by default, one JSON object per line with --json. Exit status 0 = dumped, 2 = could not run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # spark-submit jobs/dump.py: make the repo root importable, and drop
    # jobs/ itself from the path (jobs/inspect.py would shadow the standard library's inspect)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.pipeline.cli import EXIT_OK, JobError, parser, run_main, settings_from  # noqa: E402
from jobs.pipeline.store_gate import store_settings  # noqa: E402
from jobs.pipeline.dump_text import row_lines  # noqa: E402
from jobs.pipeline.dumps import dump_index, dump_queue, dump_records  # noqa: E402
from jobs.pipeline.fs import location  # noqa: E402

DEFAULT_COUNT = 20


def _args(argv: list[str] | None):
    """Command line: exactly one of the three things to dump."""
    p = parser("dump", "Dump one consume queue, commit-log records from an offset, or one index file "
                       "(like mqadmin queryCq/printMsgByQueue and kafka-dump-log).")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", help="with --queue: dump this consume queue")
    what.add_argument("--offset", type=int, help="dump commit-log records from this physical offset (a record's start)")
    what.add_argument("--index-file", help="dump this file of index/ (its name, e.g. 20261122050800409)")
    p.add_argument("--queue", type=int, help="queue id (with --topic)")
    p.add_argument("--from", dest="first", type=int,
                   help="first queue offset (default: the queue's first entry) or first index entry position (default 1)")
    p.add_argument("--count", type=int, help=f"how many entries/records (default {DEFAULT_COUNT}; "
                                             f"index entries are listed only when --count is given)")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    args = p.parse_args(argv)
    if args.topic is not None and args.queue is None:
        p.error("--topic needs --queue")
    if args.queue is not None and args.topic is None:
        p.error("--queue needs --topic")
    if args.count is not None and args.count < 0 or args.first is not None and args.first < 0:
        p.error("--from and --count must not be negative")
    if args.first is not None and args.offset is not None:
        p.error("--from goes with --topic/--queue or --index-file; give records' start with --offset")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: read what was asked and print it row by row."""
    args = _args(argv)
    settings = settings_from(args)
    store = location(args.store)
    settings = store_settings(store, settings, args.broker_config is not None)
    if not store.is_dir():
        raise JobError(f"{store.uri}: not a directory")
    count = DEFAULT_COUNT if args.count is None else args.count
    if args.topic is not None:
        rows = dump_queue(store, settings, args.topic, args.queue, args.first, count)
    elif args.offset is not None:
        rows = dump_records(store, settings, args.offset, count)
    else:
        rows = dump_index(store, settings, args.index_file, args.first, args.count or 0)
    for row in rows:
        print(json.dumps(row, ensure_ascii=False) if args.json else "\n".join(row_lines(row)))
    return EXIT_OK


if __name__ == "__main__":
    run_main("dump", main)
