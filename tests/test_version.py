"""`--version` answers the same everywhere: `reput --version`, `python -m jobs --version` and every job's own
`python -m jobs.<name> --version` print one line, `reput <version>` with the package's version (`jobs.__version__`,
the newest release in CHANGELOG.md), on stdout, nothing on stderr, and exit 0."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import __version__
from tests.conftest import REPO

REPUT = Path(sys.executable).with_name("reput")
JOB_NAMES = sorted(p.stem for p in (REPO / "jobs").glob("*.py") if not p.stem.startswith("_"))
WAYS = {"reput": [str(REPUT), "--version"],
        "python -m jobs": [sys.executable, "-m", "jobs", "--version"],
        **{f"python -m jobs.{job}": [sys.executable, "-m", f"jobs.{job}", "--version"] for job in JOB_NAMES},
        # as files, as spark-submit runs them: jobs/ first on sys.path must not shadow the standard library
        "python jobs/__main__.py": [sys.executable, "jobs/__main__.py", "--version"],
        **{f"python jobs/{job}.py": [sys.executable, f"jobs/{job}.py", "--version"] for job in JOB_NAMES}}


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


@pytest.mark.parametrize("way", WAYS)
def test_version_prints_the_package_version(way):
    proc = subprocess.run(WAYS[way], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"reput {__version__}\n", ""), (way, proc)
