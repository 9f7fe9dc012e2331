"""Index slot chains as compiled sequential loops (numba): the broker's putKey order, one entry at a
time, written straight into the entries' bytes, which beats the vectorised stable sort
(index_build.newest_positions_numpy / entry_bytes_numpy, kept as the reference)."""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit()
def newest_by_hash(key_hash: np.ndarray, slots: int, newest: np.ndarray, first_position: int) -> None:
    """newest_positions over the keys' slots (keyHash % slots), without materialising the slots."""
    for i in range(key_hash.shape[0]):
        newest[np.int64(key_hash[i]) % slots] = first_position + i


@njit()
def entry_bytes(key_hash: np.ndarray, phy: np.ndarray, store_ts: np.ndarray, slots: int, current: np.ndarray,
                first_position: int, begin_ts: int, first_begin_ts: int, int_max: int) -> np.ndarray:
    """The 20-byte entries at positions first_position, ... as putKey writes them, big-endian: keyHash,
    phyOffset, timeDiff (seconds after the begin timestamp the put saw, Java's truncating division,
    clamped to 0..int_max, 0 when that timestamp is <= 0), previous position in the slot. The first
    entry of a file (first_position 1) sees `first_begin_ts`, every other one `begin_ts`; `current`,
    the newest position per slot, is updated (index_build.entry_bytes_numpy is the reference)."""
    n = key_hash.shape[0]
    # The chain first, as its own tight loop: its random slot reads then overlap each other (2.3x the
    # one-loop form on 20 M keys in 5 M slots), the byte assembly after is sequential.
    prevs = np.empty(n, np.int64)
    for i in range(n):
        s = np.int64(key_hash[i]) % slots
        prevs[i] = current[s]
        current[s] = first_position + i
    out = np.empty(n * 20, np.uint8)
    for i in range(n):
        h = np.int64(key_hash[i])
        prev = prevs[i]
        base = first_begin_ts if (i == 0 and first_position == 1) else begin_ts
        delta = np.int64(store_ts[i]) - base
        diff = min(delta // 1000, int_max) if base > 0 and delta > 0 else 0
        p = np.int64(phy[i])
        o = i * 20
        for b in range(4):
            out[o + b] = (h >> (24 - 8 * b)) & 0xFF
            out[o + 12 + b] = (diff >> (24 - 8 * b)) & 0xFF
            out[o + 16 + b] = (prev >> (24 - 8 * b)) & 0xFF
        for b in range(8):
            out[o + 4 + b] = (p >> (56 - 8 * b)) & 0xFF
    return out


@njit()
def append_chain(key_hash: np.ndarray, slots: int, table: np.ndarray, count: int, prevs: np.ndarray) -> int:
    """putKey's chain for entries appended to an existing file at positions count, count + 1, ...: `table` is the
    file's slot table as its big-endian bytes, updated in place (only the slots put into are written); each
    entry's previous position goes to `prevs`, 0 where the slot's value is not 0 < value <= the entry's position
    (IndexFile.putKey's check). Returns the puts that found no valid value: hashSlotCount's increase
    (index_build.append_chain_numpy is the reference)."""
    invalid = 0
    for i in range(key_hash.shape[0]):
        o = (np.int64(key_hash[i]) % slots) * 4
        v = (np.int64(table[o]) << 24) | (np.int64(table[o + 1]) << 16) | (np.int64(table[o + 2]) << 8) \
            | np.int64(table[o + 3])
        if v >= 2147483648:
            v -= 4294967296
        position = count + i
        if v <= 0 or v > position:
            v = 0
            invalid += 1
        prevs[i] = v
        table[o] = (position >> 24) & 0xFF
        table[o + 1] = (position >> 16) & 0xFF
        table[o + 2] = (position >> 8) & 0xFF
        table[o + 3] = position & 0xFF
    return invalid
