"""Fault-injection hooks for the crash-safety and determinism tests (all of them: one module); inert unless
their variable is set (registered in env.py, named on stderr and in the run report when set).

- `REPUT_TEST_PAUSE_AT=<point>`: `pause_at(point)` announces itself (a line on stderr, and the file named
  by `REPUT_TEST_PAUSE_MARK` if set) and then sleeps until the process is killed. Points of a rebuild:
  in-decode-task (inside a decode task, its work files written), after-decode, in-build-task (inside a
  Spark task), after-build, before-publish-rename, between-renames (an --overwrite publish: old OUT moved
  aside, new one not yet in place), before-old-delete, after-publish (OUT in place, the report not printed); on object storage (no rename), before-commit: the
  tree is written, the run report is not. Of a convert:
  in-convert-write (inside a segment-write task, its segment half written), after-write. Of a recover --out:
  in-background-copy (the background copy thread, after its first file; it waits there, `hold_at`, until the
  job cancels it, so that a signal then tests the way out); in-index-write (the thread writing the new index
  files beside the consume-queue renders, before its first file; held the same way). Of an --in-place switch
  (recover, rebuild --since): staged (its backup made, no manifest yet), backed-up (the manifest written, the
  journal not yet), op-<n>, after its n-th file operation (the journal written); after-switch (recover: the switch
  complete, its report not yet printed); in-rollback (recover --rollback, before each file it restores);
  in-catalog-write (a catalog task, after each data file it wrote).
- `REPUT_CRASH_AT=<point>`: `crash_point(point)` kills the process with SIGKILL there (an --in-place
  recovery's points: staged, backed-up, journaled, applied, op-<n>).
- `REPUT_FAIL_ONCE=<path>`: `fail_once()` makes the first decode task that creates <path> raise after
  it wrote its work files, so Spark must retry it (needs spark.task.maxFailures > 1, e.g. master
  `local[2,2]`).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from . import env

PAUSE_POINTS = ("in-decode-task", "after-decode", "in-build-task", "after-build", "before-publish-rename",
                "between-renames", "before-old-delete", "after-publish", "before-commit", "in-convert-write",
                "after-write", "in-background-copy", "in-index-write", "staged", "backed-up", "after-switch", "in-rollback",
                "in-catalog-write")


def pause_at(point: str) -> None:
    """Sleep forever at `point` when REPUT_TEST_PAUSE_AT names it (the test then kills the process)."""
    if env.value("REPUT_TEST_PAUSE_AT") != point:
        return
    _announce(point)
    while True:
        time.sleep(3600)


def _announce(point: str) -> None:
    # one write of the whole line: Spark runs Python workers unbuffered (PYTHONUNBUFFERED), where print's text and
    # its newline are two writes, between which another process's line can land on the shared stderr
    sys.stderr.write(f"reput test hook: paused at {point}\n")
    sys.stderr.flush()
    mark = env.value("REPUT_TEST_PAUSE_MARK")
    if mark:
        with open(mark, "w") as f:
            f.write(point)


def hold_at(point: str, release: threading.Event) -> None:
    """pause_at for a thread the job stops itself: announce, then wait until `release` is set."""
    if env.value("REPUT_TEST_PAUSE_AT") != point:
        return
    _announce(point)
    release.wait()


def fail_once() -> None:
    """Raise in the one task that first creates the REPUT_FAIL_ONCE file (atomic O_EXCL create)."""
    path = env.value("REPUT_FAIL_ONCE")
    if not path:
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    raise RuntimeError(f"reput test hook: injected failure of one task (REPUT_FAIL_ONCE={path})")


def crash_point(name: str) -> None:
    """When REPUT_CRASH_AT names this point, the process kills itself with SIGKILL (no cleanup runs)."""
    if env.value("REPUT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
