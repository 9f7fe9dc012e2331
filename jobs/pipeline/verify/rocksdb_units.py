"""Verify, RocksDB consume queues: one task compares the `default` family's units of its queues, key range by key
range, with the units the commit log implies (storage_format.rocksdb_dispatch); the units in key ranges of no
expected queue are checked by a task of their own. What the broker's history leaves is counted apart, not a finding:
the dirty tail past a queue's "max", units below the log's min offset not compacted yet, units the next start
dispatches (again)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from storage_format.rocksdb_cq import (CTRL_1, DEFAULT_CF, UNIT_KEY_FIXED, UNIT_VALUE_DTYPE, UNIT_VALUE_SIZE,
                                       RocksCqFormatError, parse_unit_key, unit_key)
from storage_format.rocksdb_dispatch import (UNIT_FIELDS, NextStart, QueueTail, compare_units,
                                             consequence_of_missing, queue_units, store_timestamps)
from storage_format.scan_plan import Segment

from ..io.rocksdb_db import CqDatabase, UnitBatch, open_cq_database
from ..outputs.build import CqTask, _run_entries
from .findings import Findings

DETAIL_FIELDS = dict(UNIT_FIELDS)


@dataclass(frozen=True, kw_only=True)
class RocksRun:
    """One run of a queue a task checks: the queue, the key range [lower, upper) its units lie in, the database's
    "max" queueOffset for it (None: no "max" record)."""

    topic: str
    queue_id: int
    lower: bytes
    upper: bytes
    db_max_offset: int | None


@dataclass(frozen=True, kw_only=True)
class RocksCheckTask:
    """A verify task over a RocksDB database: `build`'s runs (rows from the scan's work files) with their key
    ranges (`runs`, same order), or (`build` None) the key ranges of no expected queue (`gaps`, with the "max"
    queueOffsets of the queues met there)."""

    db_dir: str
    label: str  # the database directory as messages name it
    segments: tuple[Segment, ...]
    next_start: NextStart
    log_min: int
    build: CqTask | None = None
    runs: tuple[RocksRun, ...] = ()
    gaps: tuple[tuple[bytes | None, bytes | None], ...] = ()
    gap_max: dict[tuple[bytes, int], int] = field(default_factory=dict)


@dataclass(kw_only=True)
class RocksCheckResult:
    """A task's findings, what it counted apart, and per queue what its "max" record is checked against."""

    found: Findings
    counts: Counter = field(default_factory=Counter)
    tails: dict[tuple[str, int], QueueTail] = field(default_factory=dict)
    dispatched_end: int = 0  # end of the last record with a unit (the checkpoint the log implies)


def unit_path(topic: str, queue_id: int) -> str:
    """How findings name a queue of the database (per_queue in the report groups by it)."""
    return f"consumequeue/{topic}/{queue_id}/{DEFAULT_CF}"


def check_rocks(task: RocksCheckTask) -> RocksCheckResult:
    """Run the task: its runs against the database, or its gap ranges."""
    out = RocksCheckResult(found=Findings())
    with open_cq_database(Path(task.db_dir), task.label) as db, _Timestamps(task.segments) as ts:
        if task.build is None:
            for lower, upper in task.gaps:
                _check_gap(db, task, lower, upper, out)
            return out
        for run, rows in zip(task.runs, _run_entries(task.build)):
            _check_run(db, task, run, rows, ts, out)
    return out


def _db_units(db: CqDatabase, lower: bytes, upper: bytes, key_len: int, label: str,
              found: Findings, path: str) -> tuple[np.ndarray, np.ndarray]:
    """(queue offsets, UNIT_VALUE_DTYPE values) of one queue's key range, batch by batch into numpy (no key kept); a
    key of another length or without the separator before its queue offset is a finding (malformed_key), left out."""
    qos, vals = [np.zeros(0, np.int64)], [np.zeros(0, UNIT_VALUE_DTYPE)]
    for batch in db.unit_batches(lower, upper):
        _bad_values(batch, found, path, label)
        joined = b"".join(batch.keys)
        if set(map(len, batch.keys)) == {key_len}:
            arr = np.frombuffer(joined, np.uint8).reshape(-1, key_len)
            ok = arr[:, key_len - 9] == CTRL_1[0]
        else:
            ok = np.array([len(k) == key_len and k[key_len - 9:key_len - 8] == CTRL_1 for k in batch.keys], bool)
        for i in np.flatnonzero(~ok).tolist():
            found.add("consumequeue", "malformed_key", path, key=batch.keys[i].hex(), column_family=DEFAULT_CF,
                      detail=f"{label}: a key in this queue's range that is not a unit key of it")
        if not ok.all():
            joined = b"".join(k for k, g in zip(batch.keys, ok) if g)
        arr = np.frombuffer(joined, np.uint8).reshape(-1, key_len)
        qos.append(np.ascontiguousarray(arr[:, key_len - 8:]).view(">i8").reshape(-1).astype(np.int64))
        vals.append(batch.values[ok])
    return np.concatenate(qos), np.concatenate(vals)


def _bad_values(batch: UnitBatch, found: Findings, path: str, label: str) -> None:
    """Items whose value is not a unit's 28 bytes: a finding each (malformed_key), left out of the comparison (the
    unit the broker would read there is missing from it, a finding of its own)."""
    for key, size in batch.bad_values:
        found.add("consumequeue", "malformed_key", path, key=key.hex(), column_family=DEFAULT_CF,
                  detail=f"{label}: a value of {size} bytes, not a unit's {UNIT_VALUE_SIZE}")


def _check_run(db: CqDatabase, task: RocksCheckTask, run: RocksRun, rows, ts: "_Timestamps",
               out: RocksCheckResult) -> None:
    """One run: the database's units in its key range against the rows the commit log implies for it."""
    path = unit_path(run.topic, run.queue_id)
    topic = run.topic.encode()
    units = queue_units(rows.queue_offset, rows.phy, rows.size, rows.tags, rows.store_ts)
    part = QueueTail.of(rows.phy, np.asarray(rows.queue_offset), task.next_start)
    key = (run.topic, run.queue_id)
    out.tails[key] = out.tails[key].then(part) if key in out.tails else part
    if len(rows.phy):
        out.dispatched_end = max(out.dispatched_end, int((np.asarray(rows.phy) + np.asarray(rows.size)).max()))
    exp = {"phy": units.phy, "size": units.size, "tags": units.tags,  # timestamps from the decode, else the log
           "ts": units.store_ts if units.store_ts is not None else ts(units.phy)}
    db_qo, values = _db_units(db, run.lower, run.upper, UNIT_KEY_FIXED + len(topic), task.label, out.found, path)
    got = {"phy": values["phy_offset"].astype(np.int64), "size": values["size"].astype(np.int32),
           "tags": values["tags_code"].astype(np.int64), "ts": values["store_timestamp"].astype(np.int64)}
    cmp = compare_units(units.queue_offset, exp, db_qo, got)
    out.counts["units_compared"] += cmp.matched + len(cmp.differ)
    out.counts["units_in_database"] += len(db_qo)
    for e, d in cmp.differ.tolist():
        fields = [name for k, name in UNIT_FIELDS if exp[k][e] != got[k][d]]
        out.found.add("consumequeue", "entry_differs", path, queue=f"{run.topic}/{run.queue_id}", entry=int(db_qo[d]),
                      key=unit_key(topic, run.queue_id, int(db_qo[d])).hex(), fields=fields, expected=_unit(exp, e), found=_unit(got, d))
    redo = task.next_start.redispatched(units.phy[cmp.missing])
    out.counts["not_yet_dispatched_units"] += int(redo.sum())
    for e in cmp.missing[~redo].tolist():
        qo, phy = int(units.queue_offset[e]), int(units.phy[e])
        out.found.add("consumequeue", "missing_entry", path, queue=f"{run.topic}/{run.queue_id}", entry=qo,
                      key=unit_key(topic, run.queue_id, qo).hex(), expected=_unit(exp, e),
                      detail=consequence_of_missing(run.topic, run.queue_id, qo, phy))
    _extra_units(out, task, path, f"{run.topic}/{run.queue_id}", db_qo[cmp.extra], got, cmp.extra,
                 lambda q: unit_key(topic, run.queue_id, q), run.db_max_offset)


def _unit(values: dict[str, np.ndarray], i: int) -> dict:
    return {name: int(values[k][i]) for k, name in UNIT_FIELDS}


def _extra_units(out: RocksCheckResult, task: RocksCheckTask, path: str, queue: str, qo: np.ndarray,
                 got: dict[str, np.ndarray], at: np.ndarray, key_of: Callable[[int], bytes],
                 db_max: int | None) -> None:
    """Units the commit log implies none for: past the queue's "max" (the dirty tail nobody reads), below the log's
    min offset (not compacted yet), else findings."""
    dirty = qo > (-1 if db_max is None else db_max)
    phy = got["phy"][at]
    expired = ~dirty & (phy >= 0) & (phy < task.log_min)
    out.counts["dirty_tail_units"] += int(dirty.sum())
    out.counts["expired_units"] += int(expired.sum())
    for i in np.flatnonzero(~dirty & ~expired).tolist():
        out.found.add("consumequeue", "extra_entry", path, queue=queue, entry=int(qo[i]), key=key_of(int(qo[i])).hex(),
                      found=_unit(got, int(at[i])),
                      detail="a unit at or below the queue's \"max\" that no record of the commit log implies")


def _check_gap(db: CqDatabase, task: RocksCheckTask, lower: bytes | None, upper: bytes | None,
               out: RocksCheckResult) -> None:
    """Units in a key range of no expected queue: every one extra (dirty tail, expired or a finding)."""
    for batch in db.unit_batches(lower, upper):
        _bad_values(batch, out.found, f"consumequeue/{DEFAULT_CF}", task.label)
        got = {"phy": batch.values["phy_offset"].astype(np.int64), "size": batch.values["size"].astype(np.int32),
               "tags": batch.values["tags_code"].astype(np.int64),
               "ts": batch.values["store_timestamp"].astype(np.int64)}
        out.counts["units_in_database"] += len(batch.keys)
        for i, key in enumerate(batch.keys):
            try:
                k = parse_unit_key(key)
            except RocksCqFormatError as exc:
                out.found.add("consumequeue", "malformed_key", f"consumequeue/{DEFAULT_CF}", key=key.hex(),
                              column_family=DEFAULT_CF, detail=f"{task.label}: {exc}")
                continue
            topic = k.topic.decode("utf-8", "replace")
            _extra_units(out, task, unit_path(topic, k.queue_id), f"{topic}/{k.queue_id}",
                         np.array([k.queue_offset], np.int64), got, np.array([i]), lambda _, key=key: key,
                         task.gap_max.get((k.topic, k.queue_id)))


class _Timestamps:
    """storeTimestamp of records by commit-log offset, read from the segments (memory-mapped, pages as touched)."""

    def __init__(self, segments: tuple[Segment, ...]) -> None:
        self.segments = segments
        self.starts = np.array([s.start for s in segments], np.int64)
        self.maps: dict[int, np.ndarray] = {}

    def __enter__(self) -> "_Timestamps":
        return self

    def __exit__(self, *exc) -> None:
        self.maps.clear()

    def __call__(self, phy: np.ndarray) -> np.ndarray:
        phy = np.asarray(phy, np.int64)
        out = np.zeros(len(phy), np.int64)
        seg = np.searchsorted(self.starts, phy, "right") - 1
        for s in np.unique(seg).tolist():
            at = np.flatnonzero(seg == s)
            if s not in self.maps:
                self.maps[s] = np.memmap(self.segments[s].path, np.uint8, "r")
            out[at] = store_timestamps(self.maps[s], phy[at] - self.starts[s])
        return out
