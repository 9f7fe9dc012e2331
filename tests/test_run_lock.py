"""One run per output: a second run for the same OUT refuses at once naming the first (pid, start time), a killed
run's lock is taken over, and a run publishes only over an OUT it was told to replace."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.pipeline.io.fs import Location
from jobs.pipeline.io.publish import output_for
from jobs.pipeline.io.run_lock import RunLock, beside
from jobs.pipeline.runtime.failure import JobError
from tests.conftest import REPO, private_temp_env

CASE = "clean-small-11"


def test_a_held_lock_refuses_a_second_holder_naming_it(tmp_path):
    out = tmp_path / "out"
    with RunLock(beside(out), "rebuild", str(out)):
        with pytest.raises(JobError, match=rf"{out} is being written by reput rebuild \(pid {os.getpid()} on "):
            RunLock(beside(out), "recover", str(out)).acquire()
    assert not beside(out).exists(), "a released lock leaves no file"


def test_a_dead_holders_lock_file_is_taken_over(tmp_path):
    """A run killed with SIGKILL leaves its lock file, but no flock: the next run takes it."""
    out = tmp_path / "out"
    beside(out).write_text(json.dumps({"job": "rebuild", "pid": 999999, "host": "h", "started": "then"}))
    lock = RunLock(beside(out), "rebuild", str(out))
    lock.acquire()
    assert json.loads(beside(out).read_text())["pid"] == os.getpid()
    lock.release()
    assert not beside(out).exists()


def test_a_refused_output_keeps_no_lock(tmp_path):
    """An OUT that exists (no --overwrite) is refused and its lock let go at once."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "reput-report.json").write_text("{}")  # an earlier output
    with pytest.raises(JobError, match="already exists"):
        output_for(Location(str(out)), "reput-report.json", "rebuild")
    assert not beside(out).exists()
    output_for(Location(str(out)), "reput-report.json", "rebuild", overwrite=True).release()


def test_publish_refuses_an_out_that_appeared_meanwhile(tmp_path):
    """Publishing without --overwrite never replaces an OUT this run did not create."""
    out = tmp_path / "out"
    with pytest.raises(JobError, match="appeared while this run was building it"):
        with output_for(Location(str(out)), "report.json", "rebuild") as staging:
            out.mkdir()
            (out / "someone-elses").write_text("x")
            staging.publish(b"{}")
    assert (out / "someone-elses").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "staging and lock removed"


def _rebuild(golden: Path, store_case: str, out: Path, env: dict, stderr) -> subprocess.Popen:
    store = golden / store_case
    argv = [sys.executable, "-m", "jobs.rebuild", "--store", str(store), "--broker-config", str(store / "broker.conf"),
            "--out", str(out), "--master", "local[2]"]
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)


@pytest.mark.slow
def test_two_real_runs_for_one_out(golden, tmp_path, killed_temp):
    """A run holding OUT (paused after its decode) makes a second run on another store exit 2 at once, naming
    the first's pid; OUT is untouched. Once the first is killed, a third run takes the lock over and publishes."""
    out = tmp_path / "out"
    mark = tmp_path / "paused"
    with open(tmp_path / "first.err", "wb") as err:
        first = _rebuild(golden, CASE, out, dict(os.environ, **private_temp_env(killed_temp),
                                                 REPUT_TEST_PAUSE_AT="after-decode", REPUT_TEST_PAUSE_MARK=str(mark)),
                         err)
    try:
        deadline = time.monotonic() + 300
        while not mark.exists():
            assert first.poll() is None, (tmp_path / "first.err").read_text()[-2000:]
            assert time.monotonic() < deadline, "the first run never paused"
            time.sleep(0.2)
        t0 = time.monotonic()
        second = _rebuild(golden, "lmq-clean-small-11", out, dict(os.environ), subprocess.PIPE)
        stdout, stderr = second.communicate(timeout=120)
        assert second.returncode == 2, stderr.decode()
        line = stderr.decode().strip()
        assert line.count("\n") == 0 and f"pid {first.pid} on " in line and "one run per output" in line, line
        assert b"published" not in stdout and b"rebuilt" not in stdout
        assert time.monotonic() - t0 < 30, "the refusal comes before Spark starts"
        assert not out.exists()
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert beside(out).exists(), "SIGKILL leaves the lock file (the flock went with the process)"
    third = _rebuild(golden, CASE, out, dict(os.environ), subprocess.PIPE)
    _, stderr = third.communicate(timeout=600)
    assert third.returncode == 0, stderr.decode()[-2000:]
    assert (out / "reput-report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "no lock or staging left"


def test_in_place_recovery_is_one_run_per_store(golden, tmp_path):
    """While a run holds a store's in-place lock, --in-place, --resume and --rollback on it refuse naming it,
    and the store is not touched."""
    import shutil

    from jobs.pipeline.io.run_lock import IN_PLACE_LOCK
    from jobs.recover import main as recover_main
    from tests.hostile import tree_digest

    store = tmp_path / "store"
    shutil.copytree(golden / "unclean-11", store)
    before = tree_digest(store)
    conf = str(store / "broker.conf")
    with RunLock(store / IN_PLACE_LOCK, "recover", str(store)):
        for extra in (["--in-place", "--backup-dir", str(tmp_path / "b")], ["--resume"],
                      ["--rollback", "--backup-dir", str(tmp_path / "b")]):
            with pytest.raises(JobError, match=rf"being written by reput recover \(pid {os.getpid()} "):
                recover_main(["--store", str(store), "--broker-config", conf, *extra])
        assert {k: v for k, v in tree_digest(store).items() if k != IN_PLACE_LOCK} == before
    assert not (store / IN_PLACE_LOCK).exists()


@pytest.mark.parametrize("busy_tries,removed", [(2, True), (99, False)], ids=["stops-writing", "never-stops"])
def test_a_failed_run_reports_its_own_error_while_tasks_still_write(tmp_path, monkeypatch, capsys, busy_tries,
                                                                      removed):
    """A job that fails while a failed Spark job's other tasks still write work files into the staging
    directory (its removal meets a directory that is not empty): the removal is tried again, and the job's own
    error is what leaves the block, never the removal's; what stays is named on stderr (the next run removes it)."""
    import errno

    from jobs.pipeline.io import publish

    monkeypatch.setattr(publish, "UNDO_PAUSE_S", 0.0)
    out = tmp_path / "out"
    real_delete = Location.delete_tree
    calls = {"n": 0}

    def busy_delete(self):
        if publish.STAGING_MARK in self.path:
            calls["n"] += 1
            if calls["n"] <= busy_tries:
                raise OSError(errno.ENOTEMPTY, f"Cannot delete directory '{self.path}': Directory not empty")
        return real_delete(self)

    monkeypatch.setattr(Location, "delete_tree", busy_delete)
    with pytest.raises(RuntimeError, match="the task's own failure"):
        with output_for(Location(str(out)), "report.json", "rebuild") as staging:
            staging.work.child("cq-0.arrow").write_bytes(b"x")
            raise RuntimeError("the task's own failure")
    left = [p.name for p in tmp_path.iterdir() if publish.STAGING_MARK in p.name]
    assert not out.exists()
    assert (left == []) is removed
    err = capsys.readouterr().err
    assert ("not removed after the error" in err) is (not removed)
    assert calls["n"] == (3 if removed else publish.UNDO_TRIES)
