"""What a test run leaves behind: `reput-*` entries and Spark's `.<uuid>.sock` sockets in the temp directory,
and processes still running below the test process. tests/conftest.py takes a snapshot when the session starts
and fails the run when its end finds more, naming each: a run leaves the machine as it found it."""
from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SPARK_SOCKET = re.compile(r"^\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.sock$")


def temp_entries(temp: Path | None = None) -> set[str]:
    """Names in the temp directory that reput or Spark made for a job: `reput-*` and `.<uuid>.sock`."""
    root = Path(temp or tempfile.gettempdir())
    return {n for n in os.listdir(root) if n.startswith("reput-") or SPARK_SOCKET.match(n)}


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid` (children, their children, ...), with its command line (zombies left out)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            found[p] = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        todo += children.get(p, [])
    return found


@dataclass(frozen=True)
class Left:
    """What the run added: temp entries and processes (pid -> command line)."""

    entries: tuple[str, ...]
    processes: dict[int, str]

    def __bool__(self) -> bool:
        return bool(self.entries or self.processes)

    def describe(self) -> str:
        lines = [f"temp directory {tempfile.gettempdir()}: {name}" for name in self.entries]
        lines += [f"process {pid}: {cmd}" for pid, cmd in sorted(self.processes.items())]
        return "\n".join(lines)


def left_behind(before: set[str], pid: int, spared: set[int] = frozenset(), wait_s: float = 10.0,
                temp: Path | None = None, check_temp: bool = True) -> Left:
    """What is there now and was not in `before` (temp entries, unless not `check_temp`), and the processes below
    `pid` other than `spared` (and theirs); both get `wait_s` to go first (a stopped SparkContext's workers take a
    moment, and an xdist worker's JVM removes its warm daemon's socket directory as it ends)."""
    deadline = time.monotonic() + wait_s
    while True:
        procs = {p: c for p, c in descendants(pid).items() if p not in spared and not _below(p, spared)}
        entries = tuple(sorted(temp_entries(temp) - before)) if check_temp else ()
        if not (procs or entries) or time.monotonic() >= deadline:
            return Left(entries, procs)
        time.sleep(0.2)


def _below(pid: int, ancestors: set[int]) -> bool:
    """`pid` runs below one of `ancestors`."""
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid in ancestors:
            return True
    return False
