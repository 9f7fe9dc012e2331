"""Determinism: one input gives byte-identical output across runs, split sizes, parallelism (local[1] vs
the suite's local[2]) and a decode task that fails once after writing its work files and is retried."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hostile import tree_digest

CASE = "clean-small-11"
REPORT = "reput-report.json"
SUBPROCESS_TIMEOUT_S = 600
pytestmark = pytest.mark.slow  # seven rebuilds, two of them in their own Spark sessions


def out_digest(out: Path) -> dict[str, str]:
    """File digests of a rebuilt OUT without the run report (it holds times and paths)."""
    return {k: v for k, v in tree_digest(out).items() if k != REPORT}


def rebuild_argv(golden: Path, out: Path, *extra: str) -> list[str]:
    """Arguments of a rebuild of the source case into `out`."""
    store = golden / CASE
    return ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out), "--json", *extra]


@pytest.fixture(scope="module")
def other_masters(golden, tmp_path_factory) -> dict[str, tuple[int, Path, str, Path]]:
    """Rebuild in two other Spark sessions at once (subprocesses, since the suite shares one session; --engine spark:
    on a store this small auto would take the local engine):
    `one-core` on local[1]; `retried` on local[2,2] (2 attempts per task) with one decode task made to
    fail. Returns name -> (exit status, OUT, stderr, failure marker)."""
    specs = {"one-core": ("local[1]", False), "retried": ("local[2,2]", True)}
    procs = {}
    for name, (master, fail) in specs.items():
        root = tmp_path_factory.mktemp(name)
        marker = root / "failed-once"
        env = dict(os.environ, **({"REPUT_FAIL_ONCE": str(marker)} if fail else {}))
        err = open(root / "stderr", "wb")
        # Spark's own log is off by default; the retried run asks for its warnings to see the lost task.
        log = ("--log-level", "warn") if fail else ()
        proc = subprocess.Popen([sys.executable, "-m", "jobs.rebuild", *rebuild_argv(golden, root / "out"),
                                 "--master", master, "--engine", "spark", *log], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
        procs[name] = (proc, root, marker, err)
    results = {}
    try:
        for name, (proc, root, marker, err) in procs.items():
            code = proc.wait(timeout=SUBPROCESS_TIMEOUT_S)
            err.close()
            results[name] = (code, root / "out", (root / "stderr").read_text(errors="replace"), marker)
    finally:
        for proc, _, _, err in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()
    return results


@pytest.fixture(scope="module")
def reference(golden, spark, tmp_path_factory) -> dict[str, str]:
    """Digest of a default rebuild in the suite's local[2] session."""
    from jobs.rebuild import main as rebuild_main

    out = tmp_path_factory.mktemp("reference") / "out"
    assert rebuild_main(rebuild_argv(golden, out)) == 0
    return out_digest(out)


@pytest.mark.parametrize("split_size", [None, "0", "100000", "65536"])
def test_same_bytes_across_runs_and_split_sizes(split_size, reference, golden, spark, tmp_path):
    """A second run, one split per segment, and splits that start mid-segment (100000 bytes, 64 KiB:
    each split finds its first record by physicalOffset) all give the reference bytes."""
    from jobs.rebuild import main as rebuild_main

    out = tmp_path / "out"
    extra = () if split_size is None else ("--split-size", split_size)
    assert rebuild_main(rebuild_argv(golden, out, *extra)) == 0
    assert out_digest(out) == reference


def test_same_bytes_on_one_core(other_masters, reference):
    """local[1]: one task at a time, a different task packing; same bytes."""
    code, out, stderr, _ = other_masters["one-core"]
    assert code == 0, stderr[-3000:]
    assert out_digest(out) == reference


def test_same_bytes_after_a_task_failed_once_and_was_retried(other_masters, reference):
    """The injected failure happened (its marker exists, Spark logged the lost task) and the retried
    task's output replaced the failed attempt's work files."""
    code, out, stderr, marker = other_masters["retried"]
    assert code == 0, stderr[-3000:]
    assert marker.exists()
    assert "injected failure of one task" in stderr
    assert out_digest(out) == reference
