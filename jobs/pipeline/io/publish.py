"""Atomic publishing: build everything in a staging directory beside OUT, check it, then rename.

One run per OUT: a run holds OUT's lock (run_lock, beside OUT on a local filesystem) from its first look at OUT
until it has published or failed; a second run refuses at once, naming the first. A run publishes only over an
OUT it was told to replace (--overwrite): an OUT that appeared while it built is refused, nothing published.
A run that fails or is killed leaves OUT untouched (absent, or the previous complete output) and at
most a `.<name>.reput-staging-*` directory beside it, which the next run removes. An --overwrite run
killed between its two renames leaves the previous output as `.<name>.reput-old-*` and no OUT: the next
run for OUT moves it back first (and deletes such a copy when OUT is in place).

On a filesystem without rename (object storage: s3://, gs://) `output_for()` gives a commit_marker.DirectOutput
instead: the tree is written in place and committed by the run report, written last.
"""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from ..runtime import interrupt
from ..runtime.failure import JobError
from .commit_marker import DirectOutput
from ..runtime.faults import pause_at
from . import out_files
from .fs import Location
from .replaceable import check_replaceable
from .paths import is_local, real_path
from .run_lock import RunLock, beside

STAGING_MARK = ".reput-staging-"
OLD_MARK = ".reput-old-"
UNDO_TRIES = 5  # removals of the staging directory after an error, while a failed Spark job's other tasks stop
UNDO_PAUSE_S = 0.1  # before the next try, times the tries so far


def output_for(out: Location, report: str, job: str, overwrite: bool = False) -> "Output":
    """Where a job builds OUT (`.dir`, `.work`) and how it publishes it with its run report `report`
    (`.publish(report_bytes)`): a staging directory renamed into place, or on object storage OUT itself,
    committed by the report. Refuses an existing OUT (unless `overwrite`) before any Spark work."""
    if out.renames_atomically():
        return Staging(out, report, job, overwrite)
    return DirectOutput(out, report, job, overwrite)


class Staging:
    """A staging directory for OUT; `publish()` renames it into place."""

    def __init__(self, out: Location, report: str, job: str, overwrite: bool = False) -> None:
        self.lock = _lock(out, job)
        if self.lock is not None:  # an interrupt before the staging directory exists (during Spark's start)
            interrupt.remove_on_interrupt(self.lock, self.release)
        try:
            _settle_interrupted_publish(out)
            check_replaceable(out, overwrite)
        except BaseException:
            self.release()
            raise
        self.out, self.report, self.overwrite = out, report, overwrite
        token = uuid.uuid4().hex[:12]
        self.dir = out.parent.child(f".{out.name}{STAGING_MARK}{token}")
        self.work = self.dir.child("_work")
        self._old = out.parent.child(f".{out.name}{OLD_MARK}{token}")

    def __enter__(self) -> "Staging":
        self.out.parent.makedirs()
        self._remove_leftovers()
        interrupt.remove_on_interrupt(self, self._undo)  # once Spark has stopped writing
        self.dir.makedirs()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and interrupt.left_to_finish(exc):
            return  # interrupt.finish undoes it once Spark has stopped writing (deleting now races its tasks)
        try:
            if exc_type is not None:
                self._undo_after_error()
            interrupt.forget(self)
        finally:
            self.release()

    def _undo_after_error(self) -> None:
        """_undo after the job failed: when a Spark task failed, Spark is still stopping the job's other tasks,
        which may write work files into the staging directory for a moment (the removal then meets a directory
        that is not empty); tried again a few times. It never hides the job's own error: what cannot be removed
        is named on stderr, and the next run for OUT removes it."""
        for attempt in range(1, UNDO_TRIES + 1):
            try:
                self._undo()
                return
            except OSError as err:
                if attempt == UNDO_TRIES:
                    print(f"reput: note: {self.dir.uri}: not removed after the error ({err}); the next run for "
                          f"{self.out.uri} removes it", file=sys.stderr, flush=True)
                    return
                time.sleep(UNDO_PAUSE_S * attempt)

    def _undo(self) -> None:
        """Remove the staging directory; an --overwrite publish cut between its renames puts the previous
        OUT back (after the second rename, the previous OUT's copy is removed)."""
        self.dir.delete_tree()
        _settle_interrupted_publish(self.out)

    def release(self) -> None:
        """Let OUT's lock go (the run has published or failed)."""
        if self.lock is not None:
            interrupt.forget(self.lock)
            self.lock.release()

    def _remove_leftovers(self) -> None:
        """Staging directories of earlier killed runs for the same OUT are garbage."""
        prefix = f".{self.out.name}{STAGING_MARK}"
        for info in self.out.parent.list():
            if info.base_name.startswith(prefix):
                self.out.parent.child(info.base_name).delete_tree()

    def publish(self, report: bytes) -> None:
        """Drop the work files, add the run report and rename the staging directory to OUT (replacing an
        old OUT)."""
        self.work.delete_tree()
        out_files.record(self.dir)
        self.dir.child(self.report).write_bytes(report)
        pause_at("before-publish-rename")
        if self.out.exists() and not self.overwrite and self.out.list():  # an empty OUT was taken at the start
            raise JobError(f"{self.out.uri} appeared while this run was building it (not written by reput, which "
                           f"holds its lock); nothing published: remove it, or pass --overwrite to replace it")
        if self.out.exists():
            try:  # again: a broker may have opened OUT while this run built
                check_replaceable(self.out, self.overwrite)
            except JobError as exc:
                raise JobError(f"{exc} (found as this run was about to publish: nothing published)") from None
            self.out.move_to(self._old)
            pause_at("between-renames")
            self.dir.move_to(self.out)
            interrupt.published(self.out.uri)  # an interrupt from here on keeps the new OUT (_settle_...)
            pause_at("before-old-delete")
            self._old.delete_tree()
        else:
            self.dir.move_to(self.out)
            interrupt.published(self.out.uri)
        pause_at("after-publish")


def _lock(out: Location, job: str) -> RunLock | None:
    """OUT's run lock, taken (local filesystems); elsewhere None, said on stderr."""
    if not is_local(out):
        print(f"reput {job}: note: {out.uri}: no run lock on this filesystem (flock is local only): a second run "
              f"for the same --out at the same time is not detected", file=sys.stderr)
        return None
    path = Path(real_path(out))  # one lock whatever the spelling of OUT (relative, through a symlink)
    lock = RunLock(beside(path), job, str(path))
    lock.acquire()
    return lock


def _settle_interrupted_publish(out: Location) -> None:
    """Finish what a killed --overwrite publish left: its `.<name>.reput-old-*` directory is the previous
    complete OUT. Put it back when OUT is missing (killed between the renames), else it is garbage."""
    prefix = f".{out.name}{OLD_MARK}"
    for info in out.parent.list():
        if info.base_name.startswith(prefix):
            old = out.parent.child(info.base_name)
            if out.exists():
                old.delete_tree()
            else:
                old.move_to(out)


Output = Staging | DirectOutput  # what `output_for()` gives
