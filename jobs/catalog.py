"""`python -m jobs.catalog --store STORE --table PATH`: a Delta table of decoded record metadata.

Spark tasks decode the stitched broker scan and write Parquet files under TABLE/topic=<escaped>/; the
driver commits them in one Delta transaction (deltalake package) carrying the application transaction
`reput-catalog:<store id>` whose version is the commit-log offset the table now covers (the end of the
last catalogued record). A re-run reads that version, scans only from the segment holding it and appends
only records past it; when nothing is new it commits nothing. The first run creates the empty table
(version 0) before any file is written, so files of a run that fails are orphans inside a Delta table
(removed by the run itself when it can, else by `DeltaTable.vacuum`), never a half-made table.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import contextlib  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Iterator  # noqa: E402

import pyarrow as pa  # noqa: E402
from deltalake import CommitProperties, DeltaTable, Schema, Transaction  # noqa: E402
from deltalake.exceptions import DeltaError  # noqa: E402
from deltalake.transaction import AddAction  # noqa: E402

from jobs.pipeline.catalog.parquet import (  # noqa: E402
    PARTITION_COLUMN, CatalogTask, CatalogTaskResult, DataFile, catalog_schema, write_split)
from jobs.pipeline.runtime.cli import (EXIT_OK, JobError, add_generation_flag, emit, parser,  # noqa: E402
                                       progress_quiet, run_process, settings_from, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.store.markers import store_generation  # noqa: E402
from jobs.pipeline.io.fs import Location, delta_storage_options, location  # noqa: E402
from jobs.pipeline.io.run_lock import held_beside  # noqa: E402
from jobs.pipeline.io.live_broker import warn_if_running  # noqa: E402
from jobs.pipeline.io.paths import check_outside  # noqa: E402
from jobs.pipeline.scan.result import ScanResult  # noqa: E402
from jobs.pipeline.scan.decode import scan_store  # noqa: E402
from storage_format.scan_plan import DEFAULT_SPLIT_SIZE  # noqa: E402
from jobs.pipeline.runtime.engine import add_engine_flag, job_runner  # noqa: E402
from jobs.pipeline.runtime import interrupt  # noqa: E402
from jobs.pipeline.runtime.tasks import run_tasks  # noqa: E402
from storage_format.multi_dispatch import MultiDispatchRules, rules_for  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402

APP_ID_PREFIX = "reput-catalog:"


def app_id(store_id: str) -> str:
    """The Delta application id whose transaction version is the store's high-water mark."""
    return APP_ID_PREFIX + store_id


def delta_table(table: Location) -> DeltaTable:
    """The Delta table at TABLE as it is now (object-storage settings from the environment: fs.py)."""
    return DeltaTable(table.uri, storage_options=delta_storage_options(table.uri))


def open_table(table: Location, include_body: bool) -> DeltaTable:
    """The Delta table at TABLE, created empty (schema, partitioning) when TABLE is new or an empty
    directory; any other existing path is refused."""
    options = delta_storage_options(table.uri)
    if DeltaTable.is_deltatable(table.uri, options):
        return delta_table(table)
    if table.exists() and (not table.is_dir() or table.list()):
        raise JobError(f"--table {table.uri} exists and is not a Delta table; choose a new path")
    try:
        return DeltaTable.create(table.uri, Schema.from_arrow(catalog_schema(include_body)), mode="error",
                                 partition_by=[PARTITION_COLUMN], name="reput-catalog",
                                 description="RocketMQ commit-log record metadata (reput catalog)",
                                 storage_options=options)
    except DeltaError:
        if DeltaTable.is_deltatable(table.uri, options):  # created by a concurrent run
            return delta_table(table)
        raise


def table_has_body(delta: DeltaTable, include_body: bool) -> bool:
    """Whether rows carry bodies: an existing table's schema decides; asking for bodies it lacks is an error."""
    names = [f.name for f in delta.schema().fields]
    has_body = "body" in names
    expected = catalog_schema(has_body).names
    if names != expected:
        raise JobError(f"the table's columns {names} are not the catalog's {expected}")
    if include_body and not has_body:
        raise JobError("the table was created without bodies; --include-body needs a new table")
    return has_body


def plan_tasks(result: ScanResult, settings: BrokerSettings, since: int | None, table: Location,
               store_id: str, include_body: bool, run_id: str,
               lmq: MultiDispatchRules | None = None) -> list[CatalogTask]:
    """One task per accepted split that holds a record past the high-water mark."""
    tasks = []
    for s in result.accepted:
        if not s.records or s.first_offset is None:
            continue
        if since is not None and (s.last_record_end or 0) <= since:
            continue
        sp = result.splits[s.index]
        tasks.append(CatalogTask(split=sp, settings=settings, first_offset=s.first_offset, records=s.records,
                                 since=since, table=table, store_id=store_id, run_id=run_id,
                                 include_body=include_body, lmq=lmq))
    return tasks


def delete_run_files(table: Location, run_id: str) -> None:
    """Remove the data files a run wrote but did not commit (names carry the run id)."""
    for info in table.walk_files():
        if run_id in info.base_name and "/_delta_log/" not in info.path:
            table.fs.delete_file(info.path)


def commit(delta: DeltaTable, files: list[DataFile], schema: pa.Schema, props: CommitProperties) -> None:
    """Add every file to the table in one Delta transaction (with the run's application transaction)."""
    adds = [AddAction(f.path, f.size, {PARTITION_COLUMN: f.topic}, f.modification_time, True, f.stats)
            for f in files]
    try:
        delta.create_write_transaction(adds, "append", schema, partition_by=[PARTITION_COLUMN],
                                       commit_properties=props)
    except DeltaError as exc:
        raise JobError(f"Delta commit failed (another catalog run may have committed first; re-run): {exc}") from exc


@contextlib.contextmanager
def _run_files(table: Location, app: str, end: int) -> Iterator[str]:
    """A run id for the block's data files, which are removed unless the block committed them: at once after an
    error, after an interrupt once the engine has stopped writing (interrupt.finish: no task's late file is left)."""
    run_id = uuid.uuid4().hex

    def drop() -> None:  # files the table does not reference are ours to drop (a concurrent run's commit of the
        added = pa.table(delta_table(table).get_add_actions(flatten=False)).column("path")  # same range took the
        if not any(run_id in path for path in added.to_pylist()):  # version: that says nothing of ours)
            delete_run_files(table, run_id)

    with interrupt.removed_unless_kept(run_id, drop, keep=True):
        yield run_id


def _say_tail(problems: list[str]) -> None:
    """A log that does not end cleanly is catalogued up to its valid end, as the broker dispatches it: said so."""
    for problem in problems:
        warn("catalog", f"{problem}; the catalog holds the records before it")


def table_held(table: Location) -> contextlib.AbstractContextManager:
    """One run per local table at a time: a second one is refused at once, naming the first (elsewhere Delta's own
    commit protocol refuses the later of two runs that catalogue the same records)."""
    return held_beside(table, "catalog", "--table")


def catalog(sc, store: Location, table: Location, settings: BrokerSettings, **options) -> dict:
    """Append the store's records past the table's high-water mark, holding the table (`_catalog`); the report."""
    with table_held(table):
        return _catalog(sc, store, table, settings, **options)


def _catalog(sc, store: Location, table: Location, settings: BrokerSettings, *, store_id: str | None = None,
             include_body: bool = False, split_size: int = DEFAULT_SPLIT_SIZE, quiet: bool = False,
             generation: int | None = None) -> dict:
    check_outside(store, table, "--table")
    sid = store_id or store.uri
    app = app_id(sid)
    delta = open_table(table, include_body)
    include_body = table_has_body(delta, include_body)
    since = delta.transaction_version(app)
    result = scan_store(sc, store, settings, split_size=split_size, with_cq=False, with_keys=False,
                        from_offset=since, label="catalog scan", quiet=quiet, keep_queues=False)
    end = result.max_physical_offset if result.segments else (since or 0)
    report = {"table": table.uri, "store": store.uri, "store_id": sid, "app_id": app,
              "from_offset": since, "to_offset": end, "committed": False, "delta_version": delta.version(),
              "rows_appended": 0, "files_added": 0, "rows_per_topic": {},
              "scan_end": result.end.as_list() if result.end else None, "gap": None,
              "tail_problems": result.tail_problems()}
    _say_tail(report["tail_problems"])
    if since is not None and result.segments and result.segments[0].start > since:
        report["gap"] = [since, result.segments[0].start]
        warn("catalog", f"commit log between {since} and {result.segments[0].start} is gone (segments expired?); "
                        f"those records are not in the catalog")
    if since is not None and end < since and result.segments:
        raise JobError(f"the store's valid commit log ends at {end}, before the table's high-water mark {since} "
                       f"for {app}: the store was truncated or is a different store (use another --store-id)")
    if since is not None and end <= since:
        report["to_offset"] = since
        return report
    with _run_files(table, app, end) as run_id:
        lmq = (rules_for(True, settings.enable_lmq, store_generation(store, generation).generation)
               if settings.enable_multi_dispatch else None)
        tasks = plan_tasks(result, settings, since, table, sid, include_body, run_id, lmq)
        results: list[CatalogTaskResult] = run_tasks(sc, tasks, write_split, "catalog write", quiet=quiet)
        problems = [r.error for r in results if r.error]
        if any(r.straddles_since for r in results):
            problems.append(f"a record crosses the table's high-water mark {since}: the store does not continue "
                            f"the catalogued commit log (a different store? use another --store-id)")
        if problems:
            raise JobError("; ".join(problems))
        files = [f for r in results for f in r.files]
        rows: Counter[str] = Counter()
        for f in files:
            rows[f.topic] += f.rows
        props = CommitProperties(
            app_transactions=[Transaction(app, end)],
            custom_metadata={"reput.storeId": sid, "reput.store": store.uri, "reput.fromOffset": since,
                             "reput.toOffset": end, "reput.rows": sum(rows.values())})
        commit(delta, files, catalog_schema(include_body), props)
    report.update(committed=True, delta_version=delta_table(table).version(), rows_appended=sum(rows.values()),
                  files_added=len(files), rows_per_topic=dict(sorted(rows.items())))
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (0, or 2 through run_main on errors)."""
    p = parser("catalog", "Append a RocketMQ commit log's record metadata to a Delta table (partitioned by topic).")
    p.add_argument("--table", required=True, help="Delta table path or URI (created on the first run)")
    p.add_argument("--store-id", help="name of this store in the table (default: the store's absolute path); "
                                      "keep it when the store moves or when cataloguing a copy")
    p.add_argument("--include-body", action="store_true", help="also store message bodies (new tables only)")
    add_generation_flag(p)
    add_engine_flag(p, "catalog")
    args = p.parse_args(argv)
    store, settings = check_store(args, settings_from(args))
    table = location(args.table)
    warn_if_running("catalog", store)
    check_outside(store, table, "--table")
    report_loc = check_report(args, store)
    with table_held(table):  # before the engine starts: a second run is refused at once
        sc, engine = job_runner(args, "catalog", settings=settings)
        report = _catalog(sc, store, table, settings, store_id=args.store_id, include_body=args.include_body,
                          split_size=args.split_size, quiet=progress_quiet(args), generation=args.rocketmq_version)
    report["engine"] = engine.to_dict()
    report["log_place"] = args.log_place  # where the records were read (outside --store: storePathCommitLog, ...)
    emit(args, report, _print_human, report_loc)
    return EXIT_OK


def _print_human(r: dict) -> None:
    """The console summary of a run."""
    if not r["committed"]:
        print(f"nothing new: {r['table']} already covers {r['app_id']} up to offset {r['to_offset']} "
              f"(Delta version {r['delta_version']})")
        return
    since = "" if r["from_offset"] is None else f", new since offset {r['from_offset']}"
    print(f"Delta version {r['delta_version']}: appended {r['rows_appended']} records in {r['files_added']} files "
          f"(commit log up to offset {r['to_offset']}{since})")
    for topic, n in r["rows_per_topic"].items():
        print(f"  {topic}: {n}")


if __name__ == "__main__":
    run_process("catalog", main)
