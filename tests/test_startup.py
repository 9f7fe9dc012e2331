"""Start-up and exit. `reput`, `reput --help` and `reput --version` answer without loading numpy, pyarrow or
pyspark. The embedded driver JVM's output: on a pipe of its own that the driver copies to stderr while the job runs
(/dev/null with --quiet), never the job's own stdout or stderr. A caller reading a job's output to the end
then stops reading when the job ends, not when the JVM has finished shutting down after it; that shutdown
still stops Spark and deletes Spark's local directories."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import pid_gone, private_temp_env

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, os, sys
from jobs.pipeline.runtime.session import get_context
sc = get_context("jvm-output", "local[1]", level=sys.argv[1], quiet=sys.argv[2] == "quiet")
assert sc.parallelize([1, 2], 2).map(lambda x: x * 2).collect() == [2, 4]
jvm = sc._gateway.proc.pid
print(json.dumps({"jvm": jvm, "jvm_fds": [os.readlink(f"/proc/{jvm}/fd/{n}") for n in (1, 2)],
                  "own_fds": [os.readlink(f"/proc/self/fd/{n}") for n in (1, 2)]}))
sys.stdout.flush()
os._exit(0)  # as jobs leave (cli.run_process): the JVM ends itself on the closed pipe
"""


@pytest.mark.parametrize("quiet", [False, True])
def test_the_jvm_writes_to_a_pipe_of_its_own_and_cleans_up_after_the_job(tmp_path, killed_temp, quiet):
    local = tmp_path / "spark-local"
    local.mkdir()
    # the script leaves by os._exit without the job's sweep of its JVM's sockets: they go in a temp dir of its own
    env = {**os.environ, **private_temp_env(killed_temp), "PYTHONPATH": str(REPO), "SPARK_LOCAL_DIRS": str(local)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, "info", "quiet" if quiet else "loud"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])  # stdout holds only what the driver printed
    assert len(done.stdout.strip().splitlines()) == 1
    assert not set(seen["jvm_fds"]) & set(seen["own_fds"]), seen
    if quiet:
        assert seen["jvm_fds"] == ["/dev/null", "/dev/null"] and "INFO" not in done.stderr
    else:
        assert seen["jvm_fds"][0] == seen["jvm_fds"][1] and seen["jvm_fds"][0].startswith("pipe:")
        assert "INFO SparkContext: Running Spark version" in done.stderr  # copied to the driver's stderr
    assert pid_gone(seen["jvm"], 120), "the JVM outlived its driver"
    assert list(local.iterdir()) == [], "Spark's local directories were left behind"


HEAVY = ("numpy", "pyarrow", "pyspark", "py4j", "numba")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], [], ["rebuild", "--version"]])
def test_the_console_command_answers_without_loading_the_pipeline(argv):
    """The front door's own answers (`reput JOB --version` too, as the job's parser prints it) import none
    of the heavy packages; the control import shows the check sees them when a job module is loaded."""
    script = ("import json, sys\nfrom jobs import __main__ as frontdoor\n"
              "try:\n    frontdoor.reput(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
              "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(%r))))" % (HEAVY,))
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert "reput" in done.stdout + done.stderr
    control = subprocess.run([sys.executable, "-c", "import sys, jobs.rebuild; print(int('numpy' in sys.modules))"],
                             cwd=REPO, capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert control.stdout.strip() == "1", control.stderr
