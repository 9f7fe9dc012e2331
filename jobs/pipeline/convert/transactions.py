"""The transaction ends' half records in the new log. A COMMIT/ROLLBACK record holds the offset of its half
(PREPARED) record, which moves with the layout. One Spark task per listed split holding such records maps the
offsets they point at, from the places of the splits their span covers (usually the split itself and the one
before), and writes the pairs that move beside the split's work files; the segment writers read the pairs of the
splits they copy. The driver holds counts only, however many transactions the store holds (issue 32)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..io.fs import Location
from ..io.workdir import write_prepared_pairs
from ..runtime.tasks import run_tasks
from .plan import ConvertPlan, PreparedMaps, SplitPlace
from ..scan.split_records import SplitRecords


@dataclass(frozen=True, kw_only=True)
class EndsTask:
    """One listed split's transaction ends to map: the places of the listed splits their prepared offsets span
    (offset order), the converted part's start (a half record below it, in the plain part, keeps its offset)."""

    records: SplitRecords
    places: tuple[SplitPlace, ...]
    segment_size: int
    start: int
    work: Location


@dataclass(frozen=True)
class EndsMapped:
    """A task's answer: the split, its transaction ends, those pointing at no record of the converted part, and
    the pairs written."""

    split: int
    ends: int
    outside: int
    pairs: int


def map_ends(prepared: np.ndarray, places: tuple[SplitPlace, ...], segment_size: int, start: int,
             sizes_of: Callable[[SplitRecords], np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """(old, new) offsets of the half records `prepared` points at that move (old ascending, unique), and how many
    of `prepared` point at no record of the converted part (at or above `start`, not a record's offset)."""
    targets = np.unique(prepared)
    found = np.zeros(len(targets), bool)
    keys, values = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for p in places:
        lo, hi = np.searchsorted(targets, [p.records.first, p.records.old_end]).tolist()
        if lo == hi:
            continue
        olds, news, _ = p.offsets(sizes_of(p.records), segment_size)
        want = targets[lo:hi]
        at = np.minimum(np.searchsorted(olds, want), len(olds) - 1)
        hit = olds[at] == want
        found[lo:hi] = hit
        moved = hit & (news[at] != want)
        keys.append(want[moved])
        values.append(news[at][moved])
    outside = targets[~found & (targets >= start)]
    return np.concatenate(keys), np.concatenate(values), int(np.isin(prepared, outside).sum())


def write_pairs(task: EndsTask) -> EndsMapped:
    """Map one split's transaction ends and write the pairs that move (a Spark task)."""
    prepared = task.records.prepared_in(task.work)
    keys, values, outside = map_ends(prepared, task.places, task.segment_size, task.start,
                                     lambda r: r.sizes_in(task.work))
    if len(keys):
        write_prepared_pairs(task.work, task.records.split, keys, values)
    return EndsMapped(task.records.split, len(prepared), outside, len(keys))


def ends_tasks(plan: ConvertPlan, work: Location) -> list[EndsTask]:
    """A task per listed split holding transaction ends, with the places its ends' span covers."""
    return [EndsTask(records=p.records, places=tuple(plan.splits[i] for i in
                                                    plan.overlapping(p.records.ends_lo, p.records.ends_hi)),
                     segment_size=plan.segment_size, start=plan.start, work=work)
            for p in plan.splits if p.records.ends]


def map_transaction_ends(sc, plan: ConvertPlan, work: Location, quiet: bool) -> PreparedMaps:
    """Every listed split's transaction ends mapped into `work`; what the plan's segment tasks and report need."""
    tasks = ends_tasks(plan, work)
    found = run_tasks(sc, tasks, write_pairs, "transaction ends", quiet=quiet) if tasks else []
    return PreparedMaps(ends=sum(f.ends for f in found), outside=sum(f.outside for f in found),
                        splits=frozenset(f.split for f in found if f.pairs), work=work)
