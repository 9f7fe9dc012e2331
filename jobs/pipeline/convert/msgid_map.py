"""convert's old -> new offset msgId map in OUT (MAP_DIR: Parquet, one file per new segment), keyed by offsets.

An offset msgId is its store host's address and port (the id's first 8 or 20 bytes, the same for every record a
broker stored) then the record's physical offset. So the map holds per moved record its old and new physical
offsets, and its store host once per distinct host (dictionary columns: `store_host` as `ip:port`, as the catalog
and the DataFrame reader print hosts, and `msg_id_prefix`, the id's host bytes); both ids are derived when read
(`with_ids`, `lookup`: `query --msg-id` takes an old id). Writing the ids as hex text cost ~0.5 s per 1 GiB segment
and ~45 MB; offsets delta-encoded cost ~0.04 s and ~5 MB. In Spark SQL an id is
`concat(hex(msg_id_prefix), lpad(hex(old_physical_offset), 16, '0'))`.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_format.arrow_numpy import texts, to_arrow
from storage_format.commitlog_layout import AT_BORN_HOST, AT_SYS_FLAG, store_host_at
from storage_format.msg_id import decode_offset_msg_id, offset_msg_ids_one_host
from storage_format.record import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6
from storage_format.record_text import host_text

from ..io.fs import Location

MAP_DIR = "reput-msgid-map"
OFFSET_COLUMNS = ("old_physical_offset", "new_physical_offset")
MAP_SCHEMA = pa.schema([("old_physical_offset", pa.int64()), ("new_physical_offset", pa.int64()),
                        ("store_host", pa.dictionary(pa.int32(), pa.string())),
                        ("msg_id_prefix", pa.dictionary(pa.int32(), pa.binary()))])
ID_COLUMNS = ("old_offset_msg_id", "new_offset_msg_id")  # what with_ids adds (the maps of the first release held them)
WRITER_OPTIONS = {"use_dictionary": ["store_host", "msg_id_prefix"],
                  "column_encoding": {c: "DELTA_BINARY_PACKED" for c in OFFSET_COLUMNS}}


def map_writer(sink) -> pq.ParquetWriter:
    """A Parquet writer of one map part: offsets delta-encoded (ascending, they pack to a few bits a row), hosts
    dictionary-encoded (one value a broker)."""
    return pq.ParquetWriter(sink, MAP_SCHEMA, **WRITER_OPTIONS)


def map_part(dst: np.ndarray, dst_base: int, old: np.ndarray, new: np.ndarray, one_host: bool) -> pa.Table:
    """The map rows of the records just copied into `dst` (absolute offset `dst_base`; `new` their new offsets):
    old and new offsets and the store host read from the copied records, once when one host stored every record
    (`one_host`, what the copy kernel found: a broker's store), else per record."""
    n = len(new)
    if one_host or n == 0:
        distinct = [_prefix_of(dst, int(new[0] - dst_base)).tobytes()] if n else []
        inverse = np.zeros(n, np.int32)
    else:
        at = (new - dst_base).astype(np.int64)
        flag = np.frombuffer(np.ascontiguousarray(dst[(at + AT_SYS_FLAG)[:, None] + np.arange(4)]).tobytes(), ">i4")
        host_at = at + AT_BORN_HOST + np.where(flag & FLAG_BORNHOST_V6, 20, 8) + 8
        wide = (flag & FLAG_STOREHOST_V6) != 0
        keyed = np.zeros((n, 21), np.uint8)  # the prefix (8 or 20 bytes, zero-padded), then its width's flag
        for width, rows in ((20, np.flatnonzero(wide)), (8, np.flatnonzero(~wide))):
            keyed[rows, :width] = dst[host_at[rows, None] + np.arange(width)]
        keyed[:, 20] = wide
        keys, inverse = np.unique(keyed.view(np.dtype((np.void, 21))).reshape(-1), return_inverse=True)
        distinct = [k.tobytes()[:20 if k.tobytes()[20] else 8] for k in keys]
        inverse = inverse.reshape(-1).astype(np.int32)
    indices = to_arrow(inverse, pa.int32())  # built from buffers: pa.array imports pandas (0.3 s a worker)
    hosts = [host_text(p[:-4], int.from_bytes(p[-4:], "big", signed=True)) for p in distinct]
    return pa.Table.from_arrays(
        [to_arrow(old, pa.int64()), to_arrow(new, pa.int64()),
         pa.DictionaryArray.from_arrays(indices, texts(hosts, pa.string())),
         pa.DictionaryArray.from_arrays(indices, texts(distinct, pa.binary()))], schema=MAP_SCHEMA)


def _prefix_of(dst: np.ndarray, at: int) -> np.ndarray:
    """The offset msgId's host part (store address + port: 8 or 20 bytes) of the record at dst[at]."""
    flag = int.from_bytes(dst[at + AT_SYS_FLAG:at + AT_SYS_FLAG + 4].tobytes(), "big", signed=True)
    start = at + store_host_at(flag)
    return dst[start:start + (20 if flag & FLAG_STOREHOST_V6 else 8)].copy()


def with_ids(table: pa.Table) -> pa.Table:
    """The map's rows with both offset msgIds added as upper-case hex (`old_offset_msg_id`, `new_offset_msg_id`),
    built once per distinct store host (a map read whole: ~0.2 s per 2 M rows and id column)."""
    if all(c in table.column_names for c in ID_COLUMNS):
        return table  # a map of the first release: the ids are stored
    prefix = table.column("msg_id_prefix").combine_chunks()
    if isinstance(prefix, pa.DictionaryArray):
        codes, values = prefix.indices.to_numpy(zero_copy_only=False), prefix.dictionary.to_pylist()
    else:
        values = pc.unique(prefix).to_pylist()
        codes = pc.index_in(prefix, value_set=pa.array(values, pa.binary())).to_numpy(zero_copy_only=False)
    for name, source in zip(ID_COLUMNS, OFFSET_COLUMNS):
        offsets = table.column(source).to_numpy()
        parts, order = [], []
        for code, value in enumerate(values):
            rows = np.flatnonzero(codes == code)
            parts.append(offset_msg_ids_one_host(value, offsets[rows]))
            order.append(rows)
        ids = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
        place = np.empty(len(offsets), np.int64)
        place[np.concatenate(order) if order else np.zeros(0, np.int64)] = np.arange(len(offsets))
        table = table.append_column(name, ids.take(pa.array(place)))
    return table


def lookup(store: Location, msg_id: str) -> dict | None:
    """An offset msgId from before `convert` in the store's map: its old and new physical offsets and its new id,
    or None (no map here, or not a moved record's old id). Reads only the row groups whose offsets can hold it."""
    folder = store.child(MAP_DIR)
    if not folder.is_dir():
        return None
    mid = decode_offset_msg_id(msg_id.strip())
    text = msg_id.strip().upper()
    stored_ids = ID_COLUMNS[0] in pq.ParquetDataset(folder.path, filesystem=folder.fs).schema.names
    filters = [(ID_COLUMNS[0], "=", text)] if stored_ids else [("old_physical_offset", "=", mid.physical_offset)]
    table = with_ids(pq.read_table(folder.path, filesystem=folder.fs, filters=filters))
    table = table.filter(pc.field(ID_COLUMNS[0]) == text)
    if not table.num_rows:
        return None
    row = table.slice(0, 1).to_pylist()[0]
    return {k: row[k] for k in ("old_physical_offset", "new_physical_offset", "new_offset_msg_id")}


def new_offset(store: Location, old_offset: int) -> int | None:
    """The new physical offset of the record that sat at `old_offset` before `convert` (None: no map here, or no
    record moved from there). Reads only the row groups whose offsets can hold it."""
    folder = store.child(MAP_DIR)
    if not folder.is_dir():
        return None
    table = pq.read_table(folder.path, filesystem=folder.fs, columns=["old_physical_offset", "new_physical_offset"],
                          filters=[("old_physical_offset", "=", old_offset)])
    return int(table.column("new_physical_offset")[0].as_py()) if table.num_rows else None

