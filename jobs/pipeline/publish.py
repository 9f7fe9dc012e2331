"""Atomic publishing: build everything in a staging directory beside OUT, check it, then rename.

A run that fails or is killed leaves OUT untouched (absent, or the previous complete output) and at
most a `.<name>.reput-staging-*` directory beside it, which the next run removes.
"""
from __future__ import annotations

import uuid

from .cli import JobError
from .fs import Location

STAGING_MARK = ".reput-staging-"
OLD_MARK = ".reput-old-"


class Staging:
    """A staging directory for OUT; `publish()` renames it into place."""

    def __init__(self, out: Location, overwrite: bool = False) -> None:
        if out.exists() and not overwrite:
            raise JobError(f"{out.uri} already exists; choose a new --out or pass --overwrite")
        self.out = out
        token = uuid.uuid4().hex[:12]
        self.dir = out.parent.child(f".{out.name}{STAGING_MARK}{token}")
        self.work = self.dir.child("_work")
        self._old = out.parent.child(f".{out.name}{OLD_MARK}{token}")

    def __enter__(self) -> "Staging":
        self.out.parent.makedirs()
        self._remove_leftovers()
        self.dir.makedirs()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.dir.delete_tree()

    def _remove_leftovers(self) -> None:
        """Staging directories of earlier killed runs for the same OUT are garbage."""
        prefix = f".{self.out.name}{STAGING_MARK}"
        for info in self.out.parent.list():
            if info.base_name.startswith(prefix):
                self.out.parent.child(info.base_name).delete_tree()

    def publish(self) -> None:
        """Drop the work files and rename the staging directory to OUT (replacing an old OUT)."""
        self.work.delete_tree()
        if self.out.exists():
            self.out.move_to(self._old)
            self.dir.move_to(self.out)
            self._old.delete_tree()
        else:
            self.dir.move_to(self.out)
