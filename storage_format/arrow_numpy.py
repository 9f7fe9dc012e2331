"""numpy <-> Arrow for the pipeline's columns without pyarrow's pandas hooks.

`pa.array(...)` and `Array.to_numpy()` import pandas on first use (0.25-0.4 s, in every forked worker that did
not have it): these build and read fixed-width columns, booleans and strings from their buffers instead, so a job
on the local engine starts without pandas at all. Fixed-width columns only where values are numbers without nulls.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

_NUMPY = {pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype(np.int16), pa.int32(): np.dtype(np.int32),
          pa.int64(): np.dtype(np.int64), pa.uint8(): np.dtype(np.uint8), pa.uint16(): np.dtype(np.uint16),
          pa.uint32(): np.dtype(np.uint32), pa.uint64(): np.dtype(np.uint64), pa.float64(): np.dtype(np.float64)}
_ARROW = {d: t for t, d in _NUMPY.items()}


def numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a fixed-width Arrow number type (not DataType.to_pandas_dtype: it imports pandas
    on some pyarrow versions)."""
    return _NUMPY[arrow_type]


def to_arrow(values: np.ndarray | Iterable[int], arrow_type: pa.DataType | None = None) -> pa.Array:
    """numpy numbers (or booleans) as an Arrow array, zero-copy for a contiguous array of the type's dtype.
    `arrow_type`: the Arrow type wanted (default: the array's own)."""
    values = np.asarray(values)
    if values.dtype == np.bool_ and arrow_type in (None, pa.bool_()):
        bits = np.packbits(values.astype(np.uint8, copy=False), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    if arrow_type is None:
        arrow_type = _ARROW[values.dtype]
    values = np.ascontiguousarray(values, dtype=_NUMPY[arrow_type])
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-width number (or boolean) column without nulls as read-only numpy values: zero-copy for one
    chunk of numbers, a copy for several chunks or for booleans."""
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    if array.type == pa.bool_():
        parts = [_bools(c) for c in chunks]
        values = np.concatenate(parts) if parts else np.zeros(0, bool)
    else:
        dtype = numpy_dtype(array.type)
        parts = []
        for c in chunks:
            if c.null_count:
                raise ValueError(f"column of {c.type} has {c.null_count} nulls")
            parts.append(np.frombuffer(c.buffers()[1], dtype, len(c), c.offset * dtype.itemsize))
        values = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype)
    values.flags.writeable = False
    return values


def _bools(chunk: pa.Array) -> np.ndarray:
    if chunk.null_count:
        raise ValueError(f"boolean column has {chunk.null_count} nulls")
    if not len(chunk):
        return np.zeros(0, bool)
    bits = np.frombuffer(chunk.buffers()[1], np.uint8)
    return np.unpackbits(bits, bitorder="little")[chunk.offset:chunk.offset + len(chunk)].astype(bool)


def large_strings(texts: Iterable[str]) -> pa.LargeStringArray:
    """Python strings as an Arrow large_string array (UTF-8, no nulls)."""
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def texts(values: Iterable[str | bytes], arrow_type: pa.DataType) -> pa.Array:
    """Python strings (`pa.string()`, UTF-8) or bytes (`pa.binary()`) as an Arrow array with int32 offsets, no
    nulls."""
    encoded = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(arrow_type, len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])
