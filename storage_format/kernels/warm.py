"""Warming the kernels: run each once on tiny inputs, so that numba compiles it (or loads it from the cache).

`python -m storage_format.kernels.warm` compiles (or loads) every kernel once: `make venv` runs it, so the
first job does not pay the compilation.
"""
from __future__ import annotations

import sys


def warm() -> dict[str, int]:
    """Run every kernel once on tiny inputs (compiling or loading each); returns cache misses per kernel
    (0 everywhere when all came from the cache)."""
    import numpy as np

    from . import crc_kernel, index_chain, layout_kernel, record_fields, record_search, row_groups, split_kernel
    from ..index_file import SLOT_DTYPE
    from .split_decode import decode_fast

    zeros = memoryview(bytes(64))  # read-only, like the segment buffers; the walk ends at once (magic 0)
    decode_fast(zeros, 0, 0, len(zeros), len(zeros), path="warm", find_start=False, dated=(0, 2**62),
                delay_levels_ms=(1000,))
    key_hash, phy, ts = np.zeros(1, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64)
    for column in (key_hash, phy, ts):  # as the work files give them: read-only Arrow columns
        column.flags.writeable = False
    index_chain.newest_by_hash(key_hash, 3, np.zeros(3, SLOT_DTYPE), 1)
    index_chain.entry_bytes(key_hash, phy, ts, 3, np.zeros(3, SLOT_DTYPE), 1, 0, 0, 2**31 - 1)
    index_chain.append_chain(np.zeros(1, np.int64), 3, np.zeros(12, np.uint8), 1, np.zeros(1, np.int64))
    offsets = np.zeros(1, np.int64)
    buf = np.frombuffer(bytes(64), np.uint8)  # read-only, as a read chunk is
    layout_kernel.hop_entries(buf, 0, 0, 64, 48, np.zeros(1, np.int64), np.zeros(1, np.int32), np.zeros(1, np.int8),
                              np.zeros(1, np.int64))
    layout_kernel.hop_copy(buf, 0, 0, 48, 1, np.zeros(64, np.uint8), 0, np.zeros(1, np.int64), np.zeros(1, np.int32),
                           np.zeros(1, np.int64))
    layout_kernel.hop_copy_checked(buf, 0, 0, 48, 1, np.zeros(64, np.uint8), 0, np.zeros(1, np.int64),
                                   np.zeros(1, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64), True)
    layout_kernel.rewrite_prepared(np.zeros(64, np.uint8), 0, offsets, offsets, offsets)
    for rows in (phy, offsets):  # an index task's keys (read-only columns), a queue's rows (copied out)
        layout_kernel.map_offsets(phy, phy, rows, np.zeros(1, np.int64))
    crc_kernel.crc32(buf, 0, 64)
    record_search.find_record(buf, buf.view("<u8"), 0, 0, 64, 0, 0)
    record_fields.store_timestamps_at(buf, offsets, np.zeros(1, np.int64))
    kernels = {"decode_kernel": split_kernel.decode_kernel, "group_rows": row_groups.group_rows,
               "hop_entries": layout_kernel.hop_entries,
               "hop_copy": layout_kernel.hop_copy, "hop_copy_checked": layout_kernel.hop_copy_checked,
               "rewrite_prepared": layout_kernel.rewrite_prepared,
               "map_offsets": layout_kernel.map_offsets,
               "newest_by_hash": index_chain.newest_by_hash, "entry_bytes": index_chain.entry_bytes,
               "append_chain": index_chain.append_chain,
               "crc32": crc_kernel.crc32, "find_record": record_search.find_record,
               "store_timestamps_at": record_fields.store_timestamps_at}
    return {name: sum(f.stats.cache_misses.values()) for name, f in kernels.items()}


if __name__ == "__main__":
    misses = warm()
    compiled = [name for name, n in misses.items() if n]
    print(f"numba kernels: {'compiled ' + ', '.join(compiled) if compiled else 'all loaded from the cache'}")
    sys.exit(0)
