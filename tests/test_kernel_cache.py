"""Compiled kernels come from numba's cache: imported from a `--py-files` zip, a kernel compiled once
is loaded again wherever the zip lies (Spark gives each application a new directory)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from jobs.pipeline.runtime.package import build_zip

WARM = "import json; from storage_format.kernels import warm as k; print(json.dumps([k.__file__, k.warm()]))"


def _warm_from(zip_path: Path, cache: Path) -> tuple[str, dict[str, int]]:
    env = dict(os.environ, PYTHONPATH=str(zip_path), NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, env=env, cwd=zip_path.parent,
                          check=True)
    origin, misses = json.loads(done.stdout.strip().splitlines()[-1])
    return origin, misses


def test_kernels_from_a_moved_zip_do_not_recompile(tmp_path):
    """First application compiles; a second one, with the same zip at another path, loads every kernel."""
    cache = tmp_path / "numba-cache"
    first_zip, second_zip = tmp_path / "app-1" / "reput.zip", tmp_path / "app-2" / "reput.zip"
    build_zip(first_zip)
    build_zip(second_zip)
    origin, misses = _warm_from(first_zip, cache)
    assert origin.startswith(str(first_zip)) and all(n > 0 for n in misses.values())
    origin, misses = _warm_from(second_zip, cache)
    assert origin.startswith(str(second_zip)) and misses == {name: 0 for name in misses}


def test_the_driver_starts_without_numba():
    """Kernels are compiled (or loaded) at their first call: importing every job, as a driver does, leaves
    numba unimported (a third of a second of every job's start-up), and a kernel call then brings it."""
    script = ("import sys, jobs.rebuild, jobs.verify, jobs.recover, jobs.query, jobs.inspect, jobs.catalog, jobs.dump; "
              "before = 'numba' in sys.modules; import numpy as np; from storage_format.kernels import row_groups; "
              "order, counts = row_groups.group_rows(np.array([1, 0, 1]), np.array([1, 0]), 2); "
              "print(before, 'numba' in sys.modules, order.tolist(), counts.tolist())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.split() == ["False", "True", "[0,", "2,", "1]", "[0,", "2,", "3]"]


def test_a_changed_helper_module_recompiles_the_kernel(tmp_path):
    """numba checks a cached kernel against its own module only; the kernel's inlined byte helpers
    (kernel_bytes) are in its stamp too, so editing them cannot leave a stale kernel in the cache."""
    tree, cache = tmp_path / "tree", tmp_path / "numba-cache"
    shutil.copytree(Path(__file__).parents[1] / "storage_format", tree / "storage_format",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runs = []
    for edit in (False, False, True):
        if edit:
            with open(tree / "storage_format" / "kernels" / "kernel_bytes.py", "a") as f:
                f.write("# edited\n")
        env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache))
        done = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, env=env, cwd=tmp_path,
                              check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1])[1]["decode_kernel"])
    assert runs[0] > 0 and runs[1] == 0 and runs[2] > 0, runs



PRELUDE = """
import json, os, sys
from storage_format.kernels import index_chain, row_groups, split_kernel, warm
warm.warm()
from jobs.pipeline.io.fs import location
from storage_format.settings import load_settings

class InProcess:  # the little of a SparkContext that scan_store and run_tasks use, running tasks here
    defaultParallelism = 2
    def parallelize(self, items, n):
        return self
    def map(self, fn):
        self.fn = fn
        return self
    def collect(self):
        return [self.fn(pair) for pair in self.items]

class Context(InProcess):
    def parallelize(self, items, n):
        job = InProcess()
        job.items = items
        return job

store, root = location(sys.argv[1]), sys.argv[2]
settings = load_settings(sys.argv[1] + "/broker.conf")
work, out = location(root + "/work"), location(root + "/out")
"""
SIGNATURES = """
kernels = {"decode_kernel": split_kernel.decode_kernel, "group_rows": row_groups.group_rows,
           "newest_by_hash": index_chain.newest_by_hash, "entry_bytes": index_chain.entry_bytes}
print(json.dumps({name: len(k.signatures) for name, k in kernels.items()}))
"""
ONE_EACH = {"decode_kernel": 1, "group_rows": 1, "newest_by_hash": 1, "entry_bytes": 1}


def _signatures_after(job: str, case: str, tmp_path: Path) -> dict[str, int]:
    from tests.conftest import GOLDEN
    done = subprocess.run([sys.executable, "-c", PRELUDE + job + SIGNATURES, str(GOLDEN / case), str(tmp_path)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_rebuild_calls_kernels_only_with_the_signatures_warm_loads(tmp_path):
    """A worker loads the kernels once (warm(), from the cache); an argument of another flavour (a
    writable array where warm() passed a read-only one) would make numba compile a second signature in
    every worker at its first task (a work-file change once did: +0.3 s per worker with a warm cache,
    seconds on a fresh one). Decode and build a golden store in a process that ran warm() first."""
    rebuild = """
from jobs.pipeline.build.stage import build_files, plan_cq, plan_index
from jobs.pipeline.scan.stage import scan_store
scan = scan_store(Context(), store, settings, split_size=1 << 20, work=work, quiet=True)
os.makedirs(root + "/out/index")
for task in plan_index(scan, settings, work, out.child("index")) + plan_cq(scan, settings, work,
                                                                              out.child("consumequeue")):
    build_files(task)
"""
    assert _signatures_after(rebuild, "clean-medium-11", tmp_path) == ONE_EACH


def test_a_recovery_calls_kernels_only_with_the_signatures_warm_loads(tmp_path):
    """The same for recovery, which resumes the last index file with the tail's keys (gathered from the
    work files, then selected: arrays of their own) and renders consume queues: a store recovered to a
    directory in a process that ran warm() first."""
    recover = """
from jobs.pipeline.recover.stage import plan_recovery
from jobs.pipeline.recover.write import plan_output, write_output
plan = plan_recovery(Context(), store, settings, work, split_size=1 << 20, quiet=True)
assert plan.index.resume is not None or plan.index.kept, "the case resumes an index file"
write_output(Context(), plan, plan_output(plan, with_copies=False), out, quiet=True)
"""
    assert _signatures_after(recover, "unclean-11", tmp_path) == ONE_EACH
