"""Index slot chains as compiled sequential loops (numba): the broker's putKey order, one entry at a
time, which beats the vectorised stable sort (index_file.*_numpy, kept as the reference)."""
from __future__ import annotations

import numpy as np

from .kernel_cache import njit


@njit(cache=True, nogil=True)
def newest_positions(slot: np.ndarray, newest: np.ndarray, first_position: int) -> None:
    """Entries at positions first_position, first_position + 1, ... in slots `slot`: each slot's
    newest position into `newest` (the slot table after these puts)."""
    for i in range(slot.shape[0]):
        newest[slot[i]] = first_position + i


@njit(cache=True, nogil=True)
def chain_prev(slot: np.ndarray, current: np.ndarray, first_position: int) -> np.ndarray:
    """Each entry's previous-in-slot position (what its put read from the slot), updating `current`,
    the newest position per slot so far."""
    prev = np.empty(slot.shape[0], np.int64)
    for i in range(slot.shape[0]):
        s = slot[i]
        prev[i] = current[s]
        current[s] = first_position + i
    return prev
