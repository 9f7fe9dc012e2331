"""A split's consume-queue rows grouped by queue as one compiled pass (numba): a stable counting sort, so
rows keep commit-log order inside their queue, that moves the rows' columns too. Apart from split_kernel
because it runs on the kernel's output after the walk and depends on nothing of it (its own numba cache
entry)."""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit(cache=True, nogil=True)
def group_rows(rows, queue_col, columns, queue_rank, n_queues):
    """Stable counting sort of the row-major `rows` by their queue's rank (queue rows[:, queue_col]):
    (the `columns` of the rows in that order, one output row each; rows per rank). The rows are read once
    in order and each one's columns written to its place, instead of an order gathered column by column."""
    n = rows.shape[0]
    counts = np.zeros(n_queues + 1, np.int64)
    for i in range(n):
        counts[queue_rank[rows[i, queue_col]] + 1] += 1
    for r in range(n_queues):
        counts[r + 1] += counts[r]
    out = np.empty((columns.shape[0], n), np.int64)
    fill = counts[:-1].copy()
    for i in range(n):
        r = queue_rank[rows[i, queue_col]]
        d = fill[r]
        fill[r] = d + 1
        for j in range(columns.shape[0]):
            out[j, d] = rows[i, columns[j]]
    return out, counts
