"""Harnesses the test modules share, so that no test module imports another: a job run in this process, a job
held at a test hook and signalled, a broker's lock held by another process, the processes a marker finds, file
digests, verify's report and a catalog table's counts."""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import REPO

# ------------------------------------------------------------------------------------ a job in this process


def run_job(job: str, argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `python -m jobs.<job> argv` in this process (the suite's Spark session): status, stdout, stderr.
    Anything but SystemExit escaping run_main fails the test; so does an error that is not one of reput's
    own (run_main's line then carries the REPUT_DEBUG hint)."""
    from jobs.pipeline.runtime.cli import run_main

    capfd.readouterr()
    module = importlib.import_module(f"jobs.{job}")
    with pytest.raises(SystemExit) as exited:
        run_main(job, module.main, argv)
    captured = capfd.readouterr()
    assert "REPUT_DEBUG=1 shows the traceback" not in captured.err, captured.err[-2000:]
    return exited.value.code, captured.out, captured.err


def run_job_lines(job: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """run_main of `jobs.<job>` in this process: (exit status, stderr lines)."""
    from jobs.pipeline.runtime.cli import run_main

    with pytest.raises(SystemExit) as e:
        run_main(job, importlib.import_module(f"jobs.{job}").main, argv)
    return e.value.code, capsys.readouterr().err.splitlines()


def rebuild_refused(argv: list[str], capfd: pytest.CaptureFixture[str], out: Path, *words: str) -> None:
    """A rebuild refused: one line on stderr holding every one of `words`, exit 2, `out` not there."""
    code, _, err = run_job("rebuild", argv, capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput rebuild: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    assert not out.exists()


def run_verify(store: Path, tmp_path: Path, conf: Path | None = None, *extra: str) -> tuple[int, dict]:
    """jobs.verify's main on `store` (its own broker.conf unless `conf`): exit status and the report."""
    from jobs.verify import main as verify_main

    report = tmp_path / "report.json"
    code = verify_main(["--store", str(store), "--broker-config", str(conf or store / "broker.conf"),
                        "--report", str(report), "--work-dir", str(tmp_path / "work"), *extra])
    return code, json.loads(report.read_text())


# ----------------------------------------------------------------------- a job held at a test hook, signalled

HOOK_WAIT_S = 300  # how long a job may take to reach its test hook (its JVM's start on a loaded machine)


@dataclass(frozen=True)
class Ended:
    """How a signalled job ended: its exit status, its stderr, and whether its process group is gone."""

    returncode: int
    stderr: str
    group_gone: bool


def start_at_hook(job: str, argv: list[str], hook: str, mark: Path, env: dict[str, str] | None = None,
                  stdout: int = subprocess.PIPE) -> subprocess.Popen:
    """`python -m jobs.<job> argv` in a process group of its own, held at test hook `hook`
    (jobs/pipeline/runtime/faults.py), which writes `mark` when reached; stderr piped as text."""
    env = dict(os.environ if env is None else env, REPUT_TEST_PAUSE_AT=hook, REPUT_TEST_PAUSE_MARK=str(mark))
    return subprocess.Popen([sys.executable, "-m", f"jobs.{job}", *argv], cwd=REPO, env=env, stdout=stdout,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_at_hook(proc: subprocess.Popen, mark: Path, within_s: float = HOOK_WAIT_S) -> None:
    """Until the job has reached its hook; fails with its stderr when it ends first, or after `within_s`."""
    deadline = time.monotonic() + within_s
    while not mark.exists():
        assert proc.poll() is None, f"exited {proc.returncode} before its hook: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"never reached its hook within {within_s} s"
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the job's process group if the job still runs (a failed test leaves nothing running)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ended(proc: subprocess.Popen, within_s: float = 120) -> Ended:
    """The signalled job's end (killed, group and all, if it has not ended within `within_s`)."""
    try:
        _, err = proc.communicate(timeout=within_s)
    finally:
        kill_group(proc)
    return Ended(proc.returncode, err, group_gone(proc.pid, within_s=60))


def signalled_at_hook(job: str, argv: list[str], hook: str, mark: Path, sig: int = signal.SIGINT,
                      env: dict[str, str] | None = None, stdout: int = subprocess.PIPE,
                      check: Callable[[], object] | None = None) -> Ended:
    """The job held at `hook` (`check()` run there: what the job must have made by then), then `sig` sent to its
    whole process group as a terminal sends Ctrl-C."""
    proc = start_at_hook(job, argv, hook, mark, env, stdout)
    try:
        wait_at_hook(proc, mark)
        if check is not None:
            check()
        os.killpg(proc.pid, sig)
    except BaseException:
        kill_group(proc)
        raise
    return ended(proc)


def group_gone(pgid: int, within_s: float) -> bool:
    """No process of the group is left (killed processes disappear once their new parent reaps them)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


# -------------------------------------------------------------------------- processes found by a marker

MARK_ENV = "REPUT_SIGNAL_TEST_MARK"  # not a REPUT_* setting: only the tests read it, from /proc/<pid>/environ


def marked(mark: str) -> dict[int, str]:
    """pid -> command line of every process whose environment holds the marker (children inherit it; a
    forked worker keeps its daemon's)."""
    found = {}
    needle = f"{MARK_ENV}={mark}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie: gone, not yet reaped
        except OSError:
            continue
        found[int(pid)] = cmd[:200]
    return found


# ----------------------------------------------------------------------------- a broker's lock, held

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # FileChannel.tryLock(0, 1, false)
print("locked", flush=True)
time.sleep(600)
"""


def hold_lock(lock: Path) -> subprocess.Popen:
    """Another process holding `lock` as a running broker holds STORE/lock (an exclusive fcntl lock on byte 0),
    once it says so; the caller kills it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


@contextlib.contextmanager
def lock_held(lock: Path) -> Iterator[subprocess.Popen]:
    """`lock` held by another process (hold_lock) for the block; the holder is killed after it."""
    proc = hold_lock(lock)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# -------------------------------------------------------------------------------------------- digests


def file_tree_digest(root: Path) -> dict[str, str]:
    """Digest of every regular file below `root` by relative POSIX path (tests/hostile.py's file_digest: an OUT's
    record of its files without its times); directories are not listed."""
    from tests.hostile import file_digest

    return {p.relative_to(root).as_posix(): file_digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


def per_topic_queue(table: pa.Table) -> dict[str, dict[str, int]]:
    """Row counts of a catalog table per topic and queue, in the golden manifest's shape."""
    grouped = table.group_by(["topic", "queue_id"]).aggregate([("physical_offset", "count")])
    out: dict[str, dict[str, int]] = {}
    for row in grouped.to_pylist():
        out.setdefault(row["topic"], {})[str(row["queue_id"])] = row["physical_offset_count"]
    return out
