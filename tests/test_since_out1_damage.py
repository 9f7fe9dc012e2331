"""OUT1 proven before it is continued (io.out_files): every damage to last night's output is refused by name before
anything is written, or gives an OUT2 equal to a full rebuild. OUT1 is clean-small-11 rebuilt at 70 %, the store
the whole golden log; each case damages a faithful copy of OUT1 (shutil.copytree keeps sizes and mtimes)."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import pytest

from jobs.pipeline.io.out_files import FILES_NAME
from tests.conftest import GOLDEN
from tests.hostile import tree_digest
from tests.helpers import rebuild_refused as _refused, run_job
from tests.rebuild_helpers import consume_queue_hashes, grown, index_hashes, report, since_argv as argv

CASE = "clean-small-11"


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[Path, Path]:
    """(OUT1, the grown store), built once for the module."""
    return grown(CASE, tmp_path_factory.mktemp("night"), 0.7)


def _queue_file(out1: Path, before: bool) -> Path:
    """A consume-queue file of OUT1 whose units all lie before (`before`) or reach into the segment --since decodes."""
    built = report(out1)["built_to"]["offset"]
    decoded_from = built - built % (1 << 18)  # clean-small-11's segments are 256 KiB
    for f in sorted(p for p in (out1 / "consumequeue").rglob("0*") if p.is_file()):
        data = f.read_bytes()
        phys = [struct.unpack_from(">q", data, i)[0] for i in range(0, len(data), 20)
                if struct.unpack_from(">i", data, i + 8)[0] > 0]
        if phys and (max(phys) < decoded_from if before else max(phys) >= decoded_from > min(phys)):
            return f
    raise AssertionError("no such file")


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def _last_index(out1: Path) -> Path:
    return max((out1 / "index").iterdir())


def _index_count_lowered(out1: Path) -> None:
    """The last index file's indexCount (header byte 36) lowered by 3: appended entries would overwrite old ones."""
    last = _last_index(out1)
    data = bytearray(last.read_bytes())
    struct.pack_into(">i", data, 36, struct.unpack_from(">i", data, 36)[0] - 3)
    last.write_bytes(bytes(data))


# (name, damage, the words the refusal must hold: the file named)
DAMAGES: list[tuple[str, Callable[[Path], object], Callable[[Path], str]]] = [
    ("file removed", lambda o: _queue_file(o, True).unlink(), lambda o: "removed"),
    ("queue directory removed", lambda o: shutil.rmtree(_queue_file(o, True).parent), lambda o: "removed"),
    ("byte changed before the decoded segment", lambda o: _flip(_queue_file(o, True), 19), lambda o: "written since"),
    ("byte changed in the overlap", lambda o: _flip(_queue_file(o, False), 19), lambda o: "written since"),
    ("size changed", lambda o: _queue_file(o, True).open("ab").write(b"\0" * 20), lambda o: "size"),
    ("index header changed", _index_count_lowered, lambda o: "written since"),
    ("index file removed", lambda o: min((o / "index").iterdir()).unlink(), lambda o: "removed"),
    ("stray file", lambda o: (o / "consumequeue" / "TopicTest" / "0" / "notes.txt").write_text("x"),
     lambda o: "consumequeue/TopicTest/0/notes.txt not written by reput"),
    ("stray directory", lambda o: (o / "index" / "old").mkdir(), lambda o: "index/old/ directory not written"),
    ("stray queue", lambda o: (o / "consumequeue" / "TopicTest" / "99").mkdir(), lambda o: "consumequeue/TopicTest/99/"),
    ("record removed", lambda o: (o / FILES_NAME).unlink(), lambda o: f"no {FILES_NAME}"),
]


@pytest.mark.parametrize("name,damage,words", DAMAGES, ids=[d[0] for d in DAMAGES])
def test_a_damaged_out1_is_refused_by_name(night, name, damage, words, tmp_path, capfd):
    """Exit 2 and one line naming what differs and the way out (a full rebuild), OUT2 not written, OUT1 as damaged."""
    out1, store = night
    bad = tmp_path / "out1"
    shutil.copytree(out1, bad)
    damage(bad)
    before = tree_digest(bad)
    _refused(argv(CASE, store, tmp_path / "out2", bad), capfd, tmp_path / "out2", words(bad), "full rebuild")
    assert tree_digest(bad) == before


def test_a_faithful_copy_of_out1_is_continued(night, tmp_path, capfd):
    """A copy that keeps sizes and mtimes (cp -p, rsync -a) holds the same bytes: continued, OUT2 the golden files;
    OUT2 carries its own record, which a second night proves."""
    out1, store = night
    copy = tmp_path / "copy"
    shutil.copytree(out1, copy)
    out2 = tmp_path / "out2"
    code, _, err = run_job("rebuild", argv(CASE, store, out2, copy), capfd)
    assert code == 0, err
    assert consume_queue_hashes(out2) == consume_queue_hashes(GOLDEN / CASE)
    assert index_hashes(out2) == index_hashes(GOLDEN / CASE)
    assert (out2 / FILES_NAME).is_file()
    code, _, err = run_job("rebuild", argv(CASE, store, tmp_path / "out3", out2), capfd)
    assert code == 0, err


def test_an_in_place_night_leaves_a_record_the_next_night_proves(night, tmp_path, capfd):
    """--in-place stages OUT1's new record of its files with them: after the switch it describes OUT1 exactly (the
    next night continues it), and a file written after the switch is named again."""
    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.io.out_files import current, differences, recorded

    out1, store = night
    copy = tmp_path / "copy"
    shutil.copytree(out1, copy)
    code, _, err = run_job("rebuild", ["--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"),
                                       "--since", str(copy), "--in-place", "--backup-dir", str(tmp_path / "bak")], capfd)
    assert code == 0, err
    assert differences(recorded(Location(str(copy))), current(Location(str(copy)))) == []
    assert consume_queue_hashes(copy) == consume_queue_hashes(GOLDEN / CASE)
    _flip(_last_index(copy), 40)
    _refused(argv(CASE, store, tmp_path / "out3", copy), capfd, tmp_path / "out3", _last_index(copy).name,
             "written since")


def test_the_weekly_verify_of_out_finds_what_since_cannot(night, tmp_path, capfd):
    """A unit of OUT1 changed with its mtime kept (bit rot) before the decoded segment: --since cannot see it (it
    reads only the record and the overlap), verify --files OUT1 reads every byte against the store's log and names
    it; the log past OUT1's end is counted apart, as not built yet."""
    import json
    import os

    from jobs.verify import main as verify_main

    out1, store = night
    copy = tmp_path / "copy"
    shutil.copytree(out1, copy)
    conf = str(GOLDEN / CASE / "broker.conf")
    assert verify_main(["--store", str(store), "--broker-config", conf, "--files", str(copy), "--quiet",
                        "--report", str(tmp_path / "ok.json")]) == 0
    ok = json.loads((tmp_path / "ok.json").read_text())
    assert ok["files"]["built_to"] == report(out1)["built_to"]["offset"] and sum(ok["in_flight"].values()) > 0
    victim = _queue_file(copy, True)
    was = victim.stat()
    _flip(victim, 19)
    os.utime(victim, ns=(was.st_atime_ns, was.st_mtime_ns))
    code, _, err = run_job("rebuild", argv(CASE, store, tmp_path / "out2", copy), capfd)
    assert code == 0, err  # carried on: what only a full verify finds
    assert verify_main(["--store", str(store), "--broker-config", conf, "--files", str(copy), "--quiet",
                        "--report", str(tmp_path / "bad.json")]) == 1
    bad = json.loads((tmp_path / "bad.json").read_text())
    assert any(victim.name in d["path"] and victim.parent.name in d["path"] for d in bad["findings"]), bad["findings"]


def test_the_first_unit_read_again_changed_with_its_mtime_kept_is_refused(night, tmp_path, capfd):
    """Bit rot in the commit-log offset of a queue's first unit in the segment --since decodes again, moved past the
    unit after it (the record of OUT1's files cannot see it: size and mtime kept): OUT1 holds no unit for the scan's
    first record of the queue, and the queue goes on from before OUT1's first unit past that record, where the units
    are compared: refused naming the file and the unit's byte offset, OUT1 as it was. (Moved back before the segment,
    the unit reads as one of the queue's older units, which --since does not read again: verify --files finds it.)"""
    import os

    out1, store = night
    bad = tmp_path / "out1"
    shutil.copytree(out1, bad)
    built = report(out1)["built_to"]["offset"]
    decoded_from = built - built % (1 << 18)
    victim, at = next((f, units[0]) for f in sorted(p for p in (bad / "consumequeue").rglob("0*") if p.is_file())
                      for units in [[i for i in range(0, f.stat().st_size, 20)
                                     if struct.unpack_from(">q", f.read_bytes(), i)[0] >= decoded_from
                                     and struct.unpack_from(">i", f.read_bytes(), i + 8)[0] > 0]]
                      if len(units) >= 2)
    data = bytearray(victim.read_bytes())
    phy = struct.unpack_from(">q", data, at)[0]
    struct.pack_into(">q", data, at, phy + 65536)
    was = victim.stat()
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(was.st_atime_ns, was.st_mtime_ns))
    before = tree_digest(bad)
    _refused(argv(CASE, store, tmp_path / "out2", bad), capfd, tmp_path / "out2",
             f"{victim.parent.name}/{victim.name} at byte offset {at}:", "the unit OUT1 holds differs from the one the "
             "commit log gives", "full rebuild")
    assert tree_digest(bad) == before


def test_files_of_a_recover_out_that_cannot_be_continued_says_why(spark, tmp_path, capfd):
    """verify --files of a recover OUT whose report says it is not continuable (a torn store's: a queue cut before
    units left on disk): one line giving the report's reason and the way to check it, not a Python TypeError."""
    case = "unclean-torn-11"
    out = tmp_path / "out"
    conf = str(GOLDEN / case / "broker.conf")
    code, _, err = run_job("recover", ["--store", str(GOLDEN / case), "--broker-config", conf, "--out", str(out),
                                       "--quiet"], capfd)
    assert code == 0, err
    code, _, err = run_job("verify", ["--store", str(GOLDEN / case), "--broker-config", conf, "--files", str(out)],
                           capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput verify: error:")]
    assert code == 2 and len(lines) == 1 and "TypeError" not in err, err[-2000:]
    assert "says OUT cannot be checked against the log as built to an offset: the recovery cut" in lines[0]
    assert lines[0].endswith(f"(`reput verify --store {out}`)"), lines[0]
