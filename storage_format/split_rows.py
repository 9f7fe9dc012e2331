"""What decoding a split hands on, whichever decoder ran (the compiled kernel or the numpy reference): the
split's consume-queue rows grouped by queue (its per-queue counts and offset ranges: queue_table). Kernel-free,
so that the reference path and the work files need no kernel module."""
from __future__ import annotations

from dataclasses import dataclass

from .consume_queue import CqColumns


@dataclass(frozen=True)
class CqRows(CqColumns):
    """A split's consume-queue rows, grouped by queue in (topic, queueId) order, commit-log order inside."""
