"""`rebuild --since OUT1 --in-place --backup-dir DIR`: OUT1 itself brought up to tonight, by recover's in-place switch
(recover.inplace: staged files, a verified backup in DIR, a journal, one rename or unlink per file). Only the files
that change are staged: the consume-queue files the new records reach, the index files they fill or open, the run
report; the files the clean service deletes go (into the backup), and nothing else of OUT1: an entry of OUT1's
index/ that is no index file (the broker skips it) stays as it is, named on stderr and in the report. OUT1's two
locks are taken before anything of it is read, its journal checked inside them. Killed or failed part-way through
the switch, OUT1 is finished or restored by `reput recover --store OUT1 --resume` / `--rollback --backup-dir DIR`,
as an in-place recovery is, and the run's one line says so."""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from storage_format.confirm_offset import DispatchLimit
from storage_format.settings import BrokerSettings

from ..io import out_files
from ..io.fs import Location, location
from ..io.paths import check_outside
from ..io.run_lock import IN_PLACE_LOCK, RunLock, beside, held
from ..io.workdir import removed_after
from ..recover import inplace
from ..recover.journal import BACKUP_APART, CREATE, REPLACE
from ..recover.staging import staging_area
from ..runtime.cli import JobError, json_bytes, warn
from ..runtime.engine import EngineChoice, job_runner
from .out1 import REPORT_NAME, Out1, check_directory
from .report import since_report
from .run import check_flags, rebuild_since, since_checks


@dataclass(frozen=True)
class InPlaceStaging:
    """Where the changed files are staged (OUT1's own staging area) and the run's work files."""

    dir: Location
    work: Location


@dataclass(frozen=True)
class InPlaceTarget:
    """OUT1 (a local directory, its path resolved) and DIR, where what the switch replaces or deletes is kept."""

    out1_path: Path
    backup: Path


@contextlib.contextmanager
def locked_out1(args: argparse.Namespace) -> Iterator[InPlaceTarget]:
    """OUT1 with both its locks held before anything of it is read: the one a rebuild publishing OUT1 takes (beside
    it) and the one recover --in-place, --resume and --rollback take (inside it); then no interrupted switch in it."""
    out1_path = inplace.local_store(location(args.since).uri)
    backup = Path(args.backup_dir).resolve()
    check_outside(Location(str(out1_path)), Location(str(backup)), "--backup-dir", why=BACKUP_APART)
    check_directory(Location(str(out1_path)))  # the in-place lock file must not make a missing OUT1
    with held(RunLock(beside(out1_path), "rebuild", str(out1_path)),
              RunLock(out1_path / IN_PLACE_LOCK, "rebuild", f"{out1_path} (--in-place)")):
        inplace.check_not_interrupted(out1_path, "OUT1")
        yield InPlaceTarget(out1_path, backup)


def rebuild_in_place(args: argparse.Namespace, store: Location, settings: BrokerSettings, limit: DispatchLimit,
                     tz: dt.tzinfo, quiet: bool) -> dict:
    """rebuild --since OUT1 --in-place: OUT1's locks first, then the --since checks (before Spark starts; OUT1 must
    be a rebuild's), then OUT1 itself brought up to the store; returns the report."""
    with locked_out1(args) as target:
        check_flags(args)
        out1 = since_checks(args, store, settings)
        if out1.report["job"] != "rebuild":
            raise JobError(f"--in-place: --since {args.since} is a {out1.report['job']} OUT, a store a broker may "
                           f"start on (its checkpoint and files are the broker's to change): write OUT2 beside it "
                           f"with --out")
        sc, engine = job_runner(args, "rebuild", out1.bytes_to_decode, settings)
        return _switched_in(sc, engine, args, store, settings, out1, target, limit, tz, quiet)


def _switched_in(sc, engine: EngineChoice, args: argparse.Namespace, store: Location, settings: BrokerSettings,
                 out1: Out1, target: InPlaceTarget, limit: DispatchLimit, tz: dt.tzinfo, quiet: bool) -> dict:
    """Stage the files that change, then switch them into OUT1 (backup and journal first); returns the report."""
    out1_path, backup = target.out1_path, target.backup
    with staging_area(out1_path, "OUT1") as staging:
        work = Location(str(out1_path / ".reput-since.work"))
        work.delete_tree() if work.exists() else None  # a killed run's leftovers
        with removed_after(work):
            run = rebuild_since(sc, args, store, settings, InPlaceStaging(Location(str(staging)), work), out1,
                                limit.offset, tz, quiet, copy_unchanged=False)
        left = _not_index_files(out1_path, run.result.index_listed)
        report = {**since_report(args, run, settings, limit, out1), "engine": engine.to_dict(),
                  "in_place": {"backup_dir": str(backup), "index_entries_left": left}}
        (staging / REPORT_NAME).write_bytes(json_bytes(report))
        gone = [f"consumequeue/{rel}" for rel in run.result.expired_cq] \
            + [f"index/{name}" for name in run.result.index_dropped]
        written = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        hashed = not inplace.same_filesystem(out1_path, backup)
        ops = inplace.build_ops(out1_path, staging, written, gone, hashed=hashed)
        _stage_files_record(out1_path, staging, [o.path for o in ops if o.op in (REPLACE, CREATE)], gone)
        # a rebuild OUT1 holds no checkpoint or abort (ordered last): the record's op can close the list
        ops += inplace.build_ops(out1_path, staging, [out_files.FILES_NAME], [], hashed=hashed)
        manifest = inplace.switch(out1_path, staging, backup, ops, {"job": "rebuild --since --in-place"}, what="OUT1")
    if manifest["backup"]["copied"]:
        warn("rebuild", f"--backup-dir {backup} is on another filesystem than OUT1: {manifest['backup']['copied']} "
                        f"files backed up by copying them (the slower path; on OUT1's filesystem they are hard-linked)")
    report["in_place"].update(operations=len(manifest["ops"]), backup=manifest["backup"])  # OUT1's report: the dir
    return report


def _stage_files_record(out1_path: Path, staging: Path, switched: list[str], gone: list[str]) -> None:
    """OUT1's record of its files (io.out_files) as the switch leaves them, staged with the files it describes: the
    record proven before the run, less what goes, with the staged files the switch renames in (a rename keeps their
    size and mtime; a staged file equal to OUT1's stays unswitched, and so does its state)."""
    before = out_files.recorded(Location(str(out1_path)), None)  # check_unchanged proved it; all of OUT1 (--overwrite)
    after = out_files.after_switch(before, Location(str(staging)), switched, gone)
    out_files.write_record(Location(str(staging / out_files.FILES_NAME)), after)


def _not_index_files(out1_path: Path, listed: list[str]) -> list[str]:
    """The entries of OUT1's index/ the run did not take as index files (the listing named each on stderr: the
    broker skips them); the switch leaves them as they are."""
    index = out1_path / "index"
    return sorted(set(p.name for p in index.iterdir()) - set(listed)) if index.is_dir() else []
