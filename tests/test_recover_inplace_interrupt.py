"""recover --in-place stopped before its journal is written, by Ctrl-C or SIGTERM to its process group (held at a test
hook: while the staging area is written, once the backup is made, once the manifest is written) or by a disk error
in the switch: one line saying the store is as it was, and it is, byte for byte and name for name (no staging area,
work files, journal or its temporary name, lock file), and --backup-dir is as it was too (made by the run: gone)."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.pipeline.recover import inplace as recover_inplace
from jobs.pipeline.recover.journal import BACKUP_MANIFEST, JOURNAL, STAGING
from tests.helpers import file_tree_digest, run_job, signalled_at_hook
from tests.rebuild_helpers import consume_queue_hashes
from tests.recovery_helpers import writable_copy

CASE = "lmq-unclean-11"  # the operator's trial: patched, replaced, created and deleted files
NOT_BEGUN = "the store is as it was: its switch had not begun"
THEIRS = "notes.txt"  # a file of the operator's in a --backup-dir that was there before the run


def argv(store: Path, backup: Path) -> list[str]:
    return ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--in-place", "--backup-dir",
            str(backup), "--engine", "local", "--quiet"]


def names(root: Path) -> list[str]:
    """Every file and directory below `root`, by relative path (dot-names included)."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def backup_dir(tmp_path: Path, there: bool) -> Path:
    """DIR, two levels below a directory that does not exist yet (the run makes them), or there already with a file
    of the operator's in it."""
    backup = tmp_path / "backups" / "tonight"
    if there:
        backup.mkdir(parents=True)
        (backup / THEIRS).write_text("the operator's own file\n")
    return backup


def as_it_was(store: Path, before: tuple[dict[str, str], list[str]], backup: Path, there: bool) -> None:
    """The store's bytes and names as before the run, and DIR as before it (or gone with the parents it made)."""
    assert file_tree_digest(store) == before[0]
    assert names(store) == before[1]
    if there:
        assert names(backup) == [THEIRS]
    else:
        assert not backup.parent.exists(), names(backup.parent)


def at_hook(point: str, store: Path, backup: Path) -> None:
    """What the run has made when held at `point`: what the signal must then take away again."""
    assert any((store / STAGING).iterdir())
    if point in ("staged", "backed-up"):
        assert any(p.is_file() and p.name != THEIRS for p in backup.rglob("*"))
    if point == "backed-up":
        assert (backup / BACKUP_MANIFEST).is_file() and (store / f"{JOURNAL}.tmp").is_file()
        assert not (store / JOURNAL).exists()


@pytest.mark.parametrize("point,sig,there", [("in-index-write", signal.SIGINT, False),
                                             ("staged", signal.SIGTERM, False),
                                             ("staged", signal.SIGINT, True),
                                             ("backed-up", signal.SIGINT, False)],
                         ids=["writing-staging-int", "backup-made-term", "backup-made-int-dir-there",
                              "manifest-written-int"])
def test_a_signal_before_the_journal_leaves_the_store_and_backup_dir_as_they_were(point, sig, there, golden,
                                                                                  tmp_path):
    """Held at `point` (before the journal), then `sig` to the whole process group: exit 130 / 143, one line saying
    the store is as it was, no process left; the store and DIR are as they were."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store), names(store)
    backup = backup_dir(tmp_path, there)
    run = signalled_at_hook("recover", argv(store, backup), point, tmp_path / "paused", sig,
                            stdout=subprocess.DEVNULL, check=lambda: at_hook(point, store, backup))
    assert run.returncode == 128 + sig, run.stderr[-2000:]
    as_it_was(store, before, backup, there)
    lines = [line for line in run.stderr.splitlines()
             if line.startswith("reput recover: ") and not line.startswith("reput recover: note:")]
    assert lines == [f"reput recover: interrupted; {NOT_BEGUN}"], run.stderr[-2000:]
    assert "Traceback" not in run.stderr and run.group_gone


@pytest.mark.parametrize("point", ["staged", "backed-up"])
def test_a_disk_error_before_the_journal_leaves_the_store_and_backup_dir_as_they_were(point, golden, tmp_path,
                                                                                      capfd, monkeypatch):
    """ENOSPC once the backup is made or the manifest written: exit 2, one line naming the error and saying the store
    is as it was; the store and DIR are as they were."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store), names(store)
    backup = backup_dir(tmp_path, False)

    def fails_at(name: str) -> None:
        if name == point:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(backup))

    monkeypatch.setattr(recover_inplace, "crash_point", fails_at)
    monkeypatch.setattr("jobs.pipeline.recover.journal.crash_point", fails_at)
    status, _, err = run_job("recover", argv(store, backup), capfd)
    lines = [line for line in err.splitlines() if line.startswith("reput recover: error:")]
    assert status == 2 and len(lines) == 1, err[-2000:]
    assert os.strerror(errno.ENOSPC) in lines[0] and lines[0].endswith(NOT_BEGUN), lines[0]
    as_it_was(store, before, backup, False)


def test_a_signal_after_the_switch_says_the_store_was_recovered(golden, tmp_path):
    """Held once the switch is complete (its report not yet printed), then SIGINT to the group: exit 130 and one line
    saying the store was recovered (not "nothing published"); the store is the recovered one, DIR holds its backup."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    backup = backup_dir(tmp_path, False)
    run = signalled_at_hook("recover", argv(store, backup), "after-switch", tmp_path / "paused",
                            stdout=subprocess.DEVNULL)
    assert run.returncode == 130, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines()
             if line.startswith("reput recover: ") and not line.startswith("reput recover: note:")]
    assert lines == [f"reput recover: interrupted; {store} was recovered in place: its switch had completed (backup "
                     f"in {backup}); the report was not printed"], run.stderr[-2000:]
    assert (backup / BACKUP_MANIFEST).is_file() and not (store / JOURNAL).exists() and not (store / STAGING).exists()
    assert consume_queue_hashes(store) == consume_queue_hashes(golden / f"{CASE}-recovered")


def _last_line(run) -> str:
    lines = [line for line in run.stderr.splitlines()
             if line.startswith("reput recover: ") and not line.startswith("reput recover: note:")]
    assert len(lines) == 1 and "Traceback" not in run.stderr and run.group_gone, run.stderr[-2000:]
    return lines[0]


def test_a_signal_while_it_scans_says_the_store_is_as_it_was(golden, tmp_path):
    """--in-place stopped in its decode (before any staging): the line says the store is as it was, not the
    "nothing published" of a run that writes an OUT."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store), names(store)
    backup = backup_dir(tmp_path, False)
    run = signalled_at_hook("recover", argv(store, backup), "in-decode-task", tmp_path / "paused", signal.SIGTERM,
                            stdout=subprocess.DEVNULL)
    assert run.returncode == 143 and _last_line(run) == f"reput recover: interrupted; {NOT_BEGUN}"
    as_it_was(store, before, backup, False)


def test_an_interrupted_resume_or_rollback_says_what_is_left_and_the_way_out(golden, tmp_path):
    """A switch stopped part-way (SIGTERM after its 2nd file operation) is resumed, and the resume stopped after its
    6th: the line says the store is still part-way and names both ways out; resumed again it is the broker's
    recovered store. The same store stopped part-way and rolled back, the rollback stopped: the line names the same
    --rollback to run again, which gives back the store as it was."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store)
    backup = backup_dir(tmp_path, False)
    for point in ("op-2", "in-rollback"):
        first = signalled_at_hook("recover", argv(store, backup), "op-2", tmp_path / f"{point}-op", signal.SIGTERM,
                                  stdout=subprocess.DEVNULL)
        assert first.returncode == 143 and (store / JOURNAL).exists(), first.stderr[-2000:]
        way_out = recover_inplace.way_out(store.resolve(), backup.resolve())
        for mode in (["--dry-run"], ["--out", str(tmp_path / f"{point}-out")]):  # a half-switched store is refused
            half = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config",
                                   str(store / "broker.conf"), *mode], capture_output=True, text=True, timeout=300)
            assert half.returncode == 2 and half.stderr.strip().endswith(way_out), half.stderr[-2000:]
        if point == "in-rollback":  # a mistyped --backup-dir: the store is named part-way, with the journal's DIR
            typo = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), "--rollback",
                                   "--backup-dir", str(tmp_path / "bakk")], capture_output=True, text=True,
                                  timeout=300)
            assert typo.returncode == 2 and typo.stderr.strip().endswith(way_out), typo.stderr[-2000:]
            assert f"is part-way through a switch whose backup is {backup.resolve()}" in typo.stderr
        again = (["--store", str(store), "--resume"] if point == "op-2" else
                 ["--store", str(store), "--rollback", "--backup-dir", str(backup)])
        second = signalled_at_hook("recover", again + ["--quiet"], "op-6" if point == "op-2" else point,
                                   tmp_path / f"{point}-again", signal.SIGTERM, stdout=subprocess.DEVNULL)
        expected = (f"the store is still part-way through the switch: {way_out}" if point == "op-2" else
                    f"the rollback may not have finished: run `reput recover --store {store.resolve()} --rollback "
                    f"--backup-dir {backup.resolve()}` again to finish it")
        assert second.returncode == 143 and _last_line(second) == f"reput recover: interrupted; {expected}"
        status = subprocess.run([sys.executable, "-m", "jobs.recover", *again, "--quiet"], capture_output=True,
                                text=True, timeout=300)
        assert status.returncode == 0, status.stderr[-2000:]
        if point == "op-2":
            assert consume_queue_hashes(store) == consume_queue_hashes(golden / f"{CASE}-recovered")
            subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(store), "--rollback",
                            "--backup-dir", str(backup), "--quiet"], check=True, capture_output=True, timeout=300)
            shutil.rmtree(backup)
        else:
            assert file_tree_digest(store) == before


def test_a_read_only_backup_dir_is_not_said_to_hold_what_was_never_written(tmp_path, monkeypatch):
    """On a read-only filesystem, removing a name that was never made fails with EROFS, not ENOENT: the switch
    stopped before its backup said DIR "still holds 7 entries" of an empty DIR. Only what is there is named."""
    from jobs.pipeline.recover.journal import DELETE, Op
    from jobs.pipeline.recover.partial_backup import PartialBackup

    backup = tmp_path / "bak"
    begun = PartialBackup.of(backup, [Op(op=DELETE, path="index/20261122050857268", old_sha256=None, new_sha256=None)])
    backup.mkdir()
    kept = backup / BACKUP_MANIFEST
    kept.write_text("{}")

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    monkeypatch.setattr(Path, "rmdir", read_only)
    assert begun.take_back() == [kept, backup]


def test_a_backup_dir_inside_the_store_is_refused_saying_why(golden, tmp_path, capfd):
    """--backup-dir inside the store an --in-place run changes: refused, and the reason is that one (it said "the
    store is only read", which an in-place run's store is not)."""
    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store)
    status, _, err = run_job("recover", argv(store, store / "bak"), capfd)
    assert status == 2 and err.strip().splitlines()[-1].endswith(
        "an in-place run changes the store, and its backup must lie apart from it"), err[-2000:]
    assert file_tree_digest(store) == before


def test_a_broker_started_while_the_run_planned_stops_it_before_its_switch(golden, tmp_path, capfd, monkeypatch):
    """The broker's lock taken while --in-place staged its files (a broker started meanwhile): refused before the
    switch begins, one line naming the lock holder, the store as it was (the lock was asked once, at the start, and
    the switch went on under the running broker)."""
    import jobs.recover as job
    from tests.helpers import hold_lock

    store = writable_copy(golden / CASE, tmp_path / "store")
    before = file_tree_digest(store), names(store)
    backup = backup_dir(tmp_path, False)
    holders = []
    real = job.write_output

    def then_a_broker_starts(*args, **kwargs):
        names_written = real(*args, **kwargs)
        holders.append(hold_lock(store / "lock"))
        return names_written

    monkeypatch.setattr(job, "write_output", then_a_broker_starts)
    try:
        status, _, err = run_job("recover", argv(store, backup), capfd)
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()
    lines = [line for line in err.splitlines() if line.startswith("reput recover: error:")]
    assert status == 2 and len(lines) == 1 and f"by process {holders[0].pid}" in lines[0], err[-2000:]
    assert "a broker took the store's lock while this run planned" in lines[0], lines[0]
    assert lines[0].endswith(f"; {NOT_BEGUN}: stop the broker first"), lines[0]
    as_it_was(store, before, backup, False)
