"""Compiled kernels come from numba's cache: imported from a `--py-files` zip, a kernel compiled once
is loaded again wherever the zip lies (Spark gives each application a new directory); the cache is keyed by
the kernels' source, so two reput versions on one executor keep one cache each; numba's cache is placed through
its documented NUMBA_CACHE_LOCATOR_CLASSES, and where that cannot work the first kernel call says so in a line."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jobs.pipeline.runtime.package import build_zip
from storage_format.kernels import jit

FLOORS = pytest.mark.floors  # numba's cache locator: make test-floors runs these at the dependency floors

REPO = Path(__file__).resolve().parents[1]

# The CRC kernel inlines kernel_bytes' helpers as the decode kernel does, and compiles in seconds (every kernel: ~35 s)
WARM = ("import json, numpy as np; from storage_format.kernels import crc_kernel as k; "
        "k.crc32(np.frombuffer(bytes(64), np.uint8), 0, 64); "
        "print(json.dumps([k.__file__, {'crc32': sum(k.crc32.stats.cache_misses.values())}]))")


def _warm_from(zip_path: Path, cache: Path) -> tuple[str, dict[str, int]]:
    env = dict(os.environ, PYTHONPATH=str(zip_path), NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, env=env, cwd=zip_path.parent,
                          check=True)
    origin, misses = json.loads(done.stdout.strip().splitlines()[-1])
    return origin, misses


@FLOORS
def test_the_driver_starts_without_numba():
    """Kernels are compiled (or loaded) at their first call: importing every job, as a driver does, leaves
    numba unimported (a third of a second of every job's start-up), and a kernel call then brings it."""
    script = ("import sys, jobs.rebuild, jobs.verify, jobs.recover, jobs.query, jobs.inspect, jobs.catalog, jobs.dump; "
              "before = 'numba' in sys.modules; import numpy as np; from storage_format.kernels import row_groups; "
              "out, counts = row_groups.group_rows(np.array([[1, 10], [0, 20], [1, 30]]), 0, np.array([1]), "
              "np.array([1, 0]), 2); print(before, 'numba' in sys.modules, out[0].tolist(), counts.tolist())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.split() == ["False", "True", "[10,", "30,", "20]", "[0,", "2,", "3]"]


def test_the_cache_follows_the_kernel_source_not_the_zip_path(tmp_path):
    """One NUMBA_CACHE_DIR, the zips of two reput versions whose sources differ only in an inlined helper module
    (kernel_bytes; numba itself checks a cached kernel against its own module only):
    - version A compiles at its first application; the same zip at another path (Spark gives each application
      a new directory) loads every kernel;
    - version B, shipped as the same zip path, compiles (editing a helper cannot leave a stale kernel);
    - then A and B both load from there on: neither recompiles the other's kernels (a cache keyed by the
      package's name alone did), one cache directory per kernel source.
    The kernel compiled is the CRC kernel, which inlines kernel_bytes as the decode kernel does (compiling every
    kernel twice took ~76 s of the suite; the key covers every kernel module: test_the_cache_key_covers_...)."""
    cache = tmp_path / "numba-cache"
    trees = {}
    for name, edit in (("a", ""), ("b", "# edited\n")):
        tree = tmp_path / name
        shutil.copytree(REPO / "storage_format", tree / "storage_format", ignore=shutil.ignore_patterns("__pycache__"))
        with open(tree / "storage_format" / "kernels" / "kernel_bytes.py", "a") as f:
            f.write(edit)
        trees[name] = tree
    first_zip, moved_zip = tmp_path / "app-1" / "reput.zip", tmp_path / "app-2" / "reput.zip"
    build_zip(first_zip, repo=trees["a"])
    origin, misses = _warm_from(first_zip, cache)
    assert origin.startswith(str(first_zip)) and all(n > 0 for n in misses.values()), misses  # A compiles
    loaded = {name: 0 for name in misses}
    runs = []
    for name in "abab":  # the moved path; A loads, B compiles once, then both load
        build_zip(moved_zip, repo=trees[name])
        origin, misses = _warm_from(moved_zip, cache)
        assert origin.startswith(str(moved_zip))
        runs.append(misses)
    assert runs[0] == loaded, runs[0]  # the same source at another path: nothing compiled
    assert runs[1]["crc32"] > 0, runs[1]  # the helper's edit compiles anew
    assert runs[2] == runs[3] == loaded, runs  # then neither version compiles again
    assert len(list((cache / jit.CACHE_NAME).iterdir())) == 2  # one directory per kernel source


PLACED = """
import json, os, sys
{before}
import numpy as np
from storage_format.kernels import jit, row_groups
row_groups.group_rows(np.array([[1, 10], [0, 20], [1, 30]]), 0, np.array([1]), np.array([1, 0]), 2)
print(json.dumps([row_groups.group_rows.stats.cache_path, jit.kernel_key(), os.environ[jit.LOCATORS_ENV]]))
"""


@FLOORS
def test_the_cache_is_placed_through_numbas_public_variable_over_a_users_value(tmp_path):
    """NUMBA_CACHE_LOCATOR_CLASSES set by the user, and numba imported before reput's first kernel: reput's
    locator goes first (the user's list after it, for every other function), and the kernels are cached in
    NUMBA_CACHE_DIR/reput-kernels/KEY (the user's value does not bypass reput's locator)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), NUMBA_CACHE_DIR=str(tmp_path),
               NUMBA_CACHE_LOCATOR_CLASSES="UserWideCacheLocator")
    done = subprocess.run([sys.executable, "-c", PLACED.format(before="import numba")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, check=True)
    path, key, locators = json.loads(done.stdout.strip().splitlines()[-1])
    assert path == str(tmp_path / jit.CACHE_NAME / key)
    assert locators == "storage_format.kernels.jit.KernelCacheLocator,UserWideCacheLocator"


def _first_call_error(tmp_path: Path, before: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", PLACED.format(before=before)], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert done.returncode == 1
    return [line for line in done.stderr.splitlines() if line.startswith("RuntimeError: ")]


@FLOORS
def test_a_numba_without_the_public_variable_is_refused_in_one_line(tmp_path):
    """numba before 0.62 has no NUMBA_CACHE_LOCATOR_CLASSES: the first kernel call says so, naming the version
    found, instead of caching where each application recompiles."""
    lines = _first_call_error(tmp_path, "import numba; numba.__version__ = '0.61.2'")
    assert lines == ["RuntimeError: reput: numba 0.61.2 has no NUMBA_CACHE_LOCATOR_CLASSES (numba 0.62 added it), "
                     "which places reput's kernel cache: install numba>=0.62"]


@FLOORS
def test_a_private_option_numba_does_not_take_is_refused_in_one_line(tmp_path):
    """The kernels' one private numba option (`_nrt`) has no public equivalent: a numba that no longer takes a
    private option fails the first kernel call in one line naming it (here an option no numba has)."""
    before = ("from storage_format.kernels.jit import njit\n"
              "@njit(cache=False, _no_such_option=True)\ndef unknown():\n    return 0")
    lines = _first_call_error(tmp_path, before)
    assert len(lines) == 1 and lines[0].startswith("RuntimeError: reput: numba ")
    assert lines[0].endswith("does not take the njit option(s) _no_such_option that reput's kernels are compiled with")


@FLOORS
def test_the_cache_key_covers_every_kernel_module_and_numbas_floor_is_pyprojects():
    """Every module of the package that defines a kernel is in the key's sources (else editing it could leave
    a stale kernel), and the numba floor the first call checks is pyproject.toml's."""
    kernels_dir = REPO / "storage_format" / "kernels"
    with_kernels = {p.stem for p in kernels_dir.glob("*.py") if re.search(r"^@njit\(", p.read_text(), re.M)}
    assert with_kernels and with_kernels | {"jit"} == set(jit.KERNEL_MODULES)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (numba,) = [d for d in deps if re.match(r"numba\b", d)]
    assert re.search(r">=([0-9.]+)", numba).group(1) == ".".join(map(str, jit.NUMBA_FLOOR))



PRELUDE = """
import json, os, sys
from storage_format.kernels import index_chain, row_groups, split_kernel, warm
warm.warm()
from jobs.pipeline.io.fs import location
from storage_format.settings import load_settings

class Context:  # a TaskRunner (jobs.pipeline.runtime.engine) running the tasks here, in this process
    default_parallelism = 2
    driver_memory = None
    def run_tasks(self, items, fn, label, total_bytes=0, quiet=False):
        return [fn(item) for item in items]

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
    every worker at its first task (tenths of a second per worker with a warm cache, seconds on a fresh one).
    Decode and build a golden store in a process that ran warm() first."""
    rebuild = """
from jobs.pipeline.outputs.build import build_files, plan_cq, plan_index
from jobs.pipeline.scan.decode import scan_store
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
from jobs.pipeline.recover.gather import plan_recovery
from jobs.pipeline.recover.write import plan_output, write_output
plan = plan_recovery(Context(), store, settings, work, split_size=1 << 20, quiet=True)
assert plan.index.resume is not None or plan.index.kept, "the case resumes an index file"
write_output(Context(), plan, plan_output(plan, with_copies=False), out, quiet=True)
"""
    assert _signatures_after(recover, "unclean-11", tmp_path) == ONE_EACH
