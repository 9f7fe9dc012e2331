"""What the broker's clean service leaves of the consume queues and the index once the commit log's head is gone.

RocketMQ 4.9.8 / 5.x `DefaultMessageStore.CleanConsumeQueueService`, run whenever the commit log's min offset (the
start of its first segment, `CommitLog.getMinOffset`) has grown: every queue's `ConsumeQueue.deleteExpiredFile`
(`MappedFileQueue.deleteExpiredFileByOffset`: oldest first, every file but the last, while the last unit's
commit-log offset lies below the min offset; the first file kept stops it; `correctMinOffset` changes memory only)
and `IndexService.deleteExpiredFile` (nothing unless the first file's endPhyOffset lies below the min offset; then
oldest first, every file but the last, while its endPhyOffset does). A whole queue is never removed here (that is
the admin command cleanExpiredCQ). Pure functions: `jobs.rebuild --since` applies them to OUT1.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .consume_queue import CQ_UNIT_SIZE


def last_unit_at(file_size: int) -> int:
    """Byte offset of a full consume-queue file's last unit (the one deleteExpiredFileByOffset reads)."""
    return file_size - CQ_UNIT_SIZE


def expired_queue_files(starts: Sequence[int], last_unit_phy: Callable[[int], int], min_offset: int) -> list[int]:
    """Starts of the queue's files (oldest first) `ConsumeQueue.deleteExpiredFile(min_offset)` deletes;
    `last_unit_phy(start)` reads the commit-log offset in a file's last unit (read only for the files it reaches)."""
    gone = []
    for start in list(starts)[:-1]:
        if last_unit_phy(start) >= min_offset:
            break
        gone.append(start)
    return gone


def expired_index_files(end_phy_offsets: Sequence[int], min_offset: int) -> int:
    """How many index files (in name order) `IndexService.deleteExpiredFile(min_offset)` deletes, from their
    headers' endPhyOffset."""
    ends = list(end_phy_offsets)
    if not ends or ends[0] >= min_offset:
        return 0
    n = 0
    for end in ends[:-1]:
        if end >= min_offset:
            break
        n += 1
    return n
