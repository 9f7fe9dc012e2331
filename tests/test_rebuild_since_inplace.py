"""rebuild --since OUT1 --in-place: OUT1 itself brought up to the grown store, equal to the golden files, through
recover's in-place switch: only the changed files staged, a backup, a journal; killed mid-switch, `recover --resume`
finishes it and `recover --rollback` restores OUT1 byte for byte; a run while the journal is there is refused. OUT1's
locks come before anything of it is read; only the index files the run listed are deleted; a failure or a signal
once the journal is written names --resume and --rollback in its one line."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.pipeline.io.run_lock import IN_PLACE_LOCK, beside
from jobs.pipeline.recover import inplace as recover_inplace
from jobs.pipeline.recover.journal import JOURNAL, STAGING
from tests.conftest import GOLDEN, REPO
from tests.hostile import tree_digest
from tests.rebuild_helpers import (consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes, grown,
                                   index_hashes, report)
from tests.helpers import ended, kill_group, run_job, start_at_hook, wait_at_hook

CASE = "clean-small-11"


def argv(store, out1, backup) -> list[str]:
    return ["--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--since", str(out1),
            "--in-place", "--backup-dir", str(backup)]


def in_place(store, out1, backup, **env) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.rebuild", *argv(store, out1, backup), "--engine", "local", "--quiet", "--json"]
    return subprocess.run(cmd, cwd=REPO, env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)


def error_line(err: str) -> str:
    """The one `reput rebuild: error:` line of a failed run."""
    lines = [line for line in err.splitlines() if line.startswith("reput rebuild: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


def way_out(out1: Path, backup: Path) -> tuple[str, str]:
    """The two commands a line that leaves a switch part-way names."""
    return (f"`reput recover --store {out1.resolve()} --resume`",
            f"`reput recover --store {out1.resolve()} --rollback --backup-dir {backup}`")


def no_leftovers(out1: Path) -> None:
    """Neither OUT1's staging area, work files, journal nor either lock file is left."""
    assert not [p.name for p in out1.iterdir() if p.name.startswith(".")], sorted(os.listdir(out1))
    assert not beside(out1).exists()


def recover(out1, *way: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(out1), *way], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_in_place_equals_the_golden_store_and_rolls_back(spark, tmp_path):
    """In place: OUT1's consume queues sha256-equal the golden files, its index the golden index, its report says
    where it is built to; the backup holds what changed; --rollback gives OUT1 back byte for byte."""
    out1, store = grown(CASE, tmp_path, 0.5)
    before = tree_digest(out1)
    done = in_place(store, out1, tmp_path / "backup")
    assert done.returncode == 0, done.stderr
    assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
    assert index_hashes(out1) == golden_index_hashes(CASE)
    r = report(out1)
    assert r["in_place"]["backup_dir"] == str(tmp_path / "backup")
    assert r["since"]["built_to_before"] < r["built_to"]["offset"]
    assert json.loads(done.stdout)["in_place"]["operations"] > 0
    assert not [p for p in os.listdir(out1) if p.startswith(".reput")]
    recover(out1, "--rollback", "--backup-dir", str(tmp_path / "backup"))
    assert tree_digest(out1) == before


def test_killed_mid_switch_resumes_and_a_second_run_is_refused(spark, tmp_path, capfd):
    """SIGKILL after the second file operation: the journal is there, a new --in-place run refuses naming recover's
    --resume and --rollback; --resume finishes the switch (golden files)."""
    out1, store = grown(CASE, tmp_path, 0.5)
    killed = in_place(store, out1, tmp_path / "backup", REPUT_CRASH_AT="op-2")
    assert killed.returncode == -signal.SIGKILL
    code, _, err = run_job("rebuild", ["--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"),
                                       "--since", str(out1), "--in-place", "--backup-dir", str(tmp_path / "b2")], capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput rebuild: error:")]
    assert code == 2 and len(lines) == 1 and "--resume" in lines[0] and "--rollback" in lines[0], err[-1500:]
    recover(out1, "--resume")
    assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
    assert index_hashes(out1) == golden_index_hashes(CASE)


def _fill_then_quiet(keys: list[int], max_index_num: int, quiet: int) -> int | None:
    """The first record that fills an index file (maxIndexNum - 1 keys: the count starts at 1) and is followed by
    `quiet` records without keys; None when the store has none."""
    total = 0
    for r, n in enumerate(keys):
        total += n
        if total and total % (max_index_num - 1) == 0 and n and not any(keys[r + 1:r + 1 + quiet]) \
                and r + quiet < len(keys):
            return r
    return None


def test_a_quiet_night_renames_the_trailing_empty_index_file_in_place(spark, tmp_path):
    """OUT1 ends in an empty index file (a file filled, then a record without keys rolled a new one); tonight's
    records bring no key, so that file is named anew by the last record's store time, as a full rebuild names it:
    --in-place switches it in under the new name and the old name is gone (the backup keeps it); OUT1 then equals
    a full rebuild of tonight's store, file for file."""
    import dataclasses

    from jobs.rebuild import main as rebuild_main
    from storegen.synth import StoreSpec, write_bench_store
    from tests.golden_walk import records_in

    spec = StoreSpec(messages=3000, segment_size=1 << 20, consume_queue_file_size=6000, max_hash_slot_num=16,
                     max_index_num=40, key_mix=(0.6, 0.4), uniq_share=0.0)
    write_bench_store(tmp_path / "all", spec, progress=False)
    keys = [len([k for k in r.properties.get("KEYS", "").split(" ") if k]) for r in records_in(tmp_path / "all")]
    fill = _fill_then_quiet(keys, spec.max_index_num, 3)
    assert fill is not None, "the seed gives no filled index file followed by 3 records without keys"
    nights = {"s1": fill + 2, "s2": fill + 4}  # last night: the roll's empty file; tonight: 2 more, no key
    for name, n in nights.items():
        write_bench_store(tmp_path / name, dataclasses.replace(spec, messages=n), progress=False)

    def run(store: str, out: str, *extra: str) -> int:
        return rebuild_main(["--store", str(tmp_path / store), "--broker-config", str(tmp_path / store / "broker.conf"),
                             "--out", str(tmp_path / out), "--json", *extra])
    assert run("s1", "out1") == 0 and run("s2", "full") == 0
    before = sorted(p.name for p in (tmp_path / "out1/index").iterdir())
    after = sorted(p.name for p in (tmp_path / "full/index").iterdir())
    assert len(before) == len(after) > 1 and before[:-1] == after[:-1] and before[-1] != after[-1], (before, after)
    assert rebuild_main(["--store", str(tmp_path / "s2"), "--broker-config", str(tmp_path / "s2/broker.conf"),
                         "--since", str(tmp_path / "out1"), "--in-place", "--backup-dir", str(tmp_path / "backup"),
                         "--json"]) == 0
    got, full = tree_digest(tmp_path / "out1"), tree_digest(tmp_path / "full")
    got.pop("reput-report.json"), full.pop("reput-report.json")
    assert got == full
    assert any(p.name == before[-1] for p in (tmp_path / "backup").rglob("*")), "the old name kept in the backup"


def _hold(lock: Path, job: str) -> subprocess.Popen:
    """Another process holding `lock` as a reput run does (a rebuild publishing OUT1, a recover --resume of it) until
    its stdin closes, then letting it go."""
    code = ("import sys; from pathlib import Path; from jobs.pipeline.io.run_lock import RunLock; "
            "lock = RunLock(Path(sys.argv[1]), sys.argv[2], 'OUT1'); lock.acquire(); print('held', flush=True); "
            "sys.stdin.read(); lock.release()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock), job], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_out1s_locks_come_before_anything_of_it_is_read(spark, tmp_path, capfd):
    """Another run holds one of OUT1's locks (a rebuild publishing OUT1; a recover --resume of it) while OUT1 is
    mid-change: its report half written, a journal and the staging area --resume renames from. --in-place refuses
    naming that run (exit 2, one line) before it reads OUT1's report or judges its journal, and leaves all of it."""
    out1, store = grown(CASE, tmp_path, 0.5)
    (out1 / "reput-report.json").write_bytes(b'{"job": "rebuild", "built_')
    (out1 / JOURNAL).write_text(json.dumps({"state": "applying", "backup_dir": str(tmp_path / "b0"), "ops": []}))
    (out1 / STAGING / "index").mkdir(parents=True)
    (out1 / STAGING / "index" / "20261122050857268").write_bytes(b"staged by the run that holds the lock")
    before = tree_digest(out1)
    for lock, job in ((beside(out1.resolve()), "rebuild"), (out1 / IN_PLACE_LOCK, "recover")):
        holder = _hold(lock, job)
        try:
            code, _, err = run_job("rebuild", argv(store, out1, tmp_path / "backup"), capfd)
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        line = error_line(err)
        assert code == 2 and f"is being written by reput {job} (pid {holder.pid} on " in line, line
        assert "one run per output" in line and str(lock) in line, line
        assert tree_digest(out1) == before
    assert not beside(out1).exists() and not (out1 / IN_PLACE_LOCK).exists()


def test_only_the_index_files_it_listed_are_deleted(spark, tmp_path, capfd, monkeypatch):
    """A directory and a file that are no index files appear in OUT1's index/ while the run builds (an operator's
    copy): the switch deletes only index files it listed, leaves these as they are, names them on stderr and counts
    them in the report (in_place.index_entries_left); OUT1's files equal the golden ones."""
    import jobs.pipeline.since.inplace as since_inplace

    out1, store = grown(CASE, tmp_path, 0.5)
    checks = since_inplace.since_checks

    def then_strays(*a, **kw):
        checked = checks(*a, **kw)
        (out1 / "index" / "old").mkdir()
        (out1 / "index" / "old" / "20261122050857268").write_bytes(b"a copy kept by hand")
        (out1 / "index" / "notes.txt").write_text("kept by hand")
        return checked

    monkeypatch.setattr(since_inplace, "since_checks", then_strays)
    code, out, err = run_job("rebuild", argv(store, out1, tmp_path / "backup") + ["--json"], capfd)
    assert code == 0, err[-2000:]
    assert json.loads(out)["in_place"]["index_entries_left"] == ["notes.txt", "old"]
    for name in ("notes.txt", "old"):
        assert any(line.startswith("reput rebuild: warning: ") and f"index/{name}: " in line
                   for line in err.splitlines()), err[-2000:]
    assert (out1 / "index" / "old" / "20261122050857268").read_bytes() == b"a copy kept by hand"
    assert (out1 / "index" / "notes.txt").read_text() == "kept by hand"
    assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
    assert index_hashes(out1)[:-1] == golden_index_hashes(CASE)  # notes.txt sorts after the numbered files
    no_leftovers(out1)


SWITCH_FAILURES = [("op-2", errno.ENOSPC, "--resume"), ("journaled", errno.EIO, "--rollback"),
                   ("staged", errno.ENOSPC, None)]


@pytest.mark.parametrize("point,code,way", SWITCH_FAILURES, ids=[f"{p}-{errno.errorcode[c]}" for p, c, _ in
                                                                   SWITCH_FAILURES])
def test_a_disk_error_in_the_switch_names_the_way_out(point, code, way, spark, tmp_path, capfd, monkeypatch):
    """ENOSPC or EIO at a point of the switch: once the journal is written the one line names the error, the file,
    `recover --resume` and `recover --rollback --backup-dir DIR` (each then tried: --resume gives the golden files,
    --rollback OUT1 as it was); before it, the line says OUT1 is as it was, and it is, its staging area gone."""
    out1, store = grown(CASE, tmp_path, 0.5)
    backup = tmp_path / "backup"
    before = tree_digest(out1)
    victim = out1 / "index"

    def fails_at(name: str) -> None:
        if name == point:
            raise OSError(code, os.strerror(code), str(victim))

    monkeypatch.setattr(recover_inplace, "crash_point", fails_at)
    status, _, err = run_job("rebuild", argv(store, out1, backup), capfd)
    line = error_line(err)
    assert status == 2 and os.strerror(code) in line and str(victim) in line, line
    resume, rollback = way_out(out1, backup)
    if way is None:
        assert "OUT1 is as it was: its switch had not begun" in line and "--resume" not in line, line
        assert tree_digest(out1) == before
        no_leftovers(out1)
        return
    assert f"OUT1 is part-way through the switch: finish it with {resume}, or undo it with {rollback}" in line, line
    recover(out1, way, *(["--backup-dir", str(backup)] if way == "--rollback" else []))
    if way == "--resume":
        assert consume_queue_hashes(out1) == golden_consume_queue_hashes(CASE)
        assert index_hashes(out1) == golden_index_hashes(CASE)
    else:
        assert tree_digest(out1) == before
    no_leftovers(out1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_group_mid_switch_names_the_way_out(sig, spark, tmp_path):
    """Ctrl-C or SIGTERM to the process group after the switch's second file operation: exit 130 / 143, one line
    naming recover --resume and --rollback, no process left; --rollback then gives OUT1 back byte for byte."""
    out1, store = grown(CASE, tmp_path, 0.5)
    backup = tmp_path / "backup"
    before = tree_digest(out1)
    mark = tmp_path / "paused"
    proc = start_at_hook("rebuild", [*argv(store, out1, backup), "--engine", "local", "--quiet"], "op-2", mark,
                         stdout=subprocess.DEVNULL)
    try:
        wait_at_hook(proc, mark)
        assert (out1 / JOURNAL).exists()
        os.killpg(proc.pid, sig)
    except BaseException:
        kill_group(proc)
        raise
    run = ended(proc)
    assert run.returncode == 128 + sig, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("reput rebuild: ")]
    resume, rollback = way_out(out1, backup)
    assert lines[-1] == (f"reput rebuild: interrupted; OUT1 is part-way through the switch: finish it with {resume}, "
                         f"or undo it with {rollback}"), run.stderr[-2000:]
    assert not [line for line in lines if ": error:" in line], run.stderr[-2000:]
    assert run.group_gone
    recover(out1, "--rollback", "--backup-dir", str(backup))
    assert tree_digest(out1) == before
    no_leftovers(out1)
