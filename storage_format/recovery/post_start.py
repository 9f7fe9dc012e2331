"""4.x start(): after recovery ReputMessageService re-dispatches [max maxPhysicOffset over queues, P);
5.x starts reput at the commit log's max offset."""
from __future__ import annotations

from typing import Iterable


def post_start_reput_from(generation: int, queue_max_phy: Iterable[int], log_min_offset: int, log_end: int) -> int:
    """Where ReputMessageService starts after recovery: 4.x the largest maxPhysicOffset of any queue
    (not below the commit log's min offset); 5.x the commit log's max offset."""
    if generation >= 5:
        return log_end
    best = max([log_min_offset, *queue_max_phy])
    return max(best, 0)
