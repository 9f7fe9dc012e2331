"""What the store holds at the path of a journaled `Op`: its old or new file, none, or (a patch killed part-way)
a torn one; resume and rollback judge every op by it before they touch the store."""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..io.compare import same_bytes
from ..io.file_id import fingerprint, sha256_file
from .journal import CREATE, DELETE, PATCH, Op
from .patches import PAGE, backed_up_old, read_ranges, staged_new


def rollback_state(target: Path, op: Op, backup: Path, interrupted: bool = False) -> str | None:
    """What the store holds at an Op's path: "old", "new", "absent" (where the Op allows that), or None for
    anything else (a file changed since the recovery). A file an earlier rollback restored is a copy of
    the backup: "old" by its bytes."""
    if op.op == PATCH:
        return patch_state(target, op, backup, interrupted) if target.exists() else None
    if not target.exists():
        return "absent" if op.old_sha256 is None and op.old_file is None or op.op == DELETE else None
    if op.new_file is not None or op.new_sha256 is not None:
        if is_recorded(target, op.new_sha256, op.new_file):
            return "new"
    if op.op != CREATE:
        if is_recorded(target, op.old_sha256, op.old_file):
            return "old"
        if op.old_sha256 is None and (backup / op.path).exists() and same_bytes(target, backup / op.path):
            return "old"
    return None


def patch_state(target: Path, op: Op, backup: Path | None, interrupted: bool) -> str | None:
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
    now = read_ranges(target, op.ranges)
    digest = hashlib.sha256(now).hexdigest()
    if digest == op.new_sha256:
        return "new"
    if digest == op.old_sha256:
        return "old"
    old = backed_up_old(backup, op) if backup is not None else None
    new = staged_new(target, op)
    if old is None or new is None:
        return None
    for at in range(0, len(now), PAGE):
        block = now[at:at + PAGE]
        if block != old[at:at + PAGE] and block != new[at:at + PAGE]:
            return None
    return "torn"


def is_recorded(path: Path, sha: str | None, file_id: str | None) -> bool:
    """path is the file an Op recorded: the same fingerprint, else (when the Op has one) the same sha256."""
    if file_id is not None and fingerprint(path) == file_id:
        return True
    return sha is not None and sha256_file(path) == sha
