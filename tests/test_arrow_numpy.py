"""storage_format.arrow_numpy: columns built and read from their buffers equal pyarrow's own conversions, and the
jobs that run on the local engine never import pandas (pyarrow's pa.array / to_numpy import it: 0.25-0.4 s of
every job's start-up, in the driver or in each forked worker)."""
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

from storage_format.arrow_numpy import large_strings, numpy_dtype, texts, to_arrow, to_numpy

pytestmark = pytest.mark.floors  # Arrow buffers and casts: make test-floors runs it at the dependency floors

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT.parent / "shared" / "golden"

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TYPES), st.data())
def test_numbers_round_trip_as_pyarrow_converts_them(arrow_type: pa.DataType, data) -> None:
    """to_arrow equals pa.array of the same values and type; to_numpy gives them back, also from a slice
    (a non-zero offset) and from several chunks."""
    info = np.iinfo(numpy_dtype(arrow_type))
    values = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=40)),
                      dtype=numpy_dtype(arrow_type))
    arr = to_arrow(values, arrow_type)
    assert arr.equals(pa.array(values, arrow_type))
    assert to_numpy(arr).tolist() == values.tolist()
    lo = data.draw(st.integers(0, len(values)))
    assert to_numpy(arr.slice(lo)).tolist() == values[lo:].tolist()
    chunked = pa.chunked_array([arr.slice(0, lo), arr.slice(lo)], arrow_type)
    assert to_numpy(chunked).tolist() == values.tolist()
    assert not to_numpy(arr).flags.writeable


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=70), st.integers(0, 70))
def test_booleans_round_trip_bit_packed(values: list[bool], lo: int) -> None:
    """Booleans are bit-packed little-endian as Arrow's; reading back honours an offset that is no multiple of 8."""
    arr = to_arrow(np.array(values, bool))
    assert arr.equals(pa.array(values, pa.bool_()))
    assert to_numpy(arr).tolist() == values
    assert to_numpy(pa.array(values, pa.bool_()).slice(min(lo, len(values)))).tolist() == values[lo:]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=20))
def test_large_strings_equal_pyarrow(texts: list[str]) -> None:
    """Strings (any Unicode, empty ones, none at all) as large_string equal pa.array's."""
    texts = [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in texts]
    assert large_strings(texts).equals(pa.array(texts, pa.large_string()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=20), st.lists(st.binary(max_size=24), max_size=20))
def test_texts_equal_pyarrow(strings: list[str], blobs: list[bytes]) -> None:
    """Strings as string and bytes as binary (the msgId map's dictionaries) equal pa.array's."""
    strings = [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in strings]
    assert texts(strings, pa.string()).equals(pa.array(strings, pa.string()))
    assert texts(blobs, pa.binary()).equals(pa.array(blobs, pa.binary()))


@pytest.mark.parametrize("arr", [pa.array([1, None], pa.int64()), pa.array([True, None], pa.bool_())],
                         ids=["int64", "bool"])
def test_nulls_are_refused(arr: pa.Array) -> None:
    with pytest.raises(ValueError, match="null"):
        to_numpy(arr)


_WATCH = """
import os, runpy, sys

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            with open(os.environ["PANDAS_LOG"], "a") as f:
                f.write(f"pandas imported in pid {os.getpid()}\\n")
        return None
sys.meta_path.insert(0, Watch())
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__")
"""


@pytest.mark.parametrize("job,store", [("recover", "unclean-11"), ("recover", "lmq-unclean-11"),
                                       ("recover", "v5-lmq-unclean-11"), ("inspect", "lmq-clean-small-11"),
                                       ("verify", "clean-small-11"), ("rebuild", "clean-small-11"),
                                       ("convert", "dledger-clean-small-11")])
def test_local_engine_jobs_import_no_pandas(tmp_path: Path, job: str, store: str) -> None:
    """recover, inspect, verify, and rebuild and convert of small stores (the local engine's jobs) run on golden
    stores without pandas in the driver or any worker: neither imported at start-up nor by a pyarrow conversion in a
    task (convert's msgId map part once did, in each segment writer)."""
    src = GOLDEN / store
    assert src.is_dir(), f"golden store missing: {src}"
    args = [job, "--store", str(src), "--broker-config", str(src / "broker.conf"), "--engine", "local"]
    if job in ("recover", "rebuild", "convert"):
        args += ["--out", str(tmp_path / "out")]
    log = tmp_path / "pandas.log"
    done = subprocess.run([sys.executable, "-c", _WATCH, f"jobs.{job}", *args[1:]], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PANDAS_LOG": str(log)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not log.exists(), log.read_text()
