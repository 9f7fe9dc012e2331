"""Ctrl-C and SIGTERM: one line, exit 130, half-made output removed, Spark stopped (no JVM left behind).

Three phases. Start-up (imports, argument checks): a signal prints the line and exits at once, there
is nothing to undo. Running (`install`; `arm` records the SparkContext once there is one): a signal
raises KeyboardInterrupt in the main thread, so `with` blocks (staging directories) unwind. Finishing
(`finish`): further signals exit at once; Spark is stopped (its jobs cancelled, its tasks and Python
workers ended), then the directories registered with `remove_on_interrupt` are deleted again.
Light on purpose (stdlib only): a job run as a program installs the start-up phase (`guard_startup`, at
the top of jobs/<name>.py under `if __name__ == "__main__"`) before pyspark is imported.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Callable, Iterator

EXIT_INTERRUPTED = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_cleanups: dict[int, Callable[[], None]] = {}
_installed = False  # a job runs under run_main (not, e.g., a test calling main() itself)
_spark_context = None  # the SparkContext to cancel and stop, once there is one
_signalled = False  # a signal reached the running phase (its KeyboardInterrupt may be replaced on the way up)


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


def guard_startup(job: str | None = None) -> None:
    """Until `install`: a signal prints the one line and exits 130 (nothing has been written yet)."""
    name = job or job_name(list(getattr(sys, "orig_argv", sys.argv)))
    for sig in SIGNALS:
        signal.signal(sig, lambda *_: _exit_now(line(name, None)))


def install() -> dict:
    """While the job runs: a signal raises KeyboardInterrupt (SIGTERM too) in the main thread. Returns
    the handlers replaced, for `uninstall`."""
    global _installed
    _installed = True
    return {sig: signal.signal(sig, _raise) for sig in SIGNALS}


def uninstall(previous: dict) -> None:
    """Put back the handlers `install` replaced (a job called in-process, e.g. by a test, is over)."""
    global _installed, _spark_context, _signalled
    _installed, _spark_context, _signalled = False, None, False
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


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal until the block is done (the JVM's launch: interrupted half-way, it would be left
    running on its own), then raise KeyboardInterrupt for it."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _: caught.append(signum)) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        _raise(caught[0], None)


def remove_on_interrupt(key: object, remove: Callable[[], None]) -> None:
    """Run `remove` after an interrupt (once Spark has stopped writing); `forget(key)` when published."""
    _cleanups[id(key)] = remove


def forget(key: object) -> None:
    _cleanups.pop(id(key), None)


def finish(job: str, note: str | None) -> int:
    """After KeyboardInterrupt reached the top: stop Spark, remove registered output, print the line."""
    for sig in SIGNALS:
        signal.signal(sig, lambda *_: _exit_now(line(job, note)))
    _stop_spark()
    for remove in list(_cleanups.values()):
        try:
            remove()
        except OSError:
            pass  # the next run removes staging leftovers too
    _cleanups.clear()
    print(line(job, note), file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def signalled() -> bool:
    """A signal reached the running job. An error that reaches the top after it is the interrupt's doing: the
    KeyboardInterrupt raised inside a Py4J call can be replaced on its way up by the error of PySpark's own
    clean-up call on the broken connection (`Py4JNetworkError: Answer from Java side is empty`)."""
    return _signalled


def _raise(signum: int, frame) -> None:
    """Signal handler of the running phase. No Py4J call here: the main thread may be inside one (a
    re-entrant call on its connection fails); `finish` stops Spark once the interrupt has unwound."""
    global _signalled
    _signalled = True
    for sig in SIGNALS:  # a second signal while unwinding must not interrupt the unwinding
        signal.signal(sig, signal.SIG_IGN)
    logging.disable(logging.CRITICAL)  # py4j logs the broken call it was in as an error
    raise KeyboardInterrupt


def _stop_spark() -> None:
    """Stop the SparkContext: its tasks end and its JVM exits with this process."""
    global _spark_context
    sc, _spark_context = _spark_context, None
    if sc is not None:
        try:
            sc.setLogLevel("OFF")
            sc.stop()
        except Exception:
            pass


def _exit_now(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)
