"""A Spark standalone cluster on 127.0.0.1 started from the installed pyspark: a master and a worker of a given
number of cores, each a `spark-class` daemon in its own process group. The cluster tests and the bench's
scale-out stage use it; jobs reach it with spark-submit and conf/spark-defaults.conf (docs/cluster.md)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

START_TIMEOUT_S = 180


def spark_home() -> Path:
    """The installed pyspark package: it ships bin/spark-class, bin/spark-submit and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def warm_executor_kernels(code_zip: Path) -> None:
    """Compile (or load) the kernels once as an executor on this machine finds them: the code imported from
    `code_zip`, so numba caches them where a `--py-files` zip's kernels go (storage_format.kernels.jit). A
    loopback cluster's first job then loads them, instead of each of its Python workers compiling them at once."""
    subprocess.run([sys.executable, "-m", "storage_format.kernels.warm"], cwd=code_zip.parent, check=True,
                   env=dict(os.environ, PYTHONPATH=str(code_zip.resolve())), stdout=subprocess.DEVNULL)


def cluster_env() -> dict:
    """Environment of the daemons and spark-submit: everything bound to 127.0.0.1; no PYSPARK_PYTHON, so
    the executors' Python is the one conf/spark-defaults.conf names (the shipped environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return dict(env, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")


def submit_argv(url: str, job: str, *args: str, conf: dict[str, str] | None = None) -> list[str]:
    """docs/cluster.md's recipe as a command line, run from the repository: spark-submit jobs/<job>.py with
    conf/spark-defaults.conf (the packaged code and environment), the driver on this Python (client mode) bound to
    127.0.0.1, and `conf` as more --conf settings."""
    extra = [x for k, v in (conf or {}).items() for x in ("--conf", f"{k}={v}")]
    return [str(spark_home() / "bin" / "spark-submit"), "--master", url, "--properties-file",
            "conf/spark-defaults.conf", "--conf", f"spark.pyspark.driver.python={sys.executable}", "--conf",
            "spark.driver.host=127.0.0.1", *extra, f"jobs/{job}.py", *args]


class Daemon:
    """A Spark daemon (`spark-class <main> args`) in its own process group, logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict, cwd: Path, wrap: tuple[str, ...] = ()) -> None:
        self.log = cwd / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([*wrap, str(spark_home() / "bin" / "spark-class"), *args], cwd=cwd, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_for(self, pattern: str) -> re.Match:
        """Wait until the daemon's log matches `pattern`; RuntimeError if it died or START_TIMEOUT_S passed."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            found = re.search(pattern, self.log.read_text(errors="replace"))
            if found:
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log.name} exited: {self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.log.name}: no {pattern!r}: {self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM the daemon's process group, SIGKILL what is left after 30 s."""
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_master(root: Path, env: dict) -> tuple[Daemon, str]:
    """A master on a free port of 127.0.0.1, logging under root; (its daemon, its spark:// URL)."""
    port = free_port()
    master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", "0"], env, root)
    master.wait_for(r"I have been elected leader")
    return master, f"spark://127.0.0.1:{port}"


def start_worker(url: str, root: Path, env: dict, work_dir: Path, cores: int, memory: str = "2g",
                 wrap: tuple[str, ...] = (), name: str = "worker") -> Daemon:
    """A worker of `cores` cores registered with the master at `url`."""
    worker = Daemon(name, ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", str(cores),
                           "--memory", memory, "--webui-port", "0", "--work-dir", str(work_dir)], env, root, wrap=wrap)
    worker.wait_for(r"Successfully registered with master")
    return worker


@contextmanager
def loopback_cluster(root: Path, cores: int, env: dict | None = None, memory: str = "2g") -> Iterator[tuple[str, Path]]:
    """A master and one worker of `cores` cores for the block; yields (master URL, the worker's work dir)."""
    env = env or cluster_env()
    worker_dir = root / "worker"
    worker_dir.mkdir(parents=True, exist_ok=True)
    daemons: list[Daemon] = []
    try:
        master, url = start_master(root, env)
        daemons.append(master)
        daemons.append(start_worker(url, root, env, worker_dir, cores, memory))
        yield url, worker_dir
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
