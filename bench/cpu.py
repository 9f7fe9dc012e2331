"""CPU used during a stage: by this benchmark's own processes (driver, JVM, Python workers) and by
everything else on the machine, from /proc. A figure taken while other work ran is not comparable
with one taken on an idle machine; the table says how busy the machine was."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .memory import PROC, _children_map

TICK = os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / TICK


def _tree_cpu(root: int) -> dict[tuple[int, int], float]:
    """CPU seconds (user + system, with waited-for children) of `root` and each descendant, keyed by
    (pid, start time) so a reused pid is another process."""
    children = _children_map()
    todo, out = [root], {}
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            stat = (PROC / str(pid) / "stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        out[(pid, int(f[19]))] = sum(int(x) for x in f[11:15]) / TICK  # utime, stime, cutime, cstime
    return out


def _used_since(before: dict[tuple[int, int], float], after: dict[tuple[int, int], float]) -> float:
    """CPU the tree used between two readings: per process still there, what it added. A process that
    left the tree unwaited (a job's JVM ending after its driver) takes its CPU along; subtracting whole
    sums then gave negative figures (and absurd "other load"), so each process counts for itself."""
    return sum(max(0.0, cpu - before.get(key, 0.0)) for key, cpu in after.items())


@dataclass
class CpuShare:
    """CPU seconds used during a stage by the benchmark's processes and by the rest of the machine."""

    ours_s: float = 0.0
    others_s: float = 0.0
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        """JSON form, with the other processes' use as cores."""
        return {"benchmark_cpu_s": round(self.ours_s, 2), "other_processes_cpu_s": round(self.others_s, 2),
                "other_processes_cores": round(self.others_s / self.wall_s, 2) if self.wall_s else None}


class CpuWatch:
    """Context manager filling `.share` for the enclosed stage."""

    def __init__(self) -> None:
        """An empty share until the stage ends."""
        self.share = CpuShare()

    def __enter__(self) -> "CpuWatch":
        """Note the clocks and CPU counters at the start."""
        self._t, self._busy, self._ours = time.monotonic(), _machine_busy_s(), _tree_cpu(os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        """Compute the share from the counters' differences."""
        ours = _used_since(self._ours, _tree_cpu(os.getpid()))
        busy = _machine_busy_s() - self._busy
        self.share = CpuShare(ours, max(0.0, busy - ours), time.monotonic() - self._t)
