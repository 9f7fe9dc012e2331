"""What decoding a split hands on, whichever decoder ran (the compiled kernel or the numpy reference): the
split's consume-queue rows grouped by queue, and per-queue counts and offset ranges. Kernel-free, so that
the reference path and the work files need no kernel module."""
from __future__ import annotations

from dataclasses import dataclass

from .consume_queue import CqColumns


@dataclass(frozen=True)
class QueueStats:
    """One (topic, queueId) of a split: its records, its consume-queue rows (where they start in the
    split's consume-queue table), and the smallest and largest queue offset among those rows."""

    records: int
    cq_rows: int = 0
    first_row: int = 0
    min_offset: int = 0
    max_offset: int = 0


@dataclass(frozen=True)
class CqRows(CqColumns):
    """A split's consume-queue rows, grouped by queue in (topic, queueId) order, commit-log order inside."""
