"""The task processes' heap policy (jobs.pipeline.runtime.heap): memory a task frees stays with the process
for its next task instead of being faulted in again, zeroed; both engines' workers run under it."""
from __future__ import annotations

import ctypes
import resource
import subprocess
import sys

from jobs.pipeline.runtime.local import LocalRunner
from jobs.pipeline.runtime.tasks import SparkRunner
from tests.conftest import REPO

BLOCK = 64 << 20  # larger than glibc's largest sliding mmap threshold (32 MiB): mmapped anew under the defaults
PAGES = BLOCK // 4096
KEPT = PAGES // 8  # page faults of a second block that reuses the first one's memory: far fewer than its pages


def _refaults(_: object = None) -> int:
    """Page faults taken by writing a BLOCK malloc'd after one of the same size was written and freed, as the
    compiled kernels allocate their outputs (numba's allocator is malloc; numpy's own asks for huge pages)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    first = libc.malloc(BLOCK)
    ctypes.memset(first, 1, BLOCK)
    libc.free(first)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = libc.malloc(BLOCK)
    ctypes.memset(second, 1, BLOCK)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(second)
    return faults


def _in_fresh_process(policy: bool) -> int:
    code = ("from jobs.pipeline.runtime import heap; from tests.test_heap import _refaults; "
            f"assert heap.keep_freed_memory() if {policy} else True; print(_refaults())")
    return int(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout)


def test_freed_memory_is_kept_for_the_next_allocation():
    """Under glibc's defaults a freed 64 MiB block goes back to the kernel and its successor faults in
    every page again; under keep_freed_memory the successor reuses it."""
    assert _in_fresh_process(False) > PAGES // 2
    assert _in_fresh_process(True) < KEPT


def test_local_engine_workers_keep_freed_memory():
    assert max(LocalRunner(2).run_tasks([0, 1, 2], _refaults, "heap", quiet=True)) < KEPT


def test_spark_engine_workers_keep_freed_memory(spark):
    assert max(SparkRunner(spark.sparkContext).run_tasks([0, 1, 2], _refaults, "heap", quiet=True)) < KEPT
