"""What an OUT was built to (store.built_to): the rebuild report names the commit-log position after its last
record and the digests of the bytes before it; a store that still holds them passes, one that does not (a byte
changed, the file cut short, the log now ending in another file) is named by file and byte offset."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from jobs.pipeline.io.fs import location
from jobs.pipeline.store.built_to import BLOCK_BYTES, TAIL_BYTES, BuiltTo, built_to, tail_difference
from jobs.pipeline.store.segments import list_segments
from storage_format.settings import load_settings
from tests.conftest import GOLDEN, manifest
from tests.helpers import run_job_lines

CASE = "clean-small-11"


def _copy(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / CASE / "commitlog", store / "commitlog")
    shutil.copy(GOLDEN / CASE / "broker.conf", store / "broker.conf")
    for p in store.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return store


def _segments(store: Path):
    return list_segments(location(str(store)), load_settings(store / "broker.conf"))


def test_the_rebuild_report_names_its_end_and_the_bytes_before_it(tmp_path, capsys):
    end = manifest(CASE)["commitlog_scan"]["max_physical_offset"]
    code, _ = run_job_lines("rebuild", ["--store", str(GOLDEN / CASE), "--broker-config", str(GOLDEN / CASE / "broker.conf"),
                                  "--out", str(tmp_path / "out"), "--engine", "local", "--quiet"], capsys)
    assert code == 0
    report = json.loads((tmp_path / "out" / "reput-report.json").read_text())
    built = BuiltTo.from_dict(report["built_to"])
    seg = max((s for s in _segments(GOLDEN / CASE) if s.start < end), key=lambda s: s.start)
    assert (built.offset, built.file, built.file_size) == (end, Path(seg.path).name, seg.size)
    assert built.tail_from == end - TAIL_BYTES and len(built.block_sha256) == TAIL_BYTES // BLOCK_BYTES
    assert built == built_to(_segments(GOLDEN / CASE), end) and tail_difference(_segments(GOLDEN / CASE), built) is None


def test_a_store_that_no_longer_holds_the_bytes_is_named_by_file_and_offset(tmp_path):
    store = _copy(tmp_path)
    end = manifest(CASE)["commitlog_scan"]["max_physical_offset"]
    built = built_to(_segments(store), end)
    assert BuiltTo.from_dict(json.loads(json.dumps(built.to_dict()))) == built
    path = store / "commitlog" / built.file
    data = bytearray(path.read_bytes())
    at = end - int(built.file) - 700  # inside the tail: the block holding it is named
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    block = built.tail_from - int(built.file) + (at - (built.tail_from - int(built.file))) // BLOCK_BYTES * BLOCK_BYTES
    assert tail_difference(_segments(store), built) == (
        f"{location(str(path)).uri} at byte offset {block}: the {BLOCK_BYTES} bytes there differ from those the "
        f"output was built from")
    data[at] ^= 0xFF
    listed = _segments(store)
    path.write_bytes(bytes(data[:end - int(built.file) - 10]))  # cut short after it was listed
    assert tail_difference(listed, built) == (f"{location(str(path)).uri} ends at byte offset "
                                              f"{end - int(built.file) - 10}, before the output's end")
    path.unlink()  # the log now ends in the file before
    assert "where the output was built from " + built.file in tail_difference(_segments(store), built)


def test_a_malformed_built_to_is_refused():
    good = {"offset": 5000, "file": "00000000000000000000", "file_size": 8192, "tail_from": 904,
            "block_bytes": BLOCK_BYTES, "block_sha256": ["0" * 64] * 16}
    assert BuiltTo.from_dict(good).offset == 5000
    for bad in ({**good, "block_sha256": ["0" * 64] * 3}, {**good, "block_bytes": 512},
                {k: v for k, v in good.items() if k != "offset"}, {**good, "offset": "x"}):
        with pytest.raises(ValueError, match="built_to"):
            BuiltTo.from_dict(bad)
