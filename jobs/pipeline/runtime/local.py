"""The local engine: a job's tasks in worker processes forked from the driver, no JVM, no pyspark.

`run_tasks` forks min(N, items) workers (N: the cores of `local[N]`), each inheriting the items and the task
function (nothing is pickled on the way in), hands them item numbers one at a time (the next to whichever is
free, as Spark's scheduler does), and takes back the pickled results (small descriptors: the heavy data stays in
the workers, which read and write through the filesystem layer; a worker runs one task at a time, so memory per
task is bounded as in a Spark worker). Results come back in item order. A single item runs in the driver.
The compiled kernels are loaded once in the driver when the engine starts (`start`, before the job's timed work)
or at the latest before the first fork, so every worker shares them.

A task's exception is raised in the driver as itself (its worker's traceback attached as the cause, shown with
REPUT_DEBUG=1), or, when it cannot be pickled, as `TaskFailed` holding the worker's traceback text, which
`failure.one_line` reads as it reads a Spark task's. Workers ignore SIGINT and SIGTERM (the driver's to handle)
and are killed by the kernel when the driver ends (PR_SET_PDEATHSIG); the driver kills and reaps them before an
interrupt or an error leaves `run_tasks`, so nothing of theirs outlives the clean-ups that follow.
"""
from __future__ import annotations

import gc
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection, Pipe, wait
from typing import Callable, Sequence, TypeVar

from . import interrupt
from .heap import keep_freed_memory
from .tasks import progress_line
from .worker_daemon import die_with_parent

T = TypeVar("T")
R = TypeVar("R")
PROGRESS_EVERY_S = 2.0  # as the Spark engine's Progress


class TaskFailed(Exception):
    """A task raised an exception that could not be brought to the driver as itself: its traceback's text."""


class WorkerLost(Exception):
    """A worker process ended without answering (killed, or crashed in native code)."""


class RemoteTraceback(Exception):
    """The worker's traceback of an exception raised in the driver (its __cause__)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class LocalRunner:
    """The TaskRunner of the local engine (see the module doc)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(int(workers), 1)

    def start(self) -> "LocalRunner":
        """The engine's start-up: the kernels its tasks share loaded now, before the job's timed work, as the
        Spark engine's warm daemon loads them while the JVM starts (pandas never: see storage_format.arrow_numpy)."""
        _warm_once()
        return self

    @property
    def default_parallelism(self) -> int:
        return self.workers

    @property
    def driver_memory(self) -> None:
        """No JVM and no memory setting: the local engine's driver is bounded by the machine only."""
        return None

    def run_tasks(self, items: Sequence[T], fn: Callable[[T], R], label: str, total_bytes: int = 0,
                  quiet: bool = False) -> list[R]:
        """fn(item) for every item, results in item order, progress lines on stderr unless quiet."""
        items = list(items)
        if not items:
            return []
        started = time.monotonic()
        if len(items) == 1:
            results = [fn(items[0])]
        else:
            _warm_once()
            results = _Pool(items, fn, min(self.workers, len(items)), label, total_bytes, quiet, started).run()
        if not quiet:
            print(progress_line(label, len(items), len(items), time.monotonic() - started, total_bytes),
                  file=sys.stderr, flush=True)
        return results


_warmed = False


def _warm_once() -> None:
    """Before the first fork: the compiled kernels loaded once, in the driver, so that every worker of every
    stage shares them (forked) instead of loading them itself (what the Spark engine's warm daemon does)."""
    global _warmed
    if not _warmed:
        from storage_format.kernels.warm import warm

        with interrupt.deferred():  # numba loads through ctypes callbacks, which swallow a KeyboardInterrupt raised
            warm()  # in them (the job then ran on and published): the signal is raised once the load is done
        gc.collect()
        gc.freeze()  # what later forks share stays shared (no collection writes to those pages)
        _warmed = True


class _Pool:
    """One run_tasks call's workers: forked, fed item numbers, collected, ended."""

    def __init__(self, items: list, fn: Callable, n: int, label: str, total_bytes: int, quiet: bool,
                 started: float) -> None:
        self.items, self.fn, self.n, self.label = items, fn, n, label
        self.total_bytes, self.quiet, self.started = total_bytes, quiet, started
        self.pids: dict[Connection, int] = {}
        self.running: dict[Connection, int] = {}  # worker -> the item it runs

    def run(self) -> list:
        """Every item's result; the workers' temporary files (their tempfile directory is one the driver makes for
        the pool) go with the pool however it ends: a worker killed after an error cannot remove its own."""
        folder = tempfile.mkdtemp(prefix="reput-tasks-")
        try:
            return self._run(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _run(self, folder: str) -> list:
        results: list = [None] * len(self.items)
        done, following = 0, 0
        try:
            with interrupt.deferred():  # a signal while forking: every worker forked is known, then killed
                self._fork_all(folder)
            for conn in list(self.pids):
                following = self._assign(conn, following)
            last = time.monotonic()
            while done < len(self.items):
                ready = wait(list(self.running), timeout=PROGRESS_EVERY_S)
                for conn in ready:
                    i = self.running.pop(conn)
                    try:
                        j, ok, value = conn.recv()
                    except (EOFError, OSError):
                        raise self._lost(conn, i) from None
                    if not ok:
                        raise _exception(value)
                    results[j] = value
                    done += 1
                    following = self._assign(conn, following)
                if not self.quiet and done < len(self.items) and time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    print(progress_line(self.label, done, len(self.items), last - self.started, self.total_bytes),
                          file=sys.stderr, flush=True)
        except BaseException:
            self._kill()
            raise
        self._close()
        return results

    def _fork_all(self, folder: str) -> None:
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            stream.flush()
        driver = os.getpid()
        for _ in range(self.n):
            here, there = Pipe()
            pid = os.fork()
            if pid == 0:
                here.close()
                for conn in self.pids:
                    conn.close()
                tempfile.tempdir = folder  # the worker's temporary files: removed with the pool (run)
                _serve(there, self.items, self.fn, driver)  # never returns
            there.close()
            self.pids[here] = pid

    def _assign(self, conn: Connection, following: int) -> int:
        """Give `conn` the next item, or tell it to leave when none is left."""
        if following < len(self.items):
            conn.send(following)
            self.running[conn] = following
            return following + 1
        return following

    def _lost(self, conn: Connection, item: int) -> WorkerLost:
        pid = self.pids.pop(conn)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        return WorkerLost(f"a local worker process ended unexpectedly ({how}) in task {item + 1} of "
                          f"{len(self.items)} ({self.label})")

    def _close(self) -> None:
        """Normal end: every worker told to leave (end of its input) and reaped."""
        for conn in self.pids:
            conn.close()
        for pid in self.pids.values():
            _reap(pid)
        self.pids.clear()

    def _kill(self) -> None:
        """An error or an interrupt: every worker killed and reaped before the driver goes on."""
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for conn in self.pids:
            conn.close()
        for pid in self.pids.values():
            _reap(pid)
        self.pids.clear()


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _serve(conn: Connection, items: list, fn: Callable, driver: int) -> None:
    """A worker: run the items the driver names until it closes the pipe, then leave with os._exit (nothing of
    the driver's clean-ups or buffers is this process's to run)."""
    code = 0
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        die_with_parent(driver)
        keep_freed_memory()
        while True:
            try:
                i = conn.recv()
            except EOFError:
                break
            try:
                reply = (i, True, fn(items[i]))
            except BaseException as exc:  # noqa: BLE001 - every failure is the driver's to report
                reply = (i, False, _failure(exc))
            try:
                conn.send(reply)
            except Exception as exc:  # the result cannot be pickled: a failure of the task
                conn.send((i, False, _failure(exc)))
    except BaseException:  # noqa: BLE001 - the pipe broke: the driver is gone or ended this run
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _failure(exc: BaseException) -> tuple[BaseException | None, str]:
    """What the driver needs of a task's exception: itself when it survives pickling, and its traceback."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None, text
    return exc, text


def _exception(failure: tuple[BaseException | None, str]) -> BaseException:
    exc, text = failure
    if exc is None:
        return TaskFailed(text)
    exc.__cause__ = RemoteTraceback(text)
    return exc
