"""`query --scan`'s search of the commit log: one task per split returns the physical offsets of the records that
carry a key, read as the `rocketmq-commitlog` reader reads them (scan.source: each split's walk, no chain check
across splits). Tasks of the job's engine, so Python workers are reput's own daemon's: the Python data source would
also start Spark's stock daemon for its planning, whose idle workers print a traceback a minute later under
spark-submit (runtime.jvm_output)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_format.properties import KEYS, UNIQ_KEY
from storage_format.record import TRAN_ROLLBACK

from ..runtime import worker_daemon
from .decode import decode_split_columns
from .result import SplitTask

worker_daemon.preload_in_workers(__name__)  # the search tasks run this module's function


@dataclass(frozen=True)
class KeySearch:
    """What a record must carry: UNIQ_KEY = `key` (`uniq`), else a KEYS token = `key` (KEYS split on single spaces,
    as Spark's `split(keys, ' ')` does); the topic when given; store time in [begin, end]; not a rollback."""

    key: str
    uniq: bool
    topic: str | None
    begin: int
    end: int


@dataclass(frozen=True)
class KeyScanTask:
    """One split searched."""

    split: SplitTask
    search: KeySearch


def carrying_offsets(task: KeyScanTask) -> list[int]:
    """The physical offsets of the split's records that carry the search's key (runs in a task)."""
    cols = decode_split_columns(task.split)
    if not len(cols):
        return []
    s = task.search
    ts = cols.store_timestamp
    keep = (cols.transaction_type != TRAN_ROLLBACK) & (ts >= s.begin) & (ts <= s.end)
    if s.topic is not None:
        keep &= _equal(cols.topic_binary, s.topic.encode("utf-8"))
    values = cols.property_binary(UNIQ_KEY if s.uniq else KEYS)
    key = s.key.encode("utf-8")
    if s.uniq:
        keep &= _equal(values, key)
    else:
        keep &= np.asarray(pc.fill_null(pc.match_substring(values, s.key), False), bool)
        rows = np.flatnonzero(keep)
        tokens = values.take(pa.array(rows)).to_pylist()
        keep[rows[[key not in v.split(b" ") for v in tokens]]] = False
    return cols.physical_offset[keep].tolist()


def _equal(values: pa.Array, wanted: bytes) -> np.ndarray:
    """Rows whose value is `wanted` (a null row is not)."""
    return np.asarray(pc.fill_null(pc.equal(values, pa.scalar(wanted, values.type)), False), bool)
