"""Ragged byte slices of one buffer as Arrow arrays, without a per-slice Python loop; one plain array from
whatever Arrow form a column comes in."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_numpy import to_arrow


def plain_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One plain Arrow array: chunks combined (none: an empty array of the type), dictionaries decoded."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], type=arr.type)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def slices_to_binary(buf: pa.Buffer, starts: np.ndarray, lengths: np.ndarray,
                     valid: np.ndarray | None = None) -> pa.LargeBinaryArray:
    """Copy `buf[starts[i]:starts[i]+lengths[i]]` into one compact large_binary array.

    Slices must be in ascending, non-overlapping order (true for fields of consecutive records).
    Works by describing slices and the gaps between them as one zero-copy array over `buf`
    (interleaved offsets) and letting Arrow `take` every other element.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], type=pa.large_binary())
    starts = starts.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    nulls = valid is not None and not valid.all()
    if nulls:
        lengths = np.where(valid, lengths, 0)  # a null value holds no bytes
    ends = starts + lengths
    offsets = np.empty(2 * n + 1, dtype=np.int64)
    offsets[0:-1:2] = starts
    offsets[1::2] = ends
    offsets[-1] = ends[-1]
    if np.any(np.diff(offsets) < 0):
        raise ValueError("slices must be ascending and non-overlapping")
    view = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * n, [None, pa.py_buffer(offsets), buf])
    out = pc.take(view, to_arrow(np.arange(0, 2 * n, 2, dtype=np.int64)))
    if nulls:  # attach the validity bitmap (no second copy of the bytes)
        bitmap = to_arrow(np.asarray(valid, dtype=bool)).buffers()[1]
        out = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [bitmap] + out.buffers()[1:],
                                               null_count=int(n - np.count_nonzero(valid)))
    return out
