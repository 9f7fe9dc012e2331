"""Patches of recover --in-place: the pages in which a kept file's new bytes differ from its old ones, found,
staged (STAGING/patches.new) as PATCH ops, and written over the file or read back (apply, resume, rollback)."""
from __future__ import annotations

import dataclasses
import hashlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..io.file_id import fingerprint
from ..io.fs import pwrite_all
from ..runtime.failure import JobError
from .journal import PATCH, PATCHES_NEW, PATCHES_OLD, STAGING, Op

PAGE = 4096  # the unit changed ranges are found in, and a torn patched range is judged by


@dataclass(frozen=True)
class Patch:
    """A store file's new bytes in some ranges (the rest of the file and its size unchanged): `ranges` as
    [offset, length], `data` their new bytes concatenated in order; `old` their bytes when read (None: read
    them again)."""

    path: str
    ranges: tuple[tuple[int, int], ...]
    data: bytes
    old: bytes | None = None


COMPARE_PAGES = 4096  # pages compared at once by changed_ranges (16 MiB: the temporaries stay small)


def changed_ranges(old, new) -> tuple[tuple[int, int], ...]:
    """The PAGE-aligned ranges in which two equal-sized buffers (bytes, mmap) differ, adjacent pages merged;
    compared COMPARE_PAGES pages at a time."""
    import numpy as np

    a, b = np.frombuffer(old, np.uint8), np.frombuffer(new, np.uint8)
    if a.shape != b.shape:
        raise ValueError("changed_ranges: buffers of different sizes")
    pages: list[int] = []
    full = len(a) // PAGE * PAGE
    step = COMPARE_PAGES * PAGE
    for lo in range(0, full, step):
        hi = min(full, lo + step)
        differ = (a[lo:hi].reshape(-1, PAGE) != b[lo:hi].reshape(-1, PAGE)).any(axis=1)
        pages.extend(lo // PAGE + int(p) for p in np.flatnonzero(differ))
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p * PAGE:
            out[-1] = (out[-1][0], out[-1][1] + PAGE)
        else:
            out.append((p * PAGE, PAGE))
    if full < len(a) and (a[full:] != b[full:]).any():
        if out and out[-1][0] + out[-1][1] == full:
            out[-1] = (out[-1][0], out[-1][1] + len(a) - full)
        else:
            out.append((full, len(a) - full))
    del a, b
    return tuple(out)


def read_ranges(path: Path, ranges: tuple[tuple[int, int], ...]) -> bytes:
    """A file's bytes in `ranges`, concatenated (short where the file is shorter)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return b"".join(os.pread(fd, n, at) for at, n in ranges)
    finally:
        os.close(fd)


def write_ranges(path: Path, ranges: tuple[tuple[int, int], ...], data: bytes, mtime_ns: int) -> None:
    """Write `data` over a file's `ranges` (its size unchanged), then set its modification time; the caller
    fsyncs it."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view, pos = memoryview(data), 0
        for at, n in ranges:
            pwrite_all(fd, view[pos:pos + n], at)
            pos += n
        st = os.fstat(fd)
        os.utime(fd, ns=(st.st_atime_ns, mtime_ns))
    finally:
        os.close(fd)


def patched_id(old_file: str, now_ns: int) -> tuple[str, int]:
    """A patched file's fingerprint after the switch, and the modification time that makes it: inode and size
    kept, the time later than the old one (so the old and new fingerprints differ)."""
    ino, size, mtime = (int(x) for x in old_file.split(":"))
    new_mtime = max(now_ns, mtime + 1)
    return f"{ino}:{size}:{new_mtime}", new_mtime


def split_patches(output, store: Path):
    """(patches, the rest of the output): of what recovery renders, the files the switch patches instead of
    replacing: kept consume-queue files (their span of written units, `recovery.render_span`, as recover --out
    writes them over a copy) and existing index files rewritten at their size (the pages keys were appended
    to: hash slots, header, entries). The checkpoint and markers stay whole-file replacements (one page each,
    renamed atomically). `output` is a recover.write.RecoveryOutput; the rest is a copy without the patched
    files. The patches are an iterator, each rendered when taken (stage_patches writes them out one by one:
    memory holds one file's span, not every re-dispatched unit at once)."""
    kept_cq, cq = [], []
    for item in output.render_cq:
        rel, _, qdir, _ = item
        (kept_cq if qdir is not None and (store / rel).is_file() else cq).append(item)
    index, whole = [], {}
    for rel, data in output.render_bytes.items():
        target = store / rel
        if rel.startswith("index/") and data and target.is_file() and os.stat(target).st_size == len(data):
            index.append((rel, data))
        else:
            whole[rel] = data
    return _patches(store, kept_cq, index), dataclasses.replace(output, render_cq=cq, render_bytes=whole)


def _patches(store: Path, kept_cq: list, index: list[tuple[str, bytes]]) -> Iterator[Patch]:
    """split_patches' patches, rendered one at a time."""
    from storage_format import recovery

    for rel, st, _, start in kept_cq:
        read: dict[tuple[int, int], bytes] = {}

        def pread(off: int, n: int, fd: int) -> bytes:
            read[(off, n)] = os.pread(fd, n, off)
            return read[(off, n)]
        fd = os.open(store / rel, os.O_RDONLY)
        try:
            at, units = recovery.render_span(st, start, lambda off, n, fd=fd: pread(off, n, fd))
        finally:
            os.close(fd)
        if len(units):
            data = units.tobytes()
            yield Patch(rel, ((at, len(data)),), data, read.get((at, len(data))))
    for rel, data in index:
        with open(store / rel, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as old:
            ranges = changed_ranges(old, data)
            view = memoryview(data)
            patch = Patch(rel, ranges, b"".join(view[a:a + n] for a, n in ranges),
                          b"".join(old[a:a + n] for a, n in ranges))
        if ranges:
            yield patch


KEEP_BYTES = 256 << 20  # patch bytes stage_patches keeps in memory for apply; past it apply reads them again


def stage_patches(store: Path, staging: Path, patches: Iterable[Patch],
                  keep: dict[str, tuple[bytes, bytes]] | None = None) -> list[Op]:
    """Stage every patch's new bytes, one after another in STAGING/patches.new (flushed by apply), and make
    their PATCH ops; a patch that changes no byte is no op. `keep` gets each op's (old, new) bytes by path, up
    to KEEP_BYTES in all, for apply (which then neither reads them again nor hashes them while the file is as
    staged)."""
    import time

    ops, at, kept = [], 0, 0
    packed = staging / PATCHES_NEW
    with open(packed, "wb") as out:
        for p in patches:
            target = store / p.path
            if sum(n for _, n in p.ranges) != len(p.data):
                raise ValueError(f"{p.path}: patch data does not fill its ranges")
            if any(a + n > os.stat(target).st_size for a, n in p.ranges):
                raise JobError(f"{target}: a patch reaches past the end of the file")
            old_file = fingerprint(target)
            old = p.old if p.old is not None and len(p.old) == len(p.data) else read_ranges(target, p.ranges)
            if old == p.data:
                continue
            new_file, _ = patched_id(old_file, time.time_ns())
            ops.append(Op(op=PATCH, path=p.path, old_sha256=hashlib.sha256(old).hexdigest(),
                          new_sha256=hashlib.sha256(p.data).hexdigest(), old_file=old_file, new_file=new_file,
                          ranges=p.ranges, packed_at=at))
            if keep is not None and kept + 2 * len(p.data) <= KEEP_BYTES:
                keep[p.path] = (old, p.data)
                kept += 2 * len(p.data)
            out.write(p.data)
            at += len(p.data)
    if not ops:
        packed.unlink()
    return ops


def read_packed(path: Path, op: Op) -> bytes | None:
    """A PATCH's bytes in a packed file (new: STAGING/patches.new, old: DIR/reput-patches.old), None where
    the file is missing or short."""
    if op.packed_at is None or not path.is_file():
        return None
    data = read_ranges(path, ((op.packed_at, op.span_bytes),))
    return data if len(data) == op.span_bytes else None


def backed_up_old(backup: Path, op: Op) -> bytes | None:
    """A PATCH's old bytes from the backup directory (DIR/reput-patches.old), checked against the manifest's
    sha256: None where missing, short or damaged."""
    data = read_packed(backup / PATCHES_OLD, op)
    return data if data is not None and hashlib.sha256(data).hexdigest() == op.old_sha256 else None


def staged_new(target: Path, op: Op) -> bytes | None:
    """A PATCH's new bytes from the store's staging area (there until the switch finishes), checked."""
    store = target
    for _ in Path(op.path).parts:
        store = store.parent
    data = read_packed(store / STAGING / PATCHES_NEW, op)
    return data if data is not None and hashlib.sha256(data).hexdigest() == op.new_sha256 else None
