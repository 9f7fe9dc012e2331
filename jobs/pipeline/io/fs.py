"""One filesystem layer for every path reput touches: local paths, hdfs://, s3://, ... via pyarrow.fs.

s3:// takes its endpoint, credentials and region from the usual AWS settings (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION, ~/.aws), read by pyarrow in
the driver and again in every task (executors need the same environment); `delta_storage_options` hands
the one setting delta-rs does not derive from them itself.
"""
from __future__ import annotations

import errno
import mmap
import os
import posixpath
import stat
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from storage_format.errors import StoreFormatError

# What a non-regular local file is, for the refusal (pyarrow lists a FIFO as a plain file).
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


@dataclass(frozen=True)
class Location:
    """A filesystem and a path on it; picklable (re-resolved from the URI inside tasks)."""

    uri: str

    @property
    def fs(self) -> pafs.FileSystem:
        return _resolve(self.uri)[0]

    @property
    def path(self) -> str:
        return _resolve(self.uri)[1]

    def child(self, *parts: str) -> "Location":
        return Location(posixpath.join(self.uri, *parts))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> "Location":
        return Location(posixpath.dirname(self.uri.rstrip("/")))

    def renames_atomically(self) -> bool:
        """Can a directory be renamed into place in one step? Local and HDFS: yes. Object storage: no."""
        return isinstance(self.fs, _RENAMING)

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.fs.get_file_info(self.path).type == pafs.FileType.Directory

    def size(self) -> int:
        return self.fs.get_file_info(self.path).size

    def not_regular(self) -> str | None:
        """What the path is when it exists but is not a regular file ("a FIFO", "a directory", ...), else
        None. Only regular files are ever read: opening a FIFO would wait forever for a writer."""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            kind = self.fs.get_file_info(self.path).type
            return "a directory" if kind == pafs.FileType.Directory else None
        try:
            mode = os.stat(self.path).st_mode
        except OSError:
            if os.path.islink(self.path):
                return f"a symbolic link to a missing file ({os.readlink(self.path)})"
            return None
        return next((what for test, what in _KINDS if test(mode)), None)

    def child_kind(self, info: pafs.FileInfo) -> str | None:
        """What a child this directory listed is when it is not a regular file (a FIFO, a directory, a symbolic link
        to a missing file, ...); None for a regular file. Every directory a broker loader reads is checked so."""
        if info.type == pafs.FileType.File:
            return None
        return self.child(info.base_name).not_regular() or "not a file"

    def check_regular(self) -> None:
        """Refuse to read anything but a regular file (one line naming the path, never a hang)."""
        kind = self.not_regular()
        if kind:
            raise StoreFormatError(self.uri, None, f"{kind}, not a regular file; reput reads only regular files")

    def list(self) -> list[pafs.FileInfo]:
        """Direct children, sorted by name; empty when the directory does not exist."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        if isinstance(self.fs, pafs.LocalFileSystem):  # pyarrow leaves out a symbolic link to nothing: not here
            seen = {i.base_name for i in infos}
            infos += [pafs.FileInfo(os.path.join(self.path, n), pafs.FileType.Unknown, size=0)
                      for n in os.listdir(self.path) if n not in seen]
        return sorted(infos, key=lambda i: i.base_name)

    def walk_files(self) -> list[pafs.FileInfo]:
        """All files below, sorted by path."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        return sorted((i for i in infos if i.type == pafs.FileType.File), key=lambda i: i.path)

    def open_input(self) -> pa.NativeFile:
        """The file opened for random reads (read_at, size); close it, e.g. with `with`. Only a regular file."""
        self.check_regular()
        return self.fs.open_input_file(self.path)

    def read_range(self, offset: int, length: int) -> pa.Buffer:
        """Up to `length` bytes from `offset` (fewer at the end of the file). Large ranges of local
        files are memory-mapped read-only instead of copied: the bytes come from the page cache as
        they are touched."""
        self.check_regular()
        if length >= MMAP_MIN_BYTES and isinstance(self.fs, pafs.LocalFileSystem):
            return _map_range(self.path, offset, length)
        with self.fs.open_input_file(self.path) as f:
            return f.read_at(length, offset)

    def is_hole(self, offset: int, end: int) -> bool:
        """True when the file provably stores nothing in [offset, end): a hole of a sparse local file
        (reads as zeros), asked with lseek(SEEK_DATA). False when it holds data or nobody can tell."""
        if not isinstance(self.fs, pafs.LocalFileSystem) or not hasattr(os, "SEEK_DATA"):
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            return os.lseek(fd, offset, os.SEEK_DATA) >= end
        except OSError as exc:
            return exc.errno == errno.ENXIO  # no data at or after offset
        finally:
            os.close(fd)

    def read_bytes(self) -> bytes:
        self.check_regular()
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def write_bytes(self, data: bytes | memoryview) -> None:
        self.make_parent()
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def write_with_zero_tail(self, chunks, size: int) -> None:
        """Write the byte chunks, then zeros up to `size` bytes in all. A local file gets the zeros as
        a sparse tail (truncate: it reads the same, and the zeros cost no writing); other filesystems
        get them written."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            os.makedirs(os.path.dirname(self.path), exist_ok=True)  # one call, not a check per level
            with open(self.path, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                if f.tell() > size:
                    raise ValueError(f"{self.uri}: {f.tell()} bytes written, more than the file size {size}")
                f.truncate(size)
            return
        self.make_parent()
        with self.fs.open_output_stream(self.path) as f:
            for chunk in chunks:
                f.write(chunk)
            left = size - f.tell()
            if left < 0:
                raise ValueError(f"{self.uri}: more bytes written than the file size {size}")
            block = bytes(min(left, 8 << 20))
            while left > 0:
                f.write(block[:min(left, len(block))])
                left -= len(block)

    @property
    def writes_in_place(self) -> bool:
        """Can tasks write byte ranges of one file side by side (write_ranges)? A local file: yes. Object
        storage and HDFS write a file as one stream."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    def write_ranges(self, ranges, size: int) -> None:
        """Write (byte offset, bytes) ranges into the local file, creating it without truncating what other
        writers put there, and make it `size` bytes long (a sparse tail): several tasks can write disjoint
        ranges of one file, in any order. Only where writes_in_place."""
        if not self.writes_in_place:
            raise ValueError(f"{self.uri}: byte ranges are written only to local files")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for at, data in ranges:
                view = memoryview(data).cast("B")
                if at + len(view) > size:
                    raise ValueError(f"{self.uri}: bytes {at}..{at + len(view)} lie past the file size {size}")
                pwrite_all(fd, view, at)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def makedirs(self) -> None:
        if isinstance(self.fs, pafs.LocalFileSystem):
            os.makedirs(self.path, exist_ok=True)  # one call, not pyarrow's check per level (a file per queue)
            return
        self.fs.create_dir(self.path, recursive=True)

    def make_parent(self) -> None:
        """Make the directory a file is about to be written in; object storage has none to make (a
        "directory" there is a key prefix), which saves requests per file."""
        if self.renames_atomically():
            self.parent.makedirs()

    def delete_tree(self) -> None:
        if self.is_dir():
            self.fs.delete_dir(self.path)
        elif self.exists():
            self.fs.delete_file(self.path)

    def move_to(self, dest: "Location") -> None:
        self.fs.move(self.path, dest.path)


MMAP_MIN_BYTES = 1 << 20


def pwrite_all(fd: int, data, at: int) -> None:
    """Write all of `data` (bytes-like) at byte offset `at` of an open file (pwrite may write less at once)."""
    view = memoryview(data).cast("B")
    while len(view):
        done = os.pwrite(fd, view, at)
        view, at = view[done:], at + done
_RENAMING = tuple(c for c in (pafs.LocalFileSystem, getattr(pafs, "HadoopFileSystem", None)) if c is not None)


def _map_range(path: str, offset: int, length: int) -> pa.Buffer:
    """A read-only memory map of path[offset:offset+length] as an Arrow buffer (the buffer keeps the
    map alive; it is unmapped when the last view of it goes)."""
    with open(path, "rb") as f:
        length = max(0, min(length, os.fstat(f.fileno()).st_size - offset))
        if length == 0:
            return pa.py_buffer(b"")
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(f.fileno(), offset - start + length, access=mmap.ACCESS_READ, offset=start)
    return pa.py_buffer(mapped).slice(offset - start, length)


_CACHE: dict[str, tuple[pafs.FileSystem, str]] = {}
_ROOTS: dict[str, tuple[pafs.FileSystem, str]] = {}  # one filesystem (and client) per scheme://authority


def _resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a local path or a URI. Only `scheme://authority` goes through pyarrow's
    URI parser; the rest is the path exactly as written (keys hold topic names: `%`, `#`, `?`, spaces)."""
    if uri in _CACHE:
        return _CACHE[uri]
    if "://" not in uri:
        fs, path = pafs.LocalFileSystem(), os.path.abspath(uri)
    else:
        scheme, rest = uri.split("://", 1)
        authority, _, key = rest.partition("/")
        if scheme == "file":
            fs, path = pafs.LocalFileSystem(), "/" + key
        else:
            root = f"{scheme}://{authority}"
            if root not in _ROOTS:
                _ROOTS[root] = pafs.FileSystem.from_uri(root)
            fs, base = _ROOTS[root]
            path = f"{base.rstrip('/')}/{key}" if key else base
    _CACHE[uri] = (fs, path)
    return fs, path


def location(path: str) -> Location:
    """A Location for a user-given path or URI (relative local paths become absolute)."""
    if "://" in path:
        return Location(path.rstrip("/"))
    return Location(os.path.abspath(path))


def delta_storage_options(uri: str) -> dict[str, str]:
    """storage_options for delta-rs at `uri`: it reads the AWS_* environment itself but refuses a plain
    http:// endpoint (a local S3-compatible server) unless told, which pyarrow allows from the URL alone."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    if uri.startswith(("s3://", "s3a://")) and endpoint.startswith("http://"):
        return {"AWS_ALLOW_HTTP": "true"}
    return {}
