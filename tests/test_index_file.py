"""Index files: the vectorised builders equal IndexFile.putKey applied one key at a time."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storage_format.index_file import IndexLayout, IndexState
from storage_format.index_build import append_to_index_file, build_index_file
from tests.index_model import ENTRY, HEADER, MAX, SLOTS, empty_file, put_key_reference

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
    empty = empty_file(inherited_ts, inherited.end_phy_offset)
    assert build_index_file(kh[:0].astype(np.int32), phy[:0], ts[:0], SLOTS, MAX, inherited) == bytes(empty)
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
    assert len(appended) == IndexLayout(SLOTS, MAX).size


def assemble_shares(kh, phy, ts, cuts, chunk, inherited, slots=SLOTS, max_entries=MAX) -> bytes:
    """A fresh file written as index_file_ranges' shares cut at `cuts` (each share's keys in chunks of `chunk`),
    shares applied last first, onto zeros: what concurrent tasks leave in one file."""
    from storage_format.index_file import IndexLayout
    from storage_format.index_build import index_file_ranges

    kh = kh.astype(np.int32)
    bounds = [0, *cuts, len(kh)]
    first = (int(ts[0]), int(phy[0])) if len(kh) else None
    data = bytearray(IndexLayout(slots, max_entries).size)
    for a, b in reversed(list(zip(bounds, bounds[1:]))):
        own = lambda a=a, b=b: [(kh[i:min(b, i + chunk)], phy[i:min(b, i + chunk)], ts[i:min(b, i + chunk)])
                                for i in range(a, b, chunk)]
        before = lambda a=a: [kh[i:min(a, i + chunk)] for i in range(0, a, chunk)]
        for at, part in index_file_ranges(own, before, a, first, slots, max_entries, inherited, b == len(kh)):
            raw = memoryview(part).cast("B")
            data[at:at + len(raw)] = raw
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(-5_000, 10**7)),
                     max_size=MAX - 1),
       inherited_ts=st.sampled_from([0, 1_699_999_000_000, 1_700_000_050_000]), data=st.data(),
       chunk=st.integers(1, 7))
def test_index_file_shares_equal_put_key(keys, inherited_ts, data, chunk):
    """An index file cut into shares at any positions (index_file_ranges: each share one pass over its keys,
    the keys before it by hash only, the last share writing header and slot table) equals the putKey model
    and the streamed file byte for byte, whichever order the shares land in."""
    kh, phy, ts = arrays(keys)
    inherited = IndexState(inherited_ts, 777 if inherited_ts else 0)
    model = empty_file(inherited_ts, inherited.end_phy_offset)
    for k, p, t in zip(kh.tolist(), phy.tolist(), ts.tolist()):
        assert put_key_reference(model, k, p, t)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(kh) - 1)), max_size=3)))) if len(kh) > 1 else []
    shares = assemble_shares(kh, phy, ts, cuts, chunk, inherited)
    assert shares == bytes(model) == build_index_file(kh.astype(np.int32), phy, ts, SLOTS, MAX, inherited)


def test_garbage_slot_value_counts_as_empty():
    """A slot holding a position past indexCount is invalid: the put starts a new chain."""
    data = empty_file()
    struct.pack_into(">i", data, HEADER.size + 3 * 4, 30)
    model = bytearray(data)
    put_key_reference(model, 3, 10, 1_700_000_000_000)
    append_to_index_file(data, np.array([3]), np.array([10]), np.array([1_700_000_000_000]), SLOTS, MAX)
    assert data == model and HEADER.unpack_from(data)[4] == 1


def test_layout_offsets_match_the_model():
    """Size, slot and entry offsets, and the slot rule, as the model lays the file out."""
    layout = IndexLayout(SLOTS, MAX)
    assert layout.size == HEADER.size + SLOTS * 4 + MAX * ENTRY.size
    assert [layout.slot_at(s) for s in (0, 7)] == [HEADER.size, HEADER.size + 28]
    assert [layout.entry_at(p) for p in (0, 1, MAX - 1)] == [HEADER.size + SLOTS * 4 + p * ENTRY.size
                                                            for p in (0, 1, MAX - 1)]
    assert [layout.slot_of(h) for h in (0, 7, 8, 2**31 - 1)] == [0, 7, 0, (2**31 - 1) % SLOTS]
    assert layout.whole_entries(layout.entry_at(5) + 19) == 5 and layout.whole_entries(10) == 0



@settings(max_examples=200, deadline=None)
@given(slots=st.integers(1, 50), begin=st.sampled_from([0, -5, 1_700_000_000_000]),
       first_begin=st.sampled_from([0, 1_699_999_990_000, 1_700_000_000_000]),
       chunks=st.lists(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1),
                                          st.integers(1_600_000_000_000, 1_800_000_000_000)),
                                max_size=40), max_size=4),
       int_max=st.sampled_from([2**31 - 1, 1000]))
def test_compiled_entries_equal_numpy_reference(slots, begin, first_begin, chunks, int_max):
    """index_chain's sequential loops give the slot table and the entry bytes (hash, offset, clamped time
    difference, previous position) of the vectorised reference, chunk after chunk, with the work files'
    dtypes."""
    from storage_format.kernels.index_chain import entry_bytes, newest_by_hash
    from storage_format.index_file import SLOT_DTYPE, key_slots
    from storage_format.index_build import entry_bytes_numpy, newest_positions_numpy

    newest = [np.zeros(slots, SLOT_DTYPE), np.zeros(slots, SLOT_DTYPE)]
    current = [np.zeros(slots, SLOT_DTYPE), np.zeros(slots, SLOT_DTYPE)]
    position = 1
    for chunk in chunks:
        key_hash = np.array([c[0] for c in chunk], np.int32)
        phy = np.array([c[1] for c in chunk], np.int64)
        ts = np.array([c[2] for c in chunk], np.int64)
        newest_by_hash(key_hash, slots, newest[0], position)
        newest_positions_numpy(key_slots(key_hash, slots), newest[1], position)
        assert np.array_equal(newest[0], newest[1])
        compiled = entry_bytes(key_hash, phy, ts, slots, current[0], position, begin, first_begin, int_max)
        reference = entry_bytes_numpy(key_hash, phy, ts, slots, current[1], position, begin, first_begin, int_max)
        assert compiled.tobytes() == reference.tobytes() and np.array_equal(current[0], current[1])
        position += len(chunk)


@settings(max_examples=300, deadline=None)
@given(slots=st.integers(1, 9), count=st.integers(1, 60),
       table=st.lists(st.integers(-2**31, 2**31 - 1) | st.integers(0, 70), min_size=9, max_size=9),
       keys=st.lists(st.integers(0, 2**31 - 1), max_size=50))
def test_compiled_append_chain_equals_numpy_reference(slots, count, table, keys):
    """index_chain.append_chain (appending to an existing file: slot values on disk checked as putKey checks them,
    garbage and positions past the entry's own included) gives the previous positions, the hashSlotCount increase
    and the big-endian slot table of the vectorised reference."""
    from storage_format.index_build import append_chain_numpy
    from storage_format.kernels.index_chain import append_chain

    on_disk = np.array(table[:slots], ">i4")
    kh = np.array(keys, np.int64)
    compiled_table = bytearray(on_disk.tobytes())
    prev = np.empty(len(kh), np.int64)
    invalid = append_chain(kh, slots, np.frombuffer(compiled_table, np.uint8), count, prev)
    reference_table = on_disk.copy()
    reference_prev, reference_invalid = append_chain_numpy(kh, slots, reference_table, count)
    assert prev.tolist() == reference_prev.tolist() and invalid == reference_invalid
    assert bytes(compiled_table) == reference_table.tobytes()


@pytest.mark.parametrize("max_index_num", [2, 3, 5])
def test_the_index_roll_is_one_rule_for_rebuild_and_recovery(max_index_num):
    """index_file.index_file_count (the rebuild's plan) and recovery.resume_index from an empty index (the
    broker's buildIndex replayed) open the same number of files for every key count, with and without a
    record after the last key (the roll)."""
    from storage_format.index_file import index_file_count
    from storage_format.index_keys import KeyBatch
    from storage_format.recovery import DispatchPass, resume_index

    for total in range(0, 4 * max_index_num):
        for after in (True, False):
            phy = np.arange(100, 100 + total, dtype=np.int64)
            keys = KeyBatch(np.ones(total, np.int32), phy, phy.copy())
            last = int(phy[-1]) + (1 if after else 0) if total else 100
            resume = resume_index(None, [DispatchPass("all", 100, last, keys)], max_index_num)
            expected = index_file_count(total, max_index_num, after or total == 0)
            assert len(resume.targets) == expected, (total, after)
