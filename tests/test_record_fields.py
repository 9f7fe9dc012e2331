"""The compiled storeTimestamp read (kernels.record_fields) against its numpy reference (RecordColumns): equal on
every record of the golden plain commit logs (IPv4 and IPv6 born hosts), and on generated heads with either born
host; a position whose field lies past the bytes' end raises IndexError on both paths."""
from __future__ import annotations

import struct
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storage_format.commitlog import walk_chain
from storage_format.rocksdb_dispatch import store_timestamps
from tests.conftest import GOLDEN


@pytest.mark.parametrize("case", ["clean-small-11", "v5-clean-small-11"])
def test_kernel_timestamps_equal_reference_on_golden(case: str) -> None:
    """Every record of every segment: the compiled read equals RecordColumns' store_timestamp; both born hosts
    occur (sysFlag's BORNHOST_V6 bit set on some records, not on others)."""
    v6 = v4 = 0
    for seg in sorted((GOLDEN / case / "commitlog").iterdir()):
        start, data = int(seg.name), seg.read_bytes()
        buf = np.frombuffer(data, np.uint8)
        positions, _, _ = walk_chain(data, start, 0, len(data), len(data))
        flags = np.array([struct.unpack_from(">i", data, int(p) + 36)[0] for p in positions], np.int64)
        v6 += int((flags & 0x10 != 0).sum())
        v4 += int((flags & 0x10 == 0).sum())
        assert np.array_equal(store_timestamps(buf, positions), store_timestamps(buf, positions, compiled=False))
    assert v6 > 0 and v4 > 0, (v6, v4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(-2**63, 2**63 - 1), st.integers(0, 300)), min_size=1,
                max_size=20), st.integers(0, 90))
def test_kernel_timestamps_equal_reference_on_generated(heads, cut: int) -> None:
    """Heads with either born host at any spacing, the buffer cut short by up to 90 bytes: the same timestamps, or
    IndexError on both paths when a field runs past the end."""
    data = bytearray()
    positions = []
    for v6, ts, gap in heads:
        positions.append(len(data))
        head = bytearray(48 + (16 if v6 else 4) + 4)
        struct.pack_into(">i", head, 36, 0x10 if v6 else 0)
        data += head + struct.pack(">q", ts) + bytes(gap)
    buf = np.frombuffer(bytes(data[:max(0, len(data) - cut)]), np.uint8)
    pos = np.array(positions, np.int64)
    try:
        expect = store_timestamps(buf, pos, compiled=False)
    except IndexError:
        with pytest.raises(IndexError):
            store_timestamps(buf, pos)
        return
    assert np.array_equal(store_timestamps(buf, pos), expect)
    assert np.array_equal(expect, [ts for _, ts, _ in heads])
