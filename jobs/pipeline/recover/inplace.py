"""Apply a recovery plan to the store itself: staged new files, a verified backup, a journal, then
one atomic rename or unlink per file, with `resume` (roll forward) and `rollback` (restore) for a
run that was killed.

Protocol (local POSIX store only; every step is fsynced):
1. stage   - every file recovery writes goes to STORE/.reput-recover.staging/<path>. Killed here:
             the store is untouched (the next run removes the staging area).
2. backup  - every file that will be replaced or deleted is hard-linked (DIR on the store's
             filesystem) or copied to DIR/<path>, then DIR/reput-backup.json (store, operations,
             each file before and after: its identity, or for copies its sha256) is written
             atomically. Killed here: the store is untouched.
3. journal - STORE/.reput-recover.journal (same operations) is written atomically: from now on the
             store may be part old, part new, and the journal says so.
4. apply   - in order: consume-queue and index files replaced/created (os.replace from the staging
             area), then files deleted (consume queue, index, commit-log segments past the
             truncation point), then the checkpoint, `abort.bak`, and last the `abort` file.
             Each step is a single rename or unlink, so every file is either old or new, and
             until the last step `abort` still marks the store unclean: a broker started on it
             runs its own recovery.
5. finish  - the journal is removed (the store is now the new state), then the staging area.
Patches: a file recovery changes in a few byte ranges and whose size stays (a kept consume-queue file with
re-dispatched units, an index file keys are appended to) is not staged whole and renamed: its new bytes of
those ranges are staged (all patches' in one file, STAGING/patches.new), its old bytes of them backed up
(DIR/reput-patches.old, at the same offsets; each patch checked by sha256), and apply writes the new bytes
over the store's file, then sets its modification time to the one the journal recorded and fsyncs it (the
broker's own recovery writes these files in place too). Killed mid-write, a patched file holds each range's
old or new bytes page by page: resume writes the new bytes again, rollback the old ones.
Way back: `rollback` restores the backup (works during and after a run, as long as DIR exists);
`resume` finishes an interrupted apply from the staging area.

How a file is known again (resume, rollback): with a hard-linked backup nothing is read whole. The
switch only renames staged files into place and links old ones into DIR, which keeps each file's
identity (inode, size, modification time: `fingerprint`): the manifest records it before and
after, and any write or replacement since changes it. A backup copied to another filesystem is
checked by sha256 instead (the manifest then holds both hashes). Files the plan rewrites with their
own bytes are left alone (compared byte for byte, not hashed). A patched file keeps its inode and size; its
identity after the switch is the modification time apply sets (recorded before the switch), so a write
since (a broker's) still shows.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import hashlib
import json
import mmap
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT

from ..io.compare import same_bytes
from ..io.copy import copy_range
from ..io.fs import pwrite_all
from ..runtime.failure import JobError
from ..runtime.faults import crash_point

JOURNAL = ".reput-recover.journal"
STAGING = ".reput-recover.staging"
BACKUP_MANIFEST = "reput-backup.json"
REPLACE, CREATE, DELETE, PATCH = "replace", "create", "delete", "patch"
PAGE = 4096  # the unit changed ranges are found in, and a torn patched range is judged by
PATCHES_NEW = "patches.new"  # STAGING/: every patch's new bytes, one after another (one file to flush)
PATCHES_OLD = "reput-patches.old"  # DIR/: their old bytes, at the same offsets


def local_store(uri: str) -> Path:
    """In-place recovery renames files, so the store must be a local directory."""
    if "://" in uri and not uri.startswith("file://"):
        raise JobError(f"--in-place needs a local store directory, not {uri}: the switch renames files one by one "
                       f"and checks the broker's lock, which object storage (s3://) does not offer; recover with "
                       f"--out instead")
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri).resolve()


def sha256_file(path: Path) -> str:
    """sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(path: Path) -> str:
    """A file's identity without reading it: inode, size, modification time (ns); not the device number,
    which some filesystems renumber across the reboot after a crash."""
    st = os.stat(path)
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def same_filesystem(store: Path, backup: Path) -> bool:
    """DIR (or, before it exists, the directory it will be made in) lies on the store's filesystem, so the
    backup can be hard links."""
    probe = backup
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.stat(store).st_dev == os.stat(probe).st_dev


def _fsync_file(path: Path) -> None:
    """Flush one file to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Flush a directory (its entries) to stable storage where the filesystem allows it."""
    try:
        _fsync_file(path)
    except OSError as exc:  # some filesystems do not allow fsync on a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.EACCES):
            raise


SYNC_THREADS = 8  # fsyncs issued at once: the filesystem's journal commits them together (one wait, not one each)


def _fsync_all(paths: list[Path]) -> None:
    """fsync many files and directories concurrently (a directory where its filesystem allows it); every one
    is durable when this returns."""
    if not paths:
        return
    if len(paths) == 1:
        _fsync_path(paths[0])
        return
    with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(paths)), thread_name_prefix="reput-fsync") as pool:
        list(pool.map(_fsync_path, paths))


def _fsync_path(path: Path) -> None:
    """fsync a file, or a directory where its filesystem allows it."""
    (_fsync_dir if path.is_dir() else _fsync_file)(path)


def _link(src: Path, dst: Path) -> None:
    """Back src up as a hard link dst (same filesystem): the switch replaces or unlinks the store's name and
    never writes the old inode, so the backup keeps the old bytes without copying them. The caller fsyncs
    dst's directory (once per directory, before the manifest)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    os.link(src, dst)


def _copy_durable(src: Path, dst: Path) -> None:
    """Copy src to dst through a temporary name, fsynced, then renamed (dst is whole or absent)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".reput-tmp")
    try:
        copy_range(str(src), str(tmp))  # in the kernel (a reflink where the filesystem shares extents)
    except OSError:
        shutil.copyfile(src, tmp)  # os.sendfile, itself falling back to read/write
    with open(tmp, "rb+") as fout:
        os.fsync(fout.fileno())
    shutil.copystat(src, tmp)
    os.replace(tmp, dst)
    _fsync_dir(dst.parent)


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


def _read_ranges(path: Path, ranges: tuple[tuple[int, int], ...]) -> bytes:
    """A file's bytes in `ranges`, concatenated (short where the file is shorter)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return b"".join(os.pread(fd, n, at) for at, n in ranges)
    finally:
        os.close(fd)


def _write_ranges(path: Path, ranges: tuple[tuple[int, int], ...], data: bytes, mtime_ns: int) -> None:
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


def _patched_id(old_file: str, now_ns: int) -> tuple[str, int]:
    """A patched file's fingerprint after the switch, and the modification time that makes it: inode and size
    kept, the time later than the old one (so the old and new fingerprints differ)."""
    ino, size, mtime = (int(x) for x in old_file.split(":"))
    new_mtime = max(now_ns, mtime + 1)
    return f"{ino}:{size}:{new_mtime}", new_mtime


def _mtime_of(file_id: str) -> int:
    return int(file_id.split(":")[2])


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
            old = p.old if p.old is not None and len(p.old) == len(p.data) else _read_ranges(target, p.ranges)
            if old == p.data:
                continue
            new_file, _ = _patched_id(old_file, time.time_ns())
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


def _packed(path: Path, op: Op) -> bytes | None:
    """A PATCH's bytes in a packed file (new: STAGING/patches.new, old: DIR/reput-patches.old), None where
    the file is missing or short."""
    if op.packed_at is None or not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, op.span_bytes, op.packed_at)
    finally:
        os.close(fd)
    return data if len(data) == op.span_bytes else None


def _patch_state(target: Path, op: Op, backup: Path | None, interrupted: bool) -> str | None:
    """What a patched file holds: "new" or "old" (by fingerprint), or None (written since). Only while a
    switch is `interrupted` (its journal present) may a patched file be between the two: then it is judged
    by its ranges' bytes, "new", "old", or "torn" (each PAGE of them old or new: a write killed part-way)."""
    fp = fingerprint(target)
    if fp == op.new_file:
        return "new"
    if fp == op.old_file:
        return "old"
    if not interrupted or op.old_file is not None and fp.split(":")[:2] != op.old_file.split(":")[:2]:
        return None  # written since the switch, or another inode or size: not the file the switch patched
    now = _read_ranges(target, op.ranges)
    digest = hashlib.sha256(now).hexdigest()
    if digest == op.new_sha256:
        return "new"
    if digest == op.old_sha256:
        return "old"
    old = _packed(backup / PATCHES_OLD, op) if backup is not None else None
    new = _staged_new(target, op)
    if old is None or new is None or hashlib.sha256(old).hexdigest() != op.old_sha256:
        return None
    for at in range(0, len(now), PAGE):
        block = now[at:at + PAGE]
        if block != old[at:at + PAGE] and block != new[at:at + PAGE]:
            return None
    return "torn"


def _staged_new(target: Path, op: Op) -> bytes | None:
    """A PATCH's new bytes from the store's staging area (there until the switch finishes), checked."""
    store = target
    for _ in Path(op.path).parts:
        store = store.parent
    data = _packed(store / STAGING / PATCHES_NEW, op)
    return data if data is not None and hashlib.sha256(data).hexdigest() == op.new_sha256 else None


def _is(path: Path, sha: str | None, file_id: str | None) -> bool:
    """path is the file an Op recorded: the same fingerprint, else (when the Op has one) the same sha256."""
    if file_id is not None and fingerprint(path) == file_id:
        return True
    return sha is not None and sha256_file(path) == sha


def _order(path: str) -> int:
    """Apply order: data files first, then the checkpoint and markers, the abort file last."""
    if path == ABORT:
        return 9
    if path == ABORT_BAK:
        return 8
    if path == CHECKPOINT:
        return 7
    return 0


def build_ops(store: Path, staging: Path, rendered: list[str], deleted: list[str], *, hashed: bool = True,
              patched: list[Op] = ()) -> list[Op]:
    """Replace/create every staged file that differs from the store's, delete the rest; `patched`: the PATCH
    ops of stage_patches, applied with the other data files. Each file is recorded by `fingerprint`, and
    with `hashed` (a backup copied to another filesystem) by sha256 too."""
    def ident(path: Path) -> tuple[str | None, str]:
        return (sha256_file(path) if hashed else None), fingerprint(path)

    ops = []
    for rel in rendered:
        target, staged = store / rel, staging / rel
        new_sha, new_file = ident(staged)
        if target.exists():
            if new_sha is None and same_bytes(staged, target):
                continue
            old_sha, old_file = ident(target)
            if old_sha is None or old_sha != new_sha:
                ops.append(Op(op=REPLACE, path=rel, old_sha256=old_sha, new_sha256=new_sha, old_file=old_file,
                              new_file=new_file))
        else:
            ops.append(Op(op=CREATE, path=rel, old_sha256=None, new_sha256=new_sha, old_file=None,
                          new_file=new_file))
    rendered_set = set(rendered)
    for rel in deleted:
        if rel not in rendered_set and (store / rel).exists():
            old_sha, old_file = ident(store / rel)
            ops.append(Op(op=DELETE, path=rel, old_sha256=old_sha, new_sha256=None, old_file=old_file,
                          new_file=None))
    ops += patched
    writes = [o for o in ops if o.op != DELETE and _order(o.path) == 0]
    dels = [o for o in ops if o.op == DELETE and _order(o.path) == 0]
    tail = sorted((o for o in ops if _order(o.path)), key=lambda o: _order(o.path))
    return writes + dels + tail


def check_not_interrupted(store: Path) -> None:
    """Refuse to start while an earlier in-place run's journal is present."""
    journal = store / JOURNAL
    if journal.exists():
        info = json.loads(journal.read_text())
        raise JobError(f"{journal}: an earlier in-place recovery was interrupted (backup in {info.get('backup_dir')}); "
                       f"run again with --resume to finish it or --rollback to restore the original files")


def prepare_staging(store: Path) -> Path:
    """A fresh staging area; leftovers of a run killed before its journal are garbage."""
    staging = store / STAGING
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    return staging


def _tree(root: Path) -> tuple[list[Path], list[Path]]:
    """Every file and every directory under root (root included)."""
    files, dirs = [], []
    for dirpath, _, names in os.walk(root):
        files.extend(Path(dirpath) / f for f in names)
        dirs.append(Path(dirpath))
    return files, dirs


def apply(store: Path, staging: Path, backup: Path, ops: list[Op], plan_summary: dict,
          patch_bytes: dict[str, tuple[bytes, bytes]] | None = None) -> dict:
    """Steps 2-5 of the protocol; returns the backup manifest. The waits for the disk are batched: the staged
    files and the backup's entries are made durable together (one concurrent batch, the backup made while
    the staged files are flushed), the manifest and the journal are flushed together (the journal renamed
    into place only once the manifest is durable), and the switch waits once for the data files and once
    for the store root before `abort` goes. `patch_bytes`: stage_patches' `keep` (a patched file still as
    staged, by its fingerprint, is backed up and written from these bytes, not read and hashed again)."""
    backup.mkdir(parents=True, exist_ok=True)
    if (backup / BACKUP_MANIFEST).exists():
        raise JobError(f"{backup} already holds a backup ({BACKUP_MANIFEST}); choose an empty --backup-dir")
    files, dirs = _tree(staging)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reput-staged-sync") as flusher:
        staged = flusher.submit(_fsync_all, files + dirs)  # the staged area flushed while backing up
        linked = same_filesystem(store, backup)
        if not linked:  # copies are checked by sha256: ops built for links get the old file's hash first
            ops = [o if o.op == CREATE or o.old_sha256 else
                   dataclasses.replace(o, old_sha256=sha256_file(store / o.path)) for o in ops]
        backup_dirs: set[Path] = {backup}
        spans: list[tuple[int, bytes]] = []
        for op in ops:
            if op.op == PATCH:  # the old bytes of its ranges, checked against what stage_patches read
                kept = (patch_bytes or {}).get(op.path)
                if kept is not None and fingerprint(store / op.path) == op.old_file:
                    old = kept[0]  # the file as staged: the bytes stage_patches read and hashed
                elif hashlib.sha256(old := _read_ranges(store / op.path, op.ranges)).hexdigest() \
                        != op.old_sha256:
                    raise JobError(f"{store / op.path}: changed while recovery ran (its bytes to be patched "
                                   f"differ from those read when staging); run recovery again")
                spans.append((op.packed_at, old))
            elif op.op in (REPLACE, DELETE):
                if linked:
                    _link(store / op.path, backup / op.path)
                    backup_dirs.add((backup / op.path).parent)
                else:
                    _copy_durable(store / op.path, backup / op.path)
                    if sha256_file(backup / op.path) != op.old_sha256:
                        raise JobError(f"{backup / op.path}: backup copy does not match {store / op.path}")
        if spans:  # each at the offset its op names, as stage_patches packed the new bytes
            fd = os.open(backup / PATCHES_OLD, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for at, old in spans:
                    pwrite_all(fd, old, at)
            finally:
                os.close(fd)
        _fsync_all(([backup / PATCHES_OLD] if spans else []) + sorted(backup_dirs))
        staged.result()
    crash_point("staged")
    saved = sum(o.op in (REPLACE, DELETE) for o in ops)
    backed = {"hard_linked": saved if linked else 0, "copied": 0 if linked else saved,
              "patched": len(spans), "patched_bytes": sum(o.span_bytes for o in ops if o.op == PATCH)}
    manifest = {"store": str(store), "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                "ops": [o.to_dict() for o in ops], "plan": plan_summary, "backup": backed}
    journal = {"state": "applying", "backup_dir": str(backup), "staging": str(staging), "ops": manifest["ops"]}
    _write_pair(backup / BACKUP_MANIFEST, json.dumps(manifest, indent=2).encode(),
                store / JOURNAL, json.dumps(journal, indent=2).encode())
    crash_point("journaled")
    _run_ops(store, staging, ops, {k: new for k, (_, new) in (patch_bytes or {}).items()})
    crash_point("applied")
    _finish(store, staging)
    return manifest


def _write_pair(first: Path, first_data: bytes, then: Path, then_data: bytes) -> None:
    """Two small files each written through a temporary name and renamed, flushed together; `then` appears only once `first` is durable (the
    backup manifest before the journal that points at it)."""
    tmps = [first.with_name(first.name + ".tmp"), then.with_name(then.name + ".tmp")]
    for tmp, data in zip(tmps, (first_data, then_data)):
        with open(tmp, "wb") as f:
            f.write(data)
    _fsync_all(tmps)
    os.replace(tmps[0], first)
    _fsync_dir(first.parent)
    crash_point("backed-up")
    os.replace(tmps[1], then)
    _fsync_dir(then.parent)


def _run_ops(store: Path, staging: Path, ops: list[Op], new_bytes: dict[str, bytes] | None = None) -> None:
    """Apply the operations in order; idempotent, so resume can run it again. The data files' changes (renames
    and unlinks in consume queues, index, commit log; patched files) are made durable together, by one
    concurrent fsync, before the first file of the store's root (checkpoint, abort.bak, lock) changes; those
    are made durable together before `abort`, the last step, goes."""
    pending: set[Path] = set()
    patched: list[Path] = []
    root_changed = False
    for n, op in enumerate(ops, 1):
        target = store / op.path
        if target.parent == store and (patched or pending) or op.path == ABORT and root_changed:
            _fsync_all(patched + sorted(pending))
            pending.clear()
            patched.clear()
            if root_changed:
                _fsync_dir(store)
                root_changed = False
        if op.op == PATCH:
            if not target.is_file():
                raise JobError(f"{target}: cannot finish: the file to patch is gone")
            if fingerprint(target) != op.new_file:
                new = (new_bytes or {}).get(op.path) or _staged_new(target, op)
                if new is None:
                    raise JobError(f"{target}: cannot finish: the staged bytes of its patch are missing or damaged")
                _write_ranges(target, op.ranges, new, _mtime_of(op.new_file))
                patched.append(target)
        elif op.op in (REPLACE, CREATE):
            staged = staging / op.path
            if staged.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
            elif not target.exists() or not _is(target, op.new_sha256, op.new_file):
                raise JobError(f"{target}: cannot finish: neither the staged file nor the new content is there")
        elif target.exists():
            target.unlink()
        if target.parent == store:
            root_changed = True
        elif op.op != PATCH:
            pending.add(target.parent)
        crash_point(f"op-{n}")
    _fsync_all(patched + sorted(pending))
    if root_changed:
        _fsync_dir(store)


def _finish(store: Path, staging: Path) -> None:
    """Drop the journal (the store is now new) and the staging area."""
    (store / JOURNAL).unlink()
    _fsync_dir(store)
    shutil.rmtree(staging, ignore_errors=True)


def _remove_empty_parents(d: Path, store: Path) -> None:
    """Directories a created file needed (a new queue's) go again when rollback leaves them empty."""
    while d != store and store in d.parents and d.is_dir() and not any(d.iterdir()):
        d.rmdir()
        d = d.parent


def resume(store: Path) -> dict:
    """Roll an interrupted apply forward to the new state."""
    journal = store / JOURNAL
    if not journal.exists():
        raise JobError(f"{store}: no interrupted in-place recovery to resume (no {JOURNAL})")
    info = json.loads(journal.read_text())
    ops = [Op(**o) for o in info["ops"]]
    _run_ops(store, store / STAGING, ops)
    _finish(store, store / STAGING)
    return {"resumed": len(ops), "backup_dir": info["backup_dir"]}


def _rollback_state(target: Path, op: Op, backup: Path, interrupted: bool = False) -> str | None:
    """What the store holds at an Op's path: "old", "new", "absent" (where the Op allows that), or None for
    anything else (a file changed since the recovery). A file an earlier rollback restored is a copy of
    the backup: "old" by its bytes."""
    if op.op == PATCH:
        return _patch_state(target, op, backup, interrupted) if target.exists() else None
    if not target.exists():
        return "absent" if op.old_sha256 is None and op.old_file is None or op.op == DELETE else None
    if op.new_file is not None or op.new_sha256 is not None:
        if _is(target, op.new_sha256, op.new_file):
            return "new"
    if op.op != CREATE:
        if _is(target, op.old_sha256, op.old_file):
            return "old"
        if op.old_sha256 is None and (backup / op.path).exists() and same_bytes(target, backup / op.path):
            return "old"
    return None


def rollback(store: Path, backup: Path) -> dict:
    """Restore the state before recovery from the backup (during or after an in-place run)."""
    manifest_path = backup / BACKUP_MANIFEST
    if not manifest_path.exists():
        raise JobError(f"{backup}: no {BACKUP_MANIFEST}; the backup is incomplete or not a reput backup "
                       f"(a run killed before its backup finished never touched the store)")
    manifest = json.loads(manifest_path.read_text())
    if Path(manifest["store"]) != store:
        raise JobError(f"{manifest_path} is a backup of {manifest['store']}, not of {store}")
    ops = [Op(**o) for o in manifest["ops"]]
    interrupted = (store / JOURNAL).exists()
    state = {op.path: _rollback_state(store / op.path, op, backup, interrupted) for op in ops}
    foreign = [op.path for op in ops if state[op.path] is None]
    if foreign:
        raise JobError(f"files changed since the recovery (a broker may have run on the store): "
                       f"{', '.join(foreign[:5])}; refusing to roll back")
    for op in reversed(ops):
        target = store / op.path
        if op.op == CREATE:
            if target.exists():
                target.unlink()
                _fsync_dir(target.parent)
            _remove_empty_parents(target.parent, store)
        elif op.op == PATCH:
            if state[op.path] != "old":
                old = _packed(backup / PATCHES_OLD, op)
                if old is None or hashlib.sha256(old).hexdigest() != op.old_sha256:
                    raise JobError(f"{backup / PATCHES_OLD}: backup of {op.path} is missing or damaged (it differs "
                                   f"from the manifest's sha256)")
                _write_ranges(target, op.ranges, old, _mtime_of(op.old_file))
                _fsync_file(target)
        elif state[op.path] != "old":
            if not _is(backup / op.path, op.old_sha256, op.old_file):
                raise JobError(f"{backup / op.path}: backup copy is damaged (it differs from the manifest's "
                               f"{'sha256' if op.old_sha256 else 'record of the file'})")
            _copy_durable(backup / op.path, target)
    if (store / JOURNAL).exists():
        _finish(store, store / STAGING)
    else:
        shutil.rmtree(store / STAGING, ignore_errors=True)
    return {"restored": len(ops), "backup_dir": str(backup)}
