"""How many worker processes the local engine forks, decided before it forks any.

CPUs: the smallest of the master's CPUs (`local[*]`: the CPUs this process may run on, its affinity, and its
cgroup's CPU quota rounded up, as the JVM counts them for Spark's `local[*]`; `local[N]`: N, as Spark takes it) and
REPUT_LOCAL_WORKERS when set. Memory: where the cgroup limits it (runtime.cgroup), the driver and that many workers
must fit by the estimate below; fewer workers when they do not (a warning says so), a refusal naming the limit and
--split-size when not even one does. What decided is in the engine note and the report's `engine.sizing`.

The estimate errs high (docs/performance.md, "The local engine's workers in a container"): the driver with the
kernels loaded, DRIVER_BYTES (measured 279 MB resident on a 1.5 M-message store, 238-336 MB at verify's peak up to
12,000 queues; more with 100,000s of queues, which are not known before the scan); a worker, WORKER_BASE_BYTES of
its own pages plus WINDOW_COPIES times a split's window (its bytes mapped, and the columns decoded from them: about
0.75x the window for 220-byte records). Measured per worker, its private pages: 228 MB for 128 MiB splits, 70 MB
for 16 MiB ones, against 328 and 104 MiB estimated.
"""
from __future__ import annotations

from dataclasses import dataclass

from storage_format.scan_plan import Segment, balanced_split_size
from storage_format.settings import BrokerSettings

from . import env
from .cgroup import CgroupLimits, Limit, read_limits
from .failure import JobError

MIB = 1 << 20
DRIVER_BYTES = 320 * MIB
WORKER_BASE_BYTES = 64 * MIB
WINDOW_COPIES = 2
WORKERS_ENV = "REPUT_LOCAL_WORKERS"
RAISE_LIMIT = "the container's memory limit (a pod's resources.limits.memory, docker --memory, systemd MemoryMax=)"
# What decided the count (the report's `limited_by`).
BY_AFFINITY, BY_MASTER, BY_QUOTA, BY_SETTING, BY_MEMORY = ("cpu affinity", "master", "cgroup cpu quota", WORKERS_ENV,
                                                           "cgroup memory limit")


@dataclass(frozen=True, kw_only=True)
class LocalSizing:
    """The local engine's worker count and what decided it (see the module doc)."""

    workers: int
    cpus: int  # the master's: local[N]'s N, or local[*]'s CPU affinity
    master: str
    cpu_quota: Limit | None  # local[*] only: local[N] is taken as given
    setting: int | None  # REPUT_LOCAL_WORKERS
    memory: Limit | None
    wanted: int  # the workers the CPUs allow, before memory
    split_bytes: int  # the largest split a worker decodes at `workers`
    worker_bytes: int
    driver_bytes: int
    limited_by: str

    def to_dict(self) -> dict:
        """The report's `engine.sizing`: every input, the estimate and what decided (None where nothing limits)."""
        return {"workers": self.workers, "cpus": self.cpus, "master": self.master,
                "cpu_quota": self.cpu_quota.value if self.cpu_quota else None,
                "cpu_quota_from": self.cpu_quota.source() if self.cpu_quota else None,
                WORKERS_ENV: self.setting,
                "memory_limit": self.memory.value if self.memory else None,
                "memory_limit_from": self.memory.source() if self.memory else None,
                "driver_bytes": self.driver_bytes, "worker_bytes": self.worker_bytes,
                "split_bytes": self.split_bytes, "limited_by": self.limited_by}

    def why(self) -> str:
        """What lowered the count below the master's CPUs, for the engine note ("" when nothing did)."""
        of = f"{self.workers} of {self.cpus} CPUs"
        if self.limited_by == BY_QUOTA:
            return f"{of}: the cgroup CPU quota, {self.cpu_quota.source()}"
        if self.limited_by == BY_SETTING:
            return f"{of}: {WORKERS_ENV}={self.setting}"
        if self.limited_by == BY_MEMORY:
            return f"{of}: the cgroup memory limit, {self.memory.source()} ({_mib(self.memory.value)})"
        return ""

    def warning(self) -> str | None:
        """The line saying memory lowered the count (None when it did not)."""
        if self.limited_by != BY_MEMORY:
            return None
        return (f"the local engine runs {self.workers} worker processes instead of {self.wanted}: the cgroup memory "
                f"limit of {_mib(self.memory.value)} ({self.memory.source()}) holds its driver "
                f"(~{_mib(self.driver_bytes)}) and {self.workers} workers of ~{_mib(self.worker_bytes)} "
                f"({_mib(self.split_bytes)} splits); raise {RAISE_LIMIT} or lower --split-size for more")


def worker_bytes(split_bytes: int, max_message_size: int) -> int:
    """The estimated memory of one worker decoding splits of `split_bytes` (module doc)."""
    return WORKER_BASE_BYTES + WINDOW_COPIES * (split_bytes + max_message_size)


def largest_split(split_size: int, segment_size: int, total: int | None, workers: int) -> int:
    """The most bytes of commit log one split holds: `split_size` (0: a whole segment), at most a segment, and cut
    finer as the scan cuts it for `workers` (scan_plan.balanced_split_size) when the log's size is known."""
    if split_size > 0 and total is not None:
        split_size = balanced_split_size([Segment(0, total, "")], split_size, workers)
    return segment_size if split_size <= 0 else min(split_size, segment_size)


def workers_setting() -> int | None:
    """REPUT_LOCAL_WORKERS as a count (None: unset); JobError naming it when it is not a whole number >= 1."""
    text = env.value(WORKERS_ENV)
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise JobError(f"{WORKERS_ENV}={text!r} is not a number of worker processes (a whole number of at least 1); "
                       f"set it to one, or unset it to run as many as the CPUs allow")
    return n


def size_workers(cpus: int, master: str, star: bool, limits: CgroupLimits, setting: int | None, split_size: int,
                 settings: BrokerSettings, total: int | None) -> LocalSizing:
    """The sizing of the module doc, from what was read (pure). JobError when the memory limit cannot hold the
    driver and one worker."""
    quota = limits.cpus if star else None
    wanted, by = cpus, BY_AFFINITY if star else BY_MASTER
    if quota is not None and quota.value < wanted:
        wanted, by = quota.value, BY_QUOTA
    if setting is not None and setting < wanted:
        wanted, by = setting, BY_SETTING
    wanted = max(wanted, 1)

    def sized(n: int, limited_by: str) -> LocalSizing:
        split = largest_split(split_size, settings.mapped_file_size_commitlog, total, n)
        return LocalSizing(workers=n, cpus=cpus, master=master, cpu_quota=quota, setting=setting,
                           memory=limits.memory, wanted=wanted, split_bytes=split,
                           worker_bytes=worker_bytes(split, settings.max_message_size), driver_bytes=DRIVER_BYTES,
                           limited_by=limited_by)

    if limits.memory is None:
        return sized(wanted, by)
    for n in range(wanted, 0, -1):
        s = sized(n, by if n == wanted else BY_MEMORY)
        if s.driver_bytes + n * s.worker_bytes <= limits.memory.value:
            return s
    raise JobError(_refusal(sized(1, BY_MEMORY), settings))


def _refusal(one: LocalSizing, settings: BrokerSettings) -> str:
    """The one line when the memory limit cannot hold the driver and one worker: the figures, and the split size
    that would fit (when one would) or the limit to ask for."""
    need = one.driver_bytes + one.worker_bytes
    room = (one.memory.value - one.driver_bytes - WORKER_BASE_BYTES) // WINDOW_COPIES - settings.max_message_size
    fits = f"lower --split-size to {room // MIB}m or less, or " if room >= MIB else ""
    return (f"the local engine needs about {_mib(need)} (its driver ~{_mib(one.driver_bytes)}, one worker "
            f"~{_mib(one.worker_bytes)} for {_mib(one.split_bytes)} splits), more than the cgroup memory limit of "
            f"{_mib(one.memory.value)} ({one.memory.source()}): {fits}raise {RAISE_LIMIT} to at least "
            f"{-(-need // MIB)} MiB")


def local_sizing(cpus: int, master: str, star: bool, split_size: int, settings: BrokerSettings | None = None,
                 total: int | None = None) -> LocalSizing:
    """The local engine's sizing for a job: the master's CPUs (`star`: local[*]), its --split-size, the store's
    settings (None: the broker's defaults: 1 GiB segments, 4 MiB messages) and the bytes of commit log it reads
    (None: not known), with REPUT_LOCAL_WORKERS and this process's cgroup read now."""
    return size_workers(cpus, master, star, read_limits(), workers_setting(), split_size,
                        settings or BrokerSettings(), total)


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"
