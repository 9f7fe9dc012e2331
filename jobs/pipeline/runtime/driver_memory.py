"""Will the driver fit in the memory it was given? reput's driver holds no per-message state, but it does hold
per-queue and per-split state (the plan's files per queue, the report's entry per file, a split's summary), so a
store of a million LMQ queues needs gigabytes where a store of 64 queues needs a few hundred megabytes. Checked
once the scan has counted the queues, before any per-queue plan is made: a driver that would not fit is refused
in one line naming spark.driver.memory and how it was set, instead of dying half-way (or being killed by its
container's limit in cluster mode).

The figures are measured (docs/performance.md, "100,000 LMQ queues at 16 M messages"): the driver JVM's peak is
flat whatever the store holds (290-450 MB from 64 to 100,000 queues; in local mode it hosts the executors too); the
driver's Python takes about 130-170 MB before any store, plus the per-queue and per-split bytes below (measured:
1.4 KB a queue rebuilding 12,000 plain queues, 2.3 KB rebuilding and 3.4 KB verifying 100,000 LMQ queues; ~2 KB a
split)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .failure import JobError

MIB = 1 << 20
JVM_BYTES = 450 * MIB  # the driver JVM's measured peak, whatever the store holds
PYTHON_BASE_BYTES = 160 * MIB  # the driver's Python with pyspark, pyarrow and the pipeline imported
PER_QUEUE_BYTES = 4096  # measured 1.4 KB (plain) to 3.4 KB (verify, LMQ) a queue at the peak
PER_SPLIT_BYTES = 4096  # measured ~2 KB a split
SETTING = "spark.driver.memory"
SPARK_DEFAULT = "1g"  # Spark's own default, when spark-submit is given no --driver-memory
_UNITS = {"": MIB, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": MIB, "mb": MIB, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}


@dataclass(frozen=True)
class DriverMemory:
    """The driver's memory setting: bytes, and how the operator set it (for the one line that names it)."""

    bytes: int
    source: str  # e.g. "REPUT_DRIVER_MEMORY", "spark-submit --driver-memory"


def parse_size(text: str) -> int:
    """Bytes of a Spark memory size as spark.driver.memory reads it: a number with an optional unit (k, m, g, t, p,
    with or without b; b alone: bytes), no unit meaning MiB. ValueError naming the text otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{SETTING} {text!r} is not a size (e.g. 4g, 512m)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def driver_memory_of(value: str | None, submitted: bool) -> DriverMemory:
    """The setting as the driver runs with it: `value` (spark.driver.memory of the running context; None: Spark's
    default, 1g) under spark-submit or from reput's own launch (REPUT_DRIVER_MEMORY). JobError when it is no size."""
    source = "spark-submit --driver-memory" if submitted else "REPUT_DRIVER_MEMORY"
    try:
        return DriverMemory(parse_size(value if value is not None else SPARK_DEFAULT), source)
    except ValueError as exc:
        raise JobError(f"{exc} ({source})") from None


def driver_need(queues: int, splits: int) -> int:
    """Bytes the driver (its JVM and its Python) takes at its peak for a store of `queues` queues in `splits`
    splits."""
    return JVM_BYTES + PYTHON_BASE_BYTES + queues * PER_QUEUE_BYTES + splits * PER_SPLIT_BYTES


def check_driver_memory(queues: int, splits: int, given: DriverMemory | None) -> None:
    """JobError when the driver would need more than `given` (None: no setting bounds it, the local engine)."""
    if given is None:
        return
    need = driver_need(queues, splits)
    if need > given.bytes:
        raise JobError(f"the driver would need about {_mib(need)} for {queues:,} queues in {splits:,} splits "
                       f"({PER_QUEUE_BYTES // 1024} KB a queue, {_mib(JVM_BYTES + PYTHON_BASE_BYTES)} besides), "
                       f"more than {SETTING} gives it ({_mib(given.bytes)}, from {given.source}): raise it to at "
                       f"least {_gib_up(need)} ({given.source} {_gib_up(need)})")


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MB"


def _gib_up(n: int) -> str:
    return f"{-(-n // (1 << 30))}g"
