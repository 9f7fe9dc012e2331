"""The warm worker daemon: started by the driver before its JVM, it becomes the daemon Spark launches, and
it never outlives the driver or stands in for a launcher it does not fit."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from jobs.pipeline.runtime import worker_daemon
from tests.conftest import pid_gone

REPO = Path(__file__).resolve().parents[1]

SESSION_SCRIPT = """
import os, sys
from jobs.pipeline.runtime.session import get_spark
from jobs.pipeline.runtime import worker_daemon
spark = get_spark("warm-test", "local[1]", quiet=True)
seen = spark.sparkContext.parallelize([0], 1).map(lambda _: (os.getppid(), os.environ.get("PYTHONHASHSEED"))).collect()
print(worker_daemon._warm.pid, seen[0][0], seen[0][1], flush=True)
spark.stop()
"""


def test_python_workers_are_forked_by_the_warm_daemon():
    """A new embedded session's Python workers are children of the process the driver started before its
    JVM (so the pipeline was loaded while the JVM started), with the workers' hash seed; it ends with the driver."""
    run = subprocess.run([sys.executable, "-c", SESSION_SCRIPT], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    warm_pid, worker_parent, seed = run.stdout.split()
    assert worker_parent == warm_pid
    assert seed == os.environ.get("PYTHONHASHSEED", "0")
    assert pid_gone(int(warm_pid), within_s=30), "the warm daemon outlived its driver"


def test_no_warm_daemon_means_the_launcher_loads_itself(monkeypatch, tmp_path):
    """A socket nobody listens on (no warm daemon, or one already taken): hand_over declines."""
    monkeypatch.setenv(worker_daemon.WARM_ENV, str(tmp_path / "missing.sock"))
    assert worker_daemon.hand_over() is False
    monkeypatch.delenv(worker_daemon.WARM_ENV)
    assert worker_daemon.hand_over() is False


def _start_warm(tmp_path: Path, seed: str) -> tuple[subprocess.Popen, Path]:
    sock = tmp_path / "warm" / "daemon.sock"
    sock.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.pipeline.runtime.worker_daemon", "--warm", str(sock), str(os.getpid())],
                            cwd=REPO, env=dict(os.environ, PYTHONHASHSEED=seed))
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return proc, sock


def test_a_warm_daemon_with_another_hash_seed_declines(monkeypatch, tmp_path):
    """Python fixes the string hash seed at start: a warm process with another seed than the workers are
    given must not become their daemon (the launcher then loads itself)."""
    proc, sock = _start_warm(tmp_path, seed="7")
    monkeypatch.setenv(worker_daemon.WARM_ENV, str(sock))
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    try:
        assert worker_daemon.hand_over() is False
        assert proc.wait(timeout=60) == 0
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_warm_daemon_ends_when_its_driver_does(tmp_path):
    """Started but never taken (the driver failed before any Python task): it leaves with the driver."""
    script = ("from jobs.pipeline.runtime import worker_daemon; worker_daemon.start_warm(); "
              "print(worker_daemon._warm.pid, flush=True)")
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert pid_gone(int(run.stdout), within_s=30), "the warm daemon outlived its driver"


def test_workers_end_quietly_when_the_jvm_is_gone():
    """A job's process leaves once its output is published and its JVM then ends: a reused worker that
    finds the socket closed ends with exit code 1, no traceback; any other failure still raises."""
    def closed(_sock, _auth):
        raise BrokenPipeError(32, "Broken pipe")

    def broken(_sock, _auth):
        raise ValueError("a real failure")

    assert worker_daemon.quiet_when_gone(closed)(None, True) == 1
    assert worker_daemon.quiet_when_gone(lambda _s, _a: 0)(None, True) == 0
    try:
        worker_daemon.quiet_when_gone(broken)(None, True)
    except ValueError:
        pass
    else:
        raise AssertionError("a failure other than a closed socket was swallowed")


def test_a_forked_worker_dies_with_its_daemon(tmp_path):
    """A worker forked by the daemon (quiet_when_gone with the daemon's pid) is killed by the kernel when the
    daemon ends however it ends (SIGKILL here: no SIGHUP to its process group on the way out), instead of
    living on reparented to init, as idle reused workers were seen to."""
    script = ("import os, signal, sys, time\n"
              "from jobs.pipeline.runtime import worker_daemon\n"
              "daemon = os.getpid()\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # only the parent-death signal can end it\n"
              "    worker_daemon.quiet_when_gone(lambda s, a: time.sleep(60) or 0, daemon)(None, True)\n"
              "    os._exit(0)\n"
              "print(pid, flush=True)\n"
              "time.sleep(60)\n")
    daemon = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(daemon.stdout.readline())
        time.sleep(0.5)  # the worker has called die_with_parent
        assert _alive(worker)
        daemon.kill()
        daemon.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), "the forked worker outlived its daemon"
    finally:
        if daemon.poll() is None:
            daemon.kill()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
