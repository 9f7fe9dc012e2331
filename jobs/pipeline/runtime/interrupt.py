"""Ctrl-C and SIGTERM: one line, exit 130 (SIGINT) or 143 (SIGTERM), half-made output removed, every
process the job started gone before it exits.

Three phases. Start-up (imports, argument checks): a signal prints the line and exits at once, there
is nothing to undo. Running (`install`; `arm` records the SparkContext once there is one): a signal
raises KeyboardInterrupt in the main thread, so `with` blocks unwind (without deleting: Spark may still be
writing). Finishing (`finish`): Spark is stopped (its jobs cancelled), the processes registered with
`own_process` (the driver JVM, the warm worker daemon and its forked workers) are ended and waited for, so
that the JVM's shutdown hooks delete Spark's temp directories before this process leaves (a scheduler
that kills what is left of a control group once the main process is gone would cut them short), and then
the clean-ups registered with `remove_on_interrupt` run (staging directory, then OUT's lock), last
registered first. A second signal while finishing cuts the polite wait short (the JVM gets SIGTERM at once,
its shutdown hooks still clean up), a third ends what is left with SIGKILL; neither skips the clean-ups.
Light on purpose (stdlib only): a job run as a program installs the start-up phase (`guard_startup`, at
the top of jobs/<name>.py under `if __name__ == "__main__"`) before pyspark is imported.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
from typing import Callable, Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a job ended by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM (timeout, systemd, Kubernetes, Airflow)
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long a stopped job waits for a process it started to end by itself, then after SIGTERM (the JVM's
# shutdown hooks stop Spark and delete its temp directories: seconds on a loaded machine), then after SIGKILL.
PATIENCE_S, TERM_PATIENCE_S, KILL_PATIENCE_S = 15.0, 10.0, 5.0

_cleanups: dict[int, Callable[[], None]] = {}
_owned: list[tuple[subprocess.Popen, bool]] = []  # processes to see gone, each with "and its process group"
_exit_files: list[str] = []  # files to remove whenever this process leaves (sockets it listens on)
_socket_dirs: list[tuple[str, float]] = []  # (directory, since): where our JVM binds Unix sockets, and from when
_SPARK_SOCKET = re.compile(r"^\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.sock$")
_installed = False  # a job runs under run_main (not, e.g., a test calling main() itself)
_spark_context = None  # the SparkContext to cancel and stop, once there is one
_signalled = False  # a signal reached the running phase (its KeyboardInterrupt may be replaced on the way up)
_signum: int | None = None  # the first signal received (it decides the exit status)
_hurry = 0  # signals that came while finishing: 1 skips the polite wait, 2 or more kill
_published: str | None = None  # the line's end once the run's output is in place (`published`)


def job_name(argv: list[str]) -> str:
    """The job a command line runs (`python -m jobs.rebuild`, `jobs/rebuild.py`, `reput rebuild`)."""
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1].rpartition(".")[2]
        if arg.endswith(".py") and os.path.basename(os.path.dirname(arg)) == "jobs":
            return os.path.basename(arg)[:-3]
        if os.path.basename(arg) == "reput" and i + 1 < len(argv):
            return argv[i + 1]
    return "job"


def line(job: str, note: str | None) -> str:
    """The one line an interrupted job prints."""
    return f"reput {job}: interrupted" + (f"; {note}" if note else "")


def exit_status(signum: int | None) -> int:
    """The exit status for a job ended by `signum`: 128 + the signal, as shells report it (130 for Ctrl-C,
    also when no signal is known: a KeyboardInterrupt raised in-process)."""
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


def guard_startup(job: str | None = None) -> None:
    """Until `install`: a signal prints the one line and exits 130/143 (nothing has been written yet)."""
    name = job or job_name(list(getattr(sys, "orig_argv", sys.argv)))
    for sig in SIGNALS:
        signal.signal(sig, lambda signum, _: _exit_now(line(name, None), signum))


def install() -> dict:
    """While the job runs: a signal raises KeyboardInterrupt (SIGTERM too) in the main thread. Returns
    the handlers replaced, for `uninstall`."""
    global _installed
    _installed = True
    return {sig: signal.signal(sig, _raise) for sig in SIGNALS}


def uninstall(previous: dict) -> None:
    """Put back the handlers `install` replaced (a job called in-process, e.g. by a test, is over)."""
    global _installed, _spark_context, _signalled, _signum, _hurry, _published
    _installed, _spark_context, _signalled, _signum, _hurry, _published = False, None, False, None, 0, None
    _cleanups.clear()
    _owned.clear()
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def arm(spark_context) -> None:
    """A SparkContext exists: `finish` stops it; PySpark's own SIGINT handler (a Py4J call inside the
    handler) is replaced. Only for a job run by `run_main`."""
    global _spark_context
    if _installed and threading.current_thread() is threading.main_thread():
        _spark_context = spark_context
        for sig in SIGNALS:
            signal.signal(sig, _raise)


def running() -> bool:
    """A job runs under run_main: an interrupt's clean-ups are left to `finish` (after Spark has stopped)."""
    return _installed


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal until the block is done (the JVM's launch: interrupted half-way, it would be left
    running on its own), then raise KeyboardInterrupt for it. An error of the block after a signal is the
    signal's doing (SIGTERM to the group ends the JVM being launched): it becomes the KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _: caught.append(signum)) for sig in SIGNALS}
    try:
        yield
    except KeyboardInterrupt:  # raised by a handler the block installed (PySpark's own, for SIGINT)
        caught.append(signal.SIGINT)
    except Exception:
        if not caught:
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        _raise(caught[0], None)


def own_process(proc: subprocess.Popen, group: bool = False) -> None:
    """A process this job started (the driver JVM, the warm worker daemon) that must be gone before an
    interrupted job exits; `group`: its process group too (a daemon that moved its forked workers there)."""
    if _installed:
        _owned.append((proc, group))


def remove_at_exit(path: str) -> None:
    """A file to remove however this process leaves (a Unix socket it listens on): `run_process` and
    `finish` remove it; a normal exit skips the interpreter teardown that would."""
    _exit_files.append(path)


def sweep_sockets_in(directory: str, since: float) -> None:
    """After an interrupt, once the job's JVM is gone: remove the Unix sockets Spark names `.<uuid>.sock` in
    `directory`, made since `since`, that no process has bound any more (a JVM killed between binding one for
    its Python side and unlinking it leaves it behind). A socket another job still listens on is bound, and kept."""
    _socket_dirs.append((directory, since))


def _sweep_sockets() -> None:
    bound = _bound_unix_paths()
    if bound is None:  # no /proc/net/unix: which sockets are in use cannot be told, so none is removed
        return
    while _socket_dirs:
        directory, since = _socket_dirs.pop()
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if (_SPARK_SOCKET.match(name) and stat.S_ISSOCK(st.st_mode) and st.st_mtime >= since
                        and path not in bound):
                    os.unlink(path)
            except OSError:
                pass


def _bound_unix_paths() -> set[str] | None:
    """Paths of the Unix sockets bound by any process (Linux's /proc/net/unix); None where it cannot be read."""
    try:
        with open("/proc/net/unix") as f:
            next(f, None)
            return {parts[7] for parts in (line.split() for line in f) if len(parts) >= 8}
    except OSError:
        return None


def remove_exit_files() -> None:
    while _exit_files:
        try:
            os.unlink(_exit_files.pop())
        except OSError:
            pass


def remove_on_interrupt(key: object, remove: Callable[[], None]) -> None:
    """Run `remove` after an interrupt (once Spark has stopped writing); `forget(key)` when published."""
    _cleanups[id(key)] = remove


def forget(key: object) -> None:
    _cleanups.pop(id(key), None)


def left_to_finish(exc: BaseException) -> bool:
    """`exc` ends a block of a job under run_main because of a signal: its clean-up waits for `finish`."""
    return _installed and (_signalled or isinstance(exc, KeyboardInterrupt))


@contextlib.contextmanager
def removed_unless_kept(key: object, remove: Callable[[], None], *, keep: bool) -> Iterator[None]:
    """Output the block makes (`key`), removed by `remove` unless the block ends well and `keep`: at once after an
    error; after an interrupt of a job under run_main only once the engine has stopped writing (`finish`: removing
    it while tasks still write races them), also when the interrupt's KeyboardInterrupt was replaced on its way up."""
    remove_on_interrupt(key, remove)  # before the block makes anything: no moment the output is left uncovered
    try:
        yield
    except BaseException as exc:
        if not left_to_finish(exc):
            forget(key)
            remove()
        raise
    forget(key)
    if not keep:
        remove()


def finish(job: str, note: str | None) -> int:
    """After KeyboardInterrupt reached the top: stop Spark, see every process the job started gone, remove
    registered output (last registered first), print the line; returns the exit status."""
    try:
        for sig in SIGNALS:  # inside the try: a signal right after this raises here, not out of finish
            signal.signal(sig, _hurried)
        _stop_spark()
    except KeyboardInterrupt:  # a second signal: on to ending the processes, in a hurry
        pass
    while _owned:
        try:
            _end_owned()
        except KeyboardInterrupt:  # another signal: the same process again, less politely
            pass
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the clean-ups run to their end
    _sweep_sockets()  # every process the job started is gone: a socket nobody binds is a leftover
    for remove in reversed(list(_cleanups.values())):
        try:
            remove()
        except OSError:
            pass  # the next run removes staging leftovers too
        except Exception as exc:  # noqa: BLE001 - the one line below, not a traceback, and the others still run
            print(f"reput {job}: note: a clean-up after the interrupt failed ({type(exc).__name__}: {exc}); "
                  f"what it was removing may be left", file=sys.stderr, flush=True)
    _cleanups.clear()
    remove_exit_files()
    print(line(job, note), file=sys.stderr, flush=True)
    return exit_status(_signum)


def published(what: str) -> None:
    """The run's output is in place (OUT renamed into place, its commit written): a signal from here on ends the run
    saying so, not with the job's "nothing published"."""
    global _published
    _published = f"{what} was published: the run had completed it; the report was not printed"


def note_after(default: str | None) -> str | None:
    """The interrupted line's end: what was published, else the job's `default`."""
    return _published or default


def signalled() -> bool:
    """A signal reached the running job. An error that reaches the top after it is the interrupt's doing: the
    KeyboardInterrupt raised inside a Py4J call can be replaced on its way up by the error of PySpark's own
    clean-up call on the broken connection (`Py4JNetworkError: Answer from Java side is empty`)."""
    return _signalled


def _raise(signum: int, frame) -> None:
    """Signal handler of the running phase. No Py4J call here: the main thread may be inside one (a
    re-entrant call on its connection fails); `finish` stops Spark once the interrupt has unwound."""
    global _signalled, _signum
    _signalled = True
    if _signum is None:
        _signum = signum
    for sig in SIGNALS:  # a second signal while unwinding must not interrupt the unwinding
        signal.signal(sig, signal.SIG_IGN)
    logging.disable(logging.CRITICAL)  # py4j logs the broken call it was in as an error
    raise KeyboardInterrupt


def _hurried(signum: int, frame) -> None:
    """Signal handler while finishing: the step in progress ends, processes are ended less politely."""
    global _hurry
    _hurry += 1
    raise KeyboardInterrupt


def _stop_spark() -> None:
    """Stop the SparkContext: its jobs are cancelled and its Python workers end (the JVM stays until its
    pipe from this process closes: `_end_owned`)."""
    global _spark_context
    sc, _spark_context = _spark_context, None
    if sc is not None and not _hurry:
        with warnings.catch_warnings():  # PySpark warns when the JVM has already gone (SIGTERM reached it)
            warnings.simplefilter("ignore")
            try:
                sc.setLogLevel("OFF")
                sc.stop()
            except Exception:
                pass


def _end_owned() -> None:
    """End the processes this job started, last started first (the JVM before the worker daemon it uses),
    and wait for each: the JVM leaves when its pipe from this process closes (or on SIGTERM; its shutdown
    hooks delete Spark's temp directories either way); SIGKILL only if it does not."""
    while _owned:
        _end(*_owned[-1])
        _owned.pop()


def _end(proc: subprocess.Popen, group: bool) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    steps = ((None, PATIENCE_S), (signal.SIGTERM, TERM_PATIENCE_S), (signal.SIGKILL, KILL_PATIENCE_S))
    for sig, wait_s in steps[min(_hurry, 2):]:
        if sig is None and proc.stdin is None:
            continue  # nothing asks it to leave but a signal
        if sig is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if group:  # what it forked and left in its own process group (pgid = its pid): SIGHUP'd as it left
        waited = time.monotonic()
        killed = False
        while _group_alive(proc.pid) and time.monotonic() - waited < TERM_PATIENCE_S + KILL_PATIENCE_S:
            if not killed and (_hurry >= 2 or time.monotonic() - waited > TERM_PATIENCE_S):
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _exit_now(text: str, signum: int) -> None:
    remove_exit_files()
    print(text, file=sys.stderr, flush=True)
    os._exit(exit_status(signum))
