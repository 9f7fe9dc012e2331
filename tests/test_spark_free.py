"""jobs.dump and jobs.query (without --scan) read with random access and no Spark: running them, in a fresh
interpreter, imports neither pyspark nor py4j (the README calls them Spark-free: not even through a stage
module they share with Spark jobs); nor does a job on the local engine (inspect). The control run shows the
check sees pyspark when a job does load it (inspect on the Spark engine)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import GOLDEN, REPO, private_temp_env

CASE = "clean-small-11"
SPARK_MODULES = ("pyspark", "py4j")

RUN = """
import contextlib, io, json, sys
from jobs.{job} import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main({argv!r})
print(json.dumps([code, sorted({{m.split('.')[0] for m in sys.modules}} & {spark!r})]))
"""


def loaded(job: str, *args: str) -> tuple[int, list[str]]:
    """Run jobs.<job> in a fresh interpreter: its exit code and the Spark modules it loaded."""
    argv = ["--store", str(GOLDEN / CASE), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--json", *args]
    script = RUN.format(job=job, argv=argv, spark=set(SPARK_MODULES))
    temp = tempfile.mkdtemp(prefix="reput-t-")  # main() returns without stopping a Spark it started: its JVM's
    try:                                        # sockets go with this directory (short: socket paths <= 107 bytes)
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **private_temp_env(Path(temp))})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    return code, modules


def test_dump_loads_no_spark(golden):
    index_file = sorted((GOLDEN / CASE / "index").iterdir())[0].name
    for args in (("--topic", "TopicTest", "--queue", "1", "--count", "3"), ("--offset", "0", "--count", "3"),
                 ("--index-file", index_file, "--count", "2")):
        assert loaded("dump", *args) == (0, []), args


def test_query_without_scan_loads_no_spark(golden):
    first = json.loads(subprocess.run(
        [sys.executable, "-m", "jobs.dump", "--store", str(GOLDEN / CASE), "--broker-config",
         str(GOLDEN / CASE / "broker.conf"), "--json", "--offset", "0", "--count", "1"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()[0])
    key = first["properties"]["KEYS"].split()[0]
    assert loaded("query", "--topic", first["topic"], "--key", key) == (0, [])
    assert loaded("query", "--msg-id", first["offset_msg_id"]) == (0, [])


def test_the_check_sees_spark_when_a_job_loads_it():
    """The control: a job run on the Spark engine does show pyspark and py4j in sys.modules."""
    assert loaded("inspect", "--engine", "spark", "--master", "local[1]", "--quiet") == (0, ["py4j", "pyspark"])


def test_inspect_on_the_local_engine_loads_no_spark(golden):
    """inspect's tasks on the local engine (auto on a local master): forked workers, no JVM, no pyspark."""
    assert loaded("inspect", "--master", "local[2]", "--quiet") == (0, [])
