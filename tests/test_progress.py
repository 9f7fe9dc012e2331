"""Progress lines of Spark jobs: totals and an ETA from the tasks done so far (jobs.pipeline.runtime.tasks)."""
from __future__ import annotations

import io
import threading

from jobs.pipeline.runtime.tasks import Progress, progress_line


def test_line_has_totals_rate_and_eta():
    """4 of 10 tasks in 8 s: 6 tasks left at 2 s each is 12 s; 40 of 100 MB at 5 MB/s."""
    assert progress_line("decode", 4, 10, 8.0, 100_000_000) == \
        "[reput] decode: 4/10 tasks, 8.0s, ~40 of 100 MB, ~5 MB/s, ETA 12s"


def test_eta_before_the_first_task_and_none_when_done():
    assert progress_line("index", 0, 3, 1.0).endswith("0/3 tasks, 1.0s, ETA unknown (no task done yet)")
    assert progress_line("index", 3, 3, 9.5) == "[reput] index: 3/3 tasks, 9.5s"


class _Tracker:
    """A status tracker whose one active stage has `done` completed tasks; `polled` is set once asked."""

    def __init__(self, done: int, polled: threading.Event) -> None:
        self.done, self.polled = done, polled

    def getActiveStageIds(self):
        return [0]

    def getStageInfo(self, _):
        self.polled.set()
        return type("Info", (), {"numCompletedTasks": self.done})()


class _Context:
    def __init__(self, done: int, polled: threading.Event) -> None:
        self.statusTracker = lambda: _Tracker(done, polled)


def test_progress_prints_running_lines_then_the_total():
    """While running: the tracker's count with an ETA; at the end the total, without one. The job ends
    only after the progress thread has asked the tracker (no timing: the wait is for that event)."""
    out = io.StringIO()
    polled = threading.Event()
    with Progress(_Context(2, polled), "decode", 5, 10_000_000, every=0.001, stream=out):
        assert polled.wait(timeout=60), "the progress thread never asked for the task count"
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2
    assert lines[0].startswith("[reput] decode: 2/5 tasks, ") and ", ETA " in lines[0]
    assert lines[-1].startswith("[reput] decode: 5/5 tasks, ") and "~10 of 10 MB" in lines[-1] and "ETA" not in lines[-1]
