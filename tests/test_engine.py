"""The two engines (issue 23 item 5): which one --engine auto picks (a pure rule), the local engine's task
contract (item order, a worker's error raised in the driver as the Spark engine surfaces it, no worker left),
and the same outputs byte for byte from `--engine spark` and `--engine local` (recover on golden unclean stores,
rebuild on one), with no pyspark or py4j imported on the local path; workers die with a killed driver."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.pipeline.runtime.engine import LOCAL_UNDER_AUTO, EngineChoice, choose_engine, local_cores
from jobs.pipeline.runtime.failure import JobError, one_line
from jobs.pipeline.runtime.local import LocalRunner, TaskFailed, WorkerLost
from storage_format.errors import StoreFormatError
from tests.conftest import GOLDEN, REPO, restored_copy
from tests.helpers import MARK_ENV, marked, run_job
from tests.recovery_helpers import RECOVERY_PAIRS, assert_matches_recovered, tree

CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("requested, job, master, submitted, engine, workers", [
    ("auto", "recover", "local[*]", False, "local", CORES),
    ("auto", "recover", "local[2]", False, "local", 2),
    ("auto", "recover", "local", False, "local", 1),
    ("auto", "recover", "local[3,2]", False, "local", 3),
    ("auto", "inspect", "local[2]", False, "local", 2),
    ("auto", "verify", "local[2]", False, "local", 2),
    ("auto", "recover", "local[2]", True, "spark", None),  # spark-submit: Spark always
    ("auto", "recover", "yarn", False, "spark", None),  # a cluster master: Spark always
    ("auto", "recover", "spark://host:7077", False, "spark", None),
    ("auto", "rebuild", "local[2]", False, "spark", None),  # rebuild: Spark when its commit log is not known
    ("auto", "convert", "local[*]", False, "spark", None),
    ("auto", "catalog", "local[*]", False, "spark", None),
    ("spark", "recover", "local[2]", False, "spark", None),
    ("local", "rebuild", "local[2]", False, "local", 2),
    ("local", "recover", "local[*]", False, "local", CORES),
    ("auto", "recover", "local[2]", "running", "spark", None),  # a SparkContext of this process (a notebook's)
    ("local", "recover", "local[2]", "running", "local", 2),
])
def test_engine_choice(requested, job, master, submitted, engine, workers):
    running = submitted == "running"
    choice = choose_engine(requested, job, master, submitted is True, spark_running=running)
    assert (choice.name, choice.workers) == (engine, workers)
    assert choice.reason and choice.requested == requested
    assert choice.to_dict()["name"] == engine


@pytest.mark.parametrize("master, submitted, says", [
    ("yarn", False, "not local"),
    ("local[2]", True, "spark-submit"),
])
def test_explicit_local_engine_that_cannot_run_is_refused(master, submitted, says):
    with pytest.raises(JobError, match=says):
        choose_engine("local", "recover", master, submitted)


@pytest.mark.parametrize("store_bytes, master, submitted, engine", [
    (3 << 30, "local[2]", False, "local"),  # the bench store: the JVM's start-up would be half the run
    (4 << 30, "local[2]", False, "local"),
    ((4 << 30) + 1, "local[2]", False, "spark"),  # larger: Spark's build is as fast or faster
    (1 << 20, "local[2]", True, "spark"),  # spark-submit, a cluster, a running context: Spark whatever the size
    (1 << 20, "yarn", False, "spark"),
    (1 << 20, "local[2]", "running", "spark"),
])
def test_rebuild_under_auto_takes_the_local_engine_up_to_4_gib(store_bytes, master, submitted, engine):
    """The rebuild's and convert's engine under auto follows the commit log's size on a local master; the reason
    names it."""
    choice = choose_engine("auto", "rebuild", master, submitted is True, submitted == "running", store_bytes)
    assert choice.name == engine
    if choice.name == "local":
        assert "of commit log (up to 4.0 GiB)" in choice.reason
    elif submitted is False and master.startswith("local"):
        assert "rebuild of 4.0 GiB of commit log (over 4.0 GiB) runs on Spark" in choice.reason
    convert = choose_engine("auto", "convert", master, submitted is True, submitted == "running", store_bytes)
    assert convert.name == engine  # convert chooses as rebuild does (issue 55 item 6)


def test_auto_jobs_are_the_small_ones():
    assert LOCAL_UNDER_AUTO == {"recover", "inspect", "verify"}
    assert local_cores("k8s://x") is None and local_cores("local[4]") == 4
    assert EngineChoice("local", "auto", "why", 2).line() == "engine local, 2 worker processes (why)"


def _slow_square(i: int) -> tuple[int, int]:
    time.sleep(0.05 * (5 - i % 5))  # later items finish first
    return i * i, os.getpid()


def _children() -> list[int]:
    """This process's live (non-zombie) children."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == me and stat[0] != "Z":
            found.append(int(pid))
    return found


def test_results_in_item_order_from_forked_workers(capsys):
    before = set(_children())  # (a JVM an earlier test's session left running is not ours)
    results = LocalRunner(2).run_tasks(list(range(10)), _slow_square, "squares", total_bytes=10_000_000)
    assert [r for r, _ in results] == [i * i for i in range(10)]
    pids = {pid for _, pid in results}
    assert len(pids) == 2 and os.getpid() not in pids
    assert set(_children()) <= before  # every worker reaped
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("[reput] squares: 10/10 tasks, ") and " of 10 MB" in last


def test_one_item_runs_in_the_driver_and_none_is_nothing():
    assert LocalRunner(2).run_tasks([3], _slow_square, "one", quiet=True) == [(9, os.getpid())]
    assert LocalRunner(2).run_tasks([], _slow_square, "none") == []


def _fail_at_three(i: int) -> int:
    if i == 3:
        raise StoreFormatError("commitlog/00000000000000000000", i, "bad magic code 0x00000000")
    return i


class UnpicklableError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


def _fail_unpicklably(i: int) -> int:
    if i == 2:
        raise UnpicklableError("this", "that")
    return i


def _die(i: int) -> int:
    if i == 1:
        os._exit(3)
    return i


def test_a_task_error_is_raised_in_the_driver_as_itself():
    before = set(_children())
    with pytest.raises(StoreFormatError) as info:
        LocalRunner(2).run_tasks(list(range(6)), _fail_at_three, "fails", quiet=True)
    assert one_line(info.value) == "commitlog/00000000000000000000 at byte offset 3: bad magic code 0x00000000"
    assert "_fail_at_three" in str(info.value.__cause__)  # the worker's traceback, for REPUT_DEBUG=1
    assert set(_children()) <= before  # every worker reaped


def test_an_unpicklable_task_error_reads_as_a_spark_task_error(monkeypatch):
    monkeypatch.delenv("REPUT_DEBUG", raising=False)
    before = set(_children())
    with pytest.raises(TaskFailed) as info:
        LocalRunner(2).run_tasks(list(range(4)), _fail_unpicklably, "fails", quiet=True)
    # what failure.one_line makes of the same error inside a Spark task's traceback
    assert one_line(info.value) == "UnpicklableError: this and that (REPUT_DEBUG=1 shows the traceback)"
    assert set(_children()) <= before  # every worker reaped


def _temp_then_fail(i: int) -> str:
    """Item 0 makes a temporary directory and waits (killed when item 1 fails); item 1 fails once it is there."""
    import tempfile

    if i == 0:
        made = tempfile.mkdtemp(prefix="reput-rocksdb-")
        Path(tempfile.gettempdir(), "made").write_text(made)
        time.sleep(60)
    deadline = time.monotonic() + 30
    while not any(Path(tempfile.gettempdir()).glob("reput-rocksdb-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    raise StoreFormatError("consumequeue/000123.sst", 4096, "block checksum mismatch")


def test_a_killed_workers_temporary_files_go_with_the_pool(tmp_path, monkeypatch):
    """A task fails while another holds a temporary directory (RocksDB's private link directory): the local engine
    kills that worker, which cannot remove it; the pool's own temporary directory, the workers' tempdir, goes with
    the pool (reput-rocksdb-* was left in /tmp)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(StoreFormatError, match="block checksum mismatch"):
        LocalRunner(2).run_tasks([0, 1], _temp_then_fail, "fails", quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_a_worker_that_dies_is_an_error_naming_the_task():
    before = set(_children())
    with pytest.raises(WorkerLost, match=r"exit status 3\) in task 2 of 4 \(dies\)"):
        LocalRunner(2).run_tasks(list(range(4)), _die, "dies", quiet=True)
    assert set(_children()) <= before  # every worker reaped


def _job(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=300)


def _normalized(out: Path) -> dict[str, str]:
    """sha256 by path, new index files by their rank (their names carry the time of the run)."""
    files = tree(out, skip=("reput-recover-report.json", "reput-report.json", "reput-files.parquet"))
    index = sorted(k for k in files if k.startswith("index/"))
    return {(f"index/#{index.index(k)}" if k in index else k): v for k, v in files.items()}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.full) for c in
                                  ("unclean-11", "v5-unclean-torn-11", "lmq-unclean-11")] + ["dledger-unclean-11"])
def test_recover_is_the_same_on_both_engines(case, tmp_path):
    """recover --out on both engines gives the same files (the broker's recovery where the case has one). CI runs
    the DLedger case, whose plan gathers the most facts in tasks; `make test-full` runs every case."""
    store = restored_copy(case, tmp_path / "store") if case.startswith("dledger-") else GOLDEN / case
    outs = {}
    for engine in ("spark", "local"):
        out = tmp_path / engine
        done = _job("jobs.recover", "--store", str(store), "--broker-config", str(store / "broker.conf"),
                    "--out", str(out), "--engine", engine, "--master", "local[2]", "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["engine"]["name"] == engine
        assert f"reput recover: note: engine {engine}" in done.stderr
        outs[engine] = _normalized(out)
        if case in RECOVERY_PAIRS:
            assert_matches_recovered(out, case)
    assert outs["local"] == outs["spark"]


def test_rebuild_is_the_same_on_both_engines(tmp_path):
    store = GOLDEN / "v5-clean-medium-11"
    outs = {}
    for engine in ("spark", "local"):
        out = tmp_path / engine
        done = _job("jobs.rebuild", "--store", str(store), "--broker-config", str(store / "broker.conf"),
                    "--out", str(out), "--engine", engine, "--master", "local[2]", "--split-size", "256k", "--quiet")
        assert done.returncode == 0, done.stderr
        outs[engine] = tree(out, skip=("reput-report.json", "reput-files.parquet"))
    assert outs["local"] == outs["spark"] and len(outs["local"]) > 10


def test_a_task_failure_is_the_same_line_and_status_on_both_engines(tmp_path):
    """A decode task that raises (the REPUT_FAIL_ONCE hook; one attempt per task on local[2]): the job ends
    with the same one line and exit status 2 whichever engine ran the task."""
    store = GOLDEN / "unclean-11"
    seen = {}
    for engine in ("spark", "local"):
        done = _job("jobs.recover", "--store", str(store), "--broker-config", str(store / "broker.conf"),
                    "--out", str(tmp_path / engine), "--engine", engine, "--master", "local[2]", "--quiet",
                    env={"REPUT_FAIL_ONCE": str(tmp_path / "fail")})
        (tmp_path / "fail").unlink()
        errors = [ln for ln in done.stderr.splitlines() if "error:" in ln]
        seen[engine] = (done.returncode, errors)
        assert "Traceback" not in done.stderr and not (tmp_path / engine).exists()
    assert seen["local"] == seen["spark"]
    code, (line,) = seen["local"]
    assert code == 2 and line.startswith("reput recover: error: RuntimeError: reput test hook: injected failure")


IMPORTS = """
import sys
from jobs.recover import main
code = main(sys.argv[1:])
assert code == 0, code
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")))
"""


def test_the_local_engine_imports_no_pyspark(tmp_path):
    store = GOLDEN / "unclean-11"
    done = subprocess.run([sys.executable, "-c", IMPORTS, "--store", str(store), "--broker-config",
                           str(store / "broker.conf"), "--out", str(tmp_path / "out"), "--master", "local[2]",
                           "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    engine = json.loads((tmp_path / "out" / "reput-recover-report.json").read_text())["engine"]
    sizing = engine.pop("sizing")  # how the workers were counted (tests/test_local_sizing.py)
    assert engine == {
        "name": "local", "requested": "auto", "reason": "auto: master local[2], not under spark-submit", "workers": 2}
    assert (sizing["workers"], sizing["cpus"], sizing["master"]) == (2, 2, "local[2]")


def test_workers_die_with_a_killed_driver(tmp_path):
    """SIGKILL to the driver alone (nothing of it runs after): its forked workers, one paused inside a decode
    task, are ended by the kernel (PR_SET_PDEATHSIG), none is left running on its own."""
    from tests.conftest import private_temp_env

    store, mark, paused = GOLDEN / "unclean-11", f"engine-{os.getpid()}-{time.time_ns()}", tmp_path / "paused"
    env = dict(os.environ, **private_temp_env(tmp_path), **{MARK_ENV: mark}, REPUT_TEST_PAUSE_AT="in-decode-task",
               REPUT_TEST_PAUSE_MARK=str(paused))
    proc = subprocess.Popen([sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config",
                             str(store / "broker.conf"), "--out", str(tmp_path / "out"), "--engine", "local",
                             "--master", "local[2]", "--quiet"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not paused.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert paused.exists(), "no task reached its pause point"
        workers = set(marked(mark)) - {proc.pid}
        assert workers, "no forked worker"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while marked(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not marked(mark)
    finally:
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("submitted,quiet,printed", [(False, False, True), (False, True, False), (True, False, False)])
def test_the_engine_line_is_on_stderr_except_quiet_or_under_spark_submit(monkeypatch, capsys, submitted, quiet,
                                                                         printed) -> None:
    """Under spark-submit PySpark's launcher merges the driver's stderr into its stdout: the engine line there
    would break a --json report (tests/test_cluster.py's inspect); the report's `engine` field still says it."""
    import argparse

    from jobs.pipeline.runtime import engine, session

    if submitted:
        monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    else:
        monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(session, "job_context", lambda args, job: object())
    args = argparse.Namespace(master="local[2]", engine="spark", quiet=quiet)
    _, choice = engine.job_runner(args, "inspect")
    assert choice.name == "spark"
    err = capsys.readouterr()
    assert ("reput inspect: note: engine spark" in err.err) == printed
    assert "engine" not in err.out


def test_a_rebuild_whose_engine_cannot_start_leaves_no_lock(tmp_path, capfd):
    """--engine local with a cluster master is refused after OUT was checked and locked: one line, exit 2, and
    OUT's lock file is gone with the run (the next run finds nothing beside OUT)."""
    store = GOLDEN / "clean-small-11"
    code, _out, err = run_job("rebuild", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                          str(tmp_path / "out"), "--engine", "local", "--master", "spark://h:7077"], capfd)
    assert code == 2 and "--engine local: the master spark://h:7077 is not local" in err, err
    assert list(tmp_path.iterdir()) == []
