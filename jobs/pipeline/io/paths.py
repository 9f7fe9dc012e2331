"""The one check that an output (OUT, --table, --report, --work-dir, --backup-dir) lies outside the store.

Paths are compared as the filesystem sees them, not as strings: symlinks and `..` are resolved (also in
the part of a path that does not exist yet), and every existing directory on the way up from the output
is compared with the store by device and inode, which catches bind mounts and other second names of the
store's directory. URIs of other filesystems are compared by scheme, host and normalised path.
"""
from __future__ import annotations

import os
import posixpath

from ..runtime.failure import JobError
from .fs import Location


def is_local(loc: Location) -> bool:
    return "://" not in loc.uri or loc.uri.startswith("file://")


def _local_path(loc: Location) -> str:
    return loc.uri[len("file://"):] if loc.uri.startswith("file://") else loc.uri


def real_path(loc: Location) -> str:
    """The path with symlinks and `..` resolved (the missing tail of a path is kept as written)."""
    if is_local(loc):
        return os.path.realpath(_local_path(loc))
    scheme, rest = loc.uri.split("://", 1)  # the path as written, like fs.py reads it (no query, no fragment)
    authority, _, path = rest.partition("/")
    return f"{scheme}://{authority}{posixpath.normpath('/' + path)}"


def _ids(path: str) -> set[tuple[int, int]]:
    """(device, inode) of `path` and every existing directory above it."""
    ids = set()
    while True:
        try:
            st = os.stat(path)
            ids.add((st.st_dev, st.st_ino))
        except OSError:
            pass
        parent = os.path.dirname(path)
        if parent == path:
            return ids
        path = parent


def _dir_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def same_or_inside(child: Location, parent: Location) -> bool:
    """Is `child` the same as `parent` or below it, under any name?"""
    c, p = real_path(child), real_path(parent)
    if c == p or c.startswith(p.rstrip("/") + "/"):
        return True
    if is_local(child) and is_local(parent):
        pid = _dir_id(p)
        return pid is not None and pid in _ids(c)
    return False


def check_outside(store: Location, other: Location, flag: str, may_contain: bool = False,
                  why: str = "the store is only read") -> None:
    """Refuse `other` (given with `flag`) when it is the store, lies inside it or (unless `may_contain`: a
    directory a job only makes a fresh subdirectory in, like --work-dir) contains it; `why` ends the line."""
    if same_or_inside(other, store):
        raise JobError(f"{flag} {other.uri} must be outside the store {store.uri} (it is {real_path(other)}, "
                       f"inside the store's {real_path(store)}); {why}")
    if not may_contain and same_or_inside(store, other):
        raise JobError(f"{flag} {other.uri} must be outside the store {store.uri} (and must not contain it)")
