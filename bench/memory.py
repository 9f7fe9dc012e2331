"""Peak resident memory of the PySpark Python workers, read from /proc while a stage runs.

The workers are the Python processes below this driver running `pyspark.daemon` (or
`jobs.pipeline.runtime.worker_daemon`): the daemon and the workers it forks, not the JVM that names the
module. Before a stage each one's peak-RSS counter (VmHWM) is reset through /proc/<pid>/clear_refs, so
a reused worker reports the peak of this stage only; a poller picks up workers forked during the stage
and keeps the highest VmHWM seen per process. Where the reset is not permitted the poller falls
back to sampling VmRSS (then a short spike between two samples can be missed).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
WORKER_MARKS = (b"pyspark.daemon", b"jobs.pipeline.runtime.worker_daemon")  # Spark's daemon, or reput's preloading one


def _children_map() -> dict[int, list[int]]:
    """ppid -> child pids of every process we can see."""
    out: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def python_workers(root: int | None = None) -> list[int]:
    """Pids of the worker daemon processes (daemon and forked workers) descending from `root`."""
    children = _children_map()
    todo, found = [os.getpid() if root is None else root], []
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            todo.append(child)
            try:
                cmdline = (PROC / str(child) / "cmdline").read_bytes()
                if _is_python(cmdline) and any(mark in cmdline for mark in WORKER_MARKS):
                    found.append(child)
            except OSError:
                pass
    return found


def _is_python(cmdline: bytes) -> bool:
    """A Python interpreter's command line. The driver's JVM names the daemon module in its own
    arguments (spark.python.daemon.module) and is no worker."""
    return os.path.basename(cmdline.split(b"\0", 1)[0]).startswith(b"python")


def _status_kib(pid: int, key: str) -> int | None:
    """A `VmXxx:` value (KiB) from /proc/<pid>/status, or None when the process is gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _reset_peak(pid: int) -> bool:
    """Set the process's VmHWM back to its current RSS (Linux clear_refs value 5)."""
    try:
        (PROC / str(pid) / "clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class WorkerPeak:
    """What a WorkerMemory watch found: the highest peak RSS per worker process (KiB)."""

    per_process_kib: dict[int, int] = field(default_factory=dict)
    method: str = "VmHWM"

    @property
    def max_mib(self) -> float | None:
        """The highest peak of one worker process (MiB)."""
        return max(self.per_process_kib.values()) / 1024 if self.per_process_kib else None

    @property
    def sum_mib(self) -> float | None:
        """The sum of the workers' peaks (MiB): an upper bound for all of them at once."""
        return sum(self.per_process_kib.values()) / 1024 if self.per_process_kib else None

    def to_dict(self) -> dict:
        """JSON form."""
        return {"max_worker_mib": _round(self.max_mib), "sum_of_worker_peaks_mib": _round(self.sum_mib),
                "workers": len(self.per_process_kib), "method": self.method}


def _round(v: float | None) -> float | None:
    """One decimal, None kept."""
    return None if v is None else round(v, 1)


class WorkerMemory:
    """Context manager: watch the Python workers while a stage runs; `.peak` holds the result."""

    def __init__(self, interval: float = 0.5, sample_interval: float = 0.05) -> None:
        """Poll every `interval` seconds once entered: only to find workers forked during the stage, as
        each one's VmHWM holds its own peak (a poll reads /proc of every process, 3-4 ms here, CPU the
        stage would miss); every `sample_interval` seconds when VmRSS has to be sampled instead."""
        self.interval, self.sample_interval = interval, sample_interval
        self.peak = WorkerPeak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._key = "VmHWM"

    def _poll(self) -> None:
        """Read each worker's counter and keep the highest value seen per process."""
        for pid in python_workers():
            kib = _status_kib(pid, self._key)
            if kib is not None and kib > self.peak.per_process_kib.get(pid, 0):
                self.peak.per_process_kib[pid] = kib

    def _run(self) -> None:
        """The poller thread."""
        while not self._stop.wait(self.interval):
            self._poll()

    def __enter__(self) -> "WorkerMemory":
        """Reset the peaks of the running workers (or fall back to sampling), start polling."""
        existing = python_workers()
        if existing and not all(_reset_peak(pid) for pid in existing):
            self.interval = self.sample_interval
            self._key, self.peak.method = "VmRSS", "VmRSS sampled every %.0f ms" % (self.interval * 1000)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        """Stop polling and take a last reading."""
        self._stop.set()
        self._thread.join()
        self._poll()
