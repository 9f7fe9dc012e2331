"""Compiled kernels come from numba's cache: imported from a `--py-files` zip, a kernel compiled once
is loaded again wherever the zip lies (Spark gives each application a new directory)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from jobs.pipeline.package import build_zip

WARM = "import json; from storage_format import kernel_cache as k; print(json.dumps([k.__file__, k.warm()]))"


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
              "before = 'numba' in sys.modules; import numpy as np; from storage_format import row_groups; "
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
            with open(tree / "storage_format" / "kernel_bytes.py", "a") as f:
                f.write("# edited\n")
        env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache))
        done = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, env=env, cwd=tmp_path,
                              check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1])[1]["decode_kernel"])
    assert runs[0] > 0 and runs[1] == 0 and runs[2] > 0, runs

