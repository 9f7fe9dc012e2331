"""The SparkSession of a job: embedded local Spark under `python -m`, the submitted one under spark-submit.

The embedded driver JVM starts faster from a class-data archive (AppCDS) of the classes a session
loads: `python -m jobs.pipeline.runtime.session` (run by `make venv`) makes it once per venv; sessions then map
it when it is there. A submitted application is left as spark-submit starts it.

Spark's own log goes to stderr at the job's --log-level (default off: a failure reaches the operator as
reput's one line; REPUT_DEBUG=1 makes it warn). --quiet also hides the JVM's start-up banner.
reput launches the embedded JVM itself (`_launch`) with its output on a pipe of its own that a thread
copies to stderr while the job runs, less Spark's own noise (jvm_output; with --quiet: /dev/null): the
JVM keeps running for a moment after the job has ended (its shutdown stops Spark and deletes Spark's
temporary directories), and a caller reading the job's stdout or stderr to the end would otherwise wait
for that too (about half a second).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from . import env, interrupt, jvm_output, worker_daemon
from .contract import under_spark_submit
from .failure import debug

CDS_ARCHIVE = Path(sys.prefix) / "reput-spark-driver.jsa"
# The embedded JVM only schedules tasks (the work is in the Python workers): the quick C1 compiler
# alone leaves the cores to the workers instead of C2 compiling.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
# Messages about an archive that does not match the JVM or its class path (then it is simply not used).
CDS_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
# Python workers are forked from a daemon that has imported the pipeline and loaded the kernels.
WORKER_DAEMON = "jobs.pipeline.runtime.worker_daemon"
LOG4J_CONFIG = Path(__file__).with_name("log4j2-reput.properties")
T = TypeVar("T")


def _java_options(dump_to: Path | None = None) -> str:
    """Driver JVM options: REPUT_DRIVER_JAVA_OPTIONS replaces ours; the archive is used when made."""
    options = env.value("REPUT_DRIVER_JAVA_OPTIONS")
    if options is not None:
        return options
    if dump_to is not None:
        return f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={dump_to} {CDS_QUIET}"
    if CDS_ARCHIVE.is_file():
        return f"{JAVA_OPTIONS} -XX:SharedArchiveFile={CDS_ARCHIVE} {CDS_QUIET}"
    return JAVA_OPTIONS


def log_level(requested: str | None) -> str:
    """Spark's log level: the flag, else REPUT_SPARK_LOG_LEVEL, else warn with REPUT_DEBUG, else off."""
    return (requested or env.value("REPUT_SPARK_LOG_LEVEL") or ("warn" if debug() else "off")).upper()


def _daemon_module() -> str:
    return env.value("REPUT_WORKER_DAEMON") or WORKER_DAEMON


def _local(master: str | None) -> bool:
    """The embedded session runs its Python workers on this machine (local[...])."""
    return (master or env.value("REPUT_SPARK_MASTER")).startswith("local")


def job_spark(args: argparse.Namespace, app: str) -> SparkSession:
    """The session for a job's parsed command line (--master, --log-level, --quiet)."""
    return get_spark(app, args.master, level=args.log_level, quiet=args.quiet)


def job_context(args: argparse.Namespace, app: str) -> SparkContext:
    """The SparkContext for a job that only runs Python tasks (all but `query --scan`): a SparkSession on
    top of it would take another 0.8 s to start here, for nothing those jobs use."""
    return get_context(app, args.master, level=args.log_level, quiet=args.quiet)


def get_spark(app: str, master: str | None = None, _dump_cds_to: Path | None = None, *, level: str | None = None,
              quiet: bool = False) -> SparkSession:
    """The job's session; local[*] unless spark-submit (or `master`) says otherwise."""
    level = log_level(level)
    builder = SparkSession.builder
    conf = spark_conf(app, master, level, _dump_cds_to)
    for key, value in conf.items():
        builder = builder.config(key, value)
    prepare_local_launch(master)
    return _start(builder.getOrCreate, conf, level, quiet)


def get_context(app: str, master: str | None = None, *, level: str | None = None, quiet: bool = False) -> SparkContext:
    """get_spark's SparkContext without the SparkSession (the active one when a session already runs)."""
    level = log_level(level)
    settings = spark_conf(app, master, level)
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    prepare_local_launch(master)
    return _start(lambda: SparkContext.getOrCreate(conf), settings, level, quiet)


def embedded(master: str | None) -> bool:
    """reput launches (or reuses) its own JVM: not under spark-submit, unless a master is given."""
    return bool(master) or not under_spark_submit()


def spark_conf(app: str, master: str | None, level: str, dump_cds_to: Path | None = None) -> dict[str, str]:
    """What reput sets on its session: the name; for an embedded session (or a given master) the rest.
    Pure: reads the environment, changes nothing (prepare_local_launch does)."""
    conf = {"spark.app.name": f"reput-{app}"}
    if not embedded(master):
        return conf
    conf.update({
        "spark.master": master or env.value("REPUT_SPARK_MASTER"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": env.value("REPUT_DRIVER_MEMORY"),
        "spark.driver.extraJavaOptions": f"{_java_options(dump_cds_to)} -Dlog4j2.configurationFile=file:{LOG4J_CONFIG} "
                                         f"-Dreput.logLevel={level}",
        "spark.sql.shuffle.partitions": "8",
        "spark.python.worker.reuse": "true",
        # The JVM talks to its Python workers over Unix sockets, not loopback TCP, whose small-packet
        # delays cost every task about 20 ms here (5 ms per task with them).
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.python.daemon.module": _daemon_module(),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # the modules tasks run, for the daemon Spark launches (the warm one has them already)
        **{f"spark.executorEnv.{k}": v for k, v in worker_daemon.preload_env().items()},
    })
    return conf


def prepare_local_launch(master: str | None) -> None:
    """The side effects of launching an embedded session: the workers' interpreter (the driver's: the venv)
    and the local IP in the environment, and, when a local JVM is about to be launched, the warm worker
    daemon started (it loads the pipeline on the other core while the JVM starts)."""
    if not embedded(master):
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if _local(master) and _daemon_module() == WORKER_DAEMON and SparkContext._active_spark_context is None:
        worker_daemon.start_warm()


def _start(create: Callable[[], T], conf: dict[str, str], level: str, quiet: bool) -> T:
    """create() (a session or a context) with signals held, armed for Ctrl-C, at Spark log `level`, on a
    JVM reput launched (`_launch`) unless one runs already."""
    with interrupt.deferred():
        fresh = SparkContext._active_spark_context is None
        launched = fresh and SparkContext._gateway is None
        try:
            if launched and not under_spark_submit():
                _launch(conf, quiet and not debug())
            made = create()
        finally:
            if launched and SparkContext._gateway is not None:  # interrupted half-way too: ours to end
                _own_jvm(SparkContext._gateway)
        sc = made if isinstance(made, SparkContext) else made.sparkContext
        if fresh:
            _own_accumulator_server(sc)
            if launched:
                _own_socket_dir(sc)
        interrupt.arm(sc)
    sc.setLogLevel(level)
    return made


def _own_jvm(gateway) -> None:
    """The driver JVM this job just launched is ended and waited for after an interrupt."""
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        interrupt.own_process(proc)


def _own_socket_dir(sc: SparkContext) -> None:
    """After an interrupt, the Unix sockets the driver JVM this job launched bound in its java.io.tmpdir for the
    Python side and never removed (a JVM killed between a bind and its unlink) are swept (interrupt.sweep_sockets)."""
    try:
        directory = str(sc._jvm.java.lang.System.getProperty("java.io.tmpdir"))
    except Exception:  # noqa: BLE001 - no answer: nothing to sweep
        return
    interrupt.sweep_sockets_in(directory, time.time() - 1)


def _own_accumulator_server(sc: SparkContext) -> None:
    """A context this job just created: its accumulator server's Unix socket is removed however the process
    leaves; the server takes the JVM's end of a connection closing mid-update (the JVM stopped by a signal)
    quietly instead of printing socketserver's EOFError traceback."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    if isinstance(server.server_address, str) and interrupt.running():
        interrupt.remove_at_exit(server.server_address)
    report = server.handle_error

    def handle_error(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            report(request, client_address)
    server.handle_error = handle_error


class _Settings:
    """What pyspark's launch_gateway reads of a SparkConf (the --conf flags of the JVM it starts)."""

    def __init__(self, conf: dict[str, str]) -> None:
        self._items = list(conf.items())

    def getAll(self) -> list[tuple[str, str]]:
        return self._items


def _launch(conf: dict[str, str], quiet: bool) -> None:
    """Launch the driver JVM (pyspark's launch_gateway, as SparkContext would) with its stdout and stderr on
    a pipe jvm_output.relay copies to this process's stderr, or on /dev/null when quiet (the JVM and the Python
    workers it starts then print nothing, no banner either)."""
    from pyspark.java_gateway import launch_gateway

    if quiet:
        gateway = launch_gateway(_Settings(conf), {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL})
    else:
        read, write = os.pipe()
        threading.Thread(target=jvm_output.relay, args=(read, 2, debug()), name="reput-jvm-output",
                         daemon=True).start()
        try:
            gateway = launch_gateway(_Settings(conf), {"stdout": write, "stderr": write})
        finally:
            os.close(write)
    SparkContext._ensure_initialized(gateway=gateway)


def make_cds_archive() -> float:
    """Start and stop one embedded session with the JVM dumping its loaded classes at exit, then move
    the archive into place atomically; returns the seconds it took."""
    t0 = time.monotonic()
    part = CDS_ARCHIVE.with_name(f"{CDS_ARCHIVE.name}.{os.getpid()}.part")
    spark = get_spark("cds", "local[1]", _dump_cds_to=part)
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x + 1).collect()
    spark.range(10).selectExpr("id * 2").collect()
    proc = spark.sparkContext._gateway.proc
    spark.stop()
    proc.stdin.close()  # the gateway JVM exits on end of input, writing the archive
    proc.wait(timeout=300)
    if not part.is_file():
        raise RuntimeError(f"the driver JVM wrote no class-data archive to {part}")
    part.replace(CDS_ARCHIVE)
    return time.monotonic() - t0


if __name__ == "__main__":
    if under_spark_submit():
        sys.exit("run this with the venv's python, not spark-submit")
    print(f"Spark driver class-data archive {CDS_ARCHIVE} made in {make_cds_archive():.1f}s")
