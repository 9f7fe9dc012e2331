"""An index file cut back to its first entries is the file the broker had then: appending the rest again gives the
whole file byte for byte, and the cut equals the file of the first entries alone (the putKey model, tests/index_model.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storage_format.index_file import ENTRY_DTYPE, IndexHeader, IndexLayout
from storage_format.index_build import append_to_index_file
from storage_format.index_prefix import cut_head, cut_index_file, entries_below
from tests.index_model import HEADER, MAX, SLOTS, empty_file, put_key_reference

LAYOUT = IndexLayout(SLOTS, MAX)
END_TS = slice(8, 16)  # the header's endTimestamp: the cut knows it to the entry's whole seconds only

KEYS = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 5_000), st.integers(0, 90_000)),
                min_size=1, max_size=MAX + 3)


def model_file(keys, begin_ts: int) -> tuple[bytearray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The putKey model's file of these keys (commit-log offsets ascending, as dispatch writes them)."""
    kh = np.array([k[0] for k in keys], np.int64)
    phy = np.cumsum([k[1] for k in keys]).astype(np.int64)
    ts = 1_700_000_000_000 + np.cumsum([k[2] for k in keys]).astype(np.int64)
    data = empty_file(begin_ts, 777 if begin_ts else 0)
    fitted = sum(put_key_reference(data, k, p, t) for k, p, t in zip(kh.tolist(), phy.tolist(), ts.tolist()))
    return data, kh, phy, ts, fitted


@settings(max_examples=300, deadline=None)
@given(keys=KEYS, begin_ts=st.sampled_from([0, 1_699_999_000_000]), data=st.data())
def test_cut_then_append_gives_the_file_back(keys, begin_ts, data):
    """Cut after any k entries, then the keys from k on appended: the whole file again, byte for byte."""
    whole, kh, phy, ts, fitted = model_file(keys, begin_ts)
    k = data.draw(st.integers(1, max(1, fitted)))
    cut = bytearray(whole)
    cut_index_file(cut, LAYOUT, k)
    first = model_file(keys[:k], begin_ts)[0]
    assert cut[:8] == first[:8] and cut[16:] == first[16:]
    assert abs(HEADER.unpack_from(cut)[1] - HEADER.unpack_from(first)[1]) < 1000
    assert append_to_index_file(cut, kh[k:], phy[k:], ts[k:], SLOTS, MAX) == fitted - k
    assert cut == whole


@settings(max_examples=200, deadline=None)
@given(keys=KEYS, bound=st.integers(0, 300_000))
def test_entries_below_counts_the_prefix(keys, bound):
    """entries_below: the entries before the first one at or past the bound (all of them when none is)."""
    whole, _, phy, _, fitted = model_file(keys, 0)
    assert entries_below(whole, LAYOUT, bound) == int(np.count_nonzero(phy[:fitted] < bound))


def test_a_cut_keeps_at_least_one_entry():
    """Before its first entry the file did not exist: a cut to none is refused, a cut past the end changes nothing."""
    whole = model_file([(5, 10, 0), (6, 10, 0)], 0)[0]
    with pytest.raises(ValueError, match="at least its first entry"):
        cut_index_file(bytearray(whole), LAYOUT, 0)
    same = bytearray(whole)
    cut_index_file(same, LAYOUT, 5)
    assert same == whole


def walk_back_reference(table: list[int], prev: list[int], keep: int, used: int) -> list[int]:
    """Each slot's head walked back one slot at a time: down prevIndex while past `keep` (a negative prev is 0, a head
    past the last used position reads that position's prev), at most `used` steps (a damaged loop stops there)."""
    heads = []
    for h in table:
        for _ in range(used):
            if h <= keep:
                break
            h = max(0, prev[min(h, used - 1)])
        heads.append(h)
    return heads


@settings(max_examples=300, deadline=None)
@given(data=st.data(), used=st.integers(3, MAX))
def test_cut_head_walks_damaged_chains_as_the_reference(data, used):
    """cut_head on a damaged file (slot values and prevIndex anywhere, loops included) gives each slot the value the
    slot-by-slot walk gives, and takes the undone entries without a prev off hashSlotCount."""
    keep = data.draw(st.integers(1, used - 2))
    value = st.integers(-3, MAX + 3)
    table = data.draw(st.lists(value, min_size=SLOTS, max_size=SLOTS))
    prev = data.draw(st.lists(value, min_size=used, max_size=used))
    head = bytearray(LAYOUT.entries_at)
    LAYOUT.slot_table(head)[:] = table  # a header-and-slots buffer, as verify's in-memory seed check cuts
    header = IndexHeader(1_700_000_000_000, 0, 5, 9, 40, used)
    last = np.zeros(1, ENTRY_DTYPE)[0]
    undone = np.array(prev[keep + 1:], ">i4")
    after = cut_head(head, LAYOUT, header, last, undone, keep)
    assert LAYOUT.slot_table(head).tolist() == walk_back_reference(table, prev, keep, used)
    assert after.index_count == keep + 1
    assert after.hash_slot_count == 40 - sum(1 for p in prev[keep + 1:] if p == 0)
