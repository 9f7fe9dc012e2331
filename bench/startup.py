"""Start-up side by side: reput's start-up against Spark's defaults, as new processes, interleaved.

Each run is a new Python process that creates the embedded session and runs a first job whose tasks
load what every reput task needs (the pipeline's imports, the compiled kernels from numba's cache): the
part of a job that comes before any work. "reput" is the jobs' own start-up (a SparkContext
without a SparkSession, driver JVM from the class-data archive, C1 only, the warm worker daemon, Unix
sockets to the workers, the JVM's output on a pipe of its own); "Spark defaults" is how jobs started
before those: a SparkSession on a JVM pyspark launches (inheriting stdout and stderr) with the archive,
C1 and the warm daemon switched off (`REPUT_DRIVER_JAVA_OPTIONS=`, `REPUT_WORKER_DAEMON=pyspark.daemon`;
Unix sockets stay on in both).
Times run from just before the process is started; `exit_s` runs from the script's last line until the
bench, reading the process's stdout and stderr to the end like any caller capturing a job's output, has
them closed (reput's runs end as jobs do, `os._exit` once flushed; a JVM holding those pipes would keep
the caller waiting through its shutdown).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cpu import CpuWatch

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"reput": ({}, "context"),
           "Spark defaults": ({"REPUT_DRIVER_JAVA_OPTIONS": "", "REPUT_WORKER_DAEMON": "pyspark.daemon"}, "session")}
FIGURES = ("session_s", "first_job_s", "total_s", "exit_s")
SCRIPT = """
import json, os, sys, time
started = float(sys.argv[1])
from jobs.pipeline.runtime.session import get_context, get_spark
from jobs.pipeline.runtime.worker_daemon import preload_in_workers
preload_in_workers("jobs.pipeline.scan.decode", "jobs.pipeline.outputs.build")  # as a job's stage modules name themselves

def load(_):
    import jobs.pipeline.outputs.build, jobs.pipeline.scan.decode
    from storage_format.kernels.warm import warm
    t = time.monotonic()
    warm()
    return time.monotonic() - t

if sys.argv[3] == "context":
    sc = get_context("startup", sys.argv[2], quiet=True)
else:  # Spark's own launch, as before reput launched the JVM itself: it inherits stdout and stderr
    from pyspark import SparkConf, SparkContext
    from jobs.pipeline.runtime.session import log_level, prepare_local_launch, spark_conf
    prepare_local_launch(sys.argv[2])
    SparkContext._ensure_initialized(conf=SparkConf().setAll(spark_conf("startup", sys.argv[2], log_level(None)).items()))
    sc = get_spark("startup", sys.argv[2], quiet=True).sparkContext
session = time.time()
sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).map(load).collect()
first = time.time()
print(json.dumps({"session_s": session - started, "first_job_s": first - session, "total_s": first - started,
                  "ended": time.time()}), flush=True)
if sys.argv[3] == "context":
    os._exit(0)
"""


@dataclass
class StartupRuns:
    """Every run per configuration, and their medians."""

    runs: dict[str, list[dict]] = field(default_factory=lambda: {name: [] for name in CONFIGS})

    def medians(self) -> dict[str, dict[str, float]]:
        return {name: {k: round(statistics.median(r[k] for r in runs), 3) for k in FIGURES}
                for name, runs in self.runs.items() if runs}

    def ratios(self) -> dict[str, float]:
        m = self.medians()
        if len(m) < 2:
            return {}
        return {k: round(m["reput"][k] / m["Spark defaults"][k], 3) for k in ("session_s", "total_s", "exit_s")
                if m["Spark defaults"][k] > 0}

    def to_dict(self) -> dict:
        return {"runs": self.runs, "median_s": self.medians(), "ratios_reput_over_spark_defaults": self.ratios()}


def _one(master: str, env: dict[str, str], kind: str) -> dict:
    with CpuWatch() as cpu:
        started = time.time()
        done = subprocess.run([sys.executable, "-c", SCRIPT, repr(started), master, kind], cwd=REPO,
                              env={**os.environ, **env}, capture_output=True, text=True, check=True)
        closed = time.time()
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["exit_s"] = closed - figures.pop("ended")
    figures["other_load_cores"] = cpu.share.to_dict()["other_processes_cores"]
    return figures


def side_by_side(master: str, pairs: int) -> StartupRuns:
    """`pairs` interleaved runs of each configuration (the order alternates), with progress lines."""
    result = StartupRuns()
    names = list(CONFIGS)
    t0 = time.monotonic()
    for i in range(pairs):
        for name in (names if i % 2 == 0 else names[::-1]):
            result.runs[name].append(_one(master, *CONFIGS[name]))
        left = (time.monotonic() - t0) / (i + 1) * (pairs - i - 1)
        print(f"[bench] start-up pair {i + 1}/{pairs} done, ETA {left:.0f} s", flush=True)
    return result


def table(s: StartupRuns) -> str:
    """The printed comparison: medians per configuration and the ratios."""
    m = s.medians()
    lines = [f"start-up as a new process ({len(s.runs['reput'])} interleaved pairs, medians): session created, "
             f"first job (Python workers loading the pipeline and kernels), both, and the wait for the process's "
             f"output to close after its last line"]
    for name, figures in m.items():
        lines.append(f"  {name:<16}" + "".join(f"{k} {figures[k]:>6.2f}   " for k in FIGURES))
    for k, v in s.ratios().items():
        lines.append(f"  ratio reput / Spark defaults, {k:<12}{v:>6.2f}")
    return "\n".join(lines)
