"""Copying a file verbatim by the fastest means that leaves the source untouched: os.copy_file_range between
local files (the kernel copies without passing the bytes through Python, and reflinks on filesystems that
share extents, e.g. XFS and Btrfs), a byte stream through the filesystem layer elsewhere (HDFS, S3), and, only
when asked (--link-sealed-segments), a hard link for files nobody writes again; for the segment the broker
writes next, copy_file_range of its non-zero blocks with the all-zero ones left as holes.

Each copy says how it was made (a `COPY_*` method) so that a job counts the methods in its report and names a
slower fallback or a non-default link on stderr."""
from __future__ import annotations

import errno
import mmap
import os
import threading

import numpy as np

import pyarrow.fs as pafs

from .fs import Location

CHUNK = 64 << 20  # bytes per copy_file_range call / per streamed read

COPY_RANGE = "copy_file_range"  # local to local, in the kernel (a reflink where the filesystem offers one)
COPY_STREAM = "stream"  # through the filesystem layer (a filesystem other than the local one)
COPY_STREAM_FALLBACK = "stream_fallback"  # local files the kernel would not copy (errno named in the report)
COPY_LINK = "hard_link"  # the opt-in: the destination is another name of the source's inode
# copy_file_range of the non-zero blocks only, the all-zero blocks left as holes (the segment the broker writes
# next, when it does not preallocate: a broker without warmMapedFileEnable leaves that segment sparse itself)
COPY_RANGE_HOLES = "copy_file_range_zero_holes"
ZERO_BLOCK = 1 << 20  # the unit a zero range becomes a hole in

# copy_file_range refusing the pair (old kernel, cross-filesystem before 5.3, a filesystem without support)
_NO_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOTSUP}


class CopyCancelled(Exception):
    """A copy stopped between two chunks because its job is stopping (an error elsewhere, an interrupt)."""


def _check(cancel: threading.Event | None, src: str) -> None:
    if cancel is not None and cancel.is_set():
        raise CopyCancelled(f"{src}: copy cancelled")


def _local(loc: Location) -> bool:
    return isinstance(loc.fs, pafs.LocalFileSystem)


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """[start, end) ranges of a local file that hold data (lseek SEEK_DATA/SEEK_HOLE); the whole file where
    the filesystem cannot tell. A broker's last segment is sparse past its write position (mapped, not written)."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    out, pos = [], 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole from pos on
                    break
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            out.append((start, end))
            pos = end
    except OSError:
        return [(0, size)]
    return out


def _nonzero_runs(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) of a local file cut into runs of ZERO_BLOCK blocks that hold a non-zero byte (the
    all-zero blocks between them left out)."""
    if end <= start:
        return []
    lo = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, end - lo, prot=mmap.PROT_READ, offset=lo) as m:
        data = np.frombuffer(m, np.uint8)
        runs: list[tuple[int, int]] = []
        for at in range(start, end, ZERO_BLOCK):
            hi = min(end, at + ZERO_BLOCK)
            block = data[at - lo:hi - lo]
            words = block[:len(block) // 8 * 8].view(np.uint64)
            if words.any() or block[len(words) * 8:].any():
                if runs and runs[-1][1] == at:
                    runs[-1] = (runs[-1][0], hi)
                else:
                    runs.append((at, hi))
        del data, block, words
    return runs


def copy_range(src: str, dst: str, zero_holes: bool = False, cancel: threading.Event | None = None) -> int:
    """Copy local file src to a new dst with os.copy_file_range, data extents only (holes stay holes: the
    same bytes read back, none written for them); bytes in the file. With `zero_holes` the blocks of zeros
    in the data are left as holes too (read to find them, never written). OSError when the kernel refuses;
    CopyCancelled between two chunks once `cancel` is set."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        for extent in data_extents(fin.fileno(), size):
            for start, end in (_nonzero_runs(fin.fileno(), *extent) if zero_holes else [extent]):
                _copy_extent(fin.fileno(), fout.fileno(), start, end, src, cancel)
        os.ftruncate(fout.fileno(), size)
        return size


def _copy_extent(fin: int, fout: int, start: int, end: int, src: str, cancel: threading.Event | None = None) -> None:
    done = start
    while done < end:
        _check(cancel, src)
        n = os.copy_file_range(fin, fout, min(CHUNK, end - done), done, done)
        if n == 0:
            raise OSError(errno.EIO, f"{src} shrank while it was copied")
        done += n


def copy_stream(src: Location, dst: Location, cancel: threading.Event | None = None) -> int:
    """Copy byte for byte in chunks through the filesystem layer; bytes copied."""
    total = 0
    with src.fs.open_input_stream(src.path) as fin, dst.fs.open_output_stream(dst.path) as fout:
        while True:
            _check(cancel, src.uri)
            chunk = fin.read(CHUNK)
            if not chunk:
                break
            fout.write(chunk)
            total += len(chunk)
    return total


def copy_file(src: Location, dst: Location, link: bool = False, zero_holes: bool = False,
              cancel: threading.Event | None = None) -> tuple[str, int, str | None]:
    """Copy src to dst (its parent made): (method, bytes, why a local copy fell back to streaming or None).
    `link`: make dst a hard link of src (both local; check_link_allowed first); bytes is then src's size.
    `zero_holes`: a local copy leaves src's all-zero blocks as holes in dst (COPY_RANGE_HOLES). `cancel`: once
    set, the copy stops between two chunks with CopyCancelled (dst left partial: the caller removes it)."""
    dst.make_parent()
    if link:
        os.link(src.path, dst.path)
        return COPY_LINK, os.stat(dst.path).st_size, None
    if _local(src) and _local(dst) and hasattr(os, "copy_file_range"):
        try:
            return ((COPY_RANGE_HOLES if zero_holes else COPY_RANGE),
                    copy_range(src.path, dst.path, zero_holes, cancel), None)
        except OSError as exc:
            if exc.errno not in _NO_RANGE:
                raise
            why = f"copy_file_range: {errno.errorcode.get(exc.errno, exc.errno)}"
            return COPY_STREAM_FALLBACK, copy_stream(src, dst, cancel), why
    return COPY_STREAM, copy_stream(src, dst, cancel), None


def write_after_prefix(src: Location, prefix: int, rest, dst: Location, size: int) -> tuple[str, int, str | None]:
    """Write dst as src's first `prefix` bytes, then `rest`, then zeros up to `size` bytes (a sparse tail where
    local): the prefix copied in the kernel where both are local. (method, prefix bytes, why it fell back) as
    copy_file's."""
    method, why = COPY_STREAM, None
    if _local(src) and _local(dst) and hasattr(os, "copy_file_range"):
        os.makedirs(os.path.dirname(dst.path), exist_ok=True)
        try:
            with open(src.path, "rb") as fin, open(dst.path, "wb") as fout:
                _copy_extent(fin.fileno(), fout.fileno(), 0, prefix, src.path)
                fout.seek(prefix)
                fout.write(rest)
                if fout.tell() > size:
                    raise ValueError(f"{dst.uri}: {fout.tell()} bytes written, more than the file size {size}")
                fout.truncate(size)
            return COPY_RANGE, prefix, None
        except OSError as exc:
            if exc.errno not in _NO_RANGE:
                raise
            method, why = COPY_STREAM_FALLBACK, f"copy_file_range: {errno.errorcode.get(exc.errno, exc.errno)}"
    dst.write_with_zero_tail([src.read_range(0, prefix), rest], size)
    return method, prefix, why


def device(path: str) -> int:
    """The device (filesystem) a local path lives on."""
    return os.stat(path).st_dev


def link_refusal(src_dir: Location, dst_dir: Location) -> str | None:
    """Why files of src_dir cannot be hard-linked into dst_dir (None: they can): both must be local and on
    one filesystem (a hard link cannot cross filesystems, and reput never falls back silently to a copy)."""
    if not (_local(src_dir) and _local(dst_dir)):
        return "hard links need local filesystems on both sides"
    a, b = device(src_dir.path), device(dst_dir.path)
    if a != b:
        return (f"{src_dir.path} (device {a}) and {dst_dir.path} (device {b}) are on different filesystems; "
                f"a hard link cannot cross filesystems")
    return None
