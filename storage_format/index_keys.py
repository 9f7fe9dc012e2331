"""The index keys of dispatched records, in the broker's order, as hashes (no key strings built).

Per record (transaction type not ROLLBACK): `topic#UNIQ_KEY` when present, then `topic#token` for
each non-empty token of KEYS split on single spaces. The hash of `topic#key` is composed from the
hashes of its parts (Java's polynomial hash is associative over concatenation).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .commitlog import RecordColumns
from .java_hash import arrow_buffers, index_key_hash, java_hash_and_length_ragged, java_hash_arrow, java_hash_concat
from .properties import KEYS, UNIQ_KEY, key_tokens
from .record import TRAN_MASK, TRAN_ROLLBACK

HASH_CHAR = ord("#")


def rows_at_or_after(offsets: np.ndarray, low) -> slice | np.ndarray:
    """The rows of record offsets that are >= low: a slice from the first one when they ascend, as keys in
    dispatch order do (searched, nothing copied), else a mask."""
    if len(offsets) > 1 and not bool((offsets[1:] >= offsets[:-1]).all()):
        return offsets >= low
    return slice(int(np.searchsorted(offsets, low, side="left")), len(offsets))


@dataclass(frozen=True)
class KeyBatch:
    """Index keys in dispatch order (key hash, record offset, store time)."""

    key_hash: np.ndarray
    phy: np.ndarray
    store_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.key_hash)

    def take(self, sel: np.ndarray | slice) -> "KeyBatch":
        """The rows selected by a mask or slice."""
        return KeyBatch(self.key_hash[sel], self.phy[sel], self.store_ts[sel])

    def from_offset(self, offset: int) -> "KeyBatch":
        """The keys of records at or after `offset` (rows_at_or_after: views, no copy, in dispatch order)."""
        return self.take(rows_at_or_after(self.phy, offset))

    @staticmethod
    def concat(batches: list["KeyBatch"]) -> "KeyBatch":
        """Batches joined in order (one batch is returned as it is: no copy of its arrays)."""
        if not batches:
            z = np.zeros(0, np.int64)
            return KeyBatch(z.astype(np.int32), z, z)
        if len(batches) == 1:
            return batches[0]
        return KeyBatch(np.concatenate([b.key_hash for b in batches]), np.concatenate([b.phy for b in batches]),
                        np.concatenate([b.store_ts for b in batches]))


@dataclass(frozen=True)
class IndexKeys:
    """Keys in dispatch order: record index, non-negative key hash, physical offset, store time."""

    record: np.ndarray
    key_hash: np.ndarray
    phy: np.ndarray
    store_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.key_hash)


def _hash_with_topic(topic_hash_sharp: np.ndarray, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Java hash of `topic#` + each string, from hash(`topic#`) and the strings' UTF-8 bytes."""
    h, length16 = java_hash_and_length_ragged(data, offsets)
    return java_hash_concat(topic_hash_sharp, h, length16)


def topic_prefix_hashes(topics: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Java hash of `topic#` per row (topics repeat: each distinct topic is hashed once; null -> "#")."""
    topic_h = java_hash_arrow(pc.dictionary_encode(topics))
    n = len(topic_h)
    return java_hash_concat(topic_h, np.full(n, HASH_CHAR, np.int32), np.ones(n, np.int64))


def index_key_hashes(topics: pa.Array | pa.ChunkedArray, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """keyHash the index stores for `topic#key` per row: abs of the Java hash, Integer.MIN_VALUE -> 0."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], type=keys.type)
    if pa.types.is_dictionary(keys.type):
        keys = keys.dictionary_decode()
    data, offsets = arrow_buffers(keys)
    return index_key_hash(_hash_with_topic(topic_prefix_hashes(topics), data, offsets))


def index_keys(cols: RecordColumns, only: np.ndarray | None = None) -> IndexKeys:
    """Index keys of the records in `cols` (optionally only where `only` is True), in dispatch order."""
    take = (cols.sys_flag & TRAN_MASK) != TRAN_ROLLBACK
    if only is not None:
        take &= only
    topic_sharp = topic_prefix_hashes(cols.topic)

    uniq = cols.property_binary(UNIQ_KEY)
    u_data, u_off = arrow_buffers(uniq)
    u_has = np.asarray(uniq.is_valid()) & take
    u_hash = _hash_with_topic(topic_sharp, u_data, u_off)

    keys = cols.property_binary(KEYS)
    k_data, k_off = arrow_buffers(keys)
    k_data, k_off = k_data[k_off[0]:k_off[-1]], k_off - k_off[0]
    owner, t_start, t_end = key_tokens(k_data, k_off)
    keep = (take & np.asarray(keys.is_valid()))[owner]
    owner, t_start, t_end = owner[keep], t_start[keep], t_end[keep]
    t_len = t_end - t_start
    t_off = np.concatenate([[0], np.cumsum(t_len)]).astype(np.int64)
    if len(t_len):
        idx = np.repeat(t_start - t_off[:-1], t_len) + np.arange(t_off[-1])
        t_data = k_data[idx]
    else:
        t_data = np.zeros(0, np.uint8)
    t_hash = _hash_with_topic(topic_sharp[owner], t_data, t_off)

    u_rec = np.flatnonzero(u_has)
    rec = np.concatenate([u_rec, owner]).astype(np.int64)
    hashes = np.concatenate([u_hash[u_rec], t_hash]).astype(np.int32)
    order = np.argsort(rec, kind="stable")  # per record: UNIQ_KEY first, then KEYS tokens in order
    rec, hashes = rec[order], hashes[order]
    return IndexKeys(rec, index_key_hash(hashes), cols.physical_offset[rec], cols.store_timestamp[rec])
