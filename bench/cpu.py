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


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of `root` and its descendants, including their waited-for children."""
    children = _children_map()
    todo, total = [root], 0.0
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            stat = (PROC / str(pid) / "stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        total += sum(int(x) for x in f[11:15]) / TICK  # utime, stime, cutime, cstime
    return total


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
        self._t, self._busy, self._ours = time.monotonic(), _machine_busy_s(), _tree_cpu_s(os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        """Compute the share from the counters' differences."""
        ours = _tree_cpu_s(os.getpid()) - self._ours
        busy = _machine_busy_s() - self._busy
        self.share = CpuShare(ours, max(0.0, busy - ours), time.monotonic() - self._t)
