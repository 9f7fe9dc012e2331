"""recover --in-place leaves a file it rewrote with its own bytes alone: `io.compare.same_bytes` (which inplace uses) must say equal
exactly when the bytes are equal, whatever the holes (a sparse tail and written zeros are the same bytes) and
wherever a difference lies (it reads from the end, and only where either file holds data)."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from jobs.pipeline.io.compare import COMPARE_CHUNK, same_bytes

SIZE = 3 * COMPARE_CHUNK + 4096 * 3 + 17


def _write(path, data: bytes, sparse: bool) -> None:
    """data, with its 4 KiB blocks of zeros left as holes when `sparse`."""
    with open(path, "wb") as f:
        if not sparse:
            f.write(data)
            return
        for at in range(0, len(data), 4096):
            block = data[at:at + 4096]
            if block.strip(b"\0"):
                f.seek(at)
                f.write(block)
        f.truncate(len(data))


def _data(seed: int, used: int) -> bytearray:
    rnd = bytearray(os.urandom(used) if seed else b"\x07" * used)
    return rnd + bytearray(SIZE - used)


@pytest.mark.parametrize("sparse_a,sparse_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("at", [0, 4095, 4096, COMPARE_CHUNK - 1, COMPARE_CHUNK, 2 * COMPARE_CHUNK + 5, SIZE - 1])
def test_one_byte_changed_anywhere_is_found_whatever_the_holes(tmp_path, sparse_a, sparse_b, at) -> None:
    data = _data(1, COMPARE_CHUNK + 100)
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, bytes(data), sparse_a)
    _write(b, bytes(data), sparse_b)
    assert same_bytes(a, b)
    data[at] ^= 0x5A
    _write(b, bytes(data), sparse_b)
    assert not same_bytes(a, b)
    assert not same_bytes(b, a)


def test_different_sizes_differ_and_empty_files_are_equal(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"")
    b.write_bytes(b"")
    assert same_bytes(a, b)
    b.write_bytes(b"\0")
    assert not same_bytes(a, b)


@settings(max_examples=40, deadline=None)
@given(used=st.integers(0, SIZE), flips=st.lists(st.integers(0, SIZE - 1), max_size=3),
       sparse_a=st.booleans(), sparse_b=st.booleans())
def test_equal_exactly_when_the_bytes_are(tmp_path_factory, used, flips, sparse_a, sparse_b) -> None:
    tmp = tmp_path_factory.mktemp("cmp")
    data = _data(1, used)
    other = bytearray(data)
    for at in flips:
        other[at] ^= 0x01
    a, b = tmp / "a", tmp / "b"
    _write(a, bytes(data), sparse_a)
    _write(b, bytes(other), sparse_b)
    assert same_bytes(a, b) == (bytes(data) == bytes(other))
