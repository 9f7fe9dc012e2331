"""The golden RocksDB cases in the tests: writable copies, their logical dumps (expected-cq.jsonl), and a store's
listing (every name, size and mtime, directories included) to show that a job wrote nothing into it."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import GOLDEN, GOLDEN_MISSING

ROCKS = GOLDEN / "rocksdb"
DB_CASES = ("rocksdb-clean-11", "rocksdb-unclean-11", "rocksdb-unclean-11-recovered", "rocksdb-cq-deleted-11",
            "rocksdb-lmq-clean-11")  # consumequeue/ is the database (storeType=defaultRocksDB)
DOUBLE_WRITE = "rocksdb-doublewrite-11"  # file queues and the database in one consumequeue/
ALL_CASES = DB_CASES + (DOUBLE_WRITE,)


def rocks_case(case: str) -> Path:
    """A golden RocksDB case's directory (read-only); fails when the golden set is absent."""
    if not (ROCKS / case / "manifest.json").is_file():
        pytest.fail(f"{GOLDEN_MISSING} (missing {ROCKS / case})", pytrace=False)
    return ROCKS / case


def rocks_copy(case: str, dest: Path) -> Path:
    """A writable copy of a golden RocksDB case (times kept), without its dump (not part of a store)."""
    shutil.copytree(rocks_case(case), dest, ignore=shutil.ignore_patterns("expected-cq.jsonl"))
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def expected_cq(case: str) -> list[dict]:
    """The case's logical content: one dict per key, `default` then `offset`, keys in bytewise order."""
    return [json.loads(line) for line in (rocks_case(case) / "expected-cq.jsonl").read_text().splitlines()]


def expected_items(case: str, cf: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of one column family of the case's dump, in key order."""
    return [(bytes.fromhex(r["key"]), bytes.fromhex(r["value"])) for r in expected_cq(case) if r["cf"] == cf]


def store_listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry below root (root itself as '.'): (size, mtime_ns, mode); a symlink as itself."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames] if dirpath == str(root) else [*dirnames, *filenames]:
            p = Path(dirpath) / name if name != "." else root
            st = p.lstat()
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out
