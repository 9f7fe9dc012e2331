"""The engine a job's tasks run on: Spark, or reput's local runner (forked worker processes, no JVM).

Every job's parallel work goes through one contract, `TaskRunner` (`default_parallelism`, `run_tasks`), which
both engines satisfy; `choose_engine` (pure) decides which one a job gets, `job_runner` starts it.
`--engine auto` is the local engine when the master is `local[...]`, the job is not running under spark-submit
and the job is one whose runs are small (recover, inspect, verify) or a rebuild of a commit log of up to 4 GiB
(where the JVM's start-up is half the run); Spark otherwise (a cluster master, or spark-submit: Spark always; a
SparkContext already running in this process, e.g. a notebook's, is used). The local engine's worker count is then
sized to the CPU quota, REPUT_LOCAL_WORKERS and the memory limit of the process's cgroup (`local_sizing`).
Light to import: pyspark is imported only when the Spark engine is chosen.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import env
from .contract import TaskRunner, under_spark_submit  # noqa: F401 (the jobs import TaskRunner from here)
from .failure import JobError
from .limits import ensure_open_files

if TYPE_CHECKING:
    from storage_format.settings import BrokerSettings

    from .local_sizing import LocalSizing

ENGINES = ("auto", "spark", "local")
# Jobs whose runs are small enough that the JVM's start-up is most of them: the local engine under auto.
LOCAL_UNDER_AUTO = frozenset({"recover", "inspect", "verify"})
# Jobs on the local engine under auto up to a commit log of this many bytes (its segments' sizes): below it the
# JVM's start-up and exit (~2 s) outweigh what Spark's build gains; above it Spark's is as fast or faster
# (docs/performance.md, "Which engine under auto").
LOCAL_UNDER_AUTO_UP_TO = {"rebuild": 4 << 30, "convert": 4 << 30}
_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


@dataclass(frozen=True)
class EngineChoice:
    """The engine in effect and why (the report's `engine` field and the job's stderr note)."""

    name: str  # "spark" or "local"
    requested: str  # the --engine value
    reason: str
    workers: int | None = None  # the local engine's worker processes (its parallelism)
    sizing: LocalSizing | None = None  # how the local engine's workers were counted (job_runner)

    def to_dict(self) -> dict:
        out = {"name": self.name, "requested": self.requested, "reason": self.reason}
        if self.workers is not None:
            out["workers"] = self.workers
        if self.sizing is not None:
            out["sizing"] = self.sizing.to_dict()
        return out

    def line(self) -> str:
        workers = f", {self.workers} worker processes" if self.workers is not None else ""
        why = self.sizing.why() if self.sizing is not None else ""
        return f"engine {self.name}{workers} ({self.reason}{'; ' + why if why else ''})"


def spark_running() -> bool:
    """A SparkContext is active in this process (looked up without importing pyspark)."""
    context = sys.modules.get("pyspark.context")
    return context is not None and context.SparkContext._active_spark_context is not None


def local_cores(master: str) -> int | None:
    """N of `local`, `local[N]`, `local[N,F]`, `local[*]` (the cores this process may run on: its CPU affinity;
    the cgroup's quota is local_sizing's); None for any other master (a cluster)."""
    m = _LOCAL_MASTER.match(master.strip())
    if not m:
        return None
    n = m.group(1)
    if n is None:
        return 1
    if n == "*":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(int(n), 1)


def all_cores(master: str) -> bool:
    """The master is `local[*]` (or `local[*,F]`): as many as the machine gives, which a CPU quota lowers."""
    m = _LOCAL_MASTER.match(master.strip())
    return m is not None and m.group(1) == "*"


def choose_engine(requested: str, job: str, master: str, submitted: bool, spark_running: bool = False,
                  store_bytes: int | None = None) -> EngineChoice:
    """The engine for `job` given --engine, the master in effect (--master or REPUT_SPARK_MASTER), whether the
    job runs under spark-submit, whether a SparkContext already runs in this process (a notebook's, a test's) and
    the bytes of commit log it reads (None: not known). Raises JobError for an explicit local engine that cannot
    honour the rest."""
    cores = local_cores(master)
    if requested == "spark":
        return EngineChoice("spark", requested, "--engine spark")
    if requested == "local":
        if submitted:
            raise JobError("--engine local: the job runs under spark-submit, whose application runs the tasks; "
                           "run it with python -m (or reput) for the local engine")
        if cores is None:
            raise JobError(f"--engine local: the master {master} is not local[...]; the local engine runs the "
                           f"tasks on this machine only")
        return EngineChoice("local", requested, f"--engine local, master {master}", cores)
    if submitted:
        return EngineChoice("spark", requested, "auto: under spark-submit")
    if cores is None:
        return EngineChoice("spark", requested, f"auto: master {master} is a cluster")
    up_to = LOCAL_UNDER_AUTO_UP_TO.get(job)
    small = up_to is not None and store_bytes is not None and store_bytes <= up_to
    if job not in LOCAL_UNDER_AUTO and not small:
        over = f" of {_gib(store_bytes)} of commit log (over {_gib(up_to)})" if up_to and store_bytes else ""
        return EngineChoice("spark", requested, f"auto: {job}{over} runs on Spark unless --engine local")
    if spark_running:
        return EngineChoice("spark", requested, "auto: a SparkContext already runs in this process")
    size = f", {_gib(store_bytes)} of commit log (up to {_gib(up_to)})" if small else ""
    return EngineChoice("local", requested, f"auto: master {master}, not under spark-submit{size}", cores)


def _gib(n: int | None) -> str:
    n = n or 0
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def add_engine_flag(p: argparse.ArgumentParser, job: str) -> None:
    """--engine {auto,spark,local} with what auto means for this job."""
    up_to = LOCAL_UNDER_AUTO_UP_TO.get(job)
    auto = ("the local engine with a local[...] master outside spark-submit, else Spark" if job in LOCAL_UNDER_AUTO
            else f"the local engine for a commit log of up to {_gib(up_to)} with a local[...] master outside "
                 f"spark-submit, else Spark" if up_to else "Spark")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help=f"what runs the job's tasks: spark (a Spark application), local (forked worker processes on "
                        f"this machine, no JVM), auto (default: {auto})")


def job_runner(args: argparse.Namespace, job: str, store_bytes: int | None = None,
               settings: BrokerSettings | None = None) -> tuple[TaskRunner, EngineChoice]:
    """The engine for a job's parsed command line (--engine, --master, --log-level, --quiet, --split-size), started,
    and the choice (named on stderr: one line, unless --quiet or under spark-submit, where the engine is always
    Spark and PySpark's launcher merges the driver's stderr into stdout, so a --json report would not parse). The
    local engine's workers are sized before any is forked (`settings`: the store's, None: the broker's defaults);
    fewer than its CPUs for memory is a warning, whatever --quiet says."""
    raised = ensure_open_files()
    if raised and not args.quiet:
        print(f"reput {job}: note: {raised}", file=sys.stderr, flush=True)
    master = args.master or env.value("REPUT_SPARK_MASTER")
    submitted = under_spark_submit()
    choice = choose_engine(getattr(args, "engine", "auto") or "auto", job, master, submitted, spark_running(),
                           store_bytes)
    if choice.name == "local":
        from storage_format.scan_plan import DEFAULT_SPLIT_SIZE

        from .cli import warn
        from .local_sizing import local_sizing

        sizing = local_sizing(choice.workers or 1, master, all_cores(master),
                              getattr(args, "split_size", DEFAULT_SPLIT_SIZE), settings, store_bytes)
        choice = replace(choice, workers=sizing.workers, sizing=sizing)
        if sizing.warning():
            warn(job, sizing.warning())
    if not args.quiet and not submitted:  # spark-submit: always Spark, and its driver's stderr joins stdout
        print(f"reput {job}: note: {choice.line()}", file=sys.stderr, flush=True)
    if choice.name == "local":
        from .local import LocalRunner

        return LocalRunner(choice.workers or 1).start(), choice
    from .session import job_context
    from .tasks import SparkRunner

    return SparkRunner(job_context(args, job)), choice
