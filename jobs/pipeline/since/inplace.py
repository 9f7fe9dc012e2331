"""`rebuild --since OUT1 --in-place --backup-dir DIR`: OUT1 itself brought up to tonight, by recover's in-place switch
(recover.inplace: staged files, a verified backup in DIR, a journal, one rename or unlink per file). Only the files
that change are staged: the consume-queue files the new records reach, the index files they fill or open, the run
report; the files the clean service deletes go (into the backup). Killed part-way, OUT1 is finished or restored by
`reput recover --store OUT1 --resume` / `--rollback --backup-dir DIR`, as an in-place recovery is."""
from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.paths import check_outside
from ..io.run_lock import IN_PLACE_LOCK, RunLock, beside
from ..io.workdir import removed_after
from ..recover import inplace
from ..recover.journal import JOURNAL
from ..runtime.cli import JobError, json_bytes, warn
from ..runtime.failure import Interrupted
from .previous import REPORT_NAME, PreviousOutput
from .run import SinceRun, rebuild_since


@dataclass(frozen=True)
class InPlaceStaging:
    """Where the changed files are staged (OUT1's own staging area) and the run's work files."""

    dir: Location
    work: Location


def check_in_place(args: argparse.Namespace, prev: PreviousOutput) -> tuple[Path, Path]:
    """OUT1 on a local filesystem, no interrupted switch in it, DIR outside it: (OUT1, DIR)."""
    path = inplace.local_store(prev.out.uri)
    backup = Path(args.backup_dir).resolve()
    check_outside(Location(str(path)), Location(str(backup)), "--backup-dir")
    if (path / JOURNAL).exists():
        raise JobError(f"{path / JOURNAL}: an earlier --in-place run on OUT1 was interrupted; finish it with "
                       f"`reput recover --store {path} --resume` or undo it with `reput recover --store {path} "
                       f"--rollback --backup-dir DIR`")
    return path, backup


def rebuild_in_place(sc, args: argparse.Namespace, store: Location, settings: BrokerSettings, prev: PreviousOutput,
                     limit_offset: int | None, tz: dt.tzinfo, quiet: bool,
                     report_of: Callable[[SinceRun], dict]) -> dict:
    """Stage the files that change, then switch them into OUT1 (backup and journal first); returns the report."""
    path, backup = check_in_place(args, prev)
    # a rebuild publishing to OUT1 and a recover --resume / --rollback of it take these locks too
    with RunLock(beside(path.resolve()), "rebuild", str(path)), \
            RunLock(path / IN_PLACE_LOCK, "rebuild", f"{path} (--in-place)"):
        staging = inplace.prepare_staging(path)
        work = Location(str(path / ".reput-since.work"))
        work.delete_tree() if work.exists() else None  # a killed run's leftovers
        with removed_after(work):
            run = rebuild_since(sc, args, store, settings, InPlaceStaging(Location(str(staging)), work), prev,
                                limit_offset, tz, quiet, copy_rest=False)
        report = {**report_of(run), "in_place": {"backup_dir": str(backup)}}
        (staging / REPORT_NAME).write_bytes(json_bytes(report))
        written = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        gone = [f"consumequeue/{rel}" for rel in run.result.expired_cq] \
            + [f"index/{name}" for name in _index_names(path) if name not in set(run.result.index_names)]
        ops = inplace.build_ops(path, staging, written, gone, hashed=not inplace.same_filesystem(path, backup))
        try:
            manifest = inplace.apply(path, staging, backup, ops, {"job": "rebuild --since --in-place"})
        except KeyboardInterrupt:
            if (path / JOURNAL).exists():
                raise Interrupted(f"OUT1 is part-way through the switch: finish it with `reput recover --store "
                                  f"{path} --resume`, or undo it with `reput recover --store {path} --rollback "
                                  f"--backup-dir {backup}`") from None
            raise
    if manifest["backup"]["copied"]:
        warn("rebuild", f"--backup-dir {backup} is on another filesystem than OUT1: {manifest['backup']['copied']} "
                        f"files backed up by copying them (the slower path; on OUT1's filesystem they are hard-linked)")
    report["in_place"].update(operations=len(manifest["ops"]), backup=manifest["backup"])  # OUT1's report: the dir
    return report


def _index_names(out: Path) -> list[str]:
    """OUT1's index files by name."""
    index = out / "index"
    return sorted(p.name for p in index.iterdir()) if index.is_dir() else []

