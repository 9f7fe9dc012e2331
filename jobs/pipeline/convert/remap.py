"""The source scan's work files read as OUT's: beside each DLedger split's work files its records' old and new
offsets (io.workdir.write_offset_map), written by one Spark task per split from the split's place in the layout and
its record sizes (the driver never holds them), and the build tasks give the split's consume-queue rows and index
keys their new offsets as they read them (io.workdir.OffsetMap; the layout is a monotone map, so every order the
build relies on holds). So consume queues and index files are built as rebuild builds them, without decoding the new
commit log or rewriting the work files, and in the same Spark job as the segment writes: they depend on the layout
only, not on the bytes written."""
from __future__ import annotations

from dataclasses import dataclass

from ..io.fs import Location
from ..io.workdir import write_offset_map
from ..runtime.tasks import run_tasks
from .plan import ConvertPlan, SplitPlace


@dataclass(frozen=True)
class MapTask:
    """One listed split's offset map to write."""

    place: SplitPlace
    segment_size: int
    work: Location


def write_map(task: MapTask) -> int:
    """Write the split's offset map (a Spark task); returns the split's index."""
    split = task.place.records.split
    olds, news, _ = task.place.offsets(task.place.records.sizes_in(task.work), task.segment_size)
    write_offset_map(task.work, split, olds, news)
    return split


def write_offset_maps(sc, plan: ConvertPlan, work: Location, quiet: bool) -> frozenset[int]:
    """Each listed DLedger split's offset map; returns the splits mapped, the build tasks' `moved`."""
    tasks = [MapTask(p, plan.segment_size, work) for p in plan.splits]
    return frozenset(run_tasks(sc, tasks, write_map, "offset maps", quiet=quiet)) if tasks else frozenset()
