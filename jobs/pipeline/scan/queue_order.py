"""Queues whose records' queueOffsets do not step by 1 in commit-log order (a damaged queueOffset), found: the
broker writes such a queue by its own rule (consume_queue.place_units), and so does reput, but the operator is
told, by file and byte offset (issues 35 item 5 and 36 item 1)."""
from __future__ import annotations

import numpy as np

from storage_format.consume_queue import place_units
from storage_format.multi_dispatch import is_lmq
from storage_format.queue_table import MergedQueues

from ..io.fs import Location
from ..io.workdir import read_cq
from .result import OutOfStepQueues, ScanResult

EXAMINED = 1_000  # out-of-step queues read for the first misplaced record (the line names them all regardless)


def out_of_step_queues(scan: ScanResult, work: Location) -> OutOfStepQueues | None:
    """The store's out-of-step queues, the one whose first misplaced record comes first named. Each queue's rows are
    read back split by split from the decode stage's work files only up to its first misplaced record, one split's
    slice at a time (the driver's memory is one slice, whatever the queue's length); a healthy store reads nothing."""
    q = scan.queue_table()
    names = q.topic.to_pylist()
    bad = _out_of_step(q, names)
    first: tuple[int, str, int, int, bool] | None = None
    sources = _sources(scan, q, bad[:EXAMINED])
    for i in bad[:EXAMINED]:
        found = _first_in_queue(sources.get(i, []), work)
        if found is not None and (first is None or found[0] < first[0]):
            first = (found[0], f"{names[i]}/{int(q.queue_id[i])}", *found[1:])
    if first is None:
        return None
    at, queue, qo, slot, skipped = first
    seg = scan.segment_of(at)
    return OutOfStepQueues(queues=tuple(sorted(f"{names[i]}/{int(q.queue_id[i])}" for i in bad)), path=seg.path,
                           byte_offset=at - seg.start, offset=at, queue=queue, queue_offset=qo, slot=slot,
                           skipped=skipped)


def _sources(scan: ScanResult, q: MergedQueues, queues: list[int]) -> dict[int, list[tuple[int, int, int]]]:
    """(split, first row, rows) of each of `queues` (rows of the merged table) in every split where it has rows, in
    split order: one pass over the splits' queue tables (only when a queue is out of step)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    if not queues:
        return out
    wanted = np.zeros(len(q), bool)
    wanted[queues] = True
    for s in scan.accepted:
        table = scan.split_queues(s)
        pos = q.positions(table)
        for row in np.flatnonzero(wanted[pos] & (table.cq_rows > 0)).tolist():
            out.setdefault(int(pos[row]), []).append((s.index, int(table.first_row[row]), int(table.cq_rows[row])))
    return out


def _first_in_queue(sources: list[tuple[int, int, int]], work: Location) -> tuple[int, int, int, bool] | None:
    """A queue's first misplaced record: its slices in split order, each skipped when it continues the queue in
    step (a vectorised check), else placed from the write position the slices before it left."""
    next_slot = None
    for split, first_row, n in sources:
        rows = read_cq(work, split).slice(first_row, n)
        qo = rows.column("queue_offset").to_numpy()
        start = int(qo[0]) if next_slot is None else next_slot
        if (qo == start + np.arange(len(qo))).all():
            next_slot = start + len(qo)
            continue
        phy, size = rows.column("phy").to_numpy(), rows.column("size").to_numpy()
        if next_slot is not None:  # the write position carried in: a written unit just before it
            qo, phy, size = (np.concatenate(([a], b)) for a, b in ((next_slot - 1, qo), (-1, phy), (1, size)))
        return _first_misplaced(qo, phy, size)
    return None


def out_of_step_names(scan: ScanResult) -> list[str]:
    """"topic/queueId" of every out-of-step queue, from the split summaries alone (no rows read: inspect)."""
    q = scan.queue_table()
    names = q.topic.to_pylist()
    return sorted(f"{names[i]}/{int(q.queue_id[i])}" for i in _out_of_step(q, names))


def _out_of_step(q, names: list[str]) -> list[int]:
    """Rows of the merged queue table whose queue has entries that do not step by 1, but for queues multi-dispatch
    fills (`%LMQ%` names, and any queue with more entries than records of its own, e.g. `%RETRY%` names in
    lmq-clean-small-11): their offsets are shared, so the broker skipping a repeat there is its normal work."""
    bad = np.flatnonzero((q.cq_rows > 0) & (q.cq_rows <= q.records) & ~q.in_step()).tolist()
    return [i for i in bad if not is_lmq(names[i])]


def _first_misplaced(qo: np.ndarray, phy: np.ndarray, size: np.ndarray) -> tuple[int, int, int, bool] | None:
    """(commit-log offset, queueOffset, write position, skipped) of a queue's first record that does not land
    at its stored offset, its entries given in commit-log order."""
    keep, at = place_units(qo, phy, size)
    slot = np.zeros(len(qo), np.int64)
    slot[keep] = at
    written = np.cumsum(keep) - keep  # entries kept before each row
    start = int(at[0]) if len(at) else 0
    slot[~keep] = start + written[~keep]
    wrong = np.flatnonzero(~keep | (slot != qo))
    if not len(wrong):
        return None
    row = int(wrong[0])
    return int(phy[row]), int(qo[row]), int(slot[row]), not bool(keep[row])
