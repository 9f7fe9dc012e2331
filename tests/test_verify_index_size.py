"""verify on index files of the wrong size (a 0-byte or cut file: wrong_size and, unpaired, extra_file findings, exit
1, never a bare exception) and verify --files OUT on an index file OUT's build never wrote: reported as in a store,
since nothing writes OUT; only where the log goes on past OUT's end is OUT's last file in flight."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tests.helpers import run_job
from tests.rebuild_helpers import grown, rebuild_store

CASE = "clean-small-11"
SIZE = 5416  # the small profile's index file: 40 + 4 x 64 slots + 20 x 256 entries
EXTRA = "20300101000000000"  # sorts after every index file of the case: the broker would load it as its last
SHORT = (f"wrong_size: index file is 0 bytes, expected {SIZE} (maxHashSlotNum, maxIndexNum); its 40-byte header is "
         f"cut off")
EXTRA_LINES = {  # the extra file: 0 bytes, or all zeros at the full size -> its findings, their console lines
    "empty": ({"index.extra_file": 1, "index.wrong_size": 1},
              [f"  index/{EXTRA} (byte 0): {SHORT}",
               f"  index/{EXTRA}: extra_file: the commit log implies no such index file"]),
    "zeros": ({"index.extra_file": 1, "index.out_of_order": 1},
              [f"  index/{EXTRA}: extra_file: the commit log implies no such index file (0 entries, phyOffsets 0..0)",
               f"  index/{EXTRA}: out_of_order: begins at phyOffset 0, before the end 2234056 of "
               f"index/20270101050824875 which sorts before it"]),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> tuple[Path, Path]:
    """(a rebuild of the whole case: OUT, the store it was built from), built once for the module."""
    root = tmp_path_factory.mktemp("out")
    store = root / "store"
    shutil.copytree(GOLDEN / CASE, store)
    assert rebuild_store(CASE, store, root / "out") == 0
    return root / "out", store


def _verify(store: Path, tmp_path: Path, capfd, *extra: str) -> tuple[int, list[str], dict]:
    """verify of `store` (with `extra`, e.g. --files OUT): exit status, console lines, the JSON report."""
    report = tmp_path / "report.json"
    argv = ["--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--quiet", "--report",
            str(report), "--work-dir", str(tmp_path / "work"), *extra]
    code, stdout, stderr = run_job("verify", argv, capfd)
    assert "reput verify: error" not in stderr, stderr[-2000:]
    return code, stdout.splitlines(), json.loads(report.read_text())


def _add_extra(index_dir: Path, kind: str) -> None:
    path = index_dir / EXTRA
    path.touch()
    if kind == "zeros":
        os.truncate(path, SIZE)


def _last(index_dir: Path) -> Path:
    return max(index_dir.iterdir())


def test_an_empty_index_file_sorting_first_is_a_finding(spark, tmp_path, capfd):
    """A 0-byte index file (shorter than its 40-byte header): wrong_size and extra_file, exit 1 (the size check
    index_gap read the header of every file with, and failed: a ValueError, exit 2)."""
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / CASE, store)
    (store / "index" / "20000101000000000").touch()
    code, lines, report = _verify(store, tmp_path, capfd)
    assert code == 1 and report["finding_counts"] == {"index.extra_file": 1, "index.wrong_size": 1}
    assert f"  index/20000101000000000 (byte 0): {SHORT}" in lines
    assert "  index/20000101000000000: extra_file: the commit log implies no such index file" in lines


def test_the_last_index_file_cut_to_30_bytes_is_a_finding(spark, tmp_path, capfd):
    """The last index file cut inside its header: still paired with the last file expected, wrong_size (naming the
    byte it ends at) beside what a broker reads there (zeros past the cut), exit 1."""
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / CASE, store)
    last = _last(store / "index")
    os.truncate(last, 30)
    code, lines, report = _verify(store, tmp_path, capfd)
    assert code == 1 and {d["path"] for d in report["findings"]} == {f"index/{last.name}"}
    assert "index.extra_file" not in report["finding_counts"] and report["finding_counts"]["index.wrong_size"] == 1
    assert (f"  index/{last.name} (byte 30): wrong_size: index file is 30 bytes, expected {SIZE} (maxHashSlotNum, "
            f"maxIndexNum); its 40-byte header is cut off") in lines


@pytest.mark.parametrize("where", ["store", "out"])
@pytest.mark.parametrize("kind", sorted(EXTRA_LINES))
def test_an_extra_last_index_file_is_reported_in_out_as_in_a_store(spark, out, kind, where, tmp_path, capfd):
    """An index file after the last one, 0 bytes or all zeros: the broker would load it as its last index file and
    put the next keys into it. No broker writes OUT, and OUT's log ends where OUT was built to: the same findings
    under --files OUT as in a store, none of them in flight (they were counted apart as OUT's last file)."""
    built, store = out
    if where == "store":
        target = tmp_path / "store"
        shutil.copytree(GOLDEN / CASE, target)
        extra: tuple[str, ...] = ()
    else:
        target = tmp_path / "files"
        shutil.copytree(built, target)
        extra = ("--files", str(target))
    _add_extra(target / "index", kind)
    code, lines, report = _verify(target if where == "store" else store, tmp_path, capfd, *extra)
    counts, shown = EXTRA_LINES[kind]
    assert code == 1 and report["finding_counts"] == counts and report["in_flight"] == {}
    assert [line for line in lines if line.startswith(f"  index/{EXTRA}")] == shown
    assert "INCONSISTENT: 2 findings" in lines


def test_a_changed_entry_in_outs_last_index_file_is_a_finding(spark, out, tmp_path, capfd):
    """OUT's log ends where OUT was built to: a changed entry in its last index file is a finding, not in flight."""
    built, store = out
    files = tmp_path / "files"
    shutil.copytree(built, files)
    last = _last(files / "index")
    data = bytearray(last.read_bytes())
    at = 40 + 64 * 4 + 1 * 20 + 4  # entry 1's phyOffset
    struct.pack_into(">q", data, at, struct.unpack_from(">q", data, at)[0] + 1)
    last.write_bytes(bytes(data))
    code, _, report = _verify(store, tmp_path, capfd, "--files", str(files))
    assert code == 1 and report["in_flight"] == {}
    assert {d["path"] for d in report["findings"]} == {f"index/{last.name}"}
    assert report["finding_counts"]["index.entry_differs"] == 1


@pytest.mark.parametrize("kind", sorted(EXTRA_LINES))
def test_an_extra_index_file_in_out_is_a_finding_while_the_log_goes_on(spark, kind, tmp_path, capfd):
    """OUT built at 70 % of the log, the store holding all of it: the log past OUT's end stays in flight, but an index
    file added after OUT's last is no file a later key would go to: a finding."""
    built, store = grown(CASE, tmp_path / "night", 0.7)
    code, _, report = _verify(store, tmp_path, capfd, "--files", str(built))
    assert code == 0 and sum(report["in_flight"].values()) > 0
    _add_extra(built / "index", kind)
    code, lines, report = _verify(store, tmp_path, capfd, "--files", str(built))
    assert code == 1 and sum(report["in_flight"].values()) > 0
    assert report["finding_counts"] == EXTRA_LINES[kind][0]
    assert {d["path"] for d in report["findings"]} == {f"index/{EXTRA}"}
