"""A split's consume-queue rows grouped by queue as one compiled pass (numba): a stable counting sort, so
rows keep commit-log order inside their queue. Apart from split_kernel because it runs on the kernel's
output after the walk and depends on nothing of it (its own numba cache entry)."""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit(cache=True, nogil=True)
def group_rows(row_queue, queue_rank, n_queues):
    """Stable counting sort of consume-queue rows by their queue's rank: (row order, rows per rank)."""
    counts = np.zeros(n_queues + 1, np.int64)
    for i in range(row_queue.shape[0]):
        counts[queue_rank[row_queue[i]] + 1] += 1
    for r in range(n_queues):
        counts[r + 1] += counts[r]
    order = np.empty(row_queue.shape[0], np.int64)
    fill = counts[:-1].copy()
    for i in range(row_queue.shape[0]):
        r = queue_rank[row_queue[i]]
        order[fill[r]] = i
        fill[r] += 1
    return order, counts
