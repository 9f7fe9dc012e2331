"""The work directory between the decode stage and the build stages: the one place that names, writes
and reads its per-split Arrow IPC files (consume-queue rows and index keys of split i).

Files hold only the columns later stages read, and a 64-bit column whose values span less than 2^32
(offsets and store times within a split, tags codes) is stored as uint32 above a base kept in the
field's metadata: 16 bytes per consume-queue row instead of 28, 12 per key instead of 20, which is
less to write and read back. Readers get int64 values either way. Local files are memory-mapped when
read (zero-copy: a reader slicing a few rows out of a large file touches only those pages).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from storage_format.arrow_numpy import numpy_dtype, to_arrow, to_numpy
from storage_format.index_keys import KeyBatch, rows_at_or_after
from storage_format.queue_table import QueueTable
from storage_format.split_rows import CqRows

from ..runtime import interrupt
from .fs import Location
from .paths import is_local

CQ_SCHEMA = pa.schema([("queue_offset", pa.int64()), ("phy", pa.int64()), ("size", pa.int32()),
                       ("tags", pa.int64())])
CQ_TS_SCHEMA = CQ_SCHEMA.append(pa.field("store_ts", pa.int64()))  # rows that carry their storeTimestamp
KEY_SCHEMA = pa.schema([("key_hash", pa.int32()), ("phy", pa.int64()), ("store_ts", pa.int64())])
OFFSET_MAP_SCHEMA = pa.schema([("old", pa.int64()), ("new", pa.int64())])
RECORD_SIZES_SCHEMA = pa.schema([("size", pa.int32())])
TRANSACTION_ENDS_SCHEMA = pa.schema([("prepared", pa.int64())])
BASE_KEY = b"reput.base"  # field metadata: the column holds value - base as uint32
NARROW_SPAN = 1 << 32


def fresh_work_dir(store: Location, work_dir: str | None, job: str) -> Location:
    """A fresh work directory `reput-<job>-<id>` outside the store: under --work-dir (shared storage on a cluster,
    where the tasks must see it), else the system temp dir."""
    from .fs import location
    from .paths import check_outside

    base = location(work_dir) if work_dir else location(tempfile.gettempdir())
    work = base.child(f"reput-{job}-{uuid.uuid4().hex[:12]}")
    check_outside(store, work, "--work-dir")
    if work_dir and is_local(base) and not os.path.lexists(base.path):  # made for this run: gone with it (_remove)
        _MADE_FOR[work.uri] = _missing_dirs(base.path)
    return work


_MADE_FOR: dict[str, list[str]] = {}  # a work directory's uri -> the --work-dir directories made for it, deepest first


def _missing_dirs(path: str) -> list[str]:
    """`path` and its parents that do not exist, deepest first."""
    out = []
    while path and not os.path.lexists(path):
        out.append(path)
        path = os.path.dirname(path.rstrip("/"))
    return out


def _remove(work: Location) -> None:
    """The work directory removed, and the --work-dir directories made for it once they are empty."""
    work.delete_tree()
    for path in _MADE_FOR.pop(work.uri, []):
        with contextlib.suppress(OSError):  # not empty: something else was put there since
            os.rmdir(path)


@contextlib.contextmanager
def removed_after(work: Location) -> Iterator[Location]:
    """`work` (a work directory) removed when the block ends (interrupt.removed_unless_kept)."""
    with interrupt.removed_unless_kept(work, lambda: _remove(work), keep=False):
        yield work


def cq_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s consume-queue rows, grouped by queue in (topic, queueId) order."""
    return work.child(f"cq-{split_index:06d}.arrow")


def keys_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s index keys in dispatch order."""
    return work.child(f"keys-{split_index:06d}.arrow")


def offset_map_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s records' old and new commit-log offsets (convert: the source's -> OUT's)."""
    return work.child(f"offsets-{split_index:06d}.arrow")


def record_sizes_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s DLedger records' sizes, in offset order (convert's listing)."""
    return work.child(f"records-{split_index:06d}.arrow")


def transaction_ends_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s COMMIT/ROLLBACK records' prepared offsets, in record order (convert's listing)."""
    return work.child(f"ends-{split_index:06d}.arrow")


def prepared_pairs_file(work: Location, split_index: int) -> Location:
    """The old and new offsets of the half records split `split_index`'s transaction ends point at that move."""
    return work.child(f"prepared-{split_index:06d}.arrow")


def queues_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s queue table (storage_format.queue_table.QueueTable), in record batches of
    QUEUE_BATCH_ROWS so a build task reads the batches holding its queues, not the whole table."""
    return work.child(f"queues-{split_index:06d}.arrow")


QUEUE_BATCH_ROWS = 8192


def write_queue_table(work: Location, split_index: int, table: QueueTable) -> None:
    loc = queues_file(work, split_index)
    data = table.to_arrow()
    loc.make_parent()
    with loc.fs.open_output_stream(loc.path) as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data, max_chunksize=QUEUE_BATCH_ROWS)


def read_queue_table(work: Location, split_index: int, start: int = 0, stop: int | None = None) -> QueueTable:
    """Rows [start, stop) of the split's queue table (all of it by default), reading only the batches holding them."""
    loc = queues_file(work, split_index)
    with _input(loc) as source:
        reader = pa.ipc.open_file(source)
        n = reader.num_record_batches
        if stop is None:
            return QueueTable.from_arrow(reader.read_all().slice(start))
        first, last = start // QUEUE_BATCH_ROWS, (max(stop, start + 1) - 1) // QUEUE_BATCH_ROWS
        batches = [reader.get_batch(i) for i in range(first, min(last + 1, n))]
        table = pa.Table.from_batches(batches, schema=reader.schema)
        return QueueTable.from_arrow(table.slice(start - first * QUEUE_BATCH_ROWS, stop - start))


def write_record_sizes(work: Location, split_index: int, sizes: np.ndarray) -> None:
    _write(record_sizes_file(work, split_index), _table(RECORD_SIZES_SCHEMA, sizes))


def read_record_sizes(work: Location, split_index: int) -> np.ndarray:
    """The sizes write_record_sizes wrote (int32, a copy: the file is let go)."""
    return np.array(_columns(record_sizes_file(work, split_index))["size"].take(), np.int32)


def write_transaction_ends(work: Location, split_index: int, prepared: np.ndarray) -> None:
    _write(transaction_ends_file(work, split_index), _table(TRANSACTION_ENDS_SCHEMA, prepared))


def read_transaction_ends(work: Location, split_index: int) -> np.ndarray:
    """The prepared offsets write_transaction_ends wrote (int64, a copy)."""
    return np.array(_columns(transaction_ends_file(work, split_index))["prepared"].take(), np.int64)


def write_prepared_pairs(work: Location, split_index: int, old: np.ndarray, new: np.ndarray) -> None:
    _write(prepared_pairs_file(work, split_index), _table(OFFSET_MAP_SCHEMA, old, new))


def read_prepared_pairs(work: Location, split_index: int) -> tuple[np.ndarray, np.ndarray]:
    """(old, new) as write_prepared_pairs wrote them (int64 copies)."""
    columns = _columns(prepared_pairs_file(work, split_index))
    return np.array(columns["old"].take(), np.int64), np.array(columns["new"].take(), np.int64)


def write_cq(work: Location, split_index: int, rows: CqRows) -> None:
    """The split's rows, and their store timestamps when the decode gave them (CqColumns.store_ts)."""
    if rows.store_ts is None:
        _write(cq_file(work, split_index), _table(CQ_SCHEMA, rows.queue_offset, rows.phy, rows.size, rows.tags))
    else:
        _write(cq_file(work, split_index), _table(CQ_TS_SCHEMA, rows.queue_offset, rows.phy, rows.size, rows.tags,
                                                  rows.store_ts))


def write_keys(work: Location, split_index: int, keys: KeyBatch) -> None:
    _write(keys_file(work, split_index), _table(KEY_SCHEMA, keys.key_hash, keys.phy, keys.store_ts))


def write_offset_map(work: Location, split_index: int, old: np.ndarray, new: np.ndarray) -> None:
    """The split's records' offsets before and after (both ascending, one row per record)."""
    _write(offset_map_file(work, split_index), _table(OFFSET_MAP_SCHEMA, old, new))


@dataclass(frozen=True)
class OffsetMap:
    """A split's old -> new record offsets (ascending): the rows of its work files given their records' new
    offsets as they are read (convert builds OUT's consume queues and index from the source scan's rows). The
    map is monotone, so every order of the rows holds."""

    old: np.ndarray
    new: np.ndarray
    where: str  # the map file, for errors

    def __call__(self, phy: np.ndarray) -> np.ndarray:
        """Each of `phy` (offsets among `old`) as its new offset (compiled: kernels.layout_kernel.map_offsets);
        an offset not among `old` is an error."""
        from storage_format.kernels.layout_kernel import map_offsets

        out = np.empty(len(phy), np.int64)
        bad = map_offsets(self.old, self.new, phy, out)
        if bad >= 0:
            raise ValueError(f"{self.where}: offset {int(phy[bad])} is no listed record's: the work files and the "
                             f"listing disagree")
        return out


def offset_map(work: Location, split_index: int) -> OffsetMap:
    """Split `split_index`'s offset map as written (write_offset_map)."""
    loc = offset_map_file(work, split_index)
    columns = _columns(loc)
    return OffsetMap(columns["old"].take(), columns["new"].take(), loc.uri)


@dataclass(frozen=True)
class WorkColumn:
    """A column as a work file holds it: its values and the base they lie above (0 when stored whole)."""

    values: np.ndarray
    base: int = 0

    def take(self, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        """The selected rows' values (int64 when the column was narrowed), read-only either way: a
        compiled kernel has one signature per array flavour, and kernel_cache.warm() loads read-only."""
        if self.values.dtype != np.uint32:
            return self.values[rows]
        wide = np.add(self.values[rows], np.int64(self.base), dtype=np.int64)
        wide.flags.writeable = False
        return wide

    def take_into(self, rows: slice, keep: np.ndarray | None, out: np.ndarray) -> None:
        """Write the selected rows' values (then the `keep` positions among them) into `out`."""
        part = self.values[rows]
        out[...] = part if keep is None else part[keep]
        if self.values.dtype == np.uint32:
            out += self.base


def at_or_after(column: WorkColumn, offset: int) -> slice | np.ndarray:
    """The rows of a work-file column whose value is >= `offset`: a slice from the first one when the values
    ascend (a split's keys and records are in commit-log order), else a mask."""
    values = column.values
    low = offset - column.base  # the stored values are value - base (uint32 when narrowed)
    if not len(values) or low <= 0:
        return slice(0, len(values))
    if low > np.iinfo(values.dtype).max:
        return slice(len(values), len(values))
    return rows_at_or_after(values, values.dtype.type(low))


def cq_columns(work: Location, split_index: int) -> dict[str, WorkColumn]:
    """Split `split_index`'s consume-queue rows as stored, by column name (zero-copy over the mapping of
    a local file): take what is kept; the file is unmapped with the last view of it."""
    return _columns(cq_file(work, split_index))


def key_columns(work: Location, split_index: int) -> dict[str, WorkColumn]:
    """Split `split_index`'s index keys as stored, by column name (as cq_columns)."""
    return _columns(keys_file(work, split_index))


def read_cq(work: Location, split_index: int) -> pa.Table:
    """Split `split_index`'s consume-queue rows as a table of CQ_SCHEMA (values widened back)."""
    return _widened(CQ_SCHEMA, cq_columns(work, split_index))


def read_keys(work: Location, split_index: int) -> pa.Table:
    """Split `split_index`'s index keys as a table of KEY_SCHEMA (values widened back)."""
    return _widened(KEY_SCHEMA, key_columns(work, split_index))


def _table(schema: pa.Schema, *columns: np.ndarray) -> pa.Table:
    """numpy columns as an Arrow table of `schema`, each int64 column narrowed when its values allow.
    Not through pa.array, which imports pandas to probe its argument (0.2 s in each worker's first task)."""
    fields, arrays = [], []
    for field, values in zip(schema, columns):
        a = np.ascontiguousarray(values, dtype=numpy_dtype(field.type))
        if field.type == pa.int64() and len(a):
            lo = int(a.min())
            if int(a.max()) - lo < NARROW_SPAN:
                a = (a - lo).astype(np.uint32)
                field = pa.field(field.name, pa.uint32(), metadata={BASE_KEY: str(lo).encode()})
        fields.append(field)
        arrays.append(to_arrow(a, field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _columns(loc: Location) -> dict[str, WorkColumn]:
    table = _read(loc)
    out = {}
    for field, column in zip(table.schema, table.columns):
        base = int((field.metadata or {}).get(BASE_KEY, b"0"))
        out[field.name] = WorkColumn(to_numpy(column), base)
    return out


def _widened(schema: pa.Schema, columns: dict[str, WorkColumn]) -> pa.Table:
    arrays = [to_arrow(columns[f.name].take(), f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _write(loc: Location, table: pa.Table) -> None:
    loc.make_parent()
    with loc.fs.open_output_stream(loc.path) as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _input(loc: Location):
    """The file open for reading: memory-mapped when local (pages read as touched), else a random-access file."""
    if isinstance(loc.fs, pafs.LocalFileSystem):
        return pa.memory_map(loc.path)
    return loc.fs.open_input_file(loc.path)


def _read(loc: Location) -> pa.Table:
    with _input(loc) as source:
        return pa.ipc.open_file(source).read_all()
