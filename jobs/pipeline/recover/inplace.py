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
Way back: `rollback` restores the backup (works during and after a run, as long as DIR exists);
`resume` finishes an interrupted apply from the staging area.

How a file is known again (resume, rollback): with a hard-linked backup nothing is read whole. The
switch only renames staged files into place and links old ones into DIR, which keeps each file's
identity (inode, size, modification time: `fingerprint`): the manifest records it before and
after, and any write or replacement since changes it. A backup copied to another filesystem is
checked by sha256 instead (the manifest then holds both hashes). Files the plan rewrites with their
own bytes are left alone (compared byte for byte, not hashed).
"""
from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT

from ..io.compare import same_bytes
from ..io.copy import copy_range
from ..runtime.failure import JobError
from ..runtime.faults import crash_point

JOURNAL = ".reput-recover.journal"
STAGING = ".reput-recover.staging"
BACKUP_MANIFEST = "reput-backup.json"
REPLACE, CREATE, DELETE = "replace", "create", "delete"


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


def _fsync_all(paths: list[Path], dirs: bool = False) -> None:
    """fsync many files (or directories) concurrently; every one is durable when this returns."""
    if not paths:
        return
    with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(paths)), thread_name_prefix="reput-fsync") as pool:
        list(pool.map(_fsync_dir if dirs else _fsync_file, paths))


def _write_atomic(path: Path, data: bytes) -> None:
    """Write a small file through a temporary name, fsynced, then renamed."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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


@dataclass(frozen=True)
class Op:
    """One file operation of the switch: the file before (`old_*`, None when created) and after (`new_*`,
    None when deleted), by sha256 and/or by `fingerprint` (manifests before fingerprints have hashes only)."""

    op: str
    path: str
    old_sha256: str | None
    new_sha256: str | None
    old_file: str | None = None
    new_file: str | None = None

    def to_dict(self) -> dict:
        """JSON form for the journal and the backup manifest."""
        return {"op": self.op, "path": self.path, "old_sha256": self.old_sha256, "new_sha256": self.new_sha256,
                "old_file": self.old_file, "new_file": self.new_file}


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


def build_ops(store: Path, staging: Path, rendered: list[str], deleted: list[str], *, hashed: bool = True) -> list[Op]:
    """Replace/create every staged file that differs from the store's, delete the rest. Each file is recorded
    by `fingerprint`, and with `hashed` (a backup copied to another filesystem) by sha256 too."""
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
                ops.append(Op(REPLACE, rel, old_sha, new_sha, old_file, new_file))
        else:
            ops.append(Op(CREATE, rel, None, new_sha, None, new_file))
    rendered_set = set(rendered)
    for rel in deleted:
        if rel not in rendered_set and (store / rel).exists():
            old_sha, old_file = ident(store / rel)
            ops.append(Op(DELETE, rel, old_sha, None, old_file, None))
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


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under root (the staged files before the switch)."""
    files, dirs = [], []
    for dirpath, _, names in os.walk(root):
        files.extend(Path(dirpath) / f for f in names)
        dirs.append(Path(dirpath))
    _fsync_all(files)
    _fsync_all(dirs, dirs=True)


def apply(store: Path, staging: Path, backup: Path, ops: list[Op], plan_summary: dict) -> dict:
    """Steps 2-5 of the protocol; returns the backup manifest."""
    fsync_tree(staging)
    crash_point("staged")
    backup.mkdir(parents=True, exist_ok=True)
    if (backup / BACKUP_MANIFEST).exists():
        raise JobError(f"{backup} already holds a backup ({BACKUP_MANIFEST}); choose an empty --backup-dir")
    linked = same_filesystem(store, backup)
    if not linked:  # copies are checked by sha256: ops built for links get the old file's hash first
        ops = [o if o.op == CREATE or o.old_sha256 else
               Op(o.op, o.path, sha256_file(store / o.path), o.new_sha256, o.old_file, o.new_file) for o in ops]
    linked_dirs: set[Path] = set()
    for op in ops:
        if op.op in (REPLACE, DELETE):
            if linked:
                _link(store / op.path, backup / op.path)
                linked_dirs.add((backup / op.path).parent)
            else:
                _copy_durable(store / op.path, backup / op.path)
                if sha256_file(backup / op.path) != op.old_sha256:
                    raise JobError(f"{backup / op.path}: backup copy does not match {store / op.path}")
    for d in sorted(linked_dirs):
        _fsync_dir(d)
    saved = sum(o.op in (REPLACE, DELETE) for o in ops)
    backed = {"hard_linked": saved if linked else 0, "copied": 0 if linked else saved}
    manifest = {"store": str(store), "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                "ops": [o.to_dict() for o in ops], "plan": plan_summary, "backup": backed}
    _write_atomic(backup / BACKUP_MANIFEST, json.dumps(manifest, indent=2).encode())
    crash_point("backed-up")
    _write_atomic(store / JOURNAL, json.dumps({"state": "applying", "backup_dir": str(backup),
                                               "staging": str(staging), "ops": manifest["ops"]}, indent=2).encode())
    crash_point("journaled")
    _run_ops(store, staging, ops)
    crash_point("applied")
    _finish(store, staging)
    return manifest


def _run_ops(store: Path, staging: Path, ops: list[Op]) -> None:
    """Apply the operations in order; idempotent, so resume can run it again. The renames and unlinks in the
    store's subdirectories (consume queues, index, commit log) are made durable together, by one concurrent
    fsync of their directories, before the first file of the store's root (checkpoint, abort.bak, abort: the
    last steps) changes, and each root step is durable before the next: `abort` still goes last."""
    pending: set[Path] = set()
    for n, op in enumerate(ops, 1):
        target = store / op.path
        if op.op in (REPLACE, CREATE):
            staged = staging / op.path
            if staged.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
            elif not target.exists() or not _is(target, op.new_sha256, op.new_file):
                raise JobError(f"{target}: cannot finish: neither the staged file nor the new content is there")
        elif target.exists():
            target.unlink()
        if target.parent == store:
            _fsync_all(sorted(pending), dirs=True)
            pending.clear()
            _fsync_dir(store)
        else:
            pending.add(target.parent)
        crash_point(f"op-{n}")
    _fsync_all(sorted(pending), dirs=True)


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


def _rollback_state(target: Path, op: Op, backup: Path) -> str | None:
    """What the store holds at an Op's path: "old", "new", "absent" (where the Op allows that), or None for
    anything else (a file changed since the recovery). A file an earlier rollback restored is a copy of
    the backup: "old" by its bytes."""
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
    state = {op.path: _rollback_state(store / op.path, op, backup) for op in ops}
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
