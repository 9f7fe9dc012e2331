"""Every REPUT_* environment variable reput reads: name, default and effect, in one registry.

Settings an operator may set change how or where a job runs; each one set to anything but its default is
named on stderr when a job starts (`reput <job>: note: environment: ...`) and recorded in the run report
(`"environment"`). Test hooks (faults.py) are inert unless set and are named the same way. docs/environment.md
holds the same table (tests/test_env.py keeps both, and the code, in step).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

SETTING, TEST_HOOK, INTERNAL = "setting", "test hook", "internal"


@dataclass(frozen=True)
class EnvVar:
    """One variable: its default (None: unset), what it does, and whether operators, tests or reput set it."""

    name: str
    default: str | None
    effect: str
    kind: str = SETTING


REGISTRY: tuple[EnvVar, ...] = (
    EnvVar("REPUT_SPARK_MASTER", "local[*]", "the Spark master jobs run on when --master is not given (a cluster "
           "URL moves where jobs run)"),
    EnvVar("REPUT_DRIVER_MEMORY", "4g", "spark.driver.memory of the driver JVM reput starts; a store whose queues "
           "would need more is refused by name"),
    EnvVar("REPUT_DRIVER_JAVA_OPTIONS", None, "replaces reput's driver JVM options (class-data archive, C1 only) "
           "with these; empty: Spark's defaults"),
    EnvVar("REPUT_LOCAL_WORKERS", None, "the local engine's worker processes at most (it runs the fewest of this, "
           "the CPUs the master allows and what the cgroup memory limit holds); Spark does not read it"),
    EnvVar("REPUT_WORKER_DAEMON", None, "the Python worker daemon module Spark starts (default: reput's warm "
           "daemon, jobs.pipeline.runtime.worker_daemon; pyspark.daemon: Spark's own)"),
    EnvVar("REPUT_SPARK_LOG_LEVEL", None, "Spark's log level when --log-level is not given (default: off, warn "
           "with REPUT_DEBUG)"),
    EnvVar("REPUT_DEBUG", None, "any value but 0: a failure prints its Python traceback too, Spark logs at warn"),
    EnvVar("REPUT_DECODE_KERNEL", "1", "0: every split is decoded by the numpy reference instead of the compiled "
           "kernel (about 10x slower; for comparisons)"),
    EnvVar("REPUT_CONVERT_DIRECT_IO", "1", "0: convert writes its commit-log segments through the page cache "
           "instead of with O_DIRECT (comparisons; the report's segment_writes counts them)"),
    EnvVar("REPUT_TEST_PAUSE_AT", None, "a job sleeps at this named point until killed (crash-safety tests)",
           TEST_HOOK),
    EnvVar("REPUT_TEST_PAUSE_MARK", None, "file the paused job writes the point's name to", TEST_HOOK),
    EnvVar("REPUT_FAIL_ONCE", None, "the first decode task creating this file fails once after writing its work "
           "files (Spark retries it)", TEST_HOOK),
    EnvVar("REPUT_CRASH_AT", None, "an --in-place recovery kills itself with SIGKILL at this named point",
           TEST_HOOK),
    EnvVar("REPUT_WARM_DAEMON", None, "set by reput for the worker launcher Spark starts: the warm daemon's "
           "socket", INTERNAL),
    EnvVar("REPUT_WORKER_PRELOAD", None, "set by reput for its worker daemons: the modules whose functions tasks "
           "run, imported before workers fork (comma-separated)", INTERNAL),
    EnvVar("REPUT_GOLDEN", None, "where the tests find the golden stores (default ../shared/golden)", TEST_HOOK),
)
BY_NAME = {v.name: v for v in REGISTRY}


def value(name: str) -> str | None:
    """The variable's value, else its default; the name must be registered."""
    return os.environ.get(name, BY_NAME[name].default)


def in_effect() -> dict[str, str]:
    """Every registered variable set to other than its default (internal ones excepted), by name."""
    out = {}
    for v in REGISTRY:
        got = os.environ.get(v.name)
        if got is not None and got != v.default and v.kind != INTERNAL:
            out[v.name] = got
    return out


def note_in_effect(job: str) -> None:
    """One stderr line naming the non-default variables in effect (nothing when there are none)."""
    got = in_effect()
    if got:
        said = "; ".join(f"{k}={v!r} ({BY_NAME[k].effect})" for k, v in got.items())
        print(f"reput {job}: note: environment: {said}", file=sys.stderr, flush=True)
