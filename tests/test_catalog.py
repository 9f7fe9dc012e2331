"""jobs.catalog: the Delta table of record metadata against golden manifests, appends and re-runs."""
from __future__ import annotations

import json
import os
import shutil
import struct
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

from jobs.catalog import app_id, catalog
from jobs.catalog import main as catalog_main
from jobs.pipeline.catalog.parquet import MAX_DIR_BYTES, catalog_schema, partition_dir, timestamps
from jobs.pipeline.runtime.cli import JobError
from jobs.pipeline.io.fs import location
from jobs.pipeline.runtime.tasks import SparkRunner
from storage_format.msg_id import decode_offset_msg_ids
from storage_format.settings import load_settings
from tests.conftest import GOLDEN, expected_scan, manifest
from tests.helpers import per_topic_queue

pytestmark = pytest.mark.floors  # deltalake commits: make test-floors runs it at the dependency floors

SMALL = "clean-small-11"


def run_catalog(capsys, store: Path, table: Path, *extra: str) -> dict:
    """jobs.catalog's main with --json; its report."""
    code = catalog_main(["--store", str(store), "--broker-config", str(store / "broker.conf"),
                         "--table", str(table), "--json", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def data_files(table: Path) -> set[str]:
    """Parquet files on disk, relative to the table root."""
    return {p.relative_to(table).as_posix() for p in table.rglob("*.parquet")}


def committed_files(dt: DeltaTable) -> set[str]:
    """Data files of the table's current version (the log stores them URI-encoded)."""
    return {unquote(p) for p in pa.table(dt.get_add_actions()).column("path").to_pylist()}


@pytest.mark.parametrize(("case", "split_size"), [(SMALL, "0"), ("v5-clean-small-11", "100000"),
                                                  ("dledger-upgrade-11", "100000")])
def test_catalog_matches_manifest_and_rerun_commits_nothing(case, split_size, spark, capsys, tmp_path):
    """Rows per topic/queue read back with deltalake equal the manifest (whole-segment tasks, and
    splits that start mid-segment); every offset message id decodes to its record's offset; a second
    run commits no new Delta version."""
    store, table = GOLDEN / case, tmp_path / "catalog"
    m = manifest(case)
    first = run_catalog(capsys, store, table, "--split-size", split_size)
    assert first["committed"] and first["delta_version"] == 1  # version 0 created the empty table
    assert first["to_offset"] == expected_scan(case)["max_physical_offset"]
    dt = DeltaTable(str(table))
    rows = dt.to_pyarrow_table()
    assert rows.num_rows == expected_scan(case)["message_records"] == first["rows_appended"]
    assert per_topic_queue(rows) == m["records_per_topic_queue"]
    assert rows.schema.names == catalog_schema(False).names
    assert dt.metadata().partition_columns == ["topic"]
    assert pc.count_distinct(rows["physical_offset"]).as_py() == rows.num_rows
    ids = decode_offset_msg_ids(rows["offset_msg_id"])
    assert ids.field("physical_offset").equals(rows["physical_offset"].combine_chunks())
    assert pc.all(pc.equal(pc.add(rows["segment_position"], pc.cast(rows["segment"], pa.int64())),
                           rows["physical_offset"])).as_py()
    assert dt.transaction_version(app_id(str(store))) == expected_scan(case)["max_physical_offset"]
    assert data_files(table) == committed_files(dt)

    again = run_catalog(capsys, store, table, "--split-size", split_size)
    assert not again["committed"] and again["rows_appended"] == 0
    assert DeltaTable(str(table)).version() == 1
    assert data_files(table) == committed_files(dt)


def record_ends(segment: Path, count: int) -> int:
    """Segment-relative end of the first `count` records (walked by totalSize)."""
    data, pos = segment.read_bytes(), 0
    for _ in range(count):
        pos += struct.unpack_from(">i", data, pos)[0]
    return pos


def test_catalog_appends_only_new_records(spark, capsys, tmp_path):
    """A copy whose log stops mid-segment (later segments missing, the tail of the last one zero),
    then the full store under the same --store-id: the second commit adds exactly the missing records,
    the table equals the manifest per topic/queue without duplicates, and a third run adds nothing."""
    src, m = GOLDEN / SMALL, manifest(SMALL)
    part = tmp_path / "partial"
    (part / "commitlog").mkdir(parents=True)
    shutil.copy(src / "broker.conf", part / "broker.conf")
    segments = sorted((src / "commitlog").iterdir())
    for seg in segments[:6]:
        shutil.copy(seg, part / "commitlog" / seg.name)
    last = part / "commitlog" / segments[5].name
    cut = record_ends(last, 40)
    data = bytearray(last.read_bytes())
    data[cut:] = bytes(len(data) - cut)
    last.write_bytes(bytes(data))
    table = tmp_path / "catalog"

    first = run_catalog(capsys, part, table, "--store-id", "broker-a")
    assert first["to_offset"] == int(segments[5].name) + cut
    second = run_catalog(capsys, src, table, "--store-id", "broker-a")
    assert second["committed"] and second["delta_version"] == 2
    assert second["from_offset"] == first["to_offset"]
    assert first["rows_appended"] + second["rows_appended"] == m["commitlog_scan"]["message_records"]

    dt = DeltaTable(str(table))
    rows = dt.to_pyarrow_table()
    assert per_topic_queue(rows) == m["records_per_topic_queue"]
    assert pc.count_distinct(rows["physical_offset"]).as_py() == rows.num_rows
    v1 = DeltaTable(str(table), version=1).to_pyarrow_table()
    assert v1.num_rows == first["rows_appended"]
    assert pc.max(v1["physical_offset"]).as_py() < first["to_offset"]
    new = rows.filter(pc.greater_equal(rows["physical_offset"], first["to_offset"]))
    assert new.num_rows == second["rows_appended"]
    assert set(rows.column("store_id").to_pylist()) == {"broker-a"}

    third = run_catalog(capsys, src, table, "--store-id", "broker-a")
    assert not third["committed"]
    assert DeltaTable(str(table)).version() == 2
    assert data_files(table) == committed_files(DeltaTable(str(table)))


def test_catalog_refuses_a_store_that_does_not_continue_the_table(spark, capsys, tmp_path):
    """Cataloguing a different commit log under an id the table already covers fails before
    committing and leaves no stray files."""
    table = tmp_path / "catalog"
    run_catalog(capsys, GOLDEN / SMALL, table, "--store-id", "x")
    other = GOLDEN / "v5-clean-small-11"
    with pytest.raises(JobError, match="high-water mark"):
        catalog(SparkRunner(spark.sparkContext), location(str(other)), location(str(table)), load_settings(other / "broker.conf"),
                store_id="x", quiet=True)
    dt = DeltaTable(str(table))
    assert dt.version() == 1
    assert data_files(table) == committed_files(dt)


def test_a_damaged_record_mid_log_is_named_and_the_catalog_holds_what_precedes_it(spark, capsys, tmp_path):
    """A record damaged in the middle of the log: the catalog holds the records before it (the broker's dispatch
    stops there too) and says so on stderr and in the report, naming the record and the valid records after it."""
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / SMALL, store)
    seg = store / "commitlog" / "00000000000000786432"
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, 215590 + 4, 1)  # the magic code of the record at byte 215590
    seg.write_bytes(bytes(data))
    code = catalog_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--table",
                         str(tmp_path / "catalog"), "--json"])
    said = capsys.readouterr()
    report, err = json.loads(said.out), said.err
    assert code == 0
    assert report["to_offset"] == 786432 + 215590 and len(report["tail_problems"]) == 3, report["tail_problems"]
    assert (f"reput catalog: warning: the commit log ends with an invalid record: bad magic code 0x00000001 at "
            f"commit-log offset 1002022 ({seg} at byte offset 215590); the catalog holds the records before it") in err
    assert "valid records follow the end of the commit log" in err


def test_catalog_refuses_table_inside_store(spark, tmp_path):
    """The store is only read: a table inside it is refused before anything is written."""
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / SMALL / "commitlog", store / "commitlog")
    with pytest.raises(JobError, match="outside the store"):
        catalog(SparkRunner(spark.sparkContext), location(str(store)), location(str(store / "catalog")),
                load_settings(GOLDEN / SMALL / "broker.conf"), quiet=True)
    assert not (store / "catalog").exists()


def test_partition_dir_examples():
    """Hive-style escaping as Spark writes it (plus the Windows-only characters)."""
    assert partition_dir("%|weird_topic-%") == "topic=%25%7Cweird_topic-%25"
    assert partition_dir("主题-Ω-topic") == "topic=主题-Ω-topic"
    assert partition_dir("../../etc") == "topic=..%2F..%2Fetc"
    assert partition_dir("a\\b:c") == "topic=a%5Cb%3Ac"
    long = "T" * 300
    assert len(partition_dir(long).encode()) <= len("topic=") + MAX_DIR_BYTES + 17
    assert partition_dir(long) != partition_dir(long + "x")


@given(st.text(min_size=1, max_size=40))
def test_partition_dir_is_one_safe_reversible_component(topic):
    """Any topic gives one path component inside the table that unescapes back to the topic."""
    name = partition_dir(topic)
    assert name.startswith("topic=") and "/" not in name and "\\" not in name and "\x00" not in name
    assert unquote(name[len("topic="):]) == topic


def test_catalog_with_bodies_from_a_headless_store(spark, capsys, tmp_path):
    """A commit log whose first segments are gone (rebuild-headless-11) catalogued with --include-body:
    the report's per-topic counts agree with the committed files' Delta stats and the manifest, and
    every stored body has its record's body_length."""
    case = "rebuild-headless-11"
    table = tmp_path / "catalog"
    report = run_catalog(capsys, GOLDEN / case, table, "--include-body")
    dt = DeltaTable(str(table))
    actions = pa.table(dt.get_add_actions(flatten=True))
    counts: Counter[str] = Counter()
    for topic, n in zip(actions["partition.topic"].to_pylist(), actions["num_records"].to_pylist()):
        counts[topic] += n
    assert dict(sorted(counts.items())) == report["rows_per_topic"]
    expected = {t: sum(q.values()) for t, q in manifest(case)["records_per_topic_queue"].items()}
    assert report["rows_per_topic"] == dict(sorted(expected.items()))
    rows = dt.to_pyarrow_table(columns=["body", "body_length"])
    assert rows.schema.names == ["body", "body_length"]
    assert pc.all(pc.equal(pc.binary_length(rows["body"]), rows["body_length"])).as_py()


def test_timestamps_outside_python_range_are_null():
    """Garbage born/store timestamps (bad bytes) become nulls instead of breaking the stats."""
    ms = np.array([0, 1_795_324_080_402, 2**62, -(2**62), 253_402_300_799_999], dtype=np.int64)
    got = timestamps(ms)
    assert got.null_count == 2 and got.is_null().to_pylist() == [False, False, True, True, False]
    assert got.cast(pa.int64()).to_pylist()[:2] == [0, 1_795_324_080_402_000]


@pytest.mark.parametrize("case", ["lmq-clean-small-11", "v5-lmq-clean-small-11"])
def test_catalog_lists_each_messages_lmq_queues(case, spark, capsys, tmp_path):
    """lmq_queues names the %LMQ% queues multi-dispatch gives each record (4.9.8 / 5.3.3 rules): per queue,
    the manifest's count of entries the broker wrote; null for records without any."""
    run_catalog(capsys, GOLDEN / case, tmp_path / "catalog")
    rows = DeltaTable(str(tmp_path / "catalog")).to_pyarrow_table(columns=["lmq_queues"])
    named = Counter(f"{q}/0" for q in pc.list_flatten(rows["lmq_queues"]).to_pylist() if q.startswith("%LMQ%"))
    want = {k: v for k, v in manifest(case)["lmq"]["multi_dispatch_entries_per_queue"].items()
            if k.startswith("%LMQ%")}
    assert dict(named) == want
    assert 0 < rows["lmq_queues"].null_count < rows.num_rows


def test_catalog_refuses_lmq_records_without_the_multi_dispatch_setting(spark, capsys, tmp_path):
    """Records written with enableMultiDispatch=true, a config that leaves it unset: exit 2 naming the setting
    (an empty lmq_queues column would be silently wrong)."""
    from jobs.pipeline.runtime.cli import run_main
    case = "lmq-clean-small-11"
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join(line for line in (GOLDEN / case / "broker.conf").read_text().splitlines()
                              if not line.startswith(("enableMultiDispatch", "enableLmq"))))
    with pytest.raises(SystemExit) as exc:
        run_main("catalog", catalog_main, ["--store", str(GOLDEN / case), "--broker-config", str(conf),
                                           "--table", str(tmp_path / "catalog")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "enableMultiDispatch" in err and "byte offset" in err and "Traceback" not in err


def test_an_interrupt_while_tasks_write_leaves_no_data_file(tmp_path):
    """Ctrl-C to the process group while a catalog task has written a data file and more are to come: one line
    saying no records were committed, exit 130, and none of the run's data files left in the table (removed once
    the engine has stopped writing)."""
    from tests.helpers import signalled_at_hook

    store = GOLDEN / SMALL
    table = tmp_path / "catalog"
    run = signalled_at_hook("catalog", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                        "--table", str(table), "--engine", "local", "--quiet"],
                            "in-catalog-write", tmp_path / "paused",
                            check=lambda: next(table.rglob("*.parquet")))
    assert run.returncode == 130 and run.stderr.strip().splitlines()[-1] == \
        "reput catalog: interrupted; no records committed", run.stderr[-2000:]
    assert data_files(table) == set() and run.group_gone


def test_a_second_run_into_the_same_table_is_refused_at_once(tmp_path, capsys):
    """A catalog run holds its (local) table: a second run into it exits 2 at once naming the first, before any
    scan; the first run, untouched by it, then ends as Ctrl-C ends it (exit 130, its files and lock gone)."""
    import signal

    from tests.helpers import ended, kill_group, start_at_hook, wait_at_hook

    store = GOLDEN / SMALL
    table = tmp_path / "catalog"
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--table", str(table)]
    first = start_at_hook("catalog", argv + ["--engine", "local", "--quiet"], "in-catalog-write", tmp_path / "paused")
    try:
        wait_at_hook(first, tmp_path / "paused")
        with pytest.raises(JobError) as refused:
            catalog_main(argv + ["--engine", "local", "--quiet"])
        assert f"--table {table} is being written by reput catalog (pid {first.pid}" in str(refused.value)
        assert "engine" not in capsys.readouterr().err  # refused before an engine started
        assert first.poll() is None  # the first run is untouched
        os.killpg(first.pid, signal.SIGINT)
    except BaseException:
        kill_group(first)
        raise
    assert ended(first).returncode == 130 and data_files(table) == set()
    assert not (tmp_path / ".catalog.reput-lock").exists()


def test_a_run_that_loses_the_commit_to_another_leaves_no_data_file(spark, capsys, tmp_path, monkeypatch):
    """Two runs over object storage (no lock there) catalogue the same records: the one whose Delta commit comes
    second fails and removes its data files although the table's version for the store is the range it
    wrote (the other run's commit)."""
    import jobs.catalog as job
    from deltalake import CommitProperties, Transaction

    store, table = GOLDEN / SMALL, tmp_path / "catalog"
    real_commit = job.commit

    def beaten(delta, files, schema, props):  # the other run commits the same range first
        real_commit(delta, [], schema, CommitProperties(app_transactions=props.app_transactions))
        raise JobError("Delta commit failed (another catalog run may have committed first; re-run): conflict")

    monkeypatch.setattr(job, "commit", beaten)
    monkeypatch.setattr("jobs.pipeline.io.run_lock.is_local", lambda loc: False)  # object storage: no lock
    with pytest.raises(JobError, match="Delta commit failed"):
        catalog_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--table", str(table),
                      "--quiet"])
    dt = DeltaTable(str(table))
    assert dt.transaction_version(app_id(str(store))) is not None
    assert data_files(table) == committed_files(dt) == set()
