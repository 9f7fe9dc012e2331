"""Every job against a real S3-compatible server on 127.0.0.1 (moto, tests/s3_server.py), through s3://
URIs only: rebuild and recover write s3:// outputs that read back from the server byte-exact, verify,
query, inspect, dump and catalog read s3:// stores, --report and --table go to s3://, and the object-storage
publish rule holds (an OUT whose run never wrote its report, the commit, is refused by every reader)."""
from __future__ import annotations

import json
import shutil
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from jobs.catalog import main as catalog_main
from jobs.dump import main as dump_main
from jobs.inspect import main as inspect_main
from jobs.pipeline.runtime.cli import JobError, run_main
from jobs.pipeline.io.commit_marker import MARKER, DirectOutput, unfinished
from jobs.pipeline.runtime import interrupt
from jobs.pipeline.io import out_files
from jobs.pipeline.io.fs import location
from jobs.query import main as query_main
from jobs.rebuild import REPORT_NAME
from jobs.rebuild import main as rebuild_main
from jobs.recover import REPORT_NAME as RECOVER_REPORT
from jobs.recover import main as recover_main
from jobs.verify import main as verify_main
from tests import s3_server
from tests.conftest import GOLDEN, REPO, manifest, private_temp_env
from tests.rebuild_helpers import golden_consume_queue_hashes, golden_index_hashes
from tests.golden_walk import carries, records_by_offset, sample_keys
from tests.helpers import per_topic_queue

# S3 copies (pyarrow's filesystem, moto) and a Delta table on S3 (deltalake): make test-floors runs a write, the reads
# and the catalog at the dependency floors; the rest of the file's paths take the same calls
FLOORS = pytest.mark.floors

BUCKET = "reput"
CLEAN, TORN = "clean-small-11", "unclean-torn-11"
PAUSE_TIMEOUT_S = 300


def uri(key: str) -> str:
    return f"s3://{BUCKET}/{key}"


def conf(case: str) -> list[str]:
    """--broker-config of a golden case (a local file: only --store, --out, --table and --report are URIs)."""
    return ["--broker-config", str(GOLDEN / case / "broker.conf")]


def store(case: str) -> list[str]:
    return ["--store", uri(f"stores/{case}"), *conf(case)]


@pytest.fixture(scope="module")
def s3(spark, golden):
    """The server, with the golden stores CLEAN and TORN uploaded, and its AWS_* settings in this
    process's environment and in the Spark workers' (sc.environment: a worker daemon started with them)."""
    server = s3_server.start()
    spark_env = spark.sparkContext.environment
    saved = {k: (os.environ.get(k), spark_env.get(k)) for k in server.env}
    os.environ.update(server.env)
    spark_env.update(server.env)
    try:
        server.make_bucket(BUCKET)
        for case in (CLEAN, TORN):
            server.upload(golden / case, f"{BUCKET}/stores/{case}")
        yield server
    finally:
        for key, (env_value, spark_value) in saved.items():
            _restore(os.environ, key, env_value)
            _restore(spark_env, key, spark_value)
        server.stop()


def _restore(env: dict, key: str, value: str | None) -> None:
    if value is None:
        env.pop(key, None)
    else:
        env[key] = value


def json_out(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def refused(capsys, job: str, main, argv: list[str]) -> str:
    """Run a job as the command does; assert exit 2 with one line on stderr, and return that line."""
    with pytest.raises(SystemExit) as exit_:
        run_main(job, main, argv)
    err = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith(f"reput {job}: error: "), err
    return err[0]


def assert_rebuilt(s3, key: str) -> None:
    """The rebuilt OUT on the server holds exactly the golden consume queues and index files (sha256 of
    the bytes read back), the run report and the record of its files: no work files, no marker, nothing else."""
    got = s3.tree(f"{BUCKET}/{key}")
    cq = {k: v for k, v in got.items() if k.startswith("consumequeue/")}
    assert cq == golden_consume_queue_hashes(CLEAN)
    index = sorted(k for k in got if k.startswith("index/"))
    assert [got[k] for k in index] == golden_index_hashes(CLEAN)
    assert set(got) == set(cq) | set(index) | {REPORT_NAME, out_files.FILES_NAME}


def assert_recovered(s3, key: str, case: str) -> None:
    """The recovered OUT on the server equals RocketMQ's own recovery of `case`, file by file."""
    files = manifest(f"{case}-recovered")["files"]
    got = s3.tree(f"{BUCKET}/{key}")
    for prefix in ("commitlog/", "consumequeue/"):
        assert {k: v for k, v in got.items() if k.startswith(prefix)} == \
            {k: v["sha256"] for k, v in files.items() if k.startswith(prefix)}, prefix
    assert [got[k] for k in sorted(k for k in got if k.startswith("index/"))] == \
        [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]
    assert got["checkpoint"] == files["checkpoint"]["sha256"]
    assert "abort" not in got and MARKER not in got and RECOVER_REPORT in got


@FLOORS
def test_rebuild_to_s3_is_byte_exact_and_overwrite_replaces_it(s3, capsys):
    """rebuild s3:// -> s3:// equals the golden files; an existing OUT is refused without --overwrite,
    and --overwrite replaces it whole once it holds only what reput wrote; nothing lands beside OUT."""
    out = "out/rebuild"
    assert rebuild_main([*store(CLEAN), "--out", uri(out), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert "each index file is written by one task as one stream" in captured.err  # no side-by-side writes on S3
    assert report["timings"]["index_share_tasks"] == 0
    assert_rebuilt(s3, out)
    assert json.loads(s3.read(f"{BUCKET}/{out}/{REPORT_NAME}"))["message_records"] == report["message_records"] \
        == manifest(CLEAN)["commitlog_scan"]["message_records"]
    with pytest.raises(JobError, match="already exists"):
        rebuild_main([*store(CLEAN), "--out", uri(out), "--json"])
    stale = f"{BUCKET}/{out}/consumequeue/stale/0/00000000000000000000"
    with s3.fs().open_output_stream(stale) as f:  # not written by reput: refused by name (issue 55 item 2)
        f.write(b"from an older run")
    with pytest.raises(JobError, match=r"consumequeue/stale/0/00000000000000000000 \(not written by reput\)"):
        rebuild_main([*store(CLEAN), "--out", uri(out), "--overwrite", "--json"])
    s3.fs().delete_dir(f"{BUCKET}/{out}/consumequeue/stale")  # the object and the directories it made
    assert rebuild_main([*store(CLEAN), "--out", uri(out), "--overwrite", "--json"]) == 0
    capsys.readouterr()
    assert_rebuilt(s3, out)
    assert {k.split("/")[0] for k in s3.tree(f"{BUCKET}/out")} == {"rebuild"}


def test_rebuild_of_a_small_s3_store_as_a_whole_process_takes_the_local_engine(s3, tmp_path, killed_temp):
    """`python -m jobs.rebuild` s3:// -> s3:// on local[2]: auto takes the local engine (a commit log under 4 GiB),
    whose forked workers read and write through the filesystem layer (an S3 client each); OUT equals the golden
    files."""
    out = "out/rebuild-local"
    env = {**os.environ, **s3.env, **private_temp_env(killed_temp)}
    done = subprocess.run([sys.executable, "-m", "jobs.rebuild", *store(CLEAN), "--out", uri(out), "--master",
                           "local[2]", "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    engine = json.loads(done.stdout)["engine"]
    assert engine["name"] == "local" and engine["workers"] == 2 and "of commit log (up to 4.0 GiB)" in engine["reason"]
    assert_rebuilt(s3, out)


def test_verify_s3_store_writes_its_report_to_s3(s3, capsys):
    """verify reads the store from s3:// (CONSISTENT), keeps its work files under an s3:// --work-dir
    (removed afterwards) and writes --report to s3://."""
    assert verify_main([*store(CLEAN), "--report", uri("reports/verify.json"), "--work-dir", uri("tmp"),
                        "--json"]) == 0
    assert s3.tree(f"{BUCKET}/tmp") == {}
    printed = json_out(capsys)
    written = json.loads(s3.read(f"{BUCKET}/reports/verify.json"))
    assert written["status"] == printed["status"] == "consistent"
    assert written["consumequeue_files_checked"] == len(golden_consume_queue_hashes(CLEAN))
    assert written["index_files_checked"] == len(golden_index_hashes(CLEAN))


@FLOORS
def test_query_inspect_dump_read_s3_stores(s3, capsys):
    """query by key finds exactly the golden records carrying the key; inspect's scan equals the manifest;
    dump prints the same rows as from the local copy of the store."""
    for topic, key in sample_keys(CLEAN, 3):
        assert query_main([*store(CLEAN), "--topic", topic, "--key", key, "--max-num", "100000", "--json"]) == 0
        got = [m["physical_offset"] for m in json_out(capsys)["messages"]]
        want = sorted(o for o, r in records_by_offset(CLEAN).items()
                      if (r.sys_flag & 0xC) != 0xC and carries(r, topic, key, False))
        assert got == want and want, (topic, key)
    assert inspect_main([*store(CLEAN), "--json"]) == 0
    scan, m = json_out(capsys), manifest(CLEAN)
    for key in ("message_records", "max_physical_offset", "scan_end"):
        assert scan[key] == m["commitlog_scan"][key], key
    assert scan["records_per_topic_queue"] == m["records_per_topic_queue"]
    for args in (["--topic", "TopicTest", "--queue", "1", "--count", "20"], ["--offset", "0", "--count", "30"]):
        assert dump_main([*store(CLEAN), "--json", *args]) == 0
        remote = capsys.readouterr().out
        assert dump_main(["--store", str(GOLDEN / CLEAN), *conf(CLEAN), "--json", *args]) == 0
        assert remote == capsys.readouterr().out and remote.count("\n") >= 20


def test_recover_s3_plan_and_out_equal_the_broker_recovery(s3, capsys):
    """recover --dry-run on an s3:// store names the torn record; --out s3:// equals RocketMQ's own
    recovery; the committed OUT is a store the jobs read (a second plan changes nothing)."""
    assert recover_main([*store(TORN), "--dry-run", "--json", "--report", uri("reports/plan.json")]) == 0
    plan = json_out(capsys)
    assert plan["truncation"]["offset"] == manifest(TORN)["torn"]["torn_record_offset"]
    assert json.loads(s3.read(f"{BUCKET}/reports/plan.json"))["truncation"] == plan["truncation"]
    assert recover_main([*store(TORN), "--out", uri("out/recovered"), "--json"]) == 0
    capsys.readouterr()
    assert_recovered(s3, "out/recovered", TORN)
    assert recover_main(["--store", uri("out/recovered"), *conf(TORN), "--dry-run", "--json"]) == 0
    assert json_out(capsys)["changes"] is False


@FLOORS
def test_catalog_appends_to_an_s3_delta_table(s3, capsys):
    """catalog --table s3://: a first run from a store holding the first six segments, a second from the
    whole store (same --store-id) appends the rest; deltalake reads the table back from the server."""
    segments = sorted((GOLDEN / CLEAN / "commitlog").iterdir())
    for seg in segments[:6]:
        with s3.fs().open_output_stream(f"{BUCKET}/stores/partial/commitlog/{seg.name}") as f:
            f.write(seg.read_bytes())
    table = uri("tables/catalog")
    common = [*conf(CLEAN), "--table", table, "--store-id", "broker-a", "--json"]
    assert catalog_main(["--store", uri("stores/partial"), *common]) == 0
    first = json_out(capsys)
    assert first["committed"] and int(segments[5].name) < first["to_offset"] <= int(segments[6].name)
    assert catalog_main(["--store", uri(f"stores/{CLEAN}"), *common, "--report", uri("reports/catalog.json")]) == 0
    second = json_out(capsys)
    assert second["committed"] and second["delta_version"] == 2 and second["from_offset"] == first["to_offset"]
    assert json.loads(s3.read(f"{BUCKET}/reports/catalog.json"))["rows_appended"] == second["rows_appended"]
    options = {"AWS_ENDPOINT_URL": s3.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    dt = DeltaTable(table, storage_options=options)
    rows = pa.table(dt.to_pyarrow_table())
    m = manifest(CLEAN)
    assert dt.version() == 2 and rows.num_rows == m["commitlog_scan"]["message_records"]
    assert per_topic_queue(rows) == m["records_per_topic_queue"]
    assert pc.count_distinct(rows["physical_offset"]).as_py() == rows.num_rows
    v1 = pa.table(DeltaTable(table, version=1, storage_options=options).to_pyarrow_table())
    assert v1.num_rows == first["rows_appended"]


def test_refusals_on_s3(s3, capsys):
    """One line, exit 2, before Spark: no store at an s3:// prefix, an OUT inside the store, a whole bucket
    as OUT, --in-place."""
    line = refused(capsys, "verify", verify_main, ["--store", uri("nothing"), *conf(CLEAN)])
    assert line.endswith(f"no RocketMQ store at {uri('nothing')}: no commitlog/ directory")
    line = refused(capsys, "rebuild", rebuild_main, [*store(CLEAN), "--out", uri(f"stores/{CLEAN}/out")])
    assert "must be outside the store" in line
    line = refused(capsys, "rebuild", rebuild_main, [*store(CLEAN), "--out", "s3://elsewhere", "--overwrite"])
    assert line.endswith("--out s3://elsewhere is a whole bucket; give a prefix inside it (s3://BUCKET/NAME)")
    line = refused(capsys, "recover", recover_main, [*store(TORN), "--in-place", "--backup-dir", "/tmp/unused"])
    assert "--in-place needs a local store directory" in line and "object storage" in line


def test_overwrite_uncommits_the_old_output_first(s3):
    """--overwrite on object storage (no Spark): entering makes the old, committed OUT unfinished (marker
    written, then its report deleted) and empties it; a failure removes everything, the marker last."""
    out = location(uri("out/overwritten"))
    for rel in ("consumequeue/t/0/00000000000000000000", "index/20260101000000000"):
        out.child(rel).write_bytes(b"old")
    out_files.record(out)  # as a publish leaves it: the record of its files, then the report
    out.child("reput-report.json").write_bytes(b"old")
    assert unfinished(out) is None
    with pytest.raises(JobError, match="already exists"):
        DirectOutput(out, "reput-report.json", "rebuild")
    with pytest.raises(RuntimeError, match="task failed"):
        with DirectOutput(out, "reput-report.json", "rebuild", overwrite=True) as direct:
            assert set(s3.tree(f"{BUCKET}/out/overwritten")) == {MARKER}
            assert unfinished(out) == "reput-report.json"
            direct.dir.child("consumequeue/t/0/00000000000000000000").write_bytes(b"new, uncommitted")
            raise RuntimeError("task failed")
    assert s3.tree(f"{BUCKET}/out/overwritten") == {}


def test_an_interrupt_after_the_commit_keeps_the_output(s3):
    """Ctrl-C once the run report (the commit) is written, before the run has printed it: the committed OUT stays
    (it was removed, committed report and all, by the interrupt's clean-up), and the line says it was published."""
    out = location(uri("out/committed"))
    previous = interrupt.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            with DirectOutput(out, "reput-report.json", "rebuild") as direct:
                direct.dir.child("consumequeue/t/0/00000000000000000000").write_bytes(b"new")
                direct.publish(b"{}")
                raise KeyboardInterrupt
        interrupt.finish("rebuild", interrupt.note_after("nothing published"))
        assert interrupt.note_after("nothing published").startswith(f"{out.uri} was published")
    finally:
        interrupt.uninstall(previous)
    assert unfinished(out) is None
    assert set(s3.tree(f"{BUCKET}/out/committed")) >= {"consumequeue/t/0/00000000000000000000", "reput-report.json"}


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        assert time.monotonic() < deadline, "the job never reached its pause point"
        time.sleep(0.2)


@pytest.mark.slow
def test_output_killed_before_its_commit_is_refused_then_replaced(s3, capsys, tmp_path, killed_temp):
    """recover --out s3:// SIGKILLed after writing the tree but before its report (the commit): the prefix
    holds the marker and files but no report; every job refuses it as --store with one line; the next
    run for the same OUT (no --overwrite) removes it and writes the full recovery."""
    out, mark = "out/killed", tmp_path / "paused"
    env = {**os.environ, **s3.env, **private_temp_env(killed_temp), "REPUT_TEST_PAUSE_AT": "before-commit",
           "REPUT_TEST_PAUSE_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "jobs.recover", *store(TORN), "--out", uri(out), "--quiet",
                             "--master", "local[1]"], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(mark, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = s3.tree(f"{BUCKET}/{out}")
    assert MARKER in left and RECOVER_REPORT not in left and any(k.startswith("commitlog/") for k in left)
    killed = ["--store", uri(out), *conf(TORN)]
    for job, main, extra in (("verify", verify_main, []), ("inspect", inspect_main, []),
                             ("query", query_main, ["--topic", "TopicTest", "--key", "k"]),
                             ("dump", dump_main, ["--offset", "0"]), ("recover", recover_main, ["--dry-run"]),
                             ("catalog", catalog_main, ["--table", uri("tables/never")])):
        line = refused(capsys, job, main, killed + extra)
        assert line.endswith(f"{uri(out)} is an unfinished reput output: it holds {MARKER} but not "
                             f"{RECOVER_REPORT}, which a run writes last (it failed, was killed or is still "
                             f"writing); run it again"), line
    assert recover_main([*store(TORN), "--out", uri(out), "--json"]) == 0
    capsys.readouterr()
    assert_recovered(s3, out, TORN)


def test_rebuild_since_on_s3_continues_an_s3_out(s3, capsys, tmp_path):
    """rebuild --since with the store, OUT1 and OUT2 all s3:// URIs: OUT1 built from the store as it stood earlier,
    OUT2 continued from it equals the golden files (copies and the appended index file go through the filesystem
    layer, no local path)."""
    from storegen.earlier import cut_store
    from tests.since_helpers import cut_offset

    cut_store(GOLDEN / CLEAN, tmp_path / "earlier", cut_offset(CLEAN, 0.7))
    s3.upload(tmp_path / "earlier", f"{BUCKET}/stores/{CLEAN}-earlier")
    assert rebuild_main(["--store", uri(f"stores/{CLEAN}-earlier"), *conf(CLEAN), "--out", uri("out/night-1"),
                         "--json"]) == 0
    capsys.readouterr()
    assert rebuild_main([*store(CLEAN), "--out", uri("out/night-2"), "--since", uri("out/night-1"), "--json"]) == 0
    report = json_out(capsys)
    assert report["since"]["built_to_before"] < report["built_to"]["offset"]
    assert_rebuilt(s3, "out/night-2")


def test_verify_since_of_an_s3_store_cuts_the_seed_as_a_copy(s3, capsys, tmp_path):
    """verify --since of an s3:// store: the index file holding where it starts cannot be mapped where it lies, so it
    is checked by a cut copy, the slower path, named in the report and on stderr; the store is CONSISTENT."""
    from tests.since_helpers import cut_offset, earlier_store

    earlier = earlier_store(CLEAN, tmp_path / "earlier", cut_offset(CLEAN, 0.7))
    assert rebuild_main(["--store", str(earlier), *conf(CLEAN), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    for part in ("consumequeue", "index"):
        shutil.copytree(tmp_path / "out" / part, earlier / part)
    then = tmp_path / "then.json"
    assert verify_main(["--store", str(earlier), *conf(CLEAN), "--report", str(then), "--quiet"]) == 0
    capsys.readouterr()
    # the earlier verify was of a local cut copy, not of the s3:// store: said aloud
    assert verify_main([*store(CLEAN), "--since", str(then), "--since-other-store", "--work-dir", uri("tmp"),
                        "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "consistent" and report["since"]["checked_from"]
    assert report["since"]["other_store"]["made_on"]["path"] == str(earlier.resolve())
    assert report["store_identity"] == {"path": uri(f"stores/{CLEAN}"), "host": report["store_identity"]["host"],
                                        "inode": None, "log_file": report["built_to"]["file"], "log_file_inode": None}
    seed = report["index_seed"]
    assert seed["checked_by"] == "cut copy" and "not on a local filesystem" in seed["why"]
    assert f"note: {report['index_seed']['file']} checked by a cut copy, the slower path" in err
