"""Hostile input: on every store of the corpus (tests/hostile.py) each job ends with a precise message or
a correct result, leaves the input byte-identical and writes nothing outside its output directory.
Damage the decoder alone finds is checked on the decoder in tests/test_decode_damage.py; here every
job runs on one case per decoder end reason."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from jobs.pipeline.io.out_files import FILES_NAME
from storage_format.java_hash import java_hash_bytes
from tests.hostile import (ACCEPTED, DLEDGER_BUILDERS, DLEDGER_CASE, DLEDGER_JOBS, ERROR, IGNORED, JOB_BUILDERS, JOBS,
                           REPORTED, SOURCE_CASE, Damage, bad_magic, copy_store, cq_entry, dledger_index_gap,
                           dledger_index_gap_at_file_start, dledger_term_down, dledger_term_down_at_file_start,
                           missing_segment, tree_digest, zeroed_header_last_segment)
from tests.helpers import run_job

REPORT = "reput-report.json"
# ~80 Spark jobs; the decode-level cases alone: tests/test_decode_damage.py. CI runs this file once, in
# `make test-boundscheck` (the same assertions with numba's bounds checks on), so `make test` leaves it to that step
# (marker full; `make test-full` runs it too).
pytestmark = [pytest.mark.slow, pytest.mark.full]


def job_argv(job: str, d: Damage, out: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """Arguments of one job on a damaged store; verify's and recover's work files go beside OUT (they
    must be gone afterwards)."""
    argv = ["--store", str(d.store), "--broker-config", str(d.broker_config), *extra]
    return argv + {"rebuild": ["--out", str(out)], "inspect": ["--json"],
                   "verify": ["--json", "--work-dir", str(out.parent)],
                   "recover": ["--dry-run", "--json", "--work", str(out.parent)]}[job]


def out_digest(out: Path) -> dict[str, str]:
    """File digests of a rebuilt OUT without the run report (it holds times and paths) and the record of its files
    (io.out_files: it lists the files compared here)."""
    return {k: v for k, v in tree_digest(out).items() if k not in (REPORT, FILES_NAME)}


def rebuilt_clean(golden: Path, tmp_path_factory, case: str) -> Path:
    """OUT of a rebuild of an undamaged copy of a golden case."""
    from jobs.rebuild import main as rebuild_main

    root = tmp_path_factory.mktemp("clean")
    store = copy_store(golden / case, root / "store")
    out = root / "out"
    assert rebuild_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
                         "--json"]) == 0
    return out


@pytest.fixture(scope="module")
def clean_rebuild(golden, spark, tmp_path_factory) -> Path:
    """OUT of a rebuild of an undamaged copy of the source case."""
    return rebuilt_clean(golden, tmp_path_factory, SOURCE_CASE)


def run_case(d: Damage, job: str, tmp_path: Path, capfd, monkeypatch) -> tuple[int, str, str, Path]:
    """Run one job on a damaged store from the case directory: (status, stdout, stderr, OUT). Never a traceback;
    nothing in the case directory changes but OUT (the store's bytes included; verify's and recover's work
    directories must be gone)."""
    before = tree_digest(tmp_path)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_job(job, job_argv(job, d, out), capfd)
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert {k: v for k, v in tree_digest(tmp_path).items() if not k.startswith("out/")} == before
    return code, stdout, stderr, out


def assert_refused(job: str, code: int, stderr: str, where: str, out: Path) -> None:
    """Exit 2 with one `reput <job>: error:` line naming `where`; no OUT."""
    errors = [line for line in stderr.splitlines() if line.startswith(f"reput {job}: error: ")]
    assert code == 2 and len(errors) == 1 and where in errors[0], (where, errors, stderr[-1500:])
    assert not out.exists()


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize("builder", JOB_BUILDERS, ids=lambda b: b.__name__)
def test_hostile_store(builder, job, golden, spark, clean_rebuild, tmp_path, capfd, monkeypatch, request):
    """Exit 2 with one line naming the file and byte offset, or the damage reported by file and byte
    offset, or accepted as the broker accepts it, or ignored when the job does not read that file; never
    a traceback; the store's bytes unchanged; nothing created outside OUT (the job's cwd is the case
    directory, and verify's/recover's work directories must be gone)."""
    d = builder(golden, tmp_path / "store")
    code, stdout, stderr, out = run_case(d, job, tmp_path, capfd, monkeypatch)
    expect = d.expect[job]
    path, offset = d.location(job)
    where = d.named(job)
    warnings = [line for line in stderr.splitlines() if line.startswith(f"reput {job}: warning: ") and where in line]
    if job == "rebuild":  # a warning line names what rebuild goes on with; recover's are in its plan
        assert len(warnings) == (1 if job in d.warns else 0), (where, stderr[-2000:])
    if expect == ERROR:
        return assert_refused(job, code, stderr, where, out)
    assert f"reput {job}: error" not in stderr
    negative = d.victim.get("moved_to", 0) < 0  # a record with a negative queueId: counted in every report
    if job == "verify":
        assert code == (1 if expect == REPORTED else 0), stderr[-2000:]
        if expect == REPORTED:
            report = json.loads(stdout)
            assert verify_names(report, d.store, path, offset, where), where
            assert report["finding_counts"].get("commitlog.negative_queue_id", 0) == (1 if negative else 0)
        return
    assert code == 0, stderr[-2000:]
    if job == "inspect":
        problems = json.loads(stdout)["problems"]
        if expect == REPORTED:
            assert any(where in p for p in problems), (where, problems)
            assert sum("which no broker assigns" in p for p in problems) == (1 if negative else 0), problems
        else:
            assert problems == []
        return
    if job == "recover":
        plan = json.loads(stdout)
        if expect == REPORTED:
            assert where in stdout, where
            if job in d.warns:  # a warning in the plan (the run report), once
                assert sum(where in w for w in plan["warnings"]) == 1, (where, plan["warnings"])
        else:
            assert plan["changes"] is False
        return
    report = json.loads((out / REPORT).read_text())
    assert (report["negative_queue_ids"] or {}).get("records", 0) == (1 if negative else 0), report
    if expect == IGNORED:
        assert out_digest(out) == out_digest(clean_rebuild)
    elif "moved_to" in d.victim:
        check_moved_rebuild(d, out, clean_rebuild)
    elif "step" in d.victim:
        check_stepped_rebuild(d, out, clean_rebuild)
    else:
        assert expect == ACCEPTED
        check_accepted_rebuild(d, out, clean_rebuild)


def verify_names(report: dict, store: Path, path: Path, offset: int | None, where: str) -> bool:
    """verify's JSON report names the file and byte offset: in a message, or as a finding on that file at
    that byte offset (or, for a file of the wrong size, with that size found); a name (offset None): a finding
    on that path."""
    if where in json.dumps(report, ensure_ascii=False):
        return True
    rel = path.relative_to(store).as_posix()
    return any(f.get("path") == rel and (offset is None or offset in (f.get("byte_offset"), f.get("found")))
               for f in report["findings"])


def check_accepted_rebuild(d: Damage, out: Path, clean: Path) -> None:
    """The damaged record is dispatched as the broker would (tagsCode of what its properties parse to);
    every other consume-queue entry is unchanged."""
    v = d.victim
    cq_size = 2000
    phy, size, tags = cq_entry(out, v["topic"], v["queue_id"], v["queue_offset"], cq_size)
    assert (phy, size) == (v["phy"], v["size"])
    assert tags == (java_hash_bytes(v["tags"]) if v["tags"] is not None else 0)
    assert tags != cq_entry(clean, v["topic"], v["queue_id"], v["queue_offset"], cq_size)[2]
    start = v["queue_offset"] * 20 // cq_size * cq_size
    victim_file = f"consumequeue/{v['topic']}/{v['queue_id']}/{start:020d}"
    got, want = out_digest(out), out_digest(clean)
    if not v["index_unchanged"]:  # the record's index keys are gone: later index files shift
        got, want = ({k: h for k, h in t.items() if k.startswith("consumequeue/")} for t in (got, want))
    assert got.keys() == want.keys()
    assert {k for k in got if got[k] != want[k]} == {victim_file}
    at = v["queue_offset"] * 20 - start
    a, b = (out / victim_file).read_bytes(), (clean / victim_file).read_bytes()
    assert a[:at] == b[:at] and a[at + 20:] == b[at + 20:]
    assert struct.unpack(">q", a[at + 12:at + 20])[0] == tags


def queue_units(out: Path, topic: str, queue_id: int) -> list[bytes]:
    """A queue's 20-byte units in offset order, its files read back to back (no file may be missing)."""
    files = sorted((out / "consumequeue" / topic / str(queue_id)).iterdir())
    assert [int(f.name) for f in files] == [i * 2000 for i in range(len(files))]
    data = b"".join(f.read_bytes() for f in files)
    return [data[i:i + 20] for i in range(0, len(data), 20)]


def check_stepped_rebuild(d: Damage, out: Path, clean: Path) -> None:
    """A record whose queueOffset is not its queue's next, written as ConsumeQueue.putMessagePositionInfo does
    (written here from its rule, not reput's): above the next offset it lands AT the next offset (the queue is
    the clean one), below it is skipped and every later entry of the queue sits one offset earlier; nothing
    else changes (the index does not hold queue offsets)."""
    v = d.victim
    want = queue_units(clean, v["topic"], v["queue_id"])
    if v["step"] < 0:
        assert struct.unpack(">qi", want[v["queue_offset"]][:12]) == (v["phy"], v["size"])
        want = want[:v["queue_offset"]] + want[v["queue_offset"] + 1:] + [bytes(20)]
    got = queue_units(out, v["topic"], v["queue_id"])
    while len(want) > len(got) and want[-1] == bytes(20):
        want.pop()  # a file left with zeros only is not written
    assert got == want
    qdir = f"consumequeue/{v['topic']}/{v['queue_id']}/"
    others = lambda t: {k: h for k, h in t.items() if not k.startswith(qdir)}  # noqa: E731
    assert others(out_digest(out)) == others(out_digest(clean))


def check_moved_rebuild(d: Damage, out: Path, clean: Path) -> None:
    """A record moved to queue `moved_to` (queueOffset 0) is dispatched as the broker does: its entry leaves its
    old queue (the last one there: nothing after it moves) and is the first of consume queue <topic>/<moved_to>/
    (a directory named by the int as Java prints it); the index does not depend on queue ids and is unchanged."""
    v, cq_size = d.victim, 2000
    entry = cq_entry(clean, v["topic"], v["queue_id"], v["queue_offset"], cq_size)
    assert entry[:2] == (v["phy"], v["size"])
    start = v["queue_offset"] * 20 // cq_size * cq_size
    old = f"consumequeue/{v['topic']}/{v['queue_id']}/{start:020d}"
    new = f"consumequeue/{v['topic']}/{v['moved_to']}/{0:020d}"
    got, want = out_digest(out), out_digest(clean)
    assert {k for k in got.keys() ^ want.keys() if not k.endswith("/")} == ({new} if start < v["queue_offset"] * 20
                                                                            else {new, old})
    assert {k for k in got.keys() & want.keys() if got[k] != want[k]} == ({old} if start < v["queue_offset"] * 20
                                                                          else set())
    at = v["queue_offset"] * 20 - start
    if old in got:
        a, b = (out / old).read_bytes(), (clean / old).read_bytes()
        assert a[:at] == b[:at] and a[at:] == bytes(len(a) - at)
    data = (out / new).read_bytes()
    assert len(data) == cq_size and struct.unpack(">qiq", data[:20]) == entry and data[20:] == bytes(cq_size - 20)


@pytest.mark.parametrize("builder", [bad_magic, missing_segment, zeroed_header_last_segment],
                         ids=lambda b: b.__name__)
def test_chain_damage_found_with_mid_segment_splits(builder, golden, spark, tmp_path, capfd):
    """With 64 KiB splits (each finds its first record by the physicalOffset rule) the damage is found
    at the same file and byte offset, whichever split holds it."""
    d = builder(golden, tmp_path / "store")
    code, _, stderr = run_job("rebuild", job_argv("rebuild", d, tmp_path / "out", ("--split-size", "65536")), capfd)
    errors = [line for line in stderr.splitlines() if line.startswith("reput rebuild: error: ")]
    assert code == 2 and len(errors) == 1
    assert f"{d.file} at byte offset {d.offset}" in errors[0]
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def clean_dledger_rebuild(golden, spark, tmp_path_factory) -> Path:
    """OUT of a rebuild of an undamaged copy of the DLedger source case."""
    return rebuilt_clean(golden, tmp_path_factory, DLEDGER_CASE)


@pytest.mark.parametrize("job", DLEDGER_JOBS)
@pytest.mark.parametrize("builder", DLEDGER_BUILDERS, ids=lambda b: b.__name__)
def test_hostile_dledger_store(builder, job, golden, spark, clean_dledger_rebuild, tmp_path, capfd, monkeypatch):
    """Damaged DLedger entries, blanks, data files and DLedger index: a one-line error naming file and byte
    offset where nothing can run, the damage reported by file and byte offset (verify: a finding), or the
    damage ignored by a job that does not read it; never a traceback, the store unchanged."""
    d = builder(golden, tmp_path / "store")
    code, stdout, stderr, out = run_case(d, job, tmp_path, capfd, monkeypatch)
    expect, where = d.expect[job], d.named(job)
    if expect == ERROR:
        return assert_refused(job, code, stderr, where, out)
    assert f"reput {job}: error" not in stderr
    if job == "verify":
        assert code == (1 if expect == REPORTED else 0), stderr[-2000:]
        if expect == REPORTED:
            assert verify_names(json.loads(stdout), d.store, *d.location(job), where), where
        return
    assert code == 0, stderr[-2000:]
    if job == "inspect":
        problems = json.loads(stdout)["problems"]
        assert any(where in p for p in problems) if expect == REPORTED else problems == [], (where, problems)
        return
    warnings = [line for line in stderr.splitlines() if line.startswith(f"reput {job}: warning: ") and where in line]
    assert len(warnings) == (1 if job in d.warns else 0), (where, stderr[-2000:])
    if "step" in d.victim:
        return check_stepped_rebuild(d, out, clean_dledger_rebuild)
    assert expect == IGNORED and out_digest(out) == out_digest(clean_dledger_rebuild)


@pytest.mark.parametrize("builder", [dledger_index_gap, dledger_index_gap_at_file_start, dledger_term_down,
                                     dledger_term_down_at_file_start], ids=lambda b: b.__name__)
@pytest.mark.parametrize("kernel", ["1", "0"])
def test_dledger_gap_found_with_mid_file_splits(builder, kernel, golden, spark, tmp_path, capfd, monkeypatch):
    """With 64 KiB splits (each finds its first entry by the pos rule) an entry-index gap, or a term that goes down,
    is found at the same file and byte offset, inside one split's walk or where two splits' walks meet, kernel or
    reference."""
    monkeypatch.setenv("REPUT_DECODE_KERNEL", kernel)
    d = builder(golden, tmp_path / "store")
    code, _, stderr = run_job("rebuild", job_argv("rebuild", d, tmp_path / "out", ("--split-size", "65536")), capfd)
    errors = [line for line in stderr.splitlines() if line.startswith("reput rebuild: error: ")]
    assert code == 2 and len(errors) == 1
    assert f"{d.file} at byte offset {d.offset}" in errors[0], errors
    assert ("a gap" if "gap" in builder.__name__ else "below the previous entry's term") in errors[0], errors


def _dledger_copy(golden: Path, case: str, dst: Path) -> Path:
    """A writable copy of a golden DLedger case with its DLedger index at its real length."""
    from tests.conftest import restored_copy
    return restored_copy(case, dst)


def test_verify_of_a_damaged_upgraded_store_reports_findings(golden, spark, tmp_path, capfd, monkeypatch):
    """The upgraded (mixed) layout with the second entry's size field damaged: the log ends there, and verify
    reports it (and the index units and files past it) as findings, exit 1, a finding whose detail has no `found`
    (a DLedger index unit past the last entry) among them."""
    store = _dledger_copy(golden, "dledger-upgrade-11", tmp_path / "store")
    data = sorted((store / "dledger-n0" / "data").iterdir())[0]
    second = struct.unpack_from(">i", data.read_bytes(), 4)[0]
    with open(data, "r+b") as f:
        f.seek(second + 4)
        f.write(struct.pack(">i", 12345))
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf")],
                                   capfd)
    assert code == 1 and "Traceback" not in stderr and "error:" not in stderr, stderr[-2000:]
    assert f"{data} at byte offset {second}" in stdout
    assert "dledger_index.extra_entry" in stdout and "INCONSISTENT" in stdout


def test_verify_of_a_truncated_last_data_file_is_one_line(golden, spark, tmp_path, capfd, monkeypatch):
    """The unclean DLedger case with its last data file cut in half: DLedger refuses to load a data file of the
    wrong size; verify says so in one line naming the file and byte offset, exit 2 (issue 35 item 3)."""
    store = _dledger_copy(golden, "dledger-unclean-11", tmp_path / "store")
    last = sorted((store / "dledger-n0" / "data").iterdir())[-1]
    os.truncate(last, last.stat().st_size // 2)
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf")], capfd)
    errors = [line for line in stderr.splitlines() if line.startswith("reput verify: error: ")]
    assert code == 2 and len(errors) == 1 and f"{last} at byte offset {last.stat().st_size}" in errors[0], stderr
    assert "Traceback" not in stderr


def test_a_split_size_given_without_its_unit_is_refused_before_any_split(golden, spark, tmp_path, capfd):
    """`--split-size 8` (bytes; 8m was meant) over clean-small-11's 2.4 MB of commit-log files would be 294,912
    splits, each a task's state and work files (on the 4 M bench store, minutes and gigabytes before any output):
    one line naming the flag and the count, exit 2, nothing written."""
    out = tmp_path / "out"
    store = golden / "clean-small-11"
    code, _, stderr = run_job("rebuild", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                          "--out", str(out), "--split-size", "8"], capfd)
    errors = [line for line in stderr.splitlines() if line.startswith("reput rebuild: error: ")]
    assert code == 2 and len(errors) == 1, stderr[-2000:]
    assert "--split-size 8: 294,912 splits of 8 bytes" in errors[0] and "e.g. 128m" in errors[0], errors[0]
    assert not out.exists() and not list(tmp_path.glob(".out*"))
