"""The front door of every job: it starts the same four ways, ends in one line (errors, Ctrl-C, SIGTERM),
and answers mistakes before Spark starts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.pipeline.runtime.failure import one_line
from jobs.__main__ import JOBS
from tests.conftest import GOLDEN, REPO
from tests.helpers import Ended, ended, kill_group, run_job_lines, start_at_hook, wait_at_hook

CASE = "clean-small-11"
REPUT = Path(sys.executable).with_name("reput")
EXIT_TEXT = ("exit status: 0 ok, 1 findings (verify) or none found (query), 2 could not run, 130 interrupted "
             "(Ctrl-C), 143 terminated (SIGTERM)")
COMMON_FLAGS = ("--version", "--quiet", "--log-level", "--json", "--broker-config")


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=kw.pop("cwd", REPO), capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.parametrize("how", ["script", "module", "console"])
def test_help_of_every_job_every_way(how):
    """`python jobs/<job>.py --help` (a job's script must not shadow a standard module, as jobs/inspect.py would
    the standard library's inspect), `python -m jobs.<job> --help` and `reput <job> --help` all work, from any
    directory, and show the common flags and the exit codes."""
    for job in JOBS:
        argv = {"script": [sys.executable, str(REPO / "jobs" / f"{job}.py")],
                "module": [sys.executable, "-m", f"jobs.{job}"],
                "console": [str(REPUT), job]}[how]
        proc = _run(argv + ["--help"], cwd=REPO if how == "module" else "/")
        assert proc.returncode == 0, (job, proc.stderr)
        assert proc.stderr == "", (job, proc.stderr)
        text = " ".join(proc.stdout.split())
        assert f"usage: reput {job}" in text and EXIT_TEXT in text, (job, text)
        assert all(flag in text for flag in COMMON_FLAGS), (job, text)
        assert ("--report FILE" in text) == (job != "dump"), (job, text)  # dump writes no report


def test_version_and_console_usage():
    from jobs import __version__

    assert _run([sys.executable, str(REPO / "jobs" / "verify.py"), "--version"]).stdout == f"reput {__version__}\n"
    assert _run([str(REPUT), "query", "--version"]).stdout == f"reput {__version__}\n"
    unknown = _run([str(REPUT), "rebuilt"])
    assert unknown.returncode == 2 and unknown.stderr.startswith("reput: error: unknown job 'rebuilt'")
    listing = _run([str(REPUT), "--help"])
    assert listing.returncode == 0 and all(f"  {job} " in listing.stdout for job in JOBS)


# ------------------------------------------------------------------ Ctrl-C and SIGTERM of a running job


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> dict[str, tuple[Ended, Path]]:
    """Two rebuilds held inside a Spark task (the driver waits on the job), one sent SIGINT to its whole
    process group as a terminal's Ctrl-C does, one sent SIGTERM; both started at once."""
    store = GOLDEN / CASE
    runs = {}
    for name in ("sigint", "sigterm"):
        root = tmp_path_factory.mktemp(name)
        argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                str(root / "out" / "rebuilt"), "--master", "local[2]", "--quiet", "--engine", "spark"]
        runs[name] = (start_at_hook("rebuild", argv, "in-build-task", root / "paused"), root)
    try:
        for name, (proc, root) in runs.items():
            wait_at_hook(proc, root / "paused")
            if name == "sigint":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGTERM)
        return {name: (ended(proc), root) for name, (proc, root) in runs.items()}
    finally:
        for proc, _ in runs.values():
            kill_group(proc)


@pytest.mark.parametrize("how", ["sigint", "sigterm"])
def test_interrupted_rebuild_is_one_line_exit_130_or_143_nothing_left(interrupted, how):
    run, root = interrupted[how]
    lines = [ln for ln in run.stderr.splitlines() if not ln.startswith("reput test hook:")]
    assert run.returncode == {"sigint": 130, "sigterm": 143}[how], run.stderr
    assert lines[-1:] == ["reput rebuild: interrupted; nothing published"] and len(lines) <= 3, run.stderr
    assert "Traceback" not in run.stderr and "Exception" not in run.stderr
    assert os.listdir(root / "out") == []  # neither OUT nor its staging directory
    assert run.group_gone, "a JVM or Python worker of the interrupted job is still running"


# ------------------------------------------------------------------------------ one line, never a traceback

PY4J_TASK_FAILURE = """An error occurred while calling o61.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most recent failure: Lost task 0.0 in stage 1.0 (TID 5) (127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/jobs/pipeline/scan/decode.py", line 230, in decode_split
    raise StoreFormatError(path, 1990, "entry is cut short")
storage_format.errors.StoreFormatError: /s/consumequeue/T/0/00000000000000000000 at byte offset 1990: entry is cut short

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:621)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
storage_format.errors.StoreFormatError: /s/consumequeue/T/0/00000000000000000000 at byte offset 1990: entry is cut short
"""


def test_one_line_of_a_spark_task_failure():
    """The Python error raised inside a Spark task is the line, without Java or Python stack."""
    assert one_line(RuntimeError(PY4J_TASK_FAILURE)) == \
        "/s/consumequeue/T/0/00000000000000000000 at byte offset 1990: entry is cut short"
    other = one_line(RuntimeError(PY4J_TASK_FAILURE.replace("storage_format.errors.StoreFormatError", "ValueError")))
    assert other.startswith("ValueError: /s/consumequeue/") and "REPUT_DEBUG=1" in other
    java = one_line(RuntimeError("An error occurred while calling o1.x.\n: java.lang.OutOfMemoryError: "
                                 "Java heap space\n\tat a.b(C.java:1)"))
    assert java.startswith("OutOfMemoryError: Java heap space")
    assert one_line(IsADirectoryError(21, "Is a directory", "/s/x")) == "[Errno 21] Is a directory: '/s/x'"


def _store_args(case: str = CASE) -> list[str]:
    return ["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf")]


def test_bad_time_zone_is_one_line_before_spark(no_spark, tmp_path, capsys):
    for job in ("rebuild", "recover"):
        code, err = run_job_lines(job, _store_args() + ["--out", str(tmp_path / job), "--index-name-tz", "Europe/Berlinn"],
                            capsys)
        assert code == 2 and err == [f"reput {job}: error: --index-name-tz 'Europe/Berlinn': unknown time zone "
                                     f"(an IANA name such as UTC or Asia/Shanghai)"]


def test_debug_shows_the_traceback(no_spark, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REPUT_DEBUG", "1")
    code, err = run_job_lines("rebuild", _store_args() + ["--out", str(tmp_path / "o"), "--index-name-tz", "Nowhere/X"],
                        capsys)
    assert err[0].startswith("reput rebuild: note: environment: REPUT_DEBUG='1' ")  # named, as any non-default
    assert code == 2 and err[1] == "Traceback (most recent call last):" and "unknown time zone" in err[-1]


def test_missing_or_unreadable_store_before_spark(no_spark, tmp_path, capsys):
    """Every job says there is no store, in the same words, before Spark starts."""
    (tmp_path / "empty").mkdir()
    for job, extra in (("inspect", []), ("rebuild", ["--out", str(tmp_path / "o")]), ("verify", []),
                       ("recover", ["--dry-run"]), ("catalog", ["--table", str(tmp_path / "t")]),
                       ("query", ["--msg-id", "7F0000010000000000000000000000FF"]), ("dump", ["--offset", "0"])):
        for store in (tmp_path / "empty", tmp_path / "missing"):
            code, err = run_job_lines(job, ["--store", str(store)] + extra, capsys)
            assert (code, err) == (2, [f"reput {job}: error: no RocketMQ store at {store}: no commitlog/ directory"])
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked"
        (locked / "commitlog").mkdir(parents=True)
        (locked / "commitlog").chmod(0)
        code, err = run_job_lines("inspect", ["--store", str(locked)], capsys)
        assert code == 2 and err[0].startswith("reput inspect: error: cannot read")


def test_existing_out_and_unreadable_config_before_spark(no_spark, tmp_path, capsys):
    """An OUT holding files is refused without --overwrite; with it, only an earlier reput output is replaced: a
    directory holding anything else (an operator's keep.txt) is refused naming what is there, and left as it was. An
    empty OUT is taken (test_an_empty_out_directory_is_taken)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    for job in ("rebuild", "recover", "convert"):
        code, err = run_job_lines(job, _store_args() + ["--out", str(tmp_path / "out")], capsys)
        assert (code, err) == (2, [f"reput {job}: error: {tmp_path / 'out'} already exists; choose a new --out "
                                   f"or pass --overwrite"]) or job == "convert" and "not a DLedger store" in err[0]
        code, err = run_job_lines(job, _store_args() + ["--out", str(tmp_path / "out"), "--overwrite"], capsys)
        assert code == 2 and len(err) == 1, err
        assert f"{tmp_path / 'out'} is not an earlier reput output" in err[0] and "it holds keep.txt" in err[0] \
            or job == "convert" and "not a DLedger store" in err[0], err
        assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    code, err = run_job_lines("verify", ["--store", str(GOLDEN / CASE), "--broker-config", str(tmp_path / "nope.conf")],
                        capsys)
    assert code == 2 and err == [f"reput verify: error: cannot read broker config {tmp_path / 'nope.conf'}: "
                                 f"No such file or directory"]


def test_bad_flags_are_usage_errors(no_spark, capsys):
    code, err = run_job_lines("verify", ["--store", str(GOLDEN / CASE), "--only", "everything"], capsys)
    assert code == 2 and err[-1].startswith("reput verify: error: argument --only: invalid choice")
    code, err = run_job_lines("inspect", ["--store", str(GOLDEN / CASE), "--log-level", "loud"], capsys)
    assert code == 2 and "argument --log-level" in err[-1]


# ------------------------------------------------------------------------- outputs outside the store, for real


@pytest.fixture
def aliased(tmp_path):
    """A small store and A, a symlink to it: A/... names paths inside the store."""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "rebuild-headless-11", store)
    (tmp_path / "A").symlink_to(store)
    return store, tmp_path / "A"


def test_outputs_inside_the_store_under_another_name_are_refused(no_spark, aliased, tmp_path, capsys):
    """Symlinks and `..` are resolved before comparing: each alias of the store is refused, before Spark,
    and the store is left as it was."""
    from tests.hostile import tree_digest

    store, alias = aliased
    before = tree_digest(store)
    conf = ["--broker-config", str(store / "broker.conf")]
    cases = [
        ("rebuild", ["--out", str(alias / "consumequeue"), "--overwrite"], "--out"),
        ("rebuild", ["--out", str(alias / "sub" / "out")], "--out"),
        ("rebuild", ["--out", str(tmp_path / "elsewhere" / ".." / "store" / "out")], "--out"),
        ("rebuild", ["--out", str(tmp_path)], "--out"),  # contains the store
        ("rebuild", ["--since", str(alias), "--in-place", "--backup-dir", str(tmp_path / "bk")], "--since"),
        ("recover", ["--out", str(alias / "recovered")], "--out"),
        ("recover", ["--dry-run", "--work-dir", str(alias / "work")], "--work-dir"),
        ("catalog", ["--table", str(alias / "tbl")], "--table"),
        ("verify", ["--report", str(alias / "r.json")], "--report"),
        ("verify", ["--work-dir", str(alias)], "--work-dir"),
        ("inspect", ["--report", str(alias / "r.json")], "--report"),
        ("query", ["--msg-id", "7F0000010000000000000000000000FF", "--report", str(alias / "q.json")], "--report"),
    ]
    for job, extra, flag in cases:
        for store_arg in (store, alias):  # the store itself may be named through the alias too
            code, err = run_job_lines(job, ["--store", str(store_arg)] + conf + extra, capsys)
            assert code == 2 and len(err) == 1, (job, extra, err)
            assert err[0].startswith(f"reput {job}: error: {flag} ") and "must be outside the store" in err[0], err
    assert tree_digest(store) == before


def test_a_report_inside_the_output_the_job_publishes_is_refused(no_spark, tmp_path, capsys):
    """--report inside --out (or inside OUT1 with --since --in-place): refused before anything is written, since the
    next --overwrite or --since would refuse OUT for a file reput's record of it does not list."""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "clean-small-11", store)
    out, out1 = tmp_path / "out", tmp_path / "out1"
    conf = ["--store", str(store), "--broker-config", str(store / "broker.conf")]
    cases = [("rebuild", ["--out", str(out), "--report", str(out / "r.json")], "--out", out),
             ("recover", ["--out", str(out), "--report", str(out / "sub" / "r.json")], "--out", out),
             ("rebuild", ["--since", str(out1), "--in-place", "--backup-dir", str(tmp_path / "bak"),
                          "--report", str(out1 / "r.json")], "--since", out1)]
    for job, extra, flag, published in cases:
        code, err = run_job_lines(job, conf + extra, capsys)
        assert code == 2 and err == [f"reput {job}: error: --report {extra[-1]} lies inside {flag} {published}, which "
                                     f"the job publishes (its own report goes there); put --report outside it"], err
        assert not out.exists() and not out1.exists()


def test_same_or_inside_by_device_and_inode(tmp_path):
    """A second name the string forms cannot see (here a hard-linked path is impossible for directories,
    so a symlinked parent stands in) is still caught through device and inode numbers."""
    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.io.paths import same_or_inside

    (tmp_path / "store" / "commitlog").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "store" / "commitlog")
    assert same_or_inside(Location(str(tmp_path / "link" / "x" / "y")), Location(str(tmp_path / "store")))
    assert not same_or_inside(Location(str(tmp_path / "storex")), Location(str(tmp_path / "store")))
    assert same_or_inside(Location("s3://b/store/x/../out"), Location("s3://b/store"))
    assert not same_or_inside(Location("s3://b/store2/out"), Location("s3://b/store"))


def test_an_error_after_the_interrupt_is_the_interrupt(capsys):
    """A signal's KeyboardInterrupt raised inside a Py4J call can be replaced on its way up by the error of
    PySpark's clean-up call on the broken connection: the job still ends as interrupted (one line, 130), not as
    `error: Py4JNetworkError` (exit 2). Without a signal the same error is an error."""
    import signal

    import pytest

    from jobs.pipeline.runtime import interrupt
    from jobs.pipeline.runtime.cli import run_main

    def job(argv):
        try:
            signal.raise_signal(signal.SIGINT)  # the handler run_main installed raises KeyboardInterrupt
        except KeyboardInterrupt:
            raise ConnectionError("Answer from Java side is empty") from None  # what PySpark's clean-up raises

    def broken(argv):
        raise ConnectionError("Answer from Java side is empty")

    with pytest.raises(SystemExit) as ended:
        run_main("rebuild", job, [])
    assert ended.value.code == interrupt.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "reput rebuild: interrupted; nothing published\n"
    with pytest.raises(SystemExit) as ended:
        run_main("rebuild", broken, [])
    assert ended.value.code == 2 and "error: Answer from Java side is empty" in capsys.readouterr().err


def test_an_empty_out_directory_is_taken(spark, tmp_path, capsys):
    """An empty OUT made beforehand is written into as if it were absent; a file where OUT belongs is refused."""
    (tmp_path / "out").mkdir()
    code, err = run_job_lines("rebuild", _store_args() + ["--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert code == 0 and (tmp_path / "out" / "reput-report.json").is_file(), err
    (tmp_path / "file").write_text("x")
    code, err = run_job_lines("rebuild", _store_args() + ["--out", str(tmp_path / "file"), "--overwrite"], capsys)
    assert code == 2 and err == [f"reput rebuild: error: {tmp_path / 'file'} exists and is not a directory; choose a "
                                 f"new --out"]


def test_a_work_dir_made_for_the_run_goes_with_it(no_spark, tmp_path, capsys):
    """--work-dir naming a directory that does not exist: the run makes it (and its missing parents) and removes them
    again; one that exists stays, empty as it was."""
    store = GOLDEN / "dledger-clean-small-11"
    conf = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--dry-run", "--quiet", "--engine",
            "local"]
    made = tmp_path / "made" / "work"
    code, err = run_job_lines("convert", conf + ["--out", str(tmp_path / "o"), "--work-dir", str(made)], capsys)
    assert code == 0, err
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept"
    kept.mkdir()
    code, err = run_job_lines("convert", conf + ["--out", str(tmp_path / "o"), "--work-dir", str(kept)], capsys)
    assert code == 0 and list(tmp_path.iterdir()) == [kept] and list(kept.iterdir()) == [], err


def test_a_reader_that_closes_the_pipe_ends_the_job_quietly():
    """`reput dump ... | head -1`: the reader closes the pipe after its line; the job ends as a program killed by
    SIGPIPE ends (141), with no error line (it used to say "[Errno 32] Broken pipe", exit 2)."""
    store = GOLDEN / "clean-small-11"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.dump", "--store", str(store), "--broker-config",
                             str(store / "broker.conf"), "--offset", "0", "--count", "3000"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("record at offset 0 ")
    proc.stdout.close()  # more than a pipe's buffer is still to come: the next write fails
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == "", err


@pytest.mark.parametrize("job,argv", [("query", ["--topic", "Topic\udcffTest", "--key", "dup"]),
                                      ("query", ["--topic", "TopicTest", "--key", "d\udcffup"]),
                                      ("dump", ["--topic", "Topic\udcffTest", "--queue", "0"]),
                                      ("rebuild", ["--out", "/nonexistent/out", "--topics", "Topic\udcffTest"])])
def test_a_topic_or_key_that_is_not_utf8_is_refused_naming_the_flag(job, argv, capsys):
    """A terminal in another encoding hands Python undecodable bytes (surrogates): the flag is named with the byte,
    before the job reads anything (it raised a UnicodeEncodeError, or matched against nothing)."""
    store = GOLDEN / "clean-small-11"
    code, err = run_job_lines(job, ["--store", str(store), "--broker-config", str(store / "broker.conf"), *argv],
                              capsys)
    flag = argv[2] if job == "query" and "\udcff" in argv[3] else argv[0] if job != "rebuild" else "--topics"
    assert code == 2 and err[-1].startswith(f"reput {job}: error: argument {flag}: b'") and "is not UTF-8 (byte 0xff" \
        in err[-1], err


@pytest.mark.parametrize("window", [["--begin", "1795324090000", "--end", "1795324000000"], ["--end", "-1"],
                                    ["--begin", "2026-11-22T05:08:00", "--end", "2026-11-22T05:07:59Z"]])
def test_a_time_window_that_ends_before_it_begins_is_refused(window, capsys):
    """query with --end before --begin answered "0 message(s)", exit 1 ("none found"): a script took the message
    for missing. It is bad input: one line naming the window, exit 2."""
    store = GOLDEN / "clean-small-11"
    code, err = run_job_lines("query", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                        "--topic", "TopicTest", "--key", "ORDER-1", *window], capsys)
    assert code == 2 and err[-1].startswith("reput query: error: --begin ") and "is no time window" in err[-1], err


@pytest.mark.parametrize("point", ["after-publish", "before-old-delete"])
def test_an_interrupt_once_out_is_in_place_says_it_was_published(point, tmp_path):
    """Ctrl-C once the new OUT is in place (renamed there; an --overwrite's old copy not yet deleted), before the
    report is printed: OUT is the new, complete output, and the line says so (it said "nothing published")."""
    from tests.helpers import signalled_at_hook

    store = GOLDEN / "clean-small-11"
    out = tmp_path / "out"
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out), "--engine",
            "local", "--quiet"]
    if point == "before-old-delete":
        out.mkdir()
        assert subprocess.run([sys.executable, "-m", "jobs.rebuild", *argv, "--overwrite"], cwd=REPO,
                              capture_output=True, timeout=300).returncode == 0
        argv.append("--overwrite")
    run = signalled_at_hook("rebuild", argv, point, tmp_path / "paused")
    assert run.returncode == 130 and run.stderr.strip().splitlines()[-1] == (
        f"reput rebuild: interrupted; {out} was published: the run had completed it; the report was not printed"), \
        run.stderr[-2000:]
    assert (out / "reput-report.json").is_file() and sorted(os.listdir(tmp_path)) == ["out", "paused"], \
        os.listdir(tmp_path)
