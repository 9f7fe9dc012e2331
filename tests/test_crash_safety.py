"""Crash safety: a rebuild killed with SIGKILL (driver, JVM and Python workers at once) at any point leaves
OUT absent or complete and correct, never touches the store, and a re-run gives byte-identical output
with nothing left beside OUT. Kill points are the hooks of jobs/pipeline/runtime/faults.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO, private_temp_env
from tests.hostile import tree_digest
from tests.helpers import group_gone

CASE = "clean-small-11"
REPORT = "reput-report.json"
OLD_FILE = "reput-earlier-report.json"  # an earlier reput output (its report), which an --overwrite run replaces
# (kill point, whether the run replaces an existing OUT with --overwrite)
POINTS = [("after-decode", False), ("in-build-task", False), ("before-publish-rename", False),
          ("between-renames", True), ("before-old-delete", True)]
MARKER_TIMEOUT_S = 300


def out_digest(out: Path) -> dict[str, str]:
    """File digests of a rebuilt OUT without the run report (it holds times and paths)."""
    return {k: v for k, v in tree_digest(out).items() if k != REPORT}


def rebuild_argv(golden: Path, out: Path, overwrite: bool) -> list[str]:
    """Arguments of a rebuild of the source case into `out`."""
    store = golden / CASE
    return (["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out)]
            + (["--overwrite"] if overwrite else []))


@pytest.fixture(scope="module")
def reference(golden, spark, tmp_path_factory) -> dict[str, str]:
    """Digest of an uninterrupted rebuild (in this process's Spark session)."""
    from jobs.rebuild import main as rebuild_main

    out = tmp_path_factory.mktemp("reference") / "out"
    assert rebuild_main(rebuild_argv(golden, out, False) + ["--json"]) == 0
    return out_digest(out)


@pytest.fixture(scope="module")
def killed(golden, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """Start one `python -m jobs.rebuild` per kill point (all at once), wait until each has paused at its
    point, SIGKILL its whole process group. Returns point -> directory holding OUT (`outdir/out`). Their
    temp files (which a SIGKILLed JVM cannot delete) go to a directory removed afterwards."""
    store_before = tree_digest(golden / CASE)
    temp = Path(tempfile.mkdtemp(prefix="reput-killed-"))
    runs: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for point, overwrite in POINTS:
            root = tmp_path_factory.mktemp(point)
            outdir = root / "outdir"
            outdir.mkdir()
            if overwrite:  # the previous output that --overwrite replaces
                (outdir / "out").mkdir()
                (outdir / "out" / OLD_FILE).write_text("the output of an earlier run\n")
            env = dict(os.environ, **private_temp_env(temp), REPUT_TEST_PAUSE_AT=point,
                       REPUT_TEST_PAUSE_MARK=str(root / "paused"))
            argv = [sys.executable, "-m", "jobs.rebuild", *rebuild_argv(golden, outdir / "out", overwrite),
                    "--master", "local[2]", "--engine", "spark"]
            with open(root / "stderr", "wb") as err:
                proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            runs[point] = (proc, root)
        deadline = time.monotonic() + MARKER_TIMEOUT_S
        for point, (proc, root) in runs.items():
            while not (root / "paused").exists():
                log = root / "stderr"
                assert proc.poll() is None, f"{point}: exited {proc.returncode}: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"{point}: never paused: {log.read_text()[-3000:]}"
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for point, (proc, _) in runs.items():  # the JVM and the Python workers died with the driver
            assert group_gone(proc.pid, within_s=60), f"{point}: processes of the killed run survive"
    finally:
        for proc, _ in runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert tree_digest(golden / CASE) == store_before
    yield {point: root / "outdir" for point, (_, root) in runs.items()}
    shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("point,overwrite", POINTS, ids=[p for p, _ in POINTS])
def test_killed_rebuild_then_rerun(point, overwrite, killed, reference, golden, spark):
    """Right after the kill OUT is absent, the previous output, or the complete new output; the re-run
    (restoring a previous output an interrupted --overwrite moved aside) ends byte-identical to an
    uninterrupted rebuild, and only OUT remains in its directory."""
    from jobs.pipeline.runtime.cli import JobError
    from jobs.rebuild import main as rebuild_main

    outdir = killed[point]
    out = outdir / "out"
    old = {OLD_FILE: tree_digest(out)[OLD_FILE]} if out.exists() and (out / OLD_FILE).exists() else None
    if out.exists():
        assert old is not None or out_digest(out) == reference
    if point == "between-renames":
        assert not out.exists()
        with pytest.raises(JobError, match="already exists"):  # the previous output is put back first
            rebuild_main(rebuild_argv(golden, out, overwrite=False))
        assert tree_digest(out) == {OLD_FILE: tree_digest(out)[OLD_FILE]}
    assert rebuild_main(rebuild_argv(golden, out, overwrite) + ["--json"]) == 0
    assert out_digest(out) == reference
    assert sorted(p.name for p in outdir.iterdir()) == ["out"]
