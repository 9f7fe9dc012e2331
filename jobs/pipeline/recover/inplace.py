"""Apply a recovery plan to the store itself: staged new files, a verified backup, a journal, then
one atomic rename or unlink per file, with `resume` (roll forward) and `rollback` (restore) for a
run that was killed.

Protocol (local POSIX store only; every step is fsynced):
1. stage   - every file recovery writes goes to STORE/.reput-recover.staging/<path>. Killed here:
             the store is untouched (the next run removes the staging area).
2. backup  - every file that will be replaced or deleted is hard-linked (DIR on the store's
             filesystem) or copied to DIR/<path>, then DIR/reput-backup.json (store, operations,
             each file before and after: its identity, or for copies its sha256) is written
             atomically. Killed here: the store is untouched. Stopped in steps 1-2 by an error or a
             signal, the run removes the staging area and takes out of DIR what it put there.
3. journal - STORE/.reput-recover.journal (same operations) is written atomically: from now on the
             store may be part as before the switch, part as after it, and the journal says so.
4. apply   - in order: consume-queue and index files replaced/created (os.replace from the staging
             area), then files deleted (consume queue, index, commit-log segments past the
             truncation point), then the checkpoint, `abort.bak`, and last the `abort` file.
             Each step is a single rename or unlink, so every file is either as before or as after, and
             until the last step `abort` still marks the store unclean: a broker started on it
             runs its own recovery.
5. finish  - the journal is removed (the store is now the new state), then the staging area.
Patches: a file recovery changes in a few byte ranges and whose size stays (a kept consume-queue file with
re-dispatched units, an index file keys are appended to) is not staged whole and renamed: its new bytes of
those ranges are staged (all patches' in one file, STAGING/patches.new), its bytes before the switch backed up
(DIR/reput-patches.old, at the same offsets; each patch checked by sha256), and apply writes the new bytes
over the store's file, then sets its modification time to the one the journal recorded and fsyncs it (the
broker's own recovery writes these files in place too). Killed mid-write, a patched file holds each range's
bytes before or after the switch page by page: resume writes the new bytes again, rollback the bytes before.
Way back: `rollback` restores the backup (works during and after a run, as long as DIR exists);
`resume` finishes an interrupted apply from the staging area. A run stopped once its journal is written (an error,
ENOSPC or EIO, a signal) names both in its one line (`switch`, `way_out`), as does a later run refused by the journal.

How a file is known again (resume, rollback): with a hard-linked backup nothing is read whole. The
switch only renames staged files into place and links the files it replaces into DIR, which keeps each file's
identity (inode, size, modification time: `fingerprint`): the manifest records it before and
after, and any write or replacement since changes it. A backup copied to another filesystem is
checked by sha256 instead (the manifest then holds both hashes). Files the plan rewrites with their
own bytes are left alone (compared byte for byte, not hashed). A patched file keeps its inode and size; its
identity after the switch is the modification time apply sets (recorded before the switch), so a write
since (a broker's) still shows.
The records (`Op`, file names) are recover.journal's (an op's `old_*` fields: its file before the switch, `new_*`:
after it), patches recover.patches', and how resume and rollback judge each op's file recover.op_state's.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT

from ..io.compare import same_bytes
from ..io.durable import copy_durable, fsync_all, fsync_dir, fsync_file, link
from ..io.file_id import fingerprint, mtime_of, sha256_file
from ..io.fs import pwrite_all
from ..runtime import interrupt
from ..runtime.failure import Interrupted, JobError, one_line
from ..runtime.faults import crash_point, pause_at
from .journal import (BACKUP_MANIFEST, CREATE, DELETE, JOURNAL, PATCH, PATCHES_OLD, REPLACE, STAGING, Op,
                      write_pair)
from .op_state import is_recorded, rollback_state
from .partial_backup import PartialBackup
from .patches import backed_up_old, read_ranges, staged_new, write_ranges


def local_store(uri: str) -> Path:
    """In-place recovery renames files, so the store must be a local directory."""
    if "://" in uri and not uri.startswith("file://"):
        raise JobError(f"--in-place needs a local store directory, not {uri}: the switch renames files one by one "
                       f"and checks the broker's lock, which object storage (s3://) does not offer; recover with "
                       f"--out instead")
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri).resolve()


def same_filesystem(store: Path, backup: Path) -> bool:
    """DIR (or, before it exists, the directory it will be made in) lies on the store's filesystem, so the
    backup can be hard links."""
    probe = backup
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.stat(store).st_dev == os.stat(probe).st_dev


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
            before_sha, before_file = ident(target)
            if before_sha is None or before_sha != new_sha:
                ops.append(Op(op=REPLACE, path=rel, old_sha256=before_sha, new_sha256=new_sha, old_file=before_file,
                              new_file=new_file))
        else:
            ops.append(Op(op=CREATE, path=rel, old_sha256=None, new_sha256=new_sha, old_file=None,
                          new_file=new_file))
    rendered_set = set(rendered)
    for rel in deleted:
        if rel not in rendered_set and (store / rel).exists():
            before_sha, before_file = ident(store / rel)
            ops.append(Op(op=DELETE, path=rel, old_sha256=before_sha, new_sha256=None, old_file=before_file,
                          new_file=None))
    ops += patched
    writes = [o for o in ops if o.op != DELETE and _order(o.path) == 0]
    dels = [o for o in ops if o.op == DELETE and _order(o.path) == 0]
    tail = sorted((o for o in ops if _order(o.path)), key=lambda o: _order(o.path))
    return writes + dels + tail


def way_out(store: Path, backup: Path | str) -> str:
    """How a switch that stopped part-way is finished or undone: every line that leaves one behind names both."""
    return (f"finish it with `reput recover --store {store} --resume`, or undo it with `reput recover --store {store} "
            f"--rollback --backup-dir {backup}`")


def check_not_interrupted(store: Path, what: str = "the store") -> None:
    """Refuse to start while an earlier in-place run's journal is present (inside the run's locks: a run that holds
    them may be writing it), naming the way out with the backup the journal names."""
    journal = store / JOURNAL
    if journal.exists():
        raise JobError(f"{journal}: an earlier in-place run on {what} was interrupted part-way through its switch: "
                       f"{way_out(store, journal_backup(store))}")


def journaled(store: Path) -> bool:
    """The store holds a switch's journal: it is part-way through it (when that cannot be told: taken as so)."""
    try:
        return (store / JOURNAL).exists()
    except OSError:
        return True


def journal_backup(store: Path) -> str:
    """The --backup-dir the store's journal names ("DIR" when it cannot be read)."""
    try:
        return json.loads((store / JOURNAL).read_text()).get("backup_dir") or "DIR"
    except (OSError, ValueError, AttributeError):
        return "DIR"


def switch(store: Path, staging: Path, backup: Path, ops: list[Op], plan_summary: dict,
           patch_bytes: dict[str, tuple[bytes, bytes]] | None = None, *, what: str = "the store") -> dict:
    """`apply`, where a failure of any kind once the journal is written (an error, ENOSPC or EIO, Ctrl-C or SIGTERM)
    is one line naming `way_out`, and one before it says that `what` is as it was (and DIR: what the switch had put
    into it is taken out again)."""
    _check_backup_dir(backup)  # refused before anything is written into DIR, so what the switch puts there is its own
    begun = PartialBackup.of(backup, ops)
    journaled: list[bool] = []
    try:
        return apply(store, staging, backup, ops, plan_summary, patch_bytes, on_journal=lambda: journaled.append(True))
    except KeyboardInterrupt:
        raise Interrupted(_stopped(store, begun, bool(journaled), what)) from None
    except Exception as exc:
        where = _stopped(store, begun, bool(journaled), what)
        if interrupt.signalled():  # a signal's KeyboardInterrupt replaced on its way up: the signal ends the run
            raise Interrupted(where) from None
        raise JobError(f"{one_line(exc)}; {where}") from exc


def _check_backup_dir(backup: Path) -> None:
    """DIR must not hold a backup already (an earlier run's, which --rollback may still need)."""
    if (backup / BACKUP_MANIFEST).exists():
        raise JobError(f"{backup} already holds a backup ({BACKUP_MANIFEST}); choose an empty --backup-dir")


def _stopped(store: Path, begun: PartialBackup, wrote_journal: bool, what: str) -> str:
    """What a switch that stopped left of `what` and of DIR, and the way out; stopped before its journal, it first
    takes what it had put into DIR out again (nothing will roll back to it)."""
    if journaled(store):
        return f"{what} is part-way through the switch: {way_out(store, begun.dir)}"
    if wrote_journal:  # the journal written and removed again: every operation ran, the removal's flush did not
        return (f"{what} went through the whole switch, but its end may not be on disk: should {JOURNAL} be back "
                f"in it after a restart, {way_out(store, begun.dir)}")
    left = begun.take_back()
    if left:
        return (f"{not_begun(what)}; --backup-dir {begun.dir} still holds {len(left)} entries of the backup it "
                f"began (e.g. {left[0]}), of no use: remove them")
    return not_begun(what)


def switched(store: Path, backup: Path) -> bool:
    """A switch into `store` with `backup` as DIR has completed: DIR holds its manifest (a switch stopped before its
    journal takes it out again; DIR held none before it) and the store no journal."""
    return (backup / BACKUP_MANIFEST).exists() and not (store / JOURNAL).exists()


def not_begun(what: str) -> str:
    """The line's end for a run stopped before its switch changed anything."""
    return f"{what} is as it was: its switch had not begun"


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


def _write_spans(path: Path, spans: list[tuple[int, bytes]]) -> None:
    """The patches' bytes before the switch, each at the offset its op names (as stage_patches packed the new
    bytes)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for at, before in spans:
            pwrite_all(fd, before, at)
    finally:
        os.close(fd)


def apply(store: Path, staging: Path, backup: Path, ops: list[Op], plan_summary: dict,
          patch_bytes: dict[str, tuple[bytes, bytes]] | None = None,
          on_journal: Callable[[], None] | None = None) -> dict:
    """Steps 2-5 of the protocol; returns the backup manifest. The waits for the disk are batched: the staged
    files and the backup's entries are made durable together (one concurrent batch, the backup made while
    the staged files are flushed), the manifest and the journal are flushed together (the journal renamed
    into place only once the manifest is durable), and the switch waits once for the data files and once
    for the store root before `abort` goes. `patch_bytes`: stage_patches' `keep` (a patched file still as
    staged, by its fingerprint, is backed up and written from these bytes, not read and hashed again);
    `on_journal`: called once the journal is written."""
    _check_backup_dir(backup)
    backup.mkdir(parents=True, exist_ok=True)
    files, dirs = _tree(staging)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reput-staged-sync") as flusher:
        staged = flusher.submit(fsync_all, files + dirs)  # the staged area flushed while backing up
        linked = same_filesystem(store, backup)
        if not linked:  # copies are checked by sha256: ops built for links get the replaced file's hash first
            ops = [o if o.op == CREATE or o.old_sha256 else
                   dataclasses.replace(o, old_sha256=sha256_file(store / o.path)) for o in ops]
        spans = _back_up(store, backup, ops, patch_bytes or {}, linked)
        staged.result()
    crash_point("staged")
    pause_at("staged")
    saved = sum(o.op in (REPLACE, DELETE) for o in ops)
    backed = {"hard_linked": saved if linked else 0, "copied": 0 if linked else saved,
              "patched": len(spans), "patched_bytes": sum(o.span_bytes for o in ops if o.op == PATCH)}
    manifest = {"store": str(store), "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                "ops": [o.to_dict() for o in ops], "plan": plan_summary, "backup": backed}
    journal = {"state": "applying", "backup_dir": str(backup), "staging": str(staging), "ops": manifest["ops"]}
    write_pair(backup / BACKUP_MANIFEST, json.dumps(manifest, indent=2).encode(),
               store / JOURNAL, json.dumps(journal, indent=2).encode())
    if on_journal is not None:
        on_journal()
    crash_point("journaled")
    _run_ops(store, staging, ops, {k: new for k, (_, new) in (patch_bytes or {}).items()})
    crash_point("applied")
    _finish(store, staging)
    return manifest


def _back_up(store: Path, backup: Path, ops: list[Op], patch_bytes: dict[str, tuple[bytes, bytes]],
             linked: bool) -> list[tuple[int, bytes]]:
    """Step 2's files, made durable: each file the switch replaces or deletes hard-linked (`linked`) or copied and
    checked into DIR, the patched ranges' bytes before the switch into DIR/reput-patches.old; returns those spans."""
    backup_dirs: set[Path] = {backup}
    spans: list[tuple[int, bytes]] = []
    for op in ops:
        if op.op == PATCH:  # its ranges' bytes before the switch, checked against what stage_patches read
            kept = patch_bytes.get(op.path)
            if kept is not None and fingerprint(store / op.path) == op.old_file:
                before = kept[0]  # the file as staged: the bytes stage_patches read and hashed
            elif hashlib.sha256(before := read_ranges(store / op.path, op.ranges)).hexdigest() != op.old_sha256:
                raise JobError(f"{store / op.path}: changed while recovery ran (its bytes to be patched "
                               f"differ from those read when staging); run recovery again")
            spans.append((op.packed_at, before))
        elif op.op in (REPLACE, DELETE):
            if linked:  # the switch renames over or unlinks the name, never writes the inode: no copy needed
                link(store / op.path, backup / op.path)
                backup_dirs.add((backup / op.path).parent)
            else:
                copy_durable(store / op.path, backup / op.path)
                if sha256_file(backup / op.path) != op.old_sha256:
                    raise JobError(f"{backup / op.path}: backup copy does not match {store / op.path}")
    if spans:
        _write_spans(backup / PATCHES_OLD, spans)
    fsync_all(([backup / PATCHES_OLD] if spans else []) + sorted(backup_dirs))
    return spans


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
            fsync_all(patched + sorted(pending))
            pending.clear()
            patched.clear()
            if root_changed:
                fsync_dir(store)
                root_changed = False
        if op.op == PATCH:
            if not target.is_file():
                raise JobError(f"{target}: cannot finish: the file to patch is gone")
            if fingerprint(target) != op.new_file:
                new = (new_bytes or {}).get(op.path) or staged_new(target, op)
                if new is None:
                    raise JobError(f"{target}: cannot finish: the staged bytes of its patch are missing or damaged")
                write_ranges(target, op.ranges, new, mtime_of(op.new_file))
                patched.append(target)
        elif op.op in (REPLACE, CREATE):
            staged = staging / op.path
            if staged.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
            elif not target.exists() or not is_recorded(target, op.new_sha256, op.new_file):
                raise JobError(f"{target}: cannot finish: neither the staged file nor the new content is there")
        elif target.exists():
            target.unlink()
        if target.parent == store:
            root_changed = True
        elif op.op != PATCH:
            pending.add(target.parent)
        crash_point(f"op-{n}")
        pause_at(f"op-{n}")
    fsync_all(patched + sorted(pending))
    if root_changed:
        fsync_dir(store)


def _finish(store: Path, staging: Path) -> None:
    """Drop the journal (the store is now new) and the staging area."""
    (store / JOURNAL).unlink()
    fsync_dir(store)
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


def rollback(store: Path, backup: Path) -> dict:
    """Restore the state before recovery from the backup (during or after an in-place run)."""
    manifest_path = backup / BACKUP_MANIFEST
    if not manifest_path.exists():
        if (store / JOURNAL).exists():  # part-way: its journal names the backup that undoes it
            raise JobError(f"{backup}: no {BACKUP_MANIFEST}, and {store} is part-way through a switch whose backup "
                           f"is {journal_backup(store)}: {way_out(store, journal_backup(store))}")
        raise JobError(f"{backup}: no {BACKUP_MANIFEST}; the backup is incomplete or not a reput backup "
                       f"(a run killed before its backup finished never touched the store)")
    manifest = json.loads(manifest_path.read_text())
    if Path(manifest["store"]) != store:
        raise JobError(f"{manifest_path} is a backup of {manifest['store']}, not of {store}")
    ops = [Op(**o) for o in manifest["ops"]]
    interrupted = (store / JOURNAL).exists()
    state = {op.path: rollback_state(store / op.path, op, backup, interrupted) for op in ops}
    foreign = [op.path for op in ops if state[op.path] is None]
    if foreign:
        raise JobError(f"files changed since the recovery (a broker may have run on the store): "
                       f"{', '.join(foreign[:5])}; refusing to roll back")
    for op in reversed(ops):
        pause_at("in-rollback")
        target = store / op.path
        if op.op == CREATE:
            if target.exists():
                target.unlink()
                fsync_dir(target.parent)
            _remove_empty_parents(target.parent, store)
        elif op.op == PATCH:
            if state[op.path] != "old":
                before = backed_up_old(backup, op)
                if before is None:
                    raise JobError(f"{backup / PATCHES_OLD}: backup of {op.path} is missing or damaged (it differs "
                                   f"from the manifest's sha256)")
                write_ranges(target, op.ranges, before, mtime_of(op.old_file))
                fsync_file(target)
        elif state[op.path] != "old":
            if not is_recorded(backup / op.path, op.old_sha256, op.old_file):
                raise JobError(f"{backup / op.path}: backup copy is damaged (it differs from the manifest's "
                               f"{'sha256' if op.old_sha256 else 'record of the file'})")
            copy_durable(backup / op.path, target)
    if (store / JOURNAL).exists():
        _finish(store, store / STAGING)
    else:
        shutil.rmtree(store / STAGING, ignore_errors=True)
    return {"restored": len(ops), "backup_dir": str(backup)}
