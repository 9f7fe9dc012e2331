"""Shared fixtures: one SparkSession for the whole suite, the golden stores, a sample store."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("REPUT_GOLDEN", REPO.parent / "shared" / "golden"))


def golden_cases(prefixes: tuple[str, ...] = ("",), exclude: tuple[str, ...] = ()) -> list[str]:
    """Names of golden case directories that start with one of `prefixes`."""
    if not GOLDEN.is_dir():
        return []
    names = sorted(p.name for p in GOLDEN.iterdir() if (p / "manifest.json").is_file())
    return [n for n in names if n.startswith(prefixes) and not any(x in n for x in exclude)]


def manifest(case: str) -> dict:
    return json.loads((GOLDEN / case / "manifest.json").read_text())


@pytest.fixture(scope="session")
def golden() -> Path:
    if not GOLDEN.is_dir():
        pytest.skip(f"golden stores not found at {GOLDEN}")
    return GOLDEN


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test suite (local[2], like the CI machine)."""
    from jobs.pipeline.session import get_spark

    session = get_spark("tests", master="local[2]")
    yield session
    session.stop()
