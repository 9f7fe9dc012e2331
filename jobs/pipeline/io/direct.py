"""A large output file written from one reusable, page-aligned buffer, with `O_DIRECT` on local filesystems that
take it (the page cache is bypassed: on a VM, the guest's first touch of fresh page-cache memory costs more than
the disk write), and buffered writing where they refuse it (tmpfs, object storage, HDFS): the writer says which
it used and why, for the run report. The caller fills `reserve(n)` and `commit()`s; bytes not yet a whole block
are carried to the next write; `close()` pads the last block with zeros (the file's zero tail reads the
same) and truncates to the file size.
"""
from __future__ import annotations

import errno
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow.fs as pafs

from .fs import Location

BLOCK = 4096  # O_DIRECT's alignment of buffer address, length and file offset (logical blocks are <= 4 KiB)
DIRECT_MODE, BUFFERED_MODE = "direct", "buffered"
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)


class SegmentFileWriter:
    """Writes `size` bytes to `loc` (a new file): bytes the caller puts in the buffer, then zeros. `direct=False`
    asks for buffered writing; otherwise O_DIRECT is tried and `fallback` names why it was not used. Two
    buffers take turns: while one is written (a thread: the write releases the GIL, and O_DIRECT waits for the
    device), the caller fills the other."""

    def __init__(self, loc: Location, size: int, direct: bool = True) -> None:
        self.loc, self.size = loc, size
        self.fallback = "" if direct else "O_DIRECT not asked for"
        self.mode = BUFFERED_MODE
        self._fd: int | None = None
        self._stream = None
        self._queued = 0  # bytes handed to the writer so far (a multiple of BLOCK while direct)
        self._carry = 0  # bytes at the current buffer's start not yet handed on (fewer than BLOCK)
        self._bufs = [np.empty(0, np.uint8), np.empty(0, np.uint8)]  # each over an anonymous (page-aligned) map
        self._cur = 0
        self._pending: Future | None = None  # the other buffer's write
        self._wrote = False  # a write has reached the file (no fallback to buffered writing after that)
        self._pool: ThreadPoolExecutor | None = None
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
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="reput-direct-write")

    def _grown(self, k: int, need: int, keep: int) -> np.ndarray:
        """Buffer `k` with room for `need` bytes, its first `keep` bytes kept."""
        if len(self._bufs[k]) < need:
            new = np.frombuffer(mmap.mmap(-1, -(-need // BLOCK) * BLOCK), np.uint8)  # the map lives with its views
            new[:keep] = self._bufs[k][:keep]
            self._bufs[k] = new
        return self._bufs[k]

    def reserve(self, n: int) -> np.ndarray:
        """A writable view of the next `n` bytes of the file (valid until `commit`)."""
        buf = self._grown(self._cur, self._carry + n + BLOCK, self._carry)
        return buf[self._carry:self._carry + n]

    def commit(self, n: int) -> None:
        """The `n` reserved bytes are filled: hand every whole block to the writer, keep the rest (in the other
        buffer, which the caller fills next once its own write is done)."""
        have = self._carry + n
        whole = have - have % BLOCK if self.mode == DIRECT_MODE else have
        if self._queued + have > self.size:
            raise ValueError(f"{self.loc.uri}: more bytes written than the file size {self.size}")
        self._wait()
        buf, other = self._bufs[self._cur], 1 - self._cur
        rest = have - whole
        self._grown(other, rest + BLOCK, 0)[:rest] = buf[whole:have]
        if whole:
            self._queued += whole
            if self._pool is None:
                self._write(buf[:whole])
            else:
                self._pending = self._pool.submit(self._write, buf[:whole])
        self._cur, self._carry = other, rest

    def put(self, data: bytes | memoryview) -> None:
        """Copy `data` in (small pieces: the BLANK at a segment's end)."""
        view = self.reserve(len(data))
        view[:] = np.frombuffer(data, np.uint8)
        self.commit(len(data))

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # a failed write raises here

    def _write(self, part: np.ndarray) -> None:
        if not len(part):
            return
        if self._stream is not None:
            self._stream.write(memoryview(part))
            return
        view = memoryview(part)
        while len(view):
            try:
                done = os.write(self._fd, view)
            except OSError as exc:  # a filesystem that opens O_DIRECT but refuses its writes: start over buffered
                if self.mode != DIRECT_MODE or self._wrote or exc.errno not in _REFUSED:
                    raise
                os.close(self._fd)
                self._fd = os.open(self.loc.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                self.mode = BUFFERED_MODE
                self.fallback = f"the filesystem refused an O_DIRECT write ({os.strerror(exc.errno)})"
                continue
            self._wrote = True
            view = view[done:]

    def close(self) -> int:
        """Write what is left (the last block padded with zeros when direct), zeros or a sparse tail up to the
        file size; returns the bytes of data written (before the zero tail)."""
        self._wait()
        data_end = self._queued + self._carry
        buf = self._bufs[self._cur]
        if self._stream is not None:
            self._write(buf[:self._carry])
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
                    buf[self._carry:pad] = 0
                    self._write(buf[:pad])
                else:
                    self._write(buf[:self._carry])
                self._queued, self._carry = data_end, 0
            os.ftruncate(self._fd, self.size)  # the zeros after the data: a sparse tail
        finally:
            self._finish()
        return data_end

    def _finish(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def abort(self) -> None:
        """Close without finishing (the staging directory is removed by the caller's cleanup)."""
        try:
            self._wait()
        except Exception:  # noqa: BLE001 - the error that made the caller abort is the one reported
            pass
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._finish()
