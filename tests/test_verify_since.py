"""verify --since REPORT: after an earlier consistent verify (its report), only what the commit log gained since is
decoded and checked (from the segment holding the earlier end); what lies before counts as checked earlier. Damage in
the new part is found at its byte offset; a report that cannot be built on is one line and exit 2, and so is a report
made on another store holding the same log bytes (a copy, a restored store) unless --since-other-store says so."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from jobs.rebuild import main as rebuild_main
from tests.conftest import GOLDEN
from tests.since_helpers import cut_offset, earlier_store, expire, expired_copy, expired_index, grown_in_place
from tests.helpers import run_job, run_verify

CASE = "clean-medium-11"
CONF = GOLDEN / CASE / "broker.conf"
CQ_UNIT = 20


@pytest.fixture(scope="module")
def last_week(spark, tmp_path_factory) -> tuple[Path, dict]:
    """The case's store as it stood at 60% of its records (its queues and index rebuilt) and its verify's report."""
    root = tmp_path_factory.mktemp("last-week")
    store = earlier_store(CASE, root / "store", cut_offset(CASE, 0.6))
    assert rebuild_main(["--store", str(store), "--broker-config", str(CONF), "--out", str(root / "out"),
                         "--quiet"]) == 0
    for part in ("consumequeue", "index"):
        shutil.copytree(root / "out" / part, store / part)
    code, report = run_verify(store, root)
    assert code == 0 and report["built_to"]["offset"] == cut_offset(CASE, 0.6)
    (root / "report.json").rename(root / "last-week.json")
    return root / "last-week.json", report


def since(store: Path, tmp_path: Path, earlier: Path, *extra: str) -> tuple[int, dict]:
    return run_verify(store, tmp_path, CONF, "--since", str(earlier), *extra)


def this_week(last_week, tmp_path: Path) -> tuple[Path, Path]:
    """(A store of its own, verified as it stood last week, then grown in place into the whole case: the same
    directory and segment files, as a broker's store grows; that verify's report)."""
    store = tmp_path / "store"
    shutil.copytree(last_week[0].parent / "store", store)
    (tmp_path / "then").mkdir()
    code, _ = run_verify(store, tmp_path / "then")
    assert code == 0
    return grown_in_place(CASE, store), tmp_path / "then" / "report.json"


def test_since_decodes_the_new_part_only_and_agrees(last_week, tmp_path):
    """The store a week on --since its verify of last week: consistent, decoded from the segment holding last week's
    end, its own built_to is the log's end (what next week's --since starts from) and it records the store it was made
    on (its resolved path, the directory's and that segment file's inodes)."""
    _, before = last_week
    store, earlier = this_week(last_week, tmp_path)
    code, report = since(store, tmp_path, earlier)
    assert code == 0, report["findings"][:3]
    ident = report["store_identity"]
    end_file = store / "commitlog" / report["built_to"]["file"]
    assert ident["path"] == str(store.resolve()) and ident["inode"] == store.stat().st_ino
    assert ident["log_file"] == end_file.name and ident["log_file_inode"] == end_file.stat().st_ino
    assert report["since"]["other_store"] is None
    s = report["since"]
    end = before["built_to"]["offset"]
    assert s["decoded_from"] < end <= s["decoded_from"] + 262144 and s["checked_from"] == end
    assert s["bytes_decoded"] <= report["commitlog"]["max_physical_offset"] - s["decoded_from"] + 262144
    assert s["earlier"]["consumequeue.units"] > 0 and s["earlier"]["index.files"] > 0
    assert report["built_to"]["offset"] == report["commitlog"]["max_physical_offset"]
    assert report["index_seed"]["checked_by"] == "in memory" and report["index_seed"]["why"] is None


def test_damage_in_the_new_part_is_found(last_week, tmp_path):
    """A unit past last week's end flipped in a queue file, and the keyHash of the index entry the decoded segment
    starts with: each found at its offset; a file wholly before the decoded segment is not read again (the earlier
    verify checked it)."""
    _, before = last_week
    store, earlier = this_week(last_week, tmp_path)
    end = before["built_to"]["offset"]
    files = sorted(store.glob("consumequeue/*/*/*"))
    new = next(p for p in files if struct.unpack_from(">q", p.read_bytes(), p.stat().st_size - CQ_UNIT)[0] > end
               and struct.unpack_from(">q", p.read_bytes(), 0)[0] < end)
    data = bytearray(new.read_bytes())
    at = next(a for a in range(0, len(data), CQ_UNIT) if struct.unpack_from(">q", data, a)[0] > end)
    data[at + 11] ^= 0x01  # the unit's size
    new.write_bytes(bytes(data))
    old = next(p for p in files if 0 < struct.unpack_from(">q", p.read_bytes(), p.stat().st_size - CQ_UNIT)[0] < end // 2)
    raw = bytearray(old.read_bytes())
    raw[11] ^= 0x01
    old.write_bytes(bytes(raw))
    files, kept = expired_index(store, (end - 1) // 262144 * 262144)  # below the decoded segment's start
    seed = sorted((store / "index").iterdir())[files]
    raw = bytearray(seed.read_bytes())
    raw[40 + 64 * 4 + (kept + 1) * 20 + 1] ^= 0x01
    seed.write_bytes(bytes(raw))
    code, report = since(store, tmp_path, earlier)
    assert code == 1
    assert [(d["path"], d["kind"], d["byte_offset"]) for d in report["findings"]
            if d["artifact"] == "consumequeue"] == [(new.relative_to(store).as_posix(), "entry_differs", at)]
    assert [(d["path"], d["position"]) for d in report["findings"] if d["kind"] == "entry_differs"
            and d["artifact"] == "index"] == [(f"index/{seed.name}", kept + 1)]
    assert report["index_seed"] == {"file": f"index/{seed.name}", "checked_by": "cut copy",
                                    "why": "the in-memory check found a difference: the cut copy names it"}


def test_head_expired_since(last_week, tmp_path, capfd):
    """Three segments gone (not past last week's end): consistent, the expired head counted apart. Gone past it (a
    missed month): nothing of the earlier check is left, said on stderr, and a full verify runs."""
    store, earlier = this_week(last_week, tmp_path)
    min_offset = expire(CASE, store, 3)
    code, report = since(store, tmp_path, earlier)
    assert code == 0 and report["expired"]["consumequeue.units"] > 0 and report["since"]["checked_from"]
    assert report["index_seed"]["checked_by"] == "in memory"
    assert report["commitlog"]["min_offset"] == min_offset
    gone = tmp_path / "gone"
    min_offset = expired_copy(CASE, gone, 120)
    capfd.readouterr()
    code, report = since(gone, tmp_path, last_week[0])  # made on another store, but nothing of it is built on
    assert code == 0 and report["since"]["checked_from"] is None and report["commitlog"]["min_offset"] == min_offset
    assert "nothing it checked is left; a full verify" in capfd.readouterr().err


def test_reports_that_cannot_be_built_on_are_refused(last_week, tmp_path, capfd):
    """Another job's report, an inconsistent or partial verify, a damaged or missing report, --only, a store that no
    longer holds what was checked: one line naming the problem, exit 2."""
    earlier, report = last_week
    base = ["--store", str(GOLDEN / CASE), "--broker-config", str(CONF), "--work-dir", str(tmp_path / "w")]

    def refused(path_or_report, *words: str, extra: tuple[str, ...] = (), store: Path | None = None) -> None:
        path = path_or_report
        if isinstance(path_or_report, dict):
            path = tmp_path / "r.json"
            path.write_text(json.dumps(path_or_report))
        argv = base + ["--since", str(path), *extra]
        if store is not None:
            argv[1] = str(store)
        code, _, err = run_job("verify", argv, capfd)
        lines = [line for line in err.splitlines() if line.startswith("reput verify: error:")]
        assert code == 2 and len(lines) == 1, err[-2000:]
        for w in words:
            assert w in lines[0], lines[0]

    refused({**report, "job": "rebuild"}, "not of verify")
    refused({**report, "status": "inconsistent", "findings_total": 3}, "found 3 findings")
    refused({**report, "checked": {**report["checked"], "index": False}}, "a partial verify")
    refused({**report, "report_version": 99}, "newer reput")
    refused({**report, "built_to": None}, "no built_to")
    refused({**report, "settings": {**report["settings"], "max_index_num": 1}}, "maxIndexNum")
    refused(tmp_path / "missing.json", "no such file")
    (tmp_path / "bad.json").write_bytes(b'{"job": "verify",')
    refused(tmp_path / "bad.json", "byte offset", "not JSON")
    refused(earlier, "--only", extra=("--only", "index"))
    changed = tmp_path / "changed"
    shutil.copytree(GOLDEN / CASE, changed)
    end = report["built_to"]["offset"]
    seg = max((p for p in (changed / "commitlog").iterdir() if int(p.name) < end), key=lambda p: int(p.name))
    raw = bytearray(seg.read_bytes())
    raw[end - int(seg.name) - 10] ^= 0xFF
    seg.write_bytes(bytes(raw))
    refused(earlier, "no longer holds", seg.name, store=changed)


def refusal(argv: list[str], capfd) -> str:
    """The one error line of a verify refused before it starts (exit 2)."""
    code, _, err = run_job("verify", argv, capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput verify: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    return lines[0]


def test_a_report_of_another_store_is_refused_unless_said_aloud(last_week, tmp_path, capfd):
    """The golden store holds last week's log bytes (the report was made on a cut copy of it, elsewhere): its old files
    were never read by that verify, so --since refuses, naming both stores and --since-other-store; with the flag it
    builds on it, says so on stderr and in the report (since.other_store), and checks the new part as ever."""
    earlier, before = last_week
    argv = ["--store", str(GOLDEN / CASE), "--broker-config", str(CONF), "--work-dir", str(tmp_path / "w"),
            "--since", str(earlier)]
    line = refusal(argv, capfd)
    made_on = str((earlier.parent / "store").resolve())
    assert "made on another store" in line and made_on in line and str((GOLDEN / CASE).resolve()) in line, line
    assert "--since-other-store" in line and "full verify" in line, line
    assert "--since-other-store goes with --since" in refusal(argv[:-2] + ["--since-other-store"], capfd)
    code, out, err = run_job("verify", argv + ["--since-other-store", "--json"], capfd)
    assert code == 0, err[-2000:]
    report = json.loads(out)
    other = report["since"]["other_store"]
    assert other["made_on"]["path"] == made_on and made_on in other["differs"]
    assert report["since"]["checked_from"] == before["built_to"]["offset"] and report["since"]["earlier"]
    warned = [line for line in err.splitlines() if line.startswith("reput verify: warning: --since-other-store:")]
    assert len(warned) == 1 and str(earlier) in warned[0] and "without being read" in warned[0], err[-2000:]


def test_a_restored_store_is_another_store(last_week, tmp_path, capfd):
    """At the same path: the commit-log file last week's verify ended in put back from a copy, then the whole directory
    replaced by a copy (a restore from a backup): each refused, naming what is another file or directory. A report
    of a reput before store identities (no store_identity) is built on where its path is this store's."""
    store, earlier = this_week(last_week, tmp_path)
    then = json.loads(earlier.read_text())
    argv = ["--store", str(store), "--broker-config", str(CONF), "--work-dir", str(tmp_path / "w"), "--since",
            str(earlier)]
    seg = store / "commitlog" / then["built_to"]["file"]
    shutil.copy2(seg, tmp_path / "seg")
    os.replace(tmp_path / "seg", seg)
    line = refusal(argv, capfd)
    assert f"its commit-log file {seg.name} is another file than it checked" in line and "--since-other-store" in line
    os.rename(store, tmp_path / "before-restore")
    shutil.copytree(tmp_path / "before-restore", store)
    line = refusal(argv, capfd)
    assert f"{store} is another directory than it was made on" in line and "--since-other-store" in line, line
    older = tmp_path / "older.json"
    older.write_text(json.dumps({k: v for k, v in then.items() if k != "store_identity"}))
    code, report = since(store, tmp_path, older)
    assert code == 0 and report["since"]["other_store"] is None and report["since"]["checked_from"]
