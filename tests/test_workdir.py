"""The work directory's files round-trip: whatever int64 values a split gives (narrowed to uint32 above a
base when they span less than 2^32, stored whole otherwise), readers get the same values back."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.pipeline.io.fs import location
from jobs.pipeline.io.workdir import (cq_columns, cq_file, key_columns, keys_file, offset_map, read_cq, read_keys,
                                   write_cq, write_keys, write_offset_map)
from storage_format.index_keys import KeyBatch
from storage_format.split_rows import CqRows

pytestmark = pytest.mark.floors  # Arrow IPC work files: make test-floors runs it at the dependency floors

I64 = st.integers(-2 ** 63, 2 ** 63 - 1)


@st.composite
def _int64_column(draw, n: int) -> np.ndarray:
    """n values: around one base within a span below, at or above 2^32 (the narrowing's edge)."""
    span = draw(st.sampled_from([1, 2 ** 32 - 1, 2 ** 32, 2 ** 63]))
    base = draw(I64)
    values = [max(-2 ** 63, min(2 ** 63 - 1, base + draw(st.integers(0, span)))) for _ in range(n)]
    return np.array(values, np.int64)


@st.composite
def _split(draw):
    n = draw(st.integers(0, 12))
    cq = CqRows(draw(_int64_column(n)), draw(_int64_column(n)),
                np.array(draw(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=n, max_size=n)), np.int32),
                draw(_int64_column(n)))
    keys = KeyBatch(np.array(draw(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=n, max_size=n)), np.int32),
                    draw(_int64_column(n)), draw(_int64_column(n)))
    return cq, keys


@settings(max_examples=150, deadline=None)
@given(_split(), st.integers(0, 12), st.integers(0, 12))
def test_work_files_give_back_the_values_written(tmp_path_factory, split, a: int, b: int) -> None:
    """Whole tables (read_cq/read_keys, int64 as before) and row ranges taken from the stored columns
    (take, take_into with a kept subset) equal what the decode wrote."""
    cq, keys = split
    work = location(str(tmp_path_factory.mktemp("work")))
    write_cq(work, 3, cq)
    write_keys(work, 3, keys)
    table = read_cq(work, 3)
    for name in ("queue_offset", "phy", "size", "tags"):
        assert table.column(name).type == (pa.int32() if name == "size" else pa.int64())
        assert np.array_equal(table.column(name).to_numpy(), getattr(cq, name))
    ktable = read_keys(work, 3)
    for name in ("key_hash", "phy", "store_ts"):
        assert np.array_equal(ktable.column(name).to_numpy(), getattr(keys, name))
    lo, hi = sorted((min(a, len(cq)), min(b, len(cq))))
    rows = slice(lo, hi)
    stored = cq_columns(work, 3)
    keep = np.arange(hi - lo)[::2]
    for name in ("queue_offset", "phy", "size", "tags"):
        out = np.empty(len(keep), getattr(cq, name).dtype)
        stored[name].take_into(rows, keep, out)
        assert np.array_equal(out, getattr(cq, name)[rows][keep])
        assert np.array_equal(stored[name].take(rows), getattr(cq, name)[rows])
    for name, column in key_columns(work, 3).items():
        assert np.array_equal(column.take(rows), getattr(keys, name)[rows])


def test_offsets_of_a_split_are_stored_in_four_bytes(tmp_path: Path) -> None:
    """A split's commit-log offsets, queue offsets and store times span far less than 2^32: its files
    hold 16 bytes per consume-queue row and 12 per key (was 28 and 20), plus the file's framing."""
    n = 100_000
    phy = 5 * 2 ** 40 + np.arange(n, dtype=np.int64) * 300
    cq = CqRows(10 ** 12 + np.arange(n, dtype=np.int64), phy, np.full(n, 300, np.int32),
                np.arange(n, dtype=np.int64) - 2 ** 31)
    keys = KeyBatch(np.arange(n, dtype=np.int32), phy, 1_700_000_000_000 + np.arange(n, dtype=np.int64))
    work = location(str(tmp_path))
    write_cq(work, 0, cq)
    write_keys(work, 0, keys)
    assert 16 * n <= Path(cq_file(work, 0).path).stat().st_size < 16 * n + 4096
    assert 12 * n <= Path(keys_file(work, 0).path).stat().st_size < 12 * n + 4096


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2 ** 40), min_size=1, max_size=30, unique=True), st.integers(-2 ** 30, 2 ** 30),
       st.data())
def test_offset_maps_give_each_listed_offset_its_new_one(tmp_path_factory, olds, shift, data):
    """convert's per-split offset map (old -> new offsets, ascending): rows read through it get their record's new
    offset, in any order and repeated (a record with several keys); an offset no record has is an error naming the
    map file, never passed on unmapped."""
    import pytest

    work = location(str(tmp_path_factory.mktemp("work")))
    old = np.array(sorted(olds), np.int64)
    new = np.maximum(old + shift - np.arange(len(old)) * 48, 0)
    write_offset_map(work, 7, old, new)
    m = offset_map(work, 7)
    rows = data.draw(st.lists(st.integers(0, len(old) - 1), max_size=40))
    assert m(old[rows]).tolist() == new[rows].tolist()
    stray = data.draw(st.integers(0, 2 ** 40).filter(lambda v: v not in set(olds)))
    with pytest.raises(ValueError, match="offsets-000007.arrow: offset .* is no listed record's"):
        m(np.array([*old[rows].tolist(), stray], np.int64))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 2 ** 45), max_size=60, unique=True), st.data())
def test_offset_map_kernel_equals_reference(olds, data):
    """kernels.layout_kernel.map_offsets == commitlog_layout.map_offsets_reference: rows ascending (a split's keys,
    repeated per record), in any order, with offsets no record has (the first such row is named), read-only or not."""
    from storage_format.commitlog_layout import map_offsets_reference
    from storage_format.kernels.layout_kernel import map_offsets

    old = np.array(sorted(olds), np.int64)
    new = old * 3 - 5
    listed = st.sampled_from(olds) if olds else st.nothing()
    pick = st.one_of(listed, st.integers(-5, 2 ** 45 + 5)) if olds else st.integers(-5, 2 ** 45 + 5)
    phy = np.array(data.draw(st.lists(pick, max_size=80)), np.int64)
    if data.draw(st.booleans()):
        phy = np.sort(phy)
    if data.draw(st.booleans()):
        phy.flags.writeable = False
    want, first_bad = map_offsets_reference(old, new, phy)
    out = np.zeros(len(phy), np.int64)
    assert map_offsets(old, new, phy, out) == first_bad
    upto = len(phy) if first_bad < 0 else first_bad
    assert out[:upto].tolist() == want[:upto].tolist()


def test_reading_work_files_imports_no_pandas(tmp_path: Path) -> None:
    """A build task reads its columns without importing pandas (pyarrow's to_numpy does: 0.2-0.7 s in each
    worker's first build task, the index task's critical path), read-only and zero-copy as before."""
    script = ("import sys, numpy as np; from jobs.pipeline.io.fs import location; "
              "from jobs.pipeline.io.workdir import cq_columns, key_columns, write_cq, write_keys; "
              "from storage_format.index_keys import KeyBatch; from storage_format.split_rows import CqRows; "
              "a = np.arange(5, dtype=np.int64); work = location(sys.argv[1]); "
              "write_cq(work, 0, CqRows(a, a + 2**40, np.arange(5, dtype=np.int32), a)); "
              "write_keys(work, 0, KeyBatch(np.arange(5, dtype=np.int32), a, a * 2**40)); "
              "cols = {**cq_columns(work, 0), **key_columns(work, 0)}; "
              "print('pandas' in sys.modules, all(not c.values.flags.writeable for c in cols.values()), "
              "cols['key_hash'].take().tolist(), cols['store_ts'].take(slice(1, 3)).tolist())")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.stdout.split() == ["False", "True", "[0,", "1,", "2,", "3,", "4]", f"[{2**40},", f"{2**41}]"]
