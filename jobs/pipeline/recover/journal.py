"""recover --in-place's records: the file operations (`Op`) its journal and backup manifest hold, their JSON
form, the names of the journal, staging area, manifest and packed patch files, and how the pair is written."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..io.durable import fsync_all, fsync_dir
from ..runtime.faults import crash_point, pause_at

JOURNAL = ".reput-recover.journal"
STAGING = ".reput-recover.staging"
BACKUP_MANIFEST = "reput-backup.json"
BACKUP_APART = "an in-place run changes the store, and its backup must lie apart from it"  # --backup-dir's refusal
REPLACE, CREATE, DELETE, PATCH = "replace", "create", "delete", "patch"
PATCHES_NEW = "patches.new"  # STAGING/: every patch's new bytes, one after another (one file to flush)
PATCHES_OLD = "reput-patches.old"  # DIR/: their old bytes, at the same offsets


@dataclass(frozen=True, kw_only=True)
class Op:
    """One file operation of the switch: the file before (`old_*`, None when created) and after (`new_*`,
    None when deleted), by sha256 and/or by `fingerprint` (manifests before fingerprints have hashes only).
    A PATCH names its byte `ranges` ([offset, length] each) and where its bytes lie in the packed files
    (`packed_at`: STAGING/patches.new, DIR/reput-patches.old); its hashes are of those ranges' bytes, old and
    new, each concatenated in order."""

    op: str
    path: str
    old_sha256: str | None
    new_sha256: str | None
    old_file: str | None = None
    new_file: str | None = None
    ranges: tuple[tuple[int, int], ...] | None = None
    packed_at: int | None = None

    def __post_init__(self) -> None:
        if self.ranges is not None:  # JSON gives lists
            object.__setattr__(self, "ranges", tuple((int(a), int(n)) for a, n in self.ranges))

    def to_dict(self) -> dict:
        """JSON form for the journal and the backup manifest."""
        d = {"op": self.op, "path": self.path, "old_sha256": self.old_sha256, "new_sha256": self.new_sha256,
             "old_file": self.old_file, "new_file": self.new_file}
        if self.ranges is not None:
            d["ranges"] = [list(r) for r in self.ranges]
            d["packed_at"] = self.packed_at
        return d

    @property
    def span_bytes(self) -> int:
        """Bytes a PATCH writes."""
        return sum(n for _, n in self.ranges or ())


def write_pair(first: Path, first_data: bytes, then: Path, then_data: bytes) -> None:
    """Two small files each written through a temporary name and renamed, flushed together; `then` appears only once
    `first` is durable (the backup manifest before the journal that points at it). Stopped part-way (an error, a
    signal), the temporary names still there are removed."""
    tmps = [first.with_name(first.name + ".tmp"), then.with_name(then.name + ".tmp")]
    try:
        for tmp, data in zip(tmps, (first_data, then_data)):
            with open(tmp, "wb") as f:
                f.write(data)
        fsync_all(tmps)
        os.replace(tmps[0], first)
        fsync_dir(first.parent)
        crash_point("backed-up")
        pause_at("backed-up")
        os.replace(tmps[1], then)
    except BaseException:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise
    fsync_dir(then.parent)
