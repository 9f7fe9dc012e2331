"""What an OUT held when reput published it: every file of its consume queues and index with its size and
modification time (`reput-files.parquet`, written beside the run report). A later `rebuild --since` compares OUT1
with it before it continues OUT1: a file removed, added, resized or written since is refused by name, so one
damaged byte of last night's output is never carried into every later night. The record holds the whole of OUT
(its run report and the record itself aside): `--overwrite` replaces only an OUT still as reput published it
(io.replaceable).

Size and mtime_ns are what a night can afford (a listing, no reads: 100,000 queues' files in well under a second)
and what every filesystem layer gives (local, HDFS, S3's last-modified). A faithful copy of OUT (cp -p, rsync -a)
keeps both and is accepted, as its bytes are the same; a write through any path changes mtime. A change that keeps
mtime (bit rot, a deliberate `touch -d`) is what a full `verify` of OUT finds (docs/nightly.md)."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage_format.arrow_numpy import large_strings, to_arrow

from .fs import Location

FILES_NAME = "reput-files.parquet"
REPORT_GLOB = re.compile(r"^reput-([a-z]+-)?report\.json$")  # every job's run report (reput-report.json, ...)
CHECKED_PARTS = ("consumequeue", "index")  # what --since continues; a recover OUT's commitlog/ is not continued
_SCHEMA = pa.schema([("path", pa.large_string()), ("size", pa.int64()), ("mtime_ns", pa.int64())])
NAMED = 5  # differences named in the refusal's one line (all are counted)


@dataclass(frozen=True)
class FileState:
    """One file of OUT: its path below OUT (posix), size and modification time in nanoseconds."""

    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class OutFiles:
    """Every file of OUT's checked parts, and every directory there (a stray empty one counts too)."""

    files: dict[str, FileState]
    dirs: frozenset[str]


@dataclass(frozen=True)
class Difference:
    """A file or directory of OUT that is not as it was published: its path below OUT and what changed."""

    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path} {self.what}"


def current(root: Location, parts: tuple[str, ...] | None = CHECKED_PARTS,
            leave_out: tuple[str, ...] = ()) -> OutFiles:
    """OUT's `parts` (directories) as they are now (one recursive listing per part); parts None: all of OUT, top-level
    files too, but its run reports, this record and `leave_out` (bookkeeping a publish removes after recording)."""
    files: dict[str, FileState] = {}
    dirs: set[str] = set()
    base = root.path.rstrip("/") + "/"
    whole = parts is None
    if parts is None:
        parts = tuple(i.base_name for i in root.list() if i.base_name != FILES_NAME
                      and not REPORT_GLOB.match(i.base_name) and i.base_name not in leave_out)
    for part in parts:
        loc = root.child(part)
        top = loc.fs.get_file_info(loc.path)
        if whole and top.type not in (pafs.FileType.Directory, pafs.FileType.NotFound):  # checkpoint, lock, ...
            files[part] = FileState(part, top.size if top.size is not None else -1,
                                    top.mtime_ns if top.mtime_ns is not None else -1)
        if top.type != pafs.FileType.Directory:
            continue
        dirs.add(part)
        for info in loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True)):
            rel = info.path[len(base):] if info.path.startswith(base) else info.path
            if info.type == pafs.FileType.Directory:
                dirs.add(rel)
            else:  # a file, or anything else that is not a directory: listed as it is (size -1 if none)
                size = info.size if info.size is not None else -1
                files[rel] = FileState(rel, size, info.mtime_ns if info.mtime_ns is not None else -1)
    return OutFiles(files, frozenset(dirs))


def record(root: Location, leave_out: tuple[str, ...] = ()) -> None:
    """Write the states of every file of OUT into OUT (the staging directory, before its report: published with
    it); `leave_out`: top-level bookkeeping names the publish removes afterwards."""
    write_record(root.child(FILES_NAME), current(root, None, leave_out))


def after_switch(before: OutFiles, staged: Location, written: list[str], gone: list[str]) -> OutFiles:
    """OUT's file states once an in-place switch renamed the staged files `written` (paths below OUT, as below the
    staging directory) into OUT and deleted `gone`: a rename keeps a file's size and mtime."""
    files = {p: f for p, f in before.files.items() if p not in set(gone)}
    for rel in written:
        if rel.split("/", 1)[0] in CHECKED_PARTS:
            info = staged.child(rel).fs.get_file_info(staged.child(rel).path)
            files[rel] = FileState(rel, info.size, info.mtime_ns)
    dirs = set(before.dirs)
    for rel in files:
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return OutFiles(files, frozenset(dirs))


def write_record(dest: Location, now: OutFiles) -> None:
    """`now` as a record file at `dest`."""
    rows = sorted(now.files.values(), key=lambda f: f.path)
    table = pa.Table.from_arrays([large_strings(f.path for f in rows), to_arrow(np.array([f.size for f in rows], np.int64)),
                      to_arrow(np.array([f.mtime_ns for f in rows], np.int64))], schema=_SCHEMA)  # no pandas probe
    dirs = sorted(now.dirs)
    table = table.replace_schema_metadata({b"dirs": "\n".join(dirs).encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    dest.write_bytes(sink.getvalue())


def recorded(root: Location, parts: tuple[str, ...] | None = CHECKED_PARTS) -> OutFiles | None:
    """The file states OUT's `parts` (None: all of it) were published with; None when OUT has no record (a reput
    older than the record)."""
    loc = root.child(FILES_NAME)
    if not loc.exists():
        return None
    table = pq.ParquetFile(pa.BufferReader(loc.read_bytes())).read(use_pandas_metadata=False)  # no pandas import
    paths, sizes, mtimes = (table.column(n).to_pylist() for n in ("path", "size", "mtime_ns"))
    meta = (table.schema.metadata or {}).get(b"dirs", b"").decode()
    kept = (lambda rel: True) if parts is None else (lambda rel: rel.split("/", 1)[0] in parts)  # noqa: E731
    return OutFiles({p: FileState(p, s, m) for p, s, m in zip(paths, sizes, mtimes) if kept(p)},
                    frozenset(d for d in meta.split("\n") if d and kept(d)))


def differences(was: OutFiles, now: OutFiles) -> list[Difference]:
    """Every file removed, added, resized or written since, and every directory removed or added, by path."""
    out: list[Difference] = []
    for path in sorted(was.files.keys() | now.files.keys()):
        a, b = was.files.get(path), now.files.get(path)
        if b is None:
            out.append(Difference(path, "removed"))
        elif a is None:
            out.append(Difference(path, "not written by reput"))
        elif a.size != b.size:
            out.append(Difference(path, f"size {a.size} -> {b.size}"))
        elif a.mtime_ns != b.mtime_ns:
            out.append(Difference(path, "written since (its modification time changed)"))
    for path in sorted(was.dirs ^ now.dirs):
        if not any(f.startswith(path + "/") for f in (was.files if path in was.dirs else now.files)):
            out.append(Difference(path + "/", "directory removed" if path in was.dirs else "directory not written by reput"))
    return out


def summary(found: list[Difference]) -> str:
    """The first NAMED differences and how many there are, for one line."""
    named = ", ".join(str(d) for d in found[:NAMED])
    more = f" and {len(found) - NAMED} more" if len(found) > NAMED else ""
    return f"{len(found)} difference{'s' if len(found) != 1 else ''}: {named}{more}"
