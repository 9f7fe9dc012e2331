"""Which store a verify report was made on, beyond its commit log's bytes: a copy, a restored store or a slave holds
the same bytes in other files, which that verify never read. A store is its directory's resolved path, that
directory's inode, and the inode of the commit-log file the report's end lies in (the broker writes on into its
segment files, so they stay the same files while the store lives; a copy or a restore makes new ones). Not the
device number, which some filesystems renumber across a reboot (as io.file_id's fingerprints), nor the host, which
is recorded to name it (a pod or a cluster driver is another host each night). On object storage: its URI only."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from storage_format.scan_plan import Segment

from ..io.fs import Location
from ..io.paths import is_local, real_path


@dataclass(frozen=True)
class StoreIdentity:
    """What a report records of the store it was made on (`store_identity`)."""

    path: str  # resolved: symlinks and `..` followed; a URI elsewhere
    host: str  # named in a refusal, not compared
    inode: int | None  # the store directory's (None: not a local filesystem)
    log_file: str | None  # the commit-log file holding the report's end (its name), and its inode
    log_file_inode: int | None

    def to_dict(self) -> dict:
        return {"path": self.path, "host": self.host, "inode": self.inode, "log_file": self.log_file,
                "log_file_inode": self.log_file_inode}

    @classmethod
    def from_dict(cls, d: dict) -> StoreIdentity:
        """A report's `store_identity` (ValueError naming what is malformed)."""
        try:
            return cls(str(d["path"]), str(d.get("host") or "?"), _int_or_none(d.get("inode")),
                       None if d.get("log_file") is None else str(d["log_file"]), _int_or_none(d.get("log_file_inode")))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"store_identity: {exc.__class__.__name__} {exc}") from None


def _int_or_none(v: object) -> int | None:
    return None if v is None else int(v)  # type: ignore[arg-type]


def store_identity(store: Location, segments: list[Segment] | tuple[Segment, ...],
                   log_file: str | None) -> StoreIdentity:
    """The store's identity now, with the commit-log file named `log_file` among `segments` (None: no record)."""
    seg = next((s for s in segments if Location(s.path).name == log_file), None) if log_file else None
    return StoreIdentity(real_path(store), socket.gethostname(), _inode(store),
                         log_file if seg is not None else None, _inode(Location(seg.path)) if seg is not None else None)


def _inode(loc: Location) -> int | None:
    """A local file's or directory's inode (None elsewhere, or where it cannot be read)."""
    if not is_local(loc):
        return None
    try:
        return os.stat(real_path(loc)).st_ino
    except OSError:
        return None


def identity_difference(then: StoreIdentity, now: StoreIdentity) -> str | None:
    """How the store a report was made on (`then`) is not this one (`now`), in words; None when it is the same."""
    if then.path != now.path:
        return f"{then.path} on host {then.host}, this store is {now.path}"
    if then.inode is not None and now.inode is not None and then.inode != now.inode:
        return (f"{now.path} is another directory than it was made on (inode {now.inode}, then {then.inode} on host "
                f"{then.host}): restored or copied there since")
    if then.log_file is not None and then.log_file == now.log_file and then.log_file_inode is not None \
            and now.log_file_inode is not None and then.log_file_inode != now.log_file_inode:
        return (f"its commit-log file {then.log_file} is another file than it checked (inode {now.log_file_inode}, "
                f"then {then.log_file_inode}): the store was restored or copied there since")
    return None
