"""The open-file limit (runtime.limits): reput needs a bounded number of descriptors whatever the store holds, so a
job raises a low soft limit itself when the hard limit allows (and says so), and refuses in one line naming the
limit and how to raise it when it does not: never the JVM's "Too many open files" halfway through."""
from __future__ import annotations

import resource
import subprocess
import sys

from jobs.pipeline.runtime.limits import OPEN_FILES_NEEDED
from tests.conftest import GOLDEN, REPO

STORE = GOLDEN / "clean-small-11"


def _inspect(soft: int, hard: int) -> subprocess.CompletedProcess:
    """jobs.inspect (local engine) in a process started under those limits."""
    return subprocess.run([sys.executable, "-m", "jobs.inspect", "--store", str(STORE), "--broker-config",
                           str(STORE / "broker.conf"), "--engine", "local", "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))


def test_a_hard_limit_below_the_need_is_refused_in_one_line_naming_it():
    done = _inspect(64, 64)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("reput inspect: error: the open-file limit (RLIMIT_NOFILE) is 64, at most 64; ")
    assert f"ulimit -n {OPEN_FILES_NEEDED}" in lines[0] and "LimitNOFILE" in lines[0] and not done.stdout


def test_a_low_soft_limit_is_raised_and_said():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    done = _inspect(64, hard)
    assert done.returncode == 0, done.stderr
    assert f"reput inspect: note: the open-file limit raised from 64 to {OPEN_FILES_NEEDED} for this run" \
        in done.stderr
