"""The line an in-place recovery (`--in-place`, `--resume`, `--rollback`) ends with after Ctrl-C or SIGTERM outside
its switch (which says its own, inplace.switch): what the store is now and the way out. These runs write into the
store, so "nothing published" would tell an operator at 3 a.m. there is nothing to do."""
from __future__ import annotations

from pathlib import Path

from ..runtime.failure import JobError
from .inplace import journal_backup, journaled, local_store, not_begun, way_out


def left_in_store(store_arg: str, resuming: bool, rolling_back: bool, backup_dir: str | None) -> str:
    """The store's state after an interrupt of an --in-place, --resume or --rollback run (the one below)."""
    try:
        path = local_store(store_arg)
    except JobError:  # not a local store: the run had not begun
        return not_begun("the store")
    if resuming:
        return resume(path)
    if rolling_back:
        return rollback(path, Path(backup_dir or "DIR").resolve())
    return in_place(path)


def in_place(store: Path, what: str = "the store") -> str:
    """An --in-place run stopped before its switch (scanning, planning, staging) or, should its journal be there,
    during it."""
    if journaled(store):
        return f"{what} is part-way through the switch: {way_out(store, journal_backup(store))}"
    return not_begun(what)


def resume(store: Path) -> str:
    """A --resume stopped: the switch is still part-way (its journal is there), or the resume had finished it."""
    if journaled(store):
        return f"the store is still part-way through the switch: {way_out(store, journal_backup(store))}"
    return "the store is recovered: the resumed switch had finished"


def rollback(store: Path, backup: Path) -> str:
    """A --rollback stopped: some files may be restored, others not; the same command finishes it (it restores only
    what is not restored yet)."""
    return (f"the rollback may not have finished: run `reput recover --store {store} --rollback --backup-dir "
            f"{backup}` again to finish it")

