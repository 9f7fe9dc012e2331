"""The source scan's work files read as OUT's: the driver writes beside each DLedger split's work files its records'
old and new offsets (io.workdir.write_offset_map), and the build tasks give the split's consume-queue rows and
index keys their new offsets as they read them (io.workdir.OffsetMap; the layout is a monotone map, so every order
the build relies on holds). So consume queues and index files are built as rebuild builds them, without decoding
the new commit log or rewriting the work files, and in the same Spark job as the segment writes: they depend on
the layout only, not on the bytes written."""
from __future__ import annotations

import numpy as np

from ..io.fs import Location
from ..io.workdir import write_offset_map
from ..scan.result import ScanResult
from .plan import ConvertPlan


def write_offset_maps(scan: ScanResult, plan: ConvertPlan, work: Location) -> frozenset[int]:
    """Each accepted DLedger split's offset map (its records are consecutive in the plan); returns the splits
    mapped, the build tasks' `moved`."""
    moved = set()
    for s in scan.accepted:
        if s.listed is None or not len(s.listed.sizes):
            continue
        lo = int(np.searchsorted(plan.old, s.listed.first))
        hi = lo + len(s.listed.sizes)
        write_offset_map(work, s.index, plan.old[lo:hi], plan.layout.offsets[lo:hi])
        moved.add(s.index)
    return frozenset(moved)
