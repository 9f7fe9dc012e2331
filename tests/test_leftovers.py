"""The run's leftover check itself (tests/leftovers.py, enforced by tests/conftest.py at the session's end): it
finds a `reput-*` directory and a Spark socket made after the snapshot, and a process still running below the
test process; it spares what was there before and the processes it is told to spare."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.leftovers import descendants, left_behind, temp_entries


def test_new_temp_entries_and_running_children_are_found(short_tmp):
    tmp_path = short_tmp  # a Unix socket is bound under it
    (tmp_path / "reput-old").mkdir()
    before = temp_entries(tmp_path)
    running = set(descendants(os.getpid()))  # the suite's own Spark JVM, when it has started
    (tmp_path / "reput-in-index-write-x").mkdir()
    (tmp_path / "unrelated").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    name = f".{uuid.uuid4()}.sock"
    sock.bind(str(tmp_path / name))
    sock.close()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = left_behind(before, os.getpid(), running, wait_s=0, temp=tmp_path)
        assert left.entries == tuple(sorted(["reput-in-index-write-x", name]))
        assert child.pid in left.processes and "time.sleep(60)" in left.processes[child.pid]
        assert not left_behind(before, os.getpid(), running | {child.pid}, wait_s=0, temp=tmp_path).processes
    finally:
        child.kill()
        child.wait()
    assert not left_behind(temp_entries(tmp_path), os.getpid(), running, wait_s=5, temp=tmp_path)


def test_a_spark_session_leaves_nothing_once_its_process_ends(killed_temp):
    """What the session's end spares (the suite's Spark JVM and its warm daemon's socket directory) is gone once
    the process that started them has ended: a process that runs one Spark job leaves nothing in its temp
    directory, and no process, within 30 s of its exit."""
    from tests.conftest import REPO, private_temp_env

    temp = killed_temp / "t"  # short: Spark's Unix socket paths under it must stay within 107 bytes (pytest's
    temp.mkdir()               # /tmp/pytest-of-root/pytest-N/<test name>/ can be longer)
    script = ("import os; from jobs.pipeline.runtime.session import get_spark; "
              "from jobs.pipeline.runtime.worker_daemon import WARM_ENV; "
              "s = get_spark('leftovers', master='local[1]'); assert s.sparkContext.parallelize([1, 2]).count() == 2; "
              "print(os.environ.get(WARM_ENV, '')); s.stop()")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **private_temp_env(temp), "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(temp)), done.stdout  # the warm daemon's socket was in `temp`
    def theirs() -> list[str]:  # processes started with this temp directory in their environment
        return [f"{p}: {_cmdline(int(p))}" for p in os.listdir("/proc") if p.isdigit() and str(temp) in _environ(int(p))]

    deadline = time.monotonic() + 30
    while (temp_entries(temp) or theirs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert temp_entries(temp) == set() and theirs() == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return ""


def _environ(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


LEAKS = """
import os, subprocess, sys, tempfile
def test_leaves_a_temp_entry():
    os.mkdir(os.path.join(tempfile.gettempdir(), "reput-in-leak"))
def test_leaves_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)", "{marker}"])
def test_nothing():
    pass
"""


def test_a_run_under_xdist_fails_naming_what_its_workers_left(short_tmp):
    """With `make test`'s `-n 2` the end still fails the run: a process a worker left below itself (reported by
    that worker) and a temp entry (found by the controller once the workers have ended), each named."""
    from tests.conftest import LEFTOVER_WAIT_ENV, REPO

    temp = short_tmp / "t"
    temp.mkdir()
    marker = f"leak-{uuid.uuid4()}"
    (short_tmp / "test_leaks.py").write_text(LEAKS.format(marker=marker))
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO), LEFTOVER_WAIT_ENV: "1"}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.conftest", "-p",
                               "no:cacheprovider", "--rootdir", str(short_tmp), str(short_tmp / "test_leaks.py")],
                              cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    finally:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and marker in _cmdline(int(pid)):
                os.kill(int(pid), 9)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout and "left these behind" in done.stdout
    assert f"temp directory {temp}: reput-in-leak" in done.stdout
    assert "] process " in done.stdout and marker in done.stdout
