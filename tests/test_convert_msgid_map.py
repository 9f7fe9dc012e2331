"""convert's msgId map keyed by offsets (jobs.pipeline.convert.msgid_map): the ids derived on reading equal the
broker's offset msgIds of the records written (MessageDecoder.createMessageId, storage_format.msg_id's reference
encoder), for one store host and for records of several (IPv4 and IPv6, either born-host width); `lookup` finds an
old id in a map of this layout and in a map of the first release (ids stored as text). No Spark."""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from jobs.pipeline.convert.msgid_map import (MAP_DIR, ID_COLUMNS, lookup, map_part, map_writer, with_ids)
from jobs.pipeline.io.fs import Location
from storage_format.commitlog_layout import AT_SYS_FLAG, store_host_at
from storage_format.msg_id import encode_offset_msg_id
from storage_format.record import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6

pytestmark = pytest.mark.floors  # Parquet reads: make test-floors runs it at the dependency floors

RECORD = 120  # room for the fields read (sysFlag, born host, store host: at most 48 + 20 + 8 + 20 bytes)

hosts = st.tuples(st.booleans(), st.booleans(), st.binary(min_size=16, max_size=16), st.integers(-2**31, 2**31 - 1))


def _records(specs: list[tuple[bool, bool, bytes, int]]) -> np.ndarray:
    """Records of RECORD bytes, each with its sysFlag (born/store host width) and store host set."""
    dst = np.zeros(len(specs) * RECORD, np.uint8)
    for i, (born_v6, store_v6, addr, port) in enumerate(specs):
        flag = (FLAG_BORNHOST_V6 if born_v6 else 0) | (FLAG_STOREHOST_V6 if store_v6 else 0)
        at = i * RECORD
        dst[at + AT_SYS_FLAG:at + AT_SYS_FLAG + 4] = np.frombuffer(struct.pack(">i", flag), np.uint8)
        host = (addr if store_v6 else addr[:4]) + struct.pack(">i", port)
        h = at + store_host_at(flag)
        dst[h:h + len(host)] = np.frombuffer(host, np.uint8)
    return dst


def _expected(specs, offsets) -> list[str]:
    return [encode_offset_msg_id(addr if v6 else addr[:4], port, int(o)) for (_, v6, addr, port), o in zip(specs, offsets)]


@hsettings(max_examples=60, deadline=None)
@given(st.lists(hosts, min_size=1, max_size=40), st.integers(0, 2**40), st.integers(0, 2**40))
def test_ids_derived_from_the_map_equal_the_broker_ids(specs, base, old_base):
    dst = _records(specs)
    new = base + np.arange(len(specs), dtype=np.int64) * RECORD
    old = old_base + np.arange(len(specs), dtype=np.int64) * (RECORD + 48)
    t = with_ids(map_part(dst, base, old, new, one_host=False))
    assert t.column(ID_COLUMNS[0]).to_pylist() == _expected(specs, old)
    assert t.column(ID_COLUMNS[1]).to_pylist() == _expected(specs, new)
    assert t.column("old_physical_offset").to_pylist() == old.tolist()
    distinct = {(v6, addr if v6 else addr[:4], port) for _, v6, addr, port in specs}
    assert len(t.column("msg_id_prefix").combine_chunks().dictionary) == len(distinct)  # one value per host


@hsettings(max_examples=30, deadline=None)
@given(hosts, st.integers(1, 30))
def test_one_host_part_equals_the_per_record_part(spec, n):
    dst = _records([spec] * n)
    new = np.arange(n, dtype=np.int64) * RECORD + 4096
    old = new * 2 + 7
    one = with_ids(map_part(dst, 4096, old, new, one_host=True))
    each = with_ids(map_part(dst, 4096, old, new, one_host=False))
    assert one.to_pylist() == each.to_pylist()
    born_v6, v6, addr, port = spec
    assert one.column("store_host").to_pylist()[0].endswith(f":{port}")


def test_lookup_finds_old_ids_in_both_map_layouts(tmp_path):
    specs = [(False, False, bytes(range(16)), 10911), (True, True, bytes(range(100, 116)), 10911)] * 3
    dst = _records(specs)
    new = np.arange(len(specs), dtype=np.int64) * RECORD
    old = new + 1000 + np.arange(len(specs)) * 48
    ids = _expected(specs, old)
    store = tmp_path / "store"
    (store / MAP_DIR).mkdir(parents=True)
    with open(store / MAP_DIR / "part-0.parquet", "wb") as sink, map_writer(sink) as w:
        w.write_table(map_part(dst, 0, old, new, one_host=False))
    for i in (0, 3, 5):
        found = lookup(Location(str(store)), ids[i].lower())
        assert found == {"old_physical_offset": int(old[i]), "new_physical_offset": int(new[i]),
                         "new_offset_msg_id": _expected(specs, new)[i]}
    assert lookup(Location(str(store)), _expected(specs, new)[2]) is None  # a new id is no old one
    # an old id of another host at a listed offset is not that record's
    other = encode_offset_msg_id(bytes([9, 9, 9, 9]), 1, int(old[0]))
    assert lookup(Location(str(store)), other) is None
    first = tmp_path / "first"  # a map of the first release: the ids stored as text
    (first / MAP_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"old_physical_offset": old, "new_physical_offset": new,
                             "old_offset_msg_id": ids, "new_offset_msg_id": _expected(specs, new)}),
                   first / MAP_DIR / "part-0.parquet")
    assert lookup(Location(str(first)), ids[4])["new_physical_offset"] == int(new[4])
    assert lookup(Location(str(tmp_path)), ids[4]) is None  # no map
