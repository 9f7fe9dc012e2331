"""Bytes moved per stage, and the scale-out model built on them: time = max(CPU bound, I/O bound) for a
store where it really lives (docs/performance.md, "Scale-out model").

The CPU bound is the stage's measured CPU seconds per commit-log byte (driver, JVM and workers, from
bench.cpu) spread over the cores, plus the fixed start-up; the I/O bound is the bytes the stage must
read (the commit log, then its own work files back) and write (work files and outputs, measured by
bench.iocount) at the stated throughput of the place. Throughputs are stated assumptions, not measurements.
"""
from __future__ import annotations

from dataclasses import dataclass

from .stages import StageResult


@dataclass(frozen=True)
class StageBytes:
    """What one stage read and wrote, per commit-log byte of the store it ran on."""

    name: str
    commitlog_bytes: int  # the commit log the stage maps or reads (its plan: mapped reads are not in rchar)
    rchar: int  # read()-family bytes of the tree: work files read back, sockets, small files
    wchar: int  # write()-family bytes: work files, outputs, sockets
    file_bytes_written: int  # file bytes dirtied in the page cache (work files and outputs)
    cpu_s: float | None  # CPU seconds of the tree during the stage
    output_bytes: int = 0  # bytes the stage's output holds on disk (0: no output)

    def per_byte(self, value: float) -> float:
        return value / self.commitlog_bytes if self.commitlog_bytes else 0.0

    @property
    def read_back(self) -> int:
        """Bytes read besides the commit log: rchar, or at least the work files written (what was written
        and is not output), which the build stage maps (mapped reads are not in rchar)."""
        return max(self.rchar, self.file_bytes_written - self.output_bytes)


def stage_bytes(r: StageResult, commitlog_bytes: int) -> StageBytes | None:
    """The bytes of a measured stage (None when the stage had no I/O counters)."""
    if r.io is None or r.seconds is None:
        return None
    return StageBytes(r.name, commitlog_bytes, r.io.rchar, r.io.wchar, r.io.file_bytes_written,
                      r.cpu.ours_s if r.cpu else None, int(r.detail.get("output_bytes") or 0))


@dataclass(frozen=True)
class Place:
    """Where a store lives: read and write throughput for the whole job, cores the job gets, and whether
    reads and writes share one device (their times add) or take separate paths (the larger counts)."""

    name: str
    read_gb_s: float
    write_gb_s: float
    cores: int
    shared: bool
    note: str


PLACES = (
    Place("one broker's NVMe disk", 2.5, 2.0, 16, True,
          "the broker host's own cores and disk; reads and writes share the device"),
    Place("HDFS, 10 datanodes", 10.0, 3.0, 32, True,
          "12 HDDs x ~85 MB/s per datanode for reads; writes land 3 times (replication)"),
    Place("S3, 4 executors", 4.4, 4.4, 32, False,
          "4 executors of 8 cores, 10 Gbit/s each (~1.1 GB/s); network in and out are separate directions"),
)


@dataclass(frozen=True)
class Estimate:
    """The model's answer for one place: both bounds and which one applies."""

    place: Place
    cpu_s: float
    io_s: float
    read_bytes: float
    written_bytes: float

    @property
    def seconds(self) -> float:
        return max(self.cpu_s, self.io_s)

    @property
    def bound(self) -> str:
        return "I/O" if self.io_s >= self.cpu_s else "CPU"


def estimate(b: StageBytes, store_bytes: float, place: Place, fixed_s: float) -> Estimate:
    """Time of the stage on a store of `store_bytes` at `place`: the larger of the CPU bound (measured CPU
    per byte over the place's cores, plus `fixed_s` of start-up and driver work) and the I/O bound (the
    commit log and the work files read back, the work files and outputs written, at the place's rates)."""
    cpu = (b.per_byte(b.cpu_s or 0.0) * store_bytes) / place.cores + fixed_s
    read = store_bytes * (1.0 + b.per_byte(b.read_back))
    written = store_bytes * b.per_byte(b.file_bytes_written)
    read_s, write_s = read / (place.read_gb_s * 1e9), written / (place.write_gb_s * 1e9)
    io = (read_s + write_s if place.shared else max(read_s, write_s)) + fixed_s
    return Estimate(place, cpu, io, read, written)


def bytes_table(rows: list[StageBytes]) -> str:
    """Per stage: commit log mapped or read, rchar, wchar, file bytes written (MB and per commit-log byte)."""
    lines = ["bytes moved per stage (this run; /proc/<pid>/io of the driver, its JVM and the workers; the commit "
             "log and the work files are mapped, so the log is counted from the plan, not rchar)",
             f"  {'stage':<36}{'commit log MB':>14}{'rchar MB':>10}{'wchar MB':>10}{'file writes MB':>16}"
             f"{'output MB':>11}{'writes/log byte':>17}{'CPU s':>7}"]
    for b in rows:
        lines.append(f"  {b.name[:35]:<36}{b.commitlog_bytes / 1e6:>14,.0f}{b.rchar / 1e6:>10,.0f}"
                     f"{b.wchar / 1e6:>10,.0f}{b.file_bytes_written / 1e6:>16,.0f}{b.output_bytes / 1e6:>11,.0f}"
                     f"{b.per_byte(b.file_bytes_written):>17.3f}{(b.cpu_s or 0):>7.1f}")
    return "\n".join(lines)


def model_table(b: StageBytes, store_gb: float, fixed_s: float, places: tuple[Place, ...] = PLACES) -> str:
    """The model for one stage on a store of `store_gb` GB at each place."""
    lines = [f"scale-out model for {b.name} on a {store_gb:,.0f} GB store (from this run: "
             f"{b.per_byte(b.cpu_s or 0) * 1e9:.2f} CPU s per GB, {b.per_byte(b.read_back):.3f} bytes read back and "
             f"{b.per_byte(b.file_bytes_written):.3f} written per commit-log byte; {fixed_s:g} s fixed)",
             f"  {'place':<26}{'read GB/s':>10}{'write GB/s':>11}{'cores':>6}{'CPU bound s':>13}{'I/O bound s':>13}"
             f"{'time s':>9}  bound"]
    for place in places:
        e = estimate(b, store_gb * 1e9, place, fixed_s)
        lines.append(f"  {place.name:<26}{place.read_gb_s:>10g}{place.write_gb_s:>11g}{place.cores:>6}"
                     f"{e.cpu_s:>13,.0f}{e.io_s:>13,.0f}{e.seconds:>9,.0f}  {e.bound}")
    return "\n".join(lines)


def io_text(moved: list, store_gb: float, fixed_s: float) -> str:
    """The bytes-moved table and the scale-out model of the rebuild stage ("" without counts): a recovery's
    work does not grow with the store like a rebuild's (docs/performance.md, "Scale-out model")."""
    if not moved:
        return ""
    parts = [bytes_table(moved)]
    parts += [model_table(b, store_gb, fixed_s) for b in moved
              if b.name.startswith("jobs.rebuild")]
    return "\n\n".join(parts)
