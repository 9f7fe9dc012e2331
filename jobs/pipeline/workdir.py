"""The work directory between the decode stage and the build stages: the one place that names, writes
and reads its per-split Arrow IPC files (consume-queue rows and index keys of split i).

Files hold only the columns later stages read. Local files are memory-mapped when read (zero-copy:
a reader slicing a few rows out of a large file touches only those pages).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from storage_format.recovery import KeyBatch
from storage_format.split_decode import CqRows

from .fs import Location

CQ_SCHEMA = pa.schema([("queue_offset", pa.int64()), ("phy", pa.int64()), ("size", pa.int32()),
                       ("tags", pa.int64())])
KEY_SCHEMA = pa.schema([("key_hash", pa.int32()), ("phy", pa.int64()), ("store_ts", pa.int64())])


def cq_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s consume-queue rows, grouped by queue in (topic, queueId) order."""
    return work.child(f"cq-{split_index:06d}.arrow")


def keys_file(work: Location, split_index: int) -> Location:
    """Split `split_index`'s index keys in dispatch order."""
    return work.child(f"keys-{split_index:06d}.arrow")


def write_cq(work: Location, split_index: int, rows: CqRows) -> None:
    _write(cq_file(work, split_index), _table(CQ_SCHEMA, rows.queue_offset, rows.phy, rows.size, rows.tags))


def write_keys(work: Location, split_index: int, keys: KeyBatch) -> None:
    _write(keys_file(work, split_index), _table(KEY_SCHEMA, keys.key_hash, keys.phy, keys.store_ts))


def _table(schema: pa.Schema, *columns: np.ndarray) -> pa.Table:
    """numpy columns as an Arrow table of `schema`, zero-copy where the dtype already fits. Not through
    pa.array, which imports pandas to probe its argument (0.2 s in each worker's first task)."""
    arrays = []
    for field, values in zip(schema, columns):
        a = np.ascontiguousarray(values, dtype=field.type.to_pandas_dtype())
        arrays.append(pa.Array.from_buffers(field.type, len(a), [None, pa.py_buffer(a)]))
    return pa.Table.from_arrays(arrays, schema=schema)


def read_cq(work: Location, split_index: int) -> pa.Table:
    return _read(cq_file(work, split_index))


def read_keys(work: Location, split_index: int) -> pa.Table:
    return _read(keys_file(work, split_index))


def cq_columns(work: Location, split_index: int) -> CqRows:
    """Split `split_index`'s consume-queue rows as numpy columns over the file (zero-copy over the
    mapping for a local file): slice them and copy what is kept; the file is unmapped with the last view."""
    table = read_cq(work, split_index)
    return CqRows(*(_numpy(table.column(name)) for name in CQ_SCHEMA.names))


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    """One column as numpy, zero-copy when it is one chunk (a work file holds one record batch)."""
    return column.chunk(0).to_numpy() if column.num_chunks == 1 else column.to_numpy()


def _write(loc: Location, table: pa.Table) -> None:
    loc.make_parent()
    with loc.fs.open_output_stream(loc.path) as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read(loc: Location) -> pa.Table:
    if isinstance(loc.fs, pafs.LocalFileSystem):
        with pa.memory_map(loc.path) as source:
            return pa.ipc.open_file(source).read_all()
    with loc.fs.open_input_file(loc.path) as source:
        return pa.ipc.open_file(source).read_all()
