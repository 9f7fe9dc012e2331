"""The index keys of dispatched records, in the broker's order, as hashes (no key strings built).

Per record (transaction type not ROLLBACK): `topic#UNIQ_KEY` when present, then `topic#token` for
each non-empty token of KEYS split on single spaces. The hash of `topic#key` is composed from the
hashes of its parts (Java's polynomial hash is associative over concatenation).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .commitlog import RecordColumns
from .java_hash import arrow_buffers, index_key_hash, java_hash_and_length_ragged, java_hash_arrow, java_hash_concat
from .properties import KEYS, UNIQ_KEY
from .record import TRAN_MASK, TRAN_ROLLBACK

HASH_CHAR = ord("#")


@dataclass(frozen=True)
class IndexKeys:
    """Keys in dispatch order: record index, non-negative key hash, physical offset, store time."""

    record: np.ndarray
    key_hash: np.ndarray
    phy: np.ndarray
    store_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.key_hash)


def _tokens(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs of non-space bytes inside each string: (owner string, start, end)."""
    data, offsets = data[offsets[0]:offsets[-1]], offsets - offsets[0]
    n_bytes = len(data)
    if n_bytes == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    word = data != 0x20
    boundary = np.zeros(n_bytes + 1, bool)
    boundary[offsets] = True  # string starts/ends break tokens
    prev_word = np.zeros(n_bytes, bool)
    prev_word[1:] = word[:-1]
    prev_word[boundary[:-1]] = False
    next_word = np.zeros(n_bytes, bool)
    next_word[:-1] = word[1:]
    next_word[boundary[1:]] = False
    starts = np.flatnonzero(word & ~prev_word)
    ends = np.flatnonzero(word & ~next_word) + 1
    owner = np.searchsorted(offsets, starts, side="right") - 1
    return owner, starts, ends


def _hash_with_topic(topic_hash_sharp: np.ndarray, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Java hash of `topic#` + each string, from hash(`topic#`) and the strings' UTF-8 bytes."""
    h, length16 = java_hash_and_length_ragged(data, offsets)
    return java_hash_concat(topic_hash_sharp, h, length16)


def index_keys(cols: RecordColumns, only: np.ndarray | None = None) -> IndexKeys:
    """Index keys of the records in `cols` (optionally only where `only` is True), in dispatch order."""
    n = len(cols)
    take = (cols.sys_flag & TRAN_MASK) != TRAN_ROLLBACK
    if only is not None:
        take &= only
    topic_h = java_hash_arrow(cols.topic)
    topic_sharp = java_hash_concat(topic_h, np.full(n, HASH_CHAR, np.int32), np.ones(n, np.int64))

    uniq = cols.property_binary(UNIQ_KEY)
    u_data, u_off = arrow_buffers(uniq)
    u_has = np.asarray(uniq.is_valid()) & take
    u_hash = _hash_with_topic(topic_sharp, u_data, u_off)

    keys = cols.property_binary(KEYS)
    k_data, k_off = arrow_buffers(keys)
    k_data, k_off = k_data[k_off[0]:k_off[-1]], k_off - k_off[0]
    owner, t_start, t_end = _tokens(k_data, k_off)
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
