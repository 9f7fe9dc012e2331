"""build_queue_files against an independent unit-by-unit writer: the increasing-offset fast path (binary
search per file, block copies for consecutive units) and the general path give the broker's bytes."""
from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_format.consume_queue import CQ_UNIT_SIZE, PRE_BLANK_SIZE, build_queue_files

UNITS_PER_FILE = 7
FILE_SIZE = UNITS_PER_FILE * CQ_UNIT_SIZE


def _unit_by_unit(offsets: list[int], rows: list[tuple[int, int, int]], first: int | None,
                  trim: bool) -> dict[int, bytes]:
    """Each entry packed big-endian at byte offset x 20 of its file; pre-blank units before the
    queue's first entry in its file; files cut after their last entry when trimmed."""
    files: dict[int, bytearray] = {}
    ends: dict[int, int] = {}
    first = min(offsets) if first is None else first
    for qo, (phy, size, tags) in zip(offsets, rows):
        start = qo * CQ_UNIT_SIZE - qo * CQ_UNIT_SIZE % FILE_SIZE
        buf = files.setdefault(start, bytearray(FILE_SIZE))
        if first > 0 and start == first * CQ_UNIT_SIZE - first * CQ_UNIT_SIZE % FILE_SIZE and start not in ends:
            for u in range((first * CQ_UNIT_SIZE - start) // CQ_UNIT_SIZE):
                struct.pack_into(">qiq", buf, u * CQ_UNIT_SIZE, 0, PRE_BLANK_SIZE, 0)
        at = qo * CQ_UNIT_SIZE - start
        struct.pack_into(">qiq", buf, at, phy, size, tags)
        ends[start] = max(ends.get(start, 0), at + CQ_UNIT_SIZE)
    return {s: bytes(b[:ends[s]] if trim else b) for s, b in files.items()}


@st.composite
def _queue(draw):
    offsets = draw(st.lists(st.integers(0, 6 * UNITS_PER_FILE), min_size=1, max_size=40, unique=True))
    rows = [(draw(st.integers(0, 2 ** 40)), draw(st.integers(1, 2 ** 31 - 1)), draw(st.integers(-2 ** 63, 2 ** 63 - 1)))
            for _ in offsets]
    first = draw(st.one_of(st.none(), st.just(-1), st.integers(0, min(offsets))))
    return offsets, rows, first, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(_queue(), st.booleans())
def test_queue_files_equal_a_unit_by_unit_writer(queue, increasing: bool) -> None:
    """Sorted (the fast path, runs of consecutive offsets included) or in any order (the general path),
    full or trimmed, with or without pre-blank units: the same bytes as packing unit by unit."""
    offsets, rows, first, trim = queue
    if increasing:
        order = sorted(range(len(offsets)), key=offsets.__getitem__)
        offsets, rows = [offsets[i] for i in order], [rows[i] for i in order]
    qo = np.array(offsets, np.int64)
    phy, size, tags = (np.array([r[i] for r in rows], dt) for i, dt in enumerate((np.int64, np.int32, np.int64)))
    assert build_queue_files(qo, phy, size, tags, FILE_SIZE, first, trim) == _unit_by_unit(offsets, rows, first, trim)


def test_a_run_of_consecutive_offsets_across_files_is_cut_at_file_edges() -> None:
    """Offsets 5..16 over files of 7 units: file 0 holds 5, 6 after five pre-blank units; file 7 x 20
    holds 7..13; file 14 x 20 holds 14..16 (trimmed to three units)."""
    qo = np.arange(5, 17, dtype=np.int64)
    files = build_queue_files(qo, qo * 100, np.full(12, 9, np.int32), -qo, FILE_SIZE, None, trim=True)
    assert sorted(files) == [0, FILE_SIZE, 2 * FILE_SIZE]
    assert [len(files[s]) // CQ_UNIT_SIZE for s in sorted(files)] == [7, 7, 3]
    assert struct.unpack_from(">qiq", files[0], 0) == (0, PRE_BLANK_SIZE, 0)
    assert struct.unpack_from(">qiq", files[FILE_SIZE], 0) == (700, 9, -7)
    assert struct.unpack_from(">qiq", files[2 * FILE_SIZE], 2 * CQ_UNIT_SIZE) == (1600, 9, -16)
