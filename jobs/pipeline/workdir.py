"""The work directory between the decode stage and the build stages: the one place that names, writes
and reads its per-split Arrow IPC files (consume-queue rows and index keys of split i).

Files hold only the columns later stages read. Local files are memory-mapped when read (zero-copy:
a reader slicing a few rows out of a large file touches only those pages).
"""
from __future__ import annotations

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
    _write(cq_file(work, split_index), pa.table(
        {"queue_offset": pa.array(rows.queue_offset, pa.int64()), "phy": pa.array(rows.phy, pa.int64()),
         "size": pa.array(rows.size, pa.int32()), "tags": pa.array(rows.tags, pa.int64())}, schema=CQ_SCHEMA))


def write_keys(work: Location, split_index: int, keys: KeyBatch) -> None:
    _write(keys_file(work, split_index), pa.table(
        {"key_hash": pa.array(keys.key_hash, pa.int32()), "phy": pa.array(keys.phy, pa.int64()),
         "store_ts": pa.array(keys.store_ts, pa.int64())}, schema=KEY_SCHEMA))


def read_cq(work: Location, split_index: int) -> pa.Table:
    return _read(cq_file(work, split_index))


def read_keys(work: Location, split_index: int) -> pa.Table:
    return _read(keys_file(work, split_index))


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
