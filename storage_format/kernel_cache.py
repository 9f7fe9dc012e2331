"""Where numba keeps the compiled kernels, so that a kernel compiles once per machine and Python.

In a source tree numba caches next to the module (__pycache__). Imported from a `--py-files` zip,
numba's own zip locator keys its cache directory by the zip's location, which Spark makes new for
every application: each application would compile again. `StableZipLocator` keys it by the package
name only (the index inside is still checked against a hash of the module's source, so a changed
module compiles anew). `python -m storage_format.kernel_cache` compiles (or loads) every kernel once:
`make venv` runs it, so the first job does not pay the compilation.
"""
from __future__ import annotations

import os
import sys
from pathlib import PurePosixPath

from numba.core import caching, config

CACHE_NAME = "reput-kernels"


class StableZipLocator(caching.ZipCacheLocator):
    """numba's zip locator with a cache directory that does not depend on where the zip lies."""

    def __init__(self, py_func, py_file) -> None:
        super().__init__(py_func, py_file)
        root = config.CACHE_DIR or caching.AppDirs(appname="numba", appauthor=False).user_cache_dir
        package = PurePosixPath(self._internal_path).parent.as_posix().replace("/", ".")
        self._cache_path = os.path.join(root, CACHE_NAME, package)

    @classmethod
    def from_function(cls, py_func, py_file):
        if ".zip" not in py_file:
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


def install() -> None:
    """Put StableZipLocator first (idempotent); kernel modules call this before defining kernels."""
    classes = caching.CacheImpl._locator_classes  # numba's documented extension point is this list
    if StableZipLocator not in classes:
        classes.insert(0, StableZipLocator)


install()


def warm() -> dict[str, int]:
    """Run every kernel once on tiny inputs (compiling or loading each); returns cache misses per kernel
    (0 everywhere when all came from the cache)."""
    import numpy as np

    from . import index_chain, row_groups, split_kernel
    from .split_decode import decode_fast

    zeros = memoryview(bytes(64))  # read-only, like the segment buffers; the walk ends at once (magic 0)
    decode_fast(zeros, 0, 0, len(zeros), len(zeros), path="warm", find_start=False, dated=(0, 2**62),
                delay_levels_ms=(1000,))
    slot = np.zeros(3, np.int64)
    index_chain.newest_positions(slot, np.zeros(1, np.int64), 1)
    index_chain.chain_prev(slot, np.zeros(1, np.int64), 1)
    kernels = {"decode_kernel": split_kernel.decode_kernel, "group_rows": row_groups.group_rows,
               "newest_positions": index_chain.newest_positions, "chain_prev": index_chain.chain_prev}
    return {name: sum(f.stats.cache_misses.values()) for name, f in kernels.items()}


if __name__ == "__main__":
    misses = warm()
    compiled = [name for name, n in misses.items() if n]
    print(f"numba kernels: {'compiled ' + ', '.join(compiled) if compiled else 'all loaded from the cache'}")
    sys.exit(0)
