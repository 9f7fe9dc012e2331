"""Helpers to run jobs.rebuild in-process and compare its output with a golden case; OUT1 and the grown store a
`--since` run continues from."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jobs.rebuild import main as rebuild_main
from tests.conftest import GOLDEN, manifest, restored_copy
from tests.since_helpers import cut_offset, earlier_store


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


def rebuild_store(case: str, store: Path, out: Path, *extra: str) -> int:
    """jobs.rebuild's main on `store` under the golden case's broker.conf, with --json."""
    return rebuild_main(["--store", str(store), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--out", str(out), "--json", *extra])


def grown(case: str, tmp_path: Path, fraction: float) -> tuple[Path, Path]:
    """(OUT1: a rebuild of the case's store cut `fraction` of the way through, the whole store: a writable copy)."""
    store1 = earlier_store(case, tmp_path / "s1", cut_offset(case, fraction))
    assert rebuild_store(case, store1, tmp_path / "out1") == 0
    return tmp_path / "out1", restored_copy(case, tmp_path / "store")


def since_argv(case: str, store: Path, out2: Path, out1: Path, *extra: str) -> list[str]:
    """A rebuild of `store` into OUT2 that continues OUT1 (--since), under the golden case's broker.conf."""
    return ["--store", str(store), "--broker-config", str(GOLDEN / case / "broker.conf"), "--out", str(out2),
            "--since", str(out1), *extra]
