"""One filesystem layer for every path reput touches: local paths, hdfs://, s3://, ... via pyarrow.fs."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs


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

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.fs.get_file_info(self.path).type == pafs.FileType.Directory

    def size(self) -> int:
        return self.fs.get_file_info(self.path).size

    def list(self) -> list[pafs.FileInfo]:
        """Direct children, sorted by name; empty when the directory does not exist."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        return sorted(infos, key=lambda i: i.base_name)

    def walk_files(self) -> list[pafs.FileInfo]:
        """All files below, sorted by path."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        return sorted((i for i in infos if i.type == pafs.FileType.File), key=lambda i: i.path)

    def read_range(self, offset: int, length: int) -> pa.Buffer:
        with self.fs.open_input_file(self.path) as f:
            return f.read_at(length, offset)

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def write_bytes(self, data: bytes | memoryview) -> None:
        self.parent.makedirs()
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def makedirs(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def delete_tree(self) -> None:
        if self.is_dir():
            self.fs.delete_dir(self.path)
        elif self.exists():
            self.fs.delete_file(self.path)

    def move_to(self, dest: "Location") -> None:
        self.fs.move(self.path, dest.path)


_CACHE: dict[str, tuple[pafs.FileSystem, str]] = {}


def _resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    if uri in _CACHE:
        return _CACHE[uri]
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
    else:
        import os
        fs, path = pafs.LocalFileSystem(), os.path.abspath(uri)
    _CACHE[uri] = (fs, path)
    return fs, path


def location(path: str) -> Location:
    """A Location for a user-given path or URI (relative local paths become absolute)."""
    if "://" in path:
        return Location(path.rstrip("/"))
    import os
    return Location(os.path.abspath(path))
