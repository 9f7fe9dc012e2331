"""The backup an in-place switch begins in DIR, taken out again when the switch stops before its journal is written:
the store is then as it was and nothing will roll back to that backup, so DIR is left as it was too (made by the run:
gone again)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .journal import BACKUP_MANIFEST, DELETE, PATCHES_OLD, REPLACE, Op


@dataclass(frozen=True)
class PartialBackup:
    """What a switch puts into DIR (`dir`): its `files` (the backups of the files it replaces or deletes, the
    patches' old bytes, the manifest; none that was there before the switch) and the directories it makes there
    (`made`: those not there before the switch, DIR itself and its missing parents among them), deepest first."""

    dir: Path
    files: tuple[Path, ...]
    made: tuple[Path, ...]

    @classmethod
    def of(cls, backup: Path, ops: list[Op]) -> PartialBackup:
        """The entries a switch of `ops` will write into `backup`, taken before it writes any."""
        files = [backup / o.path for o in ops if o.op in (REPLACE, DELETE)] + [backup / PATCHES_OLD,
                                                                              backup / BACKUP_MANIFEST]
        if backup.exists():  # a file of the operator's at one of those names is not this run's to remove
            files = [f for f in files if not f.exists()]
        seen: set[Path] = set()
        made: list[Path] = []
        for f in files:
            d = f.parent
            while d not in seen and not d.exists():
                seen.add(d)
                made.append(d)
                d = d.parent
            seen.add(d)
        return cls(backup, tuple(files), tuple(sorted(made, key=lambda p: len(p.parts), reverse=True)))

    def take_back(self) -> list[Path]:
        """Remove the files and the (now empty) directories the switch put into DIR; returns those still there
        (one that cannot be removed, a directory something else was put into)."""
        left = []
        for f in self.files:
            try:
                f.unlink()
            except (FileNotFoundError, NotADirectoryError):  # never made (DIR a file: the switch made nothing)
                pass
            except OSError:
                if os.path.lexists(f):  # a read-only DIR refuses to remove what was never made too (EROFS)
                    left.append(f)
        for d in self.made:
            try:
                d.rmdir()
            except (FileNotFoundError, NotADirectoryError):
                pass
            except OSError:
                if os.path.lexists(d):
                    left.append(d)
        return left
