"""Argument and result plumbing shared by the SQL functions: Arrow arrays in, Arrow arrays out.

Spark hands an Arrow UDF one `pyarrow.Array` per argument and batch (a SQL `NULL` literal arrives as
an array of Arrow type null); these helpers normalise them and put SQL null semantics on results.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_format.ragged import plain_array


def as_array(arr: pa.Array | pa.ChunkedArray, kind: pa.DataType | None = None) -> pa.Array:
    """One plain Arrow array: chunks combined, dictionaries decoded, an all-null (type null) array
    given type `kind`."""
    arr = plain_array(arr)
    if pa.types.is_null(arr.type) and kind is not None:
        arr = pa.nulls(len(arr), type=kind)
    return arr


def valid_mask(*arrays: pa.Array) -> np.ndarray:
    """True where every one of the (equally long) arrays is non-null."""
    valid = np.ones(len(arrays[0]), dtype=bool)
    for arr in arrays:
        if arr.null_count:
            valid &= arr.is_valid().to_numpy(zero_copy_only=False)
    return valid


def int64_values(arr: pa.Array, fill: int = 0) -> np.ndarray:
    """An integer (or numeric text) column as int64 numpy values, nulls replaced by `fill`."""
    arr = as_array(arr, pa.int64())
    if pa.types.is_timestamp(arr.type):
        arr = pc.cast(arr, pa.timestamp("ms", arr.type.tz), safe=False)
    return pc.cast(arr, pa.int64()).fill_null(fill).to_numpy(zero_copy_only=False)


def with_nulls(values: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
    """Arrow array of `values` with nulls where `valid` is False."""
    return pa.array(values, type=kind, mask=None if valid.all() else ~valid)

