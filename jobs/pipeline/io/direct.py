"""A large output file written from one reusable, page-aligned buffer, with `O_DIRECT` on local filesystems that
take it (the page cache is bypassed: on a VM, the guest's first touch of fresh page-cache memory costs more than
the disk write), and buffered writing where they refuse it (tmpfs, object storage, HDFS): the writer says which
it used and why, for the run report. The caller fills `reserve(n)` and `commit()`s; bytes not yet a whole block
stay in the buffer for the next write; `close()` pads the last block with zeros (the file's zero tail reads the
same) and truncates to the file size.
"""
from __future__ import annotations

import errno
import mmap
import os

import numpy as np
import pyarrow.fs as pafs

from .fs import Location

BLOCK = 4096  # O_DIRECT's alignment of buffer address, length and file offset (logical blocks are <= 4 KiB)
DIRECT_MODE, BUFFERED_MODE = "direct", "buffered"
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)


class SegmentFileWriter:
    """Writes `size` bytes to `loc` (a new file): bytes the caller puts in the buffer, then zeros. `direct=False`
    asks for buffered writing; otherwise O_DIRECT is tried and `fallback` names why it was not used."""

    def __init__(self, loc: Location, size: int, direct: bool = True) -> None:
        self.loc, self.size = loc, size
        self.fallback = "" if direct else "O_DIRECT not asked for"
        self.mode = BUFFERED_MODE
        self._fd: int | None = None
        self._stream = None
        self._written = 0  # bytes handed to the file so far (a multiple of BLOCK while direct)
        self._carry = 0  # bytes at the buffer's start not yet written (fewer than BLOCK)
        self._map: mmap.mmap | None = None
        self._buf = np.empty(0, np.uint8)
        if not isinstance(loc.fs, pafs.LocalFileSystem):
            self.fallback = self.fallback or "not a local filesystem"
            loc.make_parent()
            self._stream = loc.fs.open_output_stream(loc.path)
            return
        os.makedirs(os.path.dirname(loc.path), exist_ok=True)
        if not self.fallback:
            if not hasattr(os, "O_DIRECT"):
                self.fallback = "O_DIRECT not offered by this platform"
            else:
                try:
                    self._fd = os.open(loc.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
                    self.mode = DIRECT_MODE
                except OSError as exc:
                    if exc.errno not in _REFUSED:
                        raise
                    self.fallback = f"the filesystem refused O_DIRECT ({os.strerror(exc.errno)})"
        if self._fd is None:
            self._fd = os.open(loc.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def reserve(self, n: int) -> np.ndarray:
        """A writable view of the next `n` bytes of the file (valid until `commit`)."""
        need = self._carry + n + BLOCK
        if len(self._buf) < need:
            size = -(-need // BLOCK) * BLOCK
            new_map = mmap.mmap(-1, size)  # anonymous: page-aligned
            new_buf = np.frombuffer(new_map, np.uint8)
            new_buf[:self._carry] = self._buf[:self._carry]
            self._buf, self._map = new_buf, new_map  # the old map is freed with its last view
        return self._buf[self._carry:self._carry + n]

    def commit(self, n: int) -> None:
        """The `n` reserved bytes are filled: write every whole block, keep the rest for the next write."""
        have = self._carry + n
        whole = have - have % BLOCK if self.mode == DIRECT_MODE else have
        if self._written + have > self.size:
            raise ValueError(f"{self.loc.uri}: more bytes written than the file size {self.size}")
        self._write(self._buf[:whole])
        rest = have - whole
        if rest:
            self._buf[:rest] = self._buf[whole:have]
        self._carry = rest

    def put(self, data: bytes | memoryview) -> None:
        """Copy `data` in (small pieces: the BLANK at a segment's end)."""
        view = self.reserve(len(data))
        view[:] = np.frombuffer(data, np.uint8)
        self.commit(len(data))

    def _write(self, part: np.ndarray) -> None:
        if not len(part):
            return
        if self._stream is not None:
            self._stream.write(memoryview(part))
            self._written += len(part)
            return
        view = memoryview(part)
        while len(view):
            try:
                done = os.write(self._fd, view)
            except OSError as exc:  # a filesystem that opens O_DIRECT but refuses its writes: start over buffered
                if self.mode != DIRECT_MODE or self._written or exc.errno not in _REFUSED:
                    raise
                os.close(self._fd)
                self._fd = os.open(self.loc.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                self.mode = BUFFERED_MODE
                self.fallback = f"the filesystem refused an O_DIRECT write ({os.strerror(exc.errno)})"
                continue
            view = view[done:]
            self._written += done

    def close(self) -> int:
        """Write what is left (the last block padded with zeros when direct), zeros or a sparse tail up to the
        file size; returns the bytes of data written (before the zero tail)."""
        data_end = self._written + self._carry
        if self._stream is not None:
            self._write(self._buf[:self._carry])
            left = self.size - data_end
            block = bytes(min(left, 8 << 20))
            while left > 0:
                self._stream.write(block[:min(left, len(block))])
                left -= len(block)
            self._stream.close()
            self._stream = None
            return data_end
        try:
            if self._carry:
                if self.mode == DIRECT_MODE:
                    pad = -(-self._carry // BLOCK) * BLOCK
                    self._buf[self._carry:pad] = 0
                    self._write(self._buf[:pad])
                else:
                    self._write(self._buf[:self._carry])
                self._carry = 0
            os.ftruncate(self._fd, self.size)  # the zeros after the data: a sparse tail
        finally:
            os.close(self._fd)
            self._fd = None
        return data_end

    def abort(self) -> None:
        """Close without finishing (the staging directory is removed by the caller's cleanup)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
