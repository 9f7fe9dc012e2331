"""Local files made durable: fsync of files and directories (many at once, so the filesystem's journal commits
them together), a hard link, and a copy fsynced and renamed into place (recover --in-place's steps)."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .copy import copy_range

SYNC_THREADS = 8  # fsyncs issued at once: the filesystem's journal commits them together (one wait, not one each)


def fsync_file(path: Path) -> None:
    """Flush one file to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory (its entries) to stable storage where the filesystem allows it."""
    try:
        fsync_file(path)
    except OSError as exc:  # some filesystems do not allow fsync on a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.EACCES):
            raise


def fsync_all(paths: list[Path]) -> None:
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
    (fsync_dir if path.is_dir() else fsync_file)(path)


def link(src: Path, dst: Path) -> None:
    """dst made a hard link of src (same filesystem; dst's directory made, an older dst replaced). The caller
    fsyncs dst's directory (once per directory)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    os.link(src, dst)


def copy_durable(src: Path, dst: Path) -> None:
    """Copy src to dst through a temporary name, fsynced, then renamed (dst is whole or absent; the temporary name
    is removed again when the copy stops part-way: an error, a signal)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".reput-tmp")
    try:
        try:
            copy_range(str(src), str(tmp))  # in the kernel (a reflink where the filesystem shares extents)
        except OSError:
            shutil.copyfile(src, tmp)  # os.sendfile, itself falling back to read/write
        with open(tmp, "rb+") as fout:
            os.fsync(fout.fileno())
        shutil.copystat(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(dst.parent)
