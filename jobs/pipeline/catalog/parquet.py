"""The catalog's Spark stage: one task per accepted split decodes its records and writes Parquet files.

Each task writes, under TABLE/topic=<escaped topic>/, one Parquet file per topic of its split (rows in
commit-log order, without the `topic` partition column, as Delta lays files out) and returns the file
descriptors (path, size, row count, Delta stats) to the driver, which commits them in one transaction.
Only records at or past the table's high-water mark are written.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_format.commitlog import RecordColumns
from storage_format.consume_queue import has_cq_entry
from storage_format.msg_id import encode_offset_msg_ids
from storage_format.multi_dispatch import (INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, MultiDispatchError,
                                           MultiDispatchRules, lmq_entries, queues_per_record)
from storage_format.record import MAX_DATE_MS, MIN_DATE_MS
from storage_format.scan_plan import Split
from storage_format.settings import BrokerSettings

from ..scan.source import record_batch
from ..scan.cq_rows import split_lmq
from ..io.fs import Location
from ..runtime.faults import pause_at
from ..scan.decode import SplitTask, decode_split_columns

PARTITION_COLUMN = "topic"
MAX_DIR_BYTES = 200  # keep "topic=..." well under the usual 255-byte file-name limit
_TS = pa.timestamp("us", tz="UTC")
# Table columns in order; `body` only in tables created with --include-body.
CATALOG_FIELDS: list[pa.Field] = [
    pa.field("topic", pa.string()),
    pa.field("store_id", pa.string()),
    pa.field("physical_offset", pa.int64()),
    pa.field("offset_msg_id", pa.string()),
    pa.field("segment", pa.string()),
    pa.field("segment_position", pa.int64()),
    pa.field("total_size", pa.int32()),
    pa.field("magic_version", pa.int32()),
    pa.field("body_crc", pa.int32()),
    pa.field("queue_id", pa.int32()),
    pa.field("flag", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("sys_flag", pa.int32()),
    pa.field("transaction_type", pa.int32()),
    pa.field("born_timestamp", pa.int64()),
    pa.field("born_time", _TS),
    pa.field("born_host", pa.string()),
    pa.field("store_timestamp", pa.int64()),
    pa.field("store_time", _TS),
    pa.field("store_host", pa.string()),
    pa.field("reconsume_times", pa.int32()),
    pa.field("prepared_transaction_offset", pa.int64()),
    pa.field("body_length", pa.int32()),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("uniq_key", pa.string()),
    pa.field("delay_level", pa.int32()),
    pa.field("properties", pa.string()),
    pa.field("lmq_queues", pa.list_(pa.string())),  # the queues multi-dispatch gives the record (null: none)
]
BODY_FIELD = pa.field("body", pa.binary())
STATS_COLUMNS = ("physical_offset", "queue_id", "queue_offset", "store_timestamp", "born_timestamp",
                 "store_time", "born_time", "total_size", "segment_position")

# Characters Spark/Hive escape in partition directory names (ExternalCatalogUtils.escapePathName),
# plus the ones it escapes only on Windows, so a table is portable across file systems.
_ESCAPE = frozenset([chr(c) for c in range(0x00, 0x20)] + list('"#%\'*/:=?\\\x7f{[]^') + list(" <>|"))


def catalog_schema(include_body: bool) -> pa.Schema:
    """The Delta table's schema (the partition column `topic` first)."""
    return pa.schema(CATALOG_FIELDS + ([BODY_FIELD] if include_body else []))


def partition_dir(topic: str) -> str:
    """`topic=<value>` with Hive-style %XX escaping; a value too long for one path component is cut
    and suffixed with a hash of the whole topic. Never '/', '.' or '..': always inside the table."""
    if topic == "":
        return f"{PARTITION_COLUMN}=__HIVE_DEFAULT_PARTITION__"
    pieces: list[str] = []
    used = 0
    for ch in topic:
        piece = f"%{ord(ch):02X}" if ch in _ESCAPE else ch
        size = len(piece.encode("utf-8", "surrogatepass"))
        if used + size > MAX_DIR_BYTES:
            digest = hashlib.sha256(topic.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            pieces.append(f"~{digest}")
            break
        pieces.append(piece)
        used += size
    name = f"{PARTITION_COLUMN}=" + "".join(pieces)
    assert "/" not in name and "\\" not in name, name
    return name


@dataclass(frozen=True, kw_only=True)
class CatalogTask:
    """One split to catalogue: where its accepted walk starts, how many records it holds, where to write."""

    split: Split
    settings: BrokerSettings
    first_offset: int  # global offset of the split's first record in the stitched scan
    records: int  # the scan summary's count, re-checked after decoding
    since: int | None  # high-water mark: only records at or past it are written
    table: Location
    store_id: str
    run_id: str
    include_body: bool
    lmq: MultiDispatchRules | None = None  # multi-dispatch rules (storage_format.multi_dispatch), None: off


@dataclass
class DataFile:
    """One written Parquet file, described for a Delta add action."""

    path: str  # relative to the table root, unescaped (as on disk)
    topic: str
    size: int
    rows: int
    stats: str
    modification_time: int


@dataclass
class CatalogTaskResult:
    """What a catalog task sends back: its files and the facts the driver checks."""

    index: int
    files: list[DataFile] = field(default_factory=list)
    rows: int = 0
    straddles_since: bool = False  # a record starts before the high-water mark and ends after it
    error: str | None = None


def offset_msg_ids(cols: RecordColumns) -> pa.Array:
    """The broker's offset message id per record (store host + port + stored physicalOffset)."""
    n = len(cols)
    lens, at = cols.store_host_len, cols.store_host_at
    order: list[np.ndarray] = []
    parts: list[pa.Array] = []
    for width in (4, 16):
        rows = np.flatnonzero(lens == width)
        if not len(rows):
            continue
        hosts = cols.arr[at[rows, None] + np.arange(width)]
        parts.append(encode_offset_msg_ids(hosts, cols.store_port[rows], cols.physical_offset[rows]))
        order.append(rows)
    if not parts:
        return pa.array([], pa.string())
    rows = np.concatenate(order)
    inverse = np.empty(n, dtype=np.int64)
    inverse[rows] = np.arange(n)
    return pa.concat_arrays(parts).take(pa.array(inverse))


def timestamps(ms: np.ndarray) -> pa.Array:
    """Epoch milliseconds as a UTC timestamp column; values outside years 1-9999 (bad bytes) are null."""
    ms = ms.astype(np.int64)
    bad = (ms < MIN_DATE_MS) | (ms > MAX_DATE_MS)
    return pa.array(np.where(bad, 0, ms) * 1000, _TS, mask=bad)


def lmq_queues(cols: RecordColumns, rules: MultiDispatchRules | None) -> pa.Array:
    """Per record, the queues multi-dispatch writes an entry to (records with an own entry only)."""
    rows = np.flatnonzero(has_cq_entry(cols.sys_flag)) if rules is not None else np.zeros(0, np.int64)
    take = pa.array(rows)
    entries = lmq_entries(cols.property_string(INNER_MULTI_DISPATCH).take(take),
                          cols.property_string(INNER_MULTI_QUEUE_OFFSET).take(take), cols.topic.take(take),
                          cols.queue_id[rows], rules or MultiDispatchRules(4, False, False))
    return queues_per_record(replace(entries, record=rows[entries.record]), len(cols))


def catalog_table(cols: RecordColumns, segment: str, segment_start: int, store_id: str,
                  include_body: bool, lmq: MultiDispatchRules | None = None) -> pa.Table:
    """Decoded columns as catalog rows (table schema, topic included)."""
    batch = record_batch(cols, segment, include_body)
    n = len(cols)
    extra = {
        "store_id": pa.repeat(pa.scalar(store_id, pa.string()), n),
        "offset_msg_id": offset_msg_ids(cols),
        "segment_position": pa.array(cols.pos.astype(np.int64) + (cols.base_offset - segment_start)),
        "born_time": timestamps(cols.born_timestamp),
        "store_time": timestamps(cols.store_timestamp),
        "lmq_queues": lmq_queues(cols, lmq),
    }
    schema = catalog_schema(include_body)
    arrays = [extra[f.name] if f.name in extra else batch.column(f.name) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _stat_value(value: object) -> object:
    """A min/max value as Delta's JSON stats spell it (timestamps as ISO-8601 UTC with ms)."""
    if hasattr(value, "isoformat"):
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value


def delta_stats(table: pa.Table) -> str:
    """Delta per-file statistics (numRecords, min/max/nullCount of the skipping columns)."""
    mins, maxs, nulls = {}, {}, {}
    for name in STATS_COLUMNS:
        col = table.column(name)
        mm = pc.min_max(col)
        nulls[name] = col.null_count
        if mm["min"].is_valid:
            mins[name] = _stat_value(mm["min"].as_py())
            maxs[name] = _stat_value(mm["max"].as_py())
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def write_split(task: CatalogTask) -> CatalogTaskResult:
    """Decode the split (runs in a Spark task), keep records at/after `since`, write one file per topic."""
    sp = task.split
    out = CatalogTaskResult(sp.index)
    exact = task.first_offset - sp.segment.start
    cols = decode_split_columns(SplitTask(split=sp, settings=task.settings, exact_start=exact, with_cq=False,
                                          with_keys=False))
    if len(cols) != task.records:
        out.error = (f"split {sp.index} of {sp.segment.path}: decoded {len(cols)} records, the scan counted "
                     f"{task.records}")
        return out
    offsets = cols.base_offset + cols.pos.astype(np.int64)
    if task.since is not None:
        ends = offsets + cols.total_size.astype(np.int64)
        out.straddles_since = bool(np.any((offsets < task.since) & (ends > task.since)))
        keep = int(np.searchsorted(offsets, task.since, side="left"))
        cols = RecordColumns(cols.buf, cols.base_offset, cols.pos[keep:], cols.path)
    if not len(cols):
        return out
    segment = sp.segment.path.rsplit("/", 1)[-1]
    unset = split_lmq(cols, cols.pos, None, task.settings.enable_multi_dispatch is not None).unconfigured_at
    if task.lmq is None and unset is not None:
        out.error = (f"{sp.segment.path} at byte offset {unset - sp.segment.start}: the record carries "
                     f"{INNER_MULTI_DISPATCH} and {INNER_MULTI_QUEUE_OFFSET} (written with enableMultiDispatch=true) "
                     f"but the broker config does not set enableMultiDispatch: pass the broker's config or set it")
        return out
    try:
        table = catalog_table(cols, segment, sp.segment.start, task.store_id, task.include_body, task.lmq)
    except MultiDispatchError as err:
        at = cols.base_offset + int(cols.pos[err.record])
        out.error = f"{sp.segment.path} at byte offset {at - sp.segment.start}: {err} (commit-log offset {at})"
        return out
    out.rows = table.num_rows
    topics = table.column(PARTITION_COLUMN)
    data = table.drop_columns([PARTITION_COLUMN])
    for topic in pc.unique(topics).to_pylist():
        part = data.filter(pc.equal(topics, topic))
        rel = f"{partition_dir(topic)}/part-{sp.index:05d}-{task.run_id}.c000.snappy.parquet"
        loc = task.table.child(rel)
        loc.make_parent()
        pq.write_table(part, loc.path, filesystem=loc.fs, compression="snappy")
        out.files.append(DataFile(rel, topic, loc.size(), part.num_rows, delta_stats(part),
                                  int(time.time() * 1000)))
        pause_at("in-catalog-write")
    return out
