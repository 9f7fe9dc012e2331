"""The source scan's work files made OUT's: each DLedger split's consume-queue rows and index keys get their
records' new physical offsets (one Spark task per split; the layout is a monotone map, so every order the
build relies on holds), and consume queues and index files are then built from them as rebuild builds them,
without decoding the new commit log again. A task gets only its split's part of the old -> new map."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.index_keys import KeyBatch
from storage_format.split_rows import CqRows

from ..io.fs import Location
from ..io.workdir import cq_columns, cq_file, key_columns, keys_file, write_cq, write_keys


@dataclass(frozen=True)
class RemapTask:
    """One split's work files and its records' old and new offsets (sorted, the same length)."""

    work: Location
    split_index: int
    old: np.ndarray
    new: np.ndarray


def map_offsets(phy: np.ndarray, old: np.ndarray, new: np.ndarray, what: str) -> np.ndarray:
    """Each of `phy` (record offsets in `old`) as its new offset; an offset not among `old` is an error."""
    at = np.searchsorted(old, phy)
    ok = (at < len(old)) & (old[np.minimum(at, max(len(old) - 1, 0))] == phy) if len(old) else np.zeros(len(phy), bool)
    if not ok.all():
        bad = int(phy[np.flatnonzero(~ok)[0]])
        raise ValueError(f"{what}: offset {bad} is no listed record's: the work file and the listing disagree")
    return new[at]


def remap_split(task: RemapTask) -> int:
    """Rewrite the split's consume-queue rows and index keys with new offsets (runs in a Spark task);
    returns the rows and keys rewritten. Columns are copied out before the file they map is replaced."""
    done = 0
    if cq_file(task.work, task.split_index).exists():
        cols = {name: np.array(c.take()) for name, c in cq_columns(task.work, task.split_index).items()}
        phy = map_offsets(cols["phy"], task.old, task.new, cq_file(task.work, task.split_index).uri)
        write_cq(task.work, task.split_index, CqRows(cols["queue_offset"], phy, cols["size"], cols["tags"]))
        done += len(phy)
    if keys_file(task.work, task.split_index).exists():
        cols = {name: np.array(c.take()) for name, c in key_columns(task.work, task.split_index).items()}
        phy = map_offsets(cols["phy"], task.old, task.new, keys_file(task.work, task.split_index).uri)
        write_keys(task.work, task.split_index, KeyBatch(cols["key_hash"], phy, cols["store_ts"]))
        done += len(phy)
    return done
