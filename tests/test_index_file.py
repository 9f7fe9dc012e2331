"""Index files: the vectorised builders equal IndexFile.putKey applied one key at a time."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from storage_format.index_file import (ENTRY_DTYPE, HEADER_SIZE, SLOT_SIZE, IndexHeader, IndexState,
                                       append_to_index_file, build_index_file, file_size)

SLOTS, MAX = 8, 40
INT_MAX = 2**31 - 1


def put_key_reference(data: bytearray, kh: int, phy: int, ts: int) -> bool:
    """IndexFile.putKey, transcribed statement by statement (the test's independent model)."""
    h = IndexHeader.from_bytes(data[:HEADER_SIZE])
    count = h.index_count
    if count >= MAX:
        return False
    slot_at = HEADER_SIZE + (kh % SLOTS) * SLOT_SIZE
    slot_value = int.from_bytes(data[slot_at:slot_at + 4], "big", signed=True)
    if slot_value <= 0 or slot_value > count:
        slot_value = 0
    diff = ts - h.begin_timestamp
    diff = int(diff / 1000) if abs(diff) < 2**52 else (abs(diff) // 1000) * (1 if diff > 0 else -1)
    diff = 0 if h.begin_timestamp <= 0 else min(max(diff, 0), INT_MAX)
    at = HEADER_SIZE + SLOTS * SLOT_SIZE + count * 20
    data[at:at + 20] = np.array([(kh, phy, diff, slot_value)], dtype=ENTRY_DTYPE).tobytes()
    data[slot_at:slot_at + 4] = count.to_bytes(4, "big")
    begin_ts, begin_phy = (ts, phy) if count <= 1 else (h.begin_timestamp, h.begin_phy_offset)
    data[:HEADER_SIZE] = IndexHeader(begin_ts, ts, begin_phy, phy, h.hash_slot_count + (slot_value == 0),
                                     count + 1).to_bytes()
    return True


KEYS = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(-5_000, 10**7)),
                max_size=MAX + 5)


def arrays(keys):
    kh = np.array([k[0] for k in keys], np.int64)
    phy = np.array([k[1] for k in keys], np.int64)
    ts = 1_700_000_000_000 + np.cumsum([k[2] for k in keys]).astype(np.int64) if keys else np.zeros(0, np.int64)
    return kh, phy, ts


@settings(max_examples=300, deadline=None)
@given(keys=KEYS, inherited_ts=st.sampled_from([0, 1_699_999_000_000, 1_700_000_050_000]), split=st.integers(0, 50))
def test_build_and_append_equal_put_key(keys, inherited_ts, split):
    """A fresh file (inherited header begin/end), and a file filled by two appends, equal the putKey
    model byte for byte: timeDiff of the first entry, slot chains, hashSlotCount, the count limit."""
    kh, phy, ts = arrays(keys)
    inherited = IndexState(inherited_ts, 777 if inherited_ts else 0)
    empty = bytearray(build_index_file(kh[:0].astype(np.int32), phy[:0], ts[:0], SLOTS, MAX, inherited))
    model = bytearray(empty)
    fitted = 0
    for k, p, t in zip(kh.tolist(), phy.tolist(), ts.tolist()):
        if not put_key_reference(model, k, p, t):
            break
        fitted += 1
    if len(kh) <= MAX - 1:
        assert build_index_file(kh.astype(np.int32), phy, ts, SLOTS, MAX, inherited) == bytes(model)
    appended = bytearray(empty)
    first = append_to_index_file(appended, kh[:split], phy[:split], ts[:split], SLOTS, MAX)
    rest = append_to_index_file(appended, kh[first:], phy[first:], ts[first:], SLOTS, MAX)
    assert first + rest == fitted
    assert bytes(appended) == bytes(model)
    assert len(appended) == file_size(SLOTS, MAX)


def test_garbage_slot_value_counts_as_empty():
    """A slot holding a position past indexCount is invalid: the put starts a new chain."""
    data = bytearray(build_index_file(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                      SLOTS, MAX, IndexState()))
    data[HEADER_SIZE + 3 * SLOT_SIZE:HEADER_SIZE + 4 * SLOT_SIZE] = (30).to_bytes(4, "big")
    model = bytearray(data)
    put_key_reference(model, 3, 10, 1_700_000_000_000)
    append_to_index_file(data, np.array([3]), np.array([10]), np.array([1_700_000_000_000]), SLOTS, MAX)
    assert data == model and IndexHeader.from_bytes(data[:HEADER_SIZE]).hash_slot_count == 1
