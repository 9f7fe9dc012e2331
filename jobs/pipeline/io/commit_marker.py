"""Publishing on object storage (s3://), where nothing can be renamed: the run report is the commit.

A job writes its output tree directly under OUT, in this order: first the marker `OUT/_REPUT_WRITING`
(naming the report that will commit the output), then every file, then the run report (one PUT: it
appears whole or not at all), and last it deletes the marker. An OUT that holds the marker but not the
report it names is an unfinished reput output (a run that failed, was killed or is still writing): every
job refuses it as a --store (`refuse_unfinished`), and the next run for the same OUT removes it. A broker
never writes the marker, so a store without it is read as always.
"""
from __future__ import annotations

import datetime as dt
import json

from ..runtime import interrupt
from ..runtime.failure import JobError
from ..runtime.faults import pause_at
from . import out_files
from .fs import Location
from .replaceable import check_replaceable

MARKER = "_REPUT_WRITING"


def unfinished(out: Location) -> str | None:
    """The report an unfinished reput output still waits for (its marker is there, the report is not),
    else None. A marker that cannot be read names no report: the output counts as unfinished."""
    marker = out.child(MARKER)
    if not marker.exists():
        return None
    try:
        report = json.loads(marker.read_bytes())["commit"]
    except (OSError, ValueError, KeyError, TypeError):
        return "its run report"
    return None if out.child(report).exists() else report


def refuse_unfinished(store: Location) -> None:
    """A reader's check of a --store that reput may have written to object storage."""
    report = unfinished(store)
    if report is not None:
        raise JobError(f"{store.uri} is an unfinished reput output: it holds {MARKER} but not {report}, which "
                       f"a run writes last (it failed, was killed or is still writing); run it again")


class DirectOutput:
    """OUT on object storage, written in place and committed by its run report (see the module)."""

    def __init__(self, out: Location, report: str, job: str, overwrite: bool = False) -> None:
        self.out, self.report, self.job, self.overwrite = out, report, job, overwrite
        self._committed = False  # the run report is written (publish)
        self.dir = out
        self.work = out.child("_work")
        if "/" not in out.path.strip("/"):
            raise JobError(f"--out {out.uri} is a whole bucket; give a prefix inside it (s3://BUCKET/NAME)")
        if unfinished(out) is None:  # an unfinished output of an earlier run is replaced as a matter of course
            check_replaceable(out, overwrite, MARKER)

    def __enter__(self) -> "DirectOutput":
        marker = {"job": self.job, "commit": self.report,
                  "started": dt.datetime.now(dt.timezone.utc).isoformat()}
        self.out.child(MARKER).write_bytes(json.dumps(marker).encode())  # from here on: unfinished
        self.out.child(self.report).delete_tree()  # a previous output (--overwrite) is no longer complete
        self._remove_all_but_marker()
        interrupt.remove_on_interrupt(self, self.remove)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self._committed:
            self.remove()
        if exc_type is None or not issubclass(exc_type, KeyboardInterrupt):
            interrupt.forget(self)  # (a committed OUT's publish forgot it already)

    def _remove_all_but_marker(self) -> None:
        for info in self.out.list():
            if info.base_name != MARKER:
                self.out.child(info.base_name).delete_tree()

    def remove(self) -> None:
        """Delete the unfinished output, the marker last (until then readers refuse what is left)."""
        self._remove_all_but_marker()
        self.out.child(MARKER).delete_tree()

    def publish(self, report: bytes) -> None:
        """Drop the work files, write the run report (the commit), then the marker goes."""
        self.work.delete_tree()
        out_files.record(self.out, (MARKER,))  # the marker goes once the report is written
        pause_at("before-commit")
        self.out.child(self.report).write_bytes(report)
        self._committed = True  # from here on the output is the run's result: nothing removes it
        interrupt.forget(self)
        self.out.child(MARKER).delete_tree()
        interrupt.published(self.out.uri)
