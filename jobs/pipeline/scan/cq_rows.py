"""A decode task's consume-queue rows: records grouped by queue, multi-dispatch entries added, ranges noted.

The rows of a split are its records' own entries plus their multi-dispatch entries
(storage_format.multi_dispatch), grouped by (topic, queueId) with dispatch order kept inside a queue;
the build stages cut queues out of these rows by the ranges noted here. Which multi-dispatch rules the decode
applies: the generation's for file queues, RocksDB's for `storeType=defaultRocksDB` (storage_format.rocksdb_dispatch).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_format.arrow_numpy import large_strings, to_numpy
from storage_format.commitlog import RecordColumns
from storage_format.consume_queue import unsafe_topic_reason
from storage_format.cq_layout import is_rocksdb_type
from storage_format.queue_table import QueueTable
from storage_format.rocksdb_dispatch import rocksdb_lmq_rules
from storage_format.settings import BrokerSettings
from storage_format.multi_dispatch import (INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, LmqEntries,
                                           MultiDispatchError, MultiDispatchRules, lmq_entries, rules_for)

from ..io.fs import Location
from ..store.markers import store_generation

CQ_SCHEMA = pa.schema([("topic", pa.large_string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                       ("phy", pa.int64()), ("size", pa.int32()), ("tags", pa.int64())])


def multi_dispatch_rules(store: Location, settings: BrokerSettings,
                         generation: int | None) -> MultiDispatchRules | None:
    """The multi-dispatch rules the decode tasks apply (None: off), the generation given or detected."""
    if is_rocksdb_type(settings):  # RocksDB consume queues: their own LMQ rules (storage_format.rocksdb_dispatch)
        return rocksdb_lmq_rules(settings.enable_lmq)
    guess = store_generation(store, generation) if settings.enable_multi_dispatch else None
    return rules_for(settings.enable_multi_dispatch, settings.enable_lmq, guess.generation,
                     generation is not None or guess.generation >= 5) if guess else None


def names_are_dirs(rules: MultiDispatchRules | None) -> bool:
    """Whether multi-dispatch queue names become directories under consumequeue/ (file queues), so that an unsafe one
    is refused; RocksDB consume queues keep them as key bytes."""
    return rules is None or not rules.keep_separator_names


@dataclass(frozen=True)
class SplitLmq:
    """A split's multi-dispatch entries (None when the rules give none), and the commit-log offset of a
    record carrying both multi-dispatch properties while enableMultiDispatch is unset (for the driver)."""

    entries: LmqEntries | None = None
    unconfigured_at: int | None = None


def split_lmq(cols: RecordColumns, rows: np.ndarray, rules: MultiDispatchRules | None,
              configured: bool) -> SplitLmq:
    """Multi-dispatch entries of the records `rows` (those with an own consume-queue entry)."""
    names, offsets = cols.property_string(INNER_MULTI_DISPATCH), cols.property_string(INNER_MULTI_QUEUE_OFFSET)
    if names.null_count == len(names) or offsets.null_count == len(offsets):
        return SplitLmq()
    if rules is None:
        both = np.flatnonzero(pc.and_(names.is_valid(), offsets.is_valid()).to_numpy(zero_copy_only=False))
        return SplitLmq(None, cols.base_offset + int(cols.pos[both[0]]) if len(both) and not configured else None)
    take = pa.array(rows)
    try:
        extra = lmq_entries(names.take(take), offsets.take(take), cols.topic.take(take), cols.queue_id[rows], rules)
    except MultiDispatchError as err:
        raise MultiDispatchError(int(rows[err.record]), str(err)) from None
    if not len(extra):
        return SplitLmq()
    return SplitLmq(LmqEntries(rows[extra.record], extra.queue, extra.queue_id, extra.queue_offset, extra.seq))


def cq_table(cols: RecordColumns, groups: QueueGroups, rows: np.ndarray, tags: np.ndarray,
             extra: LmqEntries | None, check_names: bool = True) -> tuple[pa.Table, QueueGroups, np.ndarray]:
    """The split's consume-queue entries grouped by queue in (topic, queueId) order, dispatch order kept
    inside a queue (a record's own entry, then its multi-dispatch entries in name order); with each
    row's group. An unsafe multi-dispatch queue name raises MultiDispatchError naming its record (`check_names`
    False: RocksDB consume queues, whose names are key bytes, not directories)."""
    if extra is None:
        combined = np.sort((groups.group[rows].astype(np.int64) << 32) | np.arange(len(rows), dtype=np.int64))
        rec = rows[combined & 0xFFFFFFFF]
        topic, row_group = pc.take(groups.topic_names, groups.topic_rank[rec]), combined >> 32
        qid, qo, cq_groups = cols.queue_id[rec], cols.queue_offset[rec], groups
    else:
        rec = np.concatenate([rows, extra.record])
        dispatch = np.lexsort((np.concatenate([np.zeros(len(rows), np.int64), extra.seq]), rec))
        rec = rec[dispatch]
        topic = pa.concat_arrays([cols.topic.take(pa.array(rows)), extra.queue]).take(pa.array(dispatch))
        qid = np.concatenate([cols.queue_id[rows], extra.queue_id])[dispatch]
        qo = np.concatenate([cols.queue_offset[rows], extra.queue_offset])[dispatch]
        cq_groups = queue_groups(topic, qid)
        for first, reason in unsafe_topics(cq_groups) if check_names else ():
            raise MultiDispatchError(int(rec[first]), f"{INNER_MULTI_DISPATCH}: {reason}")
        order = np.argsort(cq_groups.group, kind="stable")
        rec, topic, qid, qo, row_group = rec[order], topic.take(pa.array(order)), qid[order], qo[order], \
            cq_groups.group[order]
    table = pa.table({"topic": topic, "queue_id": pa.array(qid, pa.int32()), "queue_offset": pa.array(qo),
                      "phy": pa.array(cols.physical_offset[rec]), "size": pa.array(cols.total_size[rec], pa.int32()),
                      "tags": pa.array(tags[rec])}, schema=CQ_SCHEMA)
    return table, cq_groups, row_group


@dataclass(frozen=True)
class QueueGroups:
    """Records grouped by (topic, queueId): keys in (topic, queueId) order and each record's group.

    Topics are dictionary-encoded once, so per-topic work runs once per distinct topic.
    """

    keys: list[tuple[str, int]]
    group: np.ndarray  # group number per record (index into keys)
    topic_names: pa.Array  # distinct topics, sorted
    topic_rank: np.ndarray  # per record: index into topic_names
    first_record: list[int]  # per distinct topic (sorted order): index of its first record


def queue_groups(topic: pa.Array, queue_id: np.ndarray) -> QueueGroups:
    """Rows grouped by (topic, queueId)."""
    encoded = pc.dictionary_encode(topic)
    names = encoded.dictionary.to_pylist()
    order = sorted(range(len(names)), key=names.__getitem__)
    rank_of_code = np.empty(len(names), np.int64)
    rank_of_code[order] = np.arange(len(names))
    codes = to_numpy(encoded.indices)
    topic_rank = rank_of_code[codes]
    first_of_code = np.full(len(names), len(codes), np.int64)
    np.minimum.at(first_of_code, codes, np.arange(len(codes)))
    qid = queue_id.astype(np.int64) + 2**31  # signed order as non-negative 32 bits
    uniq, group = np.unique((topic_rank << 32) | qid, return_inverse=True)
    sorted_names = [names[i] for i in order]
    keys = [(sorted_names[k >> 32], (k & 0xFFFFFFFF) - 2**31) for k in uniq.tolist()]
    return QueueGroups(keys, group.reshape(-1), large_strings(sorted_names), topic_rank,
                       first_of_code[order].tolist())


def unsafe_topics(groups: QueueGroups) -> list[tuple[int, str]]:
    """(record index, reason) for topics that cannot be a directory name under consumequeue/."""
    bad = [(first, reason) for topic, first in zip(groups.topic_names.to_pylist(), groups.first_record)
           if (reason := unsafe_topic_reason(topic))]
    return [min(bad)] if bad else []


def queue_table(own: QueueGroups, records: np.ndarray, groups: QueueGroups | None = None,
                row_group: np.ndarray | None = None, qo: np.ndarray | None = None) -> QueueTable:
    """The split's queue table: its records' own queues with their record counts and, from the split's
    sorted consume-queue rows (`groups`, each row's group, queue offsets), where each queue's rows start,
    the smallest and largest queue offset among them and whether they step by exactly 1."""
    keys = dict.fromkeys(own.keys)
    if groups is not None:
        keys.update(dict.fromkeys(groups.keys))
    at = {key: i for i, key in enumerate(keys)}
    n = len(at)
    cols = {c: np.zeros(n, np.int64) for c in ("records", "cq_rows", "first_row", "min_offset", "max_offset")}
    unordered = np.zeros(n, bool)
    cols["records"][[at[key] for key in own.keys]] = records
    if groups is not None and len(row_group):
        starts = np.flatnonzero(np.diff(row_group, prepend=-1))
        mine = np.array([at[groups.keys[g]] for g in row_group[starts].tolist()], np.int64)
        cols["first_row"][mine] = starts
        cols["cq_rows"][mine] = np.diff(np.append(starts, len(row_group)))
        cols["min_offset"][mine], cols["max_offset"][mine] = np.minimum.reduceat(qo, starts), np.maximum.reduceat(qo, starts)
        steps = np.flatnonzero(np.diff(qo) != 1) + 1  # row after a step that is not +1 ...
        steps = steps[np.diff(row_group)[steps - 1] == 0]  # ... inside one queue
        unordered[[at[groups.keys[g]] for g in np.unique(row_group[steps]).tolist()]] = True
    return QueueTable.build([t for t, _ in keys], np.array([q for _, q in keys], np.int64), **cols,
                            unordered=unordered)
