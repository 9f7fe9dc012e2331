"""The compiled CRC-32 (crc_kernel) against zlib.crc32 (java.util.zip.CRC32's), and the kernel's per-record
body check against the reference's (record_columns.first_crc_error through commitlog.decode_buffer)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from storage_format.commitlog import END_CRC_MISMATCH, decode_buffer
from storage_format.kernels import crc_kernel
from storage_format.kernels.split_decode import decode_fast
from storage_format.record import FLAG_COMPRESSED, Message
from storegen.encoder import encode_record

pytestmark = pytest.mark.floors  # numba's code for the CRC kernel: make test-floors runs it at the dependency floors


def _kernel_crc(data: bytes, lo: int = 0, hi: int | None = None) -> int:
    arr = np.frombuffer(data, np.uint8)  # read-only, as the segment buffers the kernel walks
    return int(crc_kernel.crc32(arr, lo, len(data) if hi is None else hi))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600), cut=st.integers(0, 40))
def test_kernel_crc_equals_zlib(data, cut):
    """Any bytes, at any start and end inside a buffer (the 16-byte steps and the byte-wise tail both)."""
    lo, hi = min(cut, len(data)), max(min(cut, len(data)), len(data) - cut)
    assert _kernel_crc(data, lo, hi) == zlib.crc32(data[lo:hi])


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff", b"a", bytes(15), bytes(16), bytes(17), b"\xff" * 33,
                                  b"123456789"], ids=lambda d: f"{len(d)}B")
def test_kernel_crc_of_edge_lengths(data):
    """Empty, one byte, around one 16-byte step; and CRC-32's check value (0xCBF43926 for "123456789")."""
    assert _kernel_crc(data) == zlib.crc32(data)
    if data == b"123456789":
        assert _kernel_crc(data) == 0xCBF43926


def test_kernel_crc_of_a_large_buffer():
    """8 MiB of random bytes, whole and at an odd offset."""
    data = np.random.default_rng(23).bytes(8 << 20)
    assert _kernel_crc(data) == zlib.crc32(data)
    assert _kernel_crc(data, 7, len(data) - 3) == zlib.crc32(data[7:-3])


def _both(buf: bytes, n: int):
    """(kernel's FastSplit, reference's DecodedChunk) of buf's first n bytes of records, CRCs checked."""
    fast = decode_fast(buf, 0, 0, n, len(buf), path="x", find_start=False, dated=(0, 2**62), delay_levels_ms=(),
                       check_crc=True)
    return fast, decode_buffer(buf, 0, 0, n, segment_end=len(buf), path="x", check_crc=True)


@settings(max_examples=60, deadline=None)
@example(bodies=[b"a", b"bc", b""], compressed=False, bad=1, stored=-1)  # a negative stored CRC never matches
@example(bodies=[b"a", b""], compressed=False, bad=1, stored=7)  # an empty body is not checked
@example(bodies=[b"x" * 300, b"y"], compressed=True, bad=0, stored=0)
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=6), compressed=st.booleans(),
       bad=st.one_of(st.none(), st.integers(0, 5)), stored=st.sampled_from([None, 0, -1, 7, 0x7FFFFFFF]))
def test_kernel_body_check_equals_the_reference(bodies, compressed, bad, stored):
    """Records with bodies (empty, plain, zlib-compressed with the compressed flag), one of them with a
    wrong, zero or negative stored bodyCRC: the kernel ends at the same record with the reference's end, or
    takes every record as the reference does (an empty body is not checked, whatever its stored CRC)."""
    raw, offset, mismatch_at = [], 0, None
    for i, body in enumerate(bodies):
        body = zlib.compress(body) if compressed else body
        crc = stored if (bad is not None and i == bad % len(bodies)) else None
        if crc is not None and body and crc != zlib.crc32(body) & 0x7FFFFFFF and mismatch_at is None:
            mismatch_at = offset
        rec = encode_record(Message(topic="T", body=body, sys_flag=FLAG_COMPRESSED if compressed else 0,
                                    body_crc=crc), offset)
        raw.append(rec)
        offset += len(rec)
    buf = b"".join(raw) + bytes(16)
    fast, ref = _both(buf, offset)
    assert not isinstance(fast, str), fast
    assert fast.end == ref.end and fast.records == ref.count and fast.blanks == ref.blank_count
    assert (ref.end.reason == END_CRC_MISMATCH) == (mismatch_at is not None)
    assert mismatch_at is None or ref.end.offset == mismatch_at


def test_a_split_starting_at_a_failing_record_names_it_as_its_first_position():
    """A mid-segment split (its first record searched) whose first record fails the CRC: no record decoded,
    but the split's first position is that record's, as in the reference (the walk started there)."""
    first = encode_record(Message(topic="T", body=b"ok"), 0)
    bad = encode_record(Message(topic="T", body=b"bad", body_crc=1), len(first))
    after = encode_record(Message(topic="T", body=b"after"), len(first) + len(bad))
    buf = first + bad + after + bytes(16)
    n = len(first) + len(bad) + len(after)
    fast = decode_fast(buf, 0, 1, n, len(buf), path="x", find_start=True, dated=(0, 2**62), delay_levels_ms=(),
                       check_crc=True)
    ref = decode_buffer(buf, 0, 1, n, segment_end=len(buf), path="x", check_crc=True, find_start=True)
    assert not isinstance(fast, str) and fast.records == ref.count == 0
    assert fast.first_position == ref.first_position == len(first)
    assert fast.end == ref.end and ref.end.reason == END_CRC_MISMATCH and ref.end.offset == len(first)
