"""Helpers to run jobs.rebuild in-process and compare its output with a golden case."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jobs.rebuild import main as rebuild_main
from tests.conftest import GOLDEN, manifest


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_rebuild(case: str, out: Path, *extra: str) -> int:
    return rebuild_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--out", str(out), "--json", *extra])


def consume_queue_hashes(root: Path) -> dict[str, str]:
    """{consumequeue/<topic>/<qid>/<file>: sha256} of a store or an output directory."""
    base = root / "consumequeue"
    return {f"consumequeue/{p.relative_to(base).as_posix()}": sha256(p)
            for p in sorted(base.rglob("*")) if p.is_file()}


def index_hashes(root: Path) -> list[str]:
    """sha256 of the index files in name order."""
    return [sha256(p) for p in sorted((root / "index").iterdir()) if p.is_file()]


def golden_consume_queue_hashes(case: str) -> dict[str, str]:
    return {k: v["sha256"] for k, v in manifest(case)["files"].items() if k.startswith("consumequeue/")}


def golden_index_hashes(case: str) -> list[str]:
    files = manifest(case)["files"]
    return [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]


def report(out: Path) -> dict:
    return json.loads((out / "reput-report.json").read_text())
