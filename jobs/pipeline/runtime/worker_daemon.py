"""The embedded session's Python worker daemon: Spark's own (pyspark.daemon), but already warm.

Every worker the daemon forks shares, copy-on-write, the pipeline's imports and the compiled kernels
the daemon loaded (about a second of work) instead of paying them in its first task. That second
would still sit on every job's critical path, after the driver JVM's own start, because Spark launches
the daemon only when the first Python task runs. So the driver starts a *warm* daemon first, beside the
JVM it is about to launch (`start_warm`, from jobs.pipeline.runtime.session): it loads everything on the other
core while the JVM starts, then waits on a private Unix socket. When Spark later launches
`python -m jobs.pipeline.runtime.worker_daemon`, that launcher hands its standard streams, environment,
arguments and working directory over the socket (`hand_over`); the warm process takes them on and runs
Spark's daemon loop in the launcher's place, while the launcher waits and passes SIGTERM on.
Without a warm process to take over (none started, already taken, a different interpreter or hash
seed, or anything unexpected) the launcher loads everything itself, as before. Sessions started by
spark-submit keep Spark's daemon (jobs.pipeline.runtime.session sets this one for embedded sessions only).
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from typing import Callable

from . import env, interrupt

WARM_ENV = "REPUT_WARM_DAEMON"  # the warm daemon's socket, for the launcher Spark starts
HASH_SEED = "PYTHONHASHSEED"  # fixed at interpreter start: the warm process must have the workers' seed
_POLL_S = 0.25  # how often a waiting warm daemon checks that the driver is still there
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_warm: subprocess.Popen | None = None
_pdeathsig_set = False  # in a forked worker: PR_SET_PDEATHSIG done (once per process)
PRELOAD_ENV = "REPUT_WORKER_PRELOAD"  # the modules a worker daemon imports first (preload_env)
_preload: list[str] = []  # the modules this process's tasks run, named by themselves (preload_in_workers)


def preload_in_workers(*modules: str) -> None:
    """Name modules whose functions Spark tasks run: the worker daemons of a session started afterwards import them
    before forking workers. A stage module names itself (`preload_in_workers(__name__)`), so the runtime, the
    lowest layer of the pipeline, names no module above it."""
    _preload.extend(m for m in modules if m not in _preload)


def preload_env() -> dict[str, str]:
    """The environment that carries the named modules to a worker daemon: the warm one, or (as
    spark.executorEnv) the one Spark launches."""
    return {PRELOAD_ENV: ",".join(_preload)} if _preload else {}


def preload() -> None:
    """Import what decode and build tasks run (the modules the driver named, preload_in_workers), load every kernel
    from numba's cache, then freeze what that made: Spark's daemon runs a full garbage collection after every task
    of a reused worker, and walking the objects of numba, llvmlite, pyarrow and numpy cost each task about 40 ms of
    CPU (and wrote to pages the workers otherwise share with the daemon)."""
    import importlib

    import pyspark.worker  # noqa: F401 - what every forked worker imports first

    for name in filter(None, (env.value(PRELOAD_ENV) or "").split(",")):
        importlib.import_module(name)
    from storage_format.kernels.warm import warm

    warm()
    gc.collect()
    gc.freeze()


def start_warm() -> None:
    """Driver side, just before the JVM launch: start a warm daemon and name its socket in the
    environment the JVM (and so the daemon launcher) inherits. After an interrupt the driver ends it and
    the workers it forked (its own process group, see run_daemon) and removes its socket's directory."""
    global _warm
    folder = tempfile.mkdtemp(prefix="reput-warm-")
    path = os.path.join(folder, "daemon.sock")
    child_env = {**os.environ, **preload_env()}
    child_env[HASH_SEED] = os.environ.get(HASH_SEED, "0")  # what SparkContext gives its Python workers
    _warm = subprocess.Popen([sys.executable, "-m", __name__, "--warm", path, str(os.getpid())],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=child_env, close_fds=True)
    os.environ[WARM_ENV] = path
    interrupt.own_process(_warm, group=True)
    interrupt.remove_on_interrupt(_warm, lambda: shutil.rmtree(folder, ignore_errors=True))


def hand_over() -> bool:
    """Launcher side: give this process's place to the warm daemon and wait until it ends (True), or
    False when there is none to take it."""
    path = os.environ.get(WARM_ENV)
    if not path:
        return False
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = json.dumps({"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(),
                              "executable": os.path.realpath(sys.executable)}).encode()
        socket.send_fds(conn, [struct.pack(">I", len(request))], [0, 1, 2])
        conn.sendall(request)
        reply = conn.recv(64).decode()
    except OSError:
        return False
    if not reply.startswith("ok "):
        return False
    pid = int(reply[3:])
    signal.signal(signal.SIGTERM, lambda *_: _pass_on_and_exit(pid))  # Spark stops its daemon so
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while conn.recv(4096):  # the warm daemon (and the workers it forked) hold the other end
        pass
    return True


def run_daemon() -> None:
    """Spark's daemon loop (it moves itself and the workers it forks into a process group of their own),
    with workers that leave quietly when the JVM has gone (a job's process exits as soon as its output is
    published, the JVM then ends on its own, and a reused worker still flushing its last reply into the
    closed socket would otherwise print a BrokenPipeError traceback on the operator's terminal after the
    job's last line) and that never outlive the daemon. The daemon leaves by os._exit: nothing is left to
    flush, and an interpreter teardown could wait on a thread of a preloaded library."""
    import pyspark.daemon

    pyspark.daemon.worker = quiet_when_gone(pyspark.daemon.worker, os.getpid())
    try:
        pyspark.daemon.manager()
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    os._exit(0)


def quiet_when_gone(spark_worker: Callable[[socket.socket, bool], int],
                    daemon: int | None = None) -> Callable[[socket.socket, bool], int]:
    """Spark's per-connection worker function, ending with exit code 1 instead of a traceback when the
    JVM's end of the socket is gone. Forked by `daemon`: the worker is killed when the daemon ends, however
    it ends (an idle reused worker was seen to outlive its daemon, reparented to init)."""
    def worker(sock: socket.socket, authenticated: bool) -> int:
        if daemon is not None:
            die_with_parent(daemon)
        try:
            return spark_worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1  # nobody is listening any more: nothing to report
    return worker


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent ends (Linux prctl PR_SET_PDEATHSIG); leave
    at once if `parent` is already gone (the parent may have ended before the call)."""
    global _pdeathsig_set
    if not _pdeathsig_set and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _pdeathsig_set = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _pdeathsig_set = True  # no prctl: the daemon's SIGHUP on its way out is all there is
    if os.getppid() != parent:
        os._exit(1)


def _pass_on_and_exit(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass
    os._exit(0)


def serve_warm(path: str, driver: int) -> None:
    """The warm daemon: load everything, wait for the launcher (or for the driver to go), then run
    Spark's daemon loop in the launcher's place."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle, as for Spark's daemon
    # SIGTERM before a launcher took it (the job's process group signalled): leave, socket removed.
    signal.signal(signal.SIGTERM, lambda *_: _leave_unused(path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    preload()
    conn = _accept(listener, driver)
    os.unlink(path)
    os.rmdir(os.path.dirname(path))
    if conn is None:
        return
    msg, fds, _, _ = socket.recv_fds(conn, 4, 3)
    size = struct.unpack(">I", msg)[0]
    request = b""
    while len(request) < size:
        request += conn.recv(size - len(request))
    req = json.loads(request)
    why = _unfit(req)
    if why:
        conn.sendall(f"no {why}".encode())
        return
    _become(req, fds)
    conn.sendall(f"ok {os.getpid()}".encode())
    run_daemon()


def _leave_unused(path: str) -> None:
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    os._exit(0)


def _accept(listener: socket.socket, driver: int) -> socket.socket | None:
    """The launcher's connection, or None once the driver that started us is gone."""
    listener.settimeout(_POLL_S)
    while os.getppid() == driver:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        return conn
    return None


def _unfit(req: dict) -> str | None:
    """Why this process cannot stand in for the launcher (an interpreter or hash seed of its own)."""
    if req["executable"] != os.path.realpath(sys.executable):
        return "another Python"
    if req["env"].get(HASH_SEED) != os.environ.get(HASH_SEED):
        return "another hash seed"
    return None


def _become(req: dict, fds: list[int]) -> None:
    """Take on the launcher's standard streams, environment, arguments and working directory."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = req["argv"]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--warm":
        serve_warm(sys.argv[2], int(sys.argv[3]))
    elif not hand_over():
        preload()
        run_daemon()
