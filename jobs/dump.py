"""`python -m jobs.dump --store STORE ...`: the store's files as operators know them from `mqadmin queryCq` /
`printMsgByQueue` and `kafka-dump-log --deep-iteration`, read directly (no Spark):

  --topic T --queue Q [--from N] [--count K]   consume-queue entries with the records they point at
  --offset O [--count K]                       commit-log records (headers and properties) from an offset
  --index-file NAME [--from P --count K]       one index file: header, slot use, chain lengths (and entries)
  --queue-offsets [--count K]                  a RocksDB store's `offset` column family ("max"/"min", checkpoint)
  --checkpoint                                 the `checkpoint` file, and a RocksDB store's dispatch checkpoint

A RocksDB store's queues (storeType=defaultRocksDB) are read from its database, read-only.

Plain text by default, one JSON object per line with --json. Exit status 0 = dumped, 2 = could not run.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401

if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import json  # noqa: E402
from typing import Iterator  # noqa: E402

from jobs.pipeline.convert.msgid_map import new_offset  # noqa: E402
from jobs.pipeline.runtime.cli import EXIT_OK, JobError, parser, run_process, settings_from, utf8_text  # noqa: E402
from jobs.pipeline.io.job_args import check_store  # noqa: E402
from jobs.pipeline.dump.text import row_lines  # noqa: E402
from jobs.pipeline.dump.readers import dump_index, dump_queue, dump_records  # noqa: E402
from jobs.pipeline.dump.rocksdb import dump_checkpoints, dump_rocksdb_offsets, dump_rocksdb_queue  # noqa: E402
from jobs.pipeline.io.store_gate import store_cq_layout  # noqa: E402
from jobs.pipeline.io.live_broker import warn_if_running  # noqa: E402

DEFAULT_COUNT = 20


def _args(argv: list[str] | None):
    """Command line: exactly one of the three things to dump."""
    p = parser("dump", "Dump one consume queue, commit-log records from an offset, or one index file "
                       "(like mqadmin queryCq/printMsgByQueue and kafka-dump-log).",
               json_help="one JSON object per line instead of text", report=False)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", type=utf8_text, help="with --queue: dump this consume queue")
    what.add_argument("--offset", type=int, help="dump commit-log records from this physical offset (a record's start)")
    what.add_argument("--index-file", help="dump this file of index/ (its name, e.g. 20261122050800409)")
    what.add_argument("--queue-offsets", action="store_true",
                      help="dump a RocksDB store's offset column family: each queue's \"max\"/\"min\" record and "
                           "the dispatch checkpoint (all of it unless --count)")
    what.add_argument("--checkpoint", action="store_true",
                      help="dump the checkpoint file, and a RocksDB store's dispatch checkpoint (CHECKPOINT_TOPIC)")
    p.add_argument("--queue", type=int, help="queue id (with --topic)")
    p.add_argument("--from", dest="first", type=int,
                   help="first queue offset (default: the queue's first entry) or first index entry position (default 1)")
    p.add_argument("--count", type=int, help=f"how many entries/records (default {DEFAULT_COUNT}; "
                                             f"index entries are listed only when --count is given)")
    args = p.parse_args(argv)
    if args.topic is not None and args.queue is None:
        p.error("--topic needs --queue")
    if args.queue is not None and args.topic is None:
        p.error("--queue needs --topic")
    if any(v is not None and v < 0 for v in (args.count, args.first, args.offset)):
        p.error("--from, --count and --offset must not be negative")
    if args.first is not None and args.offset is not None:
        p.error("--from goes with --topic/--queue or --index-file; give records' start with --offset")
    if args.first is not None and (args.queue_offsets or args.checkpoint):
        p.error("--from goes with --topic/--queue or --index-file")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: read what was asked and print it row by row."""
    args = _args(argv)
    store, settings = check_store(args, settings_from(args))
    warn_if_running("dump", store)
    count = DEFAULT_COUNT if args.count is None else args.count
    layout = store_cq_layout(store, settings)
    database = layout.db_dir if layout.reads_database else None
    if args.queue_offsets and database is None:
        raise JobError(f"--queue-offsets: {store.uri} keeps its consume queues as files ({layout.kind} layout), not "
                       f"in a RocksDB database (storeType=defaultRocksDB): there is no offset column family to dump")
    if args.topic is not None:
        rows = (dump_rocksdb_queue(store, settings, database, args.topic, args.queue, args.first, count)
                if database else dump_queue(store, settings, args.topic, args.queue, args.first, count))
    elif args.queue_offsets:
        rows = dump_rocksdb_offsets(store, database, args.count)
    elif args.checkpoint:
        rows = dump_checkpoints(store, settings, database)
    elif args.offset is not None:
        rows = _moved_note(store, args.offset, dump_records(store, settings, args.offset, count))
    else:
        rows = dump_index(store, settings, args.index_file, args.first, args.count or 0)
    for row in rows:
        print(json.dumps(row, ensure_ascii=False) if args.json else "\n".join(row_lines(row)))
    return EXIT_OK


def _moved_note(store, offset: int, rows: Iterator[dict]) -> Iterator[dict]:
    """The rows, and when no record starts at `offset` in a store `convert` wrote, where the record that sat there
    before the conversion is now (its msgId map): an old offset, from an old id or a log, is a common question."""
    for i, row in enumerate(rows):
        if i == 0 and row.get("kind") == "end":
            moved = new_offset(store, offset)
            if moved is not None:
                row = {**row, "moved_to": moved, "detail": f"{row.get('detail', row.get('reason'))}; offset {offset} is "
                       f"from before convert: that record is now at offset {moved} (dump --offset {moved})"}
        yield row


if __name__ == "__main__":
    run_process("dump", main)
