"""A real Spark standalone cluster: a master and one worker on 127.0.0.1 started from the installed pyspark,
`spark-submit jobs/rebuild.py` with the packaged code (jobs.pipeline.package) on executors, output
byte-identical to a local run. Slow (three JVMs): runs only when selected, `pytest -m cluster`."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.pipeline.package import build_zip
from tests.conftest import REPO
from tests.hostile import tree_digest

pytestmark = pytest.mark.cluster

CASE = "clean-small-11"
REPORT = "reput-report.json"
START_TIMEOUT_S = 180
SUBMIT_TIMEOUT_S = 600


@pytest.fixture(autouse=True)
def only_when_selected(request):
    """Keep the default run fast: this module runs when the marker expression asks for `cluster`."""
    expr = request.config.getoption("markexpr") or ""
    if "cluster" not in expr or "not cluster" in expr:
        pytest.skip("starts a Spark standalone cluster; run with `pytest -m cluster tests/test_cluster.py`")


def spark_home() -> Path:
    """The installed pyspark package: it ships bin/spark-class, bin/spark-submit and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A Spark daemon (`spark-class <main> args`) in its own process group, logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict, cwd: Path) -> None:
        self.log = cwd / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], cwd=cwd, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_for(self, pattern: str) -> re.Match:
        """Wait until the daemon's log matches `pattern` (or it died, or START_TIMEOUT_S passed)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            found = re.search(pattern, self.log.read_text(errors="replace"))
            if found:
                return found
            assert self.proc.poll() is None, f"{self.log.name} exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.log.name}: no {pattern!r}: {self.log.read_text()[-3000:]}"
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


def cluster_env() -> dict:
    """Environment of the daemons and spark-submit: everything bound to 127.0.0.1, the venv's Python."""
    return dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")


def test_spark_submit_on_a_standalone_cluster_gives_the_local_bytes(golden, tmp_path, request):
    """Master + worker (2 cores) bound to 127.0.0.1; the rebuild is submitted with the zip from
    jobs.pipeline.package as --py-files; its executor ran the tasks; OUT equals a local[2] rebuild."""
    from jobs.rebuild import main as rebuild_main

    request.getfixturevalue("spark")  # the suite's session, only once the test is selected

    store = golden / CASE
    job_args = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--json"]
    local_out = tmp_path / "local-out"
    assert rebuild_main(job_args + ["--out", str(local_out)]) == 0

    env, port = cluster_env(), free_port()
    worker_dir = tmp_path / "worker"
    worker_dir.mkdir()
    master = worker = None
    try:
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                                   "--webui-port", "0"], env, tmp_path)
        master.wait_for(r"I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        worker = Daemon("worker", ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
                                   "--memory", "2g", "--webui-port", "0", "--work-dir", str(worker_dir)], env, tmp_path)
        worker.wait_for(r"Successfully registered with master")
        zip_path = tmp_path / "dist" / "reput.zip"
        build_zip(zip_path)
        cluster_out = tmp_path / "cluster-out"
        submit = subprocess.run(
            [str(spark_home() / "bin" / "spark-submit"), "--master", url, "--py-files", str(zip_path),
             "--conf", f"spark.pyspark.python={sys.executable}",
             "--conf", f"spark.pyspark.driver.python={sys.executable}",
             "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.executor.memory=1g", str(REPO / "jobs" / "rebuild.py"),
             *job_args, "--out", str(cluster_out)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
        assert submit.returncode == 0, submit.stderr[-4000:] + submit.stdout[-2000:]
    finally:
        for daemon in (worker, master):
            if daemon is not None:
                daemon.stop()
    executors = list(worker_dir.glob("app-*/*"))
    assert executors, "the worker never started an executor"
    assert all((e / "reput.zip").is_file() for e in executors)
    assert any("Running task" in (e / "stderr").read_text(errors="replace") for e in executors)
    digest = {k: v for k, v in tree_digest(cluster_out).items() if k != REPORT}
    assert digest == {k: v for k, v in tree_digest(local_out).items() if k != REPORT}
