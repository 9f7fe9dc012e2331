"""Run a Python function over a list of small work items as tasks of the job's engine, with console progress:
`run_tasks(sc, ...)` is the one call every stage makes; `SparkRunner` is the Spark engine's TaskRunner
(engine.py; the local engine's is local.LocalRunner).

Items and results are small descriptors (never per-message rows); the heavy data stays inside the
Python workers, which read their input and write their output through the filesystem layer.
Light to import: pyspark is only needed by what a SparkRunner does.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from .contract import under_spark_submit
from .driver_memory import SETTING, DriverMemory, driver_memory_of
from .heap import keep_freed_memory

if TYPE_CHECKING:
    from pyspark import SparkContext

    from .contract import TaskRunner

T = TypeVar("T")
R = TypeVar("R")


class Progress:
    """Prints `label: done/total tasks, elapsed, MB of total MB, MB/s, ETA` while a Spark job runs (stderr,
    every few seconds), and a last line with the totals when it is done."""

    def __init__(self, sc: "SparkContext", label: str, total: int, total_bytes: int = 0,
                 every: float = 2.0, stream=None) -> None:
        self.sc, self.label, self.total, self.total_bytes = sc, label, total, total_bytes
        self.every, self.stream = every, stream if stream is not None else sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def _done_tasks(self) -> int:
        tracker = self.sc.statusTracker()
        done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info:
                done += info.numCompletedTasks
        return done

    def _line(self, done: int) -> str:
        return progress_line(self.label, done, self.total, time.monotonic() - self.started, self.total_bytes)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                done = self._done_tasks()
            except Exception:  # the JVM is going (a signal): the job's own error or interrupt says it
                return
            print(self._line(done), file=self.stream, flush=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            print(self._line(self.total), file=self.stream, flush=True)


def progress_line(label: str, done: int, total: int, secs: float, total_bytes: int = 0) -> str:
    """One progress line: tasks done of the total, elapsed time, bytes of the total and the rate (bytes
    counted per finished task, evenly), and while unfinished the ETA from the rate of tasks so far."""
    secs = max(secs, 1e-9)
    line = f"[reput] {label}: {done}/{total} tasks, {secs:.1f}s"
    if total_bytes and total:
        mb, total_mb = total_bytes * done / total / 1e6, total_bytes / 1e6
        line += f", ~{mb:.0f} of {total_mb:.0f} MB, ~{mb / secs:.0f} MB/s"
    if done < total:
        line += f", ETA {secs * (total - done) / done:.0f}s" if done else ", ETA unknown (no task done yet)"
    return line


def run_tasks(sc: TaskRunner, items: Sequence[T], fn: Callable[[T], R], label: str,
              total_bytes: int = 0, quiet: bool = False) -> list[R]:
    """fn(item) for every item, one task per item on the job's engine, results in item order."""
    return sc.run_tasks(items, fn, label, total_bytes=total_bytes, quiet=quiet)


def _in_worker(fn: Callable[[T], R], item: T) -> R:
    """fn(item) in a Spark Python worker, under the task processes' heap policy (heap.keep_freed_memory)."""
    keep_freed_memory()
    return fn(item)


class SparkRunner:
    """The Spark engine's TaskRunner: one Spark task per item on the job's SparkContext (`.context`)."""

    def __init__(self, context: SparkContext) -> None:
        self.context = context

    @property
    def default_parallelism(self) -> int:
        return self.context.defaultParallelism

    @property
    def driver_memory(self) -> DriverMemory:
        """spark.driver.memory as the driver runs with it, and who set it."""
        return driver_memory_of(self.context.getConf().get(SETTING, None), under_spark_submit())

    def run_tasks(self, items: Sequence[T], fn: Callable[[T], R], label: str, total_bytes: int = 0,
                  quiet: bool = False) -> list[R]:
        """fn(item) for every item, one Spark task per item, results in item order."""
        if not items:
            return []
        sc = self.context
        rdd = sc.parallelize(list(enumerate(items)), len(items))
        job = rdd.map(lambda pair: (pair[0], _in_worker(fn, pair[1])))
        if quiet:
            pairs = job.collect()
        else:
            with Progress(sc, label, len(items), total_bytes):
                pairs = job.collect()
        return [r for _, r in sorted(pairs, key=lambda p: p[0])]
