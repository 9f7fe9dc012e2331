"""Bytes a stage reads and writes, from /proc/<pid>/io of the benchmark's process tree (driver, its JVM,
the Python workers): what the scale-out model's I/O bound is built on (docs/performance.md).

/proc/<pid>/io counts, per process with its threads and its waited-for children: `rchar`/`wchar`, the
bytes of every read()/write()-family call (files, pipes and the sockets between the JVM and the workers:
those are counted on both sides), `read_bytes`, what was fetched from the block layer (0 for a file in
the page cache) and `write_bytes`, file bytes dirtied in the page cache (`cancelled_write_bytes`: dirty
bytes deleted or truncated before write-back, charged to the process that deleted them). Memory-mapped
reads (the decode and build stages map the commit log and their work files) are in none of them: the
commit-log bytes a stage maps come from its plan, not from here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

from .memory import PROC, _children_map

IO_FIELDS = ("rchar", "wchar", "read_bytes", "write_bytes", "cancelled_write_bytes")


@dataclass(frozen=True)
class IoCounts:
    """The five /proc/<pid>/io byte counters (summed over processes, or the difference of two sums)."""

    rchar: int = 0
    wchar: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    cancelled_write_bytes: int = 0

    def __add__(self, other: "IoCounts") -> "IoCounts":
        return IoCounts(*(getattr(self, f) + getattr(other, f) for f in IO_FIELDS))

    def __sub__(self, other: "IoCounts") -> "IoCounts":
        return IoCounts(*(getattr(self, f) - getattr(other, f) for f in IO_FIELDS))

    @property
    def file_bytes_written(self) -> int:
        """File bytes the stage dirtied (written into files). Not net of `cancelled_write_bytes`: those are
        charged to whoever deletes or truncates dirty pages (a stage deleting the previous stage's output,
        a job deleting its work files), so subtracting them made the figure swing from run to run."""
        return self.write_bytes

    def to_dict(self) -> dict:
        """JSON form, every counter plus the net file bytes written."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "file_bytes_written": self.file_bytes_written}


def parse_proc_io(text: str) -> IoCounts:
    """The counters of one /proc/<pid>/io text ("name: value" lines; lines it does not know are skipped)."""
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in IO_FIELDS:
            values[name.strip()] = int(value)
    return IoCounts(**values)


def tree_io(root: int) -> IoCounts:
    """The counters of `root` and every live descendant, summed. A child waited for by its parent is
    already in the parent's counters (the kernel adds them on reaping), so the sum over a tree whose
    processes stay or are reaped inside it changes by exactly what the tree did."""
    children = _children_map()
    todo, total = [root], IoCounts()
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            total = total + parse_proc_io((PROC / str(pid) / "io").read_text())
        except (OSError, ValueError):
            continue
    return total


class IoWatch:
    """Context manager filling `.counts` with what the benchmark's process tree read and wrote meanwhile.
    Meant for stages run in the bench's own session (its JVM and worker daemon live through the stage);
    a whole-process job whose JVM outlives its driver would take its counts out of the tree."""

    def __init__(self) -> None:
        """Zero until the stage ends."""
        self.counts = IoCounts()

    def __enter__(self) -> "IoWatch":
        """Sum the tree's counters at the start."""
        self._before = tree_io(os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        """The difference of the tree's sums."""
        self.counts = tree_io(os.getpid()) - self._before


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (st_blocks; holes of sparse files are not counted)."""
    if not path.exists():
        return 0
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file() and not p.is_symlink())
