"""The project's imports hold its layers (docs/pipeline-map.md, tests/import_graph.py): a package imports only
packages of lower layers and none of its own layer, counting imports inside functions and modules named in strings;
storage_format's subpackages and top-level modules form no circle; no package has an import cycle between modules;
the kernels' decorator imports nothing else of the package and the types decoding hands on live outside the kernels."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import (LAYERS, PACKAGES, ROOT, Edge, cycle, import_graph, layer_of, module_edges,
                                module_files, package_of, project_edges, report, storage_format_units, violation,
                                violations)

KERNELS = "storage_format.kernels"


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return project_edges()


def test_no_edge_climbs_a_layer_or_joins_two_peers(edges):
    """Each edge that breaks the layers is named with its file and line."""
    assert len(edges) > 500, "the graph reads the project"
    broken = [f"{e.where()}: {why}" for e, why in violations(edges)]
    assert not broken, "\n".join(broken)


def test_every_package_has_a_layer(edges):
    """A new package is placed in LAYERS (and docs/pipeline-map.md) before anything imports it."""
    packages = {package_of(m) for e in edges for m in (e.source, e.target)} - {"jobs.pipeline"}
    assert {p for layer in LAYERS for p in layer} == packages
    for p in packages:
        layer_of(p)


def test_the_docs_list_the_layers():
    """docs/pipeline-map.md's "Layers" list is LAYERS, in order, a line per layer."""
    page = (ROOT / "docs" / "pipeline-map.md").read_text()
    section = page[page.index("\n## Layers\n"):page.index("\n| package | module |")]
    listed = [tuple(re.findall(r"`([a-z_]+)`", m.group(2).split(" — ")[0]))
              for m in re.finditer(r"^(\d+)\. (.*)$", section, re.M)]
    assert listed == list(LAYERS)


def test_the_layer_rule():
    """Down is allowed; up, sideways and out of the package that holds layers are not; importing an enclosing package
    is no edge, naming a module under it in a string is."""
    def edge(source: str, target: str, how: str = "import") -> Edge:
        return Edge(source, target, "x.py", 1, how)

    assert violation(edge("jobs.pipeline.scan.decode", "jobs.pipeline.store.markers")) is None
    assert violation(edge("jobs.pipeline.scan.decode", "storage_format.record")) is None
    assert violation(edge("jobs.rebuild", "jobs.pipeline.since.run")) is None
    assert "climbs from store (layer 5) to scan (layer 6)" in violation(
        edge("jobs.pipeline.store.dispatch", "jobs.pipeline.scan.result"))
    assert "climbs from runtime" in violation(edge("jobs.pipeline.runtime.worker_daemon", "jobs.pipeline.scan.decode",
                                                   "string"))
    assert "joins peers dump and verify" in violation(edge("jobs.pipeline.dump.readers", "jobs.pipeline.verify.cq"))
    assert "climbs from storage_format" in violation(edge("storage_format.record", "jobs.pipeline.io.fs"))
    assert violation(edge("jobs.pipeline.runtime.cli", "jobs")) is None  # `from jobs import __version__`
    assert "climbs from runtime" in violation(edge("jobs.pipeline.runtime.cli", "jobs", "string"))
    assert "holds layers" in violation(edge("jobs.pipeline", "jobs.pipeline.scan.decode", "string"))


def _package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files((root / "pkg",))


def test_modules_named_in_strings_are_edges(tmp_path):
    """A dotted module name in a string (a preload list, an import_module argument) is an edge, an f-string passed to
    import_module names the package of its constant part; a docstring and an undotted word are not."""
    files = _package(tmp_path, {
        "pkg/__init__.py": "", "pkg/low.py": '"""Names pkg.high in its docstring."""\nWORD = "pkg"\n',
        "pkg/high.py": "", "pkg/jobs/__init__.py": "", "pkg/jobs/a.py": "",
        "pkg/preload.py": 'MODULES = ("pkg.high",)\n',
        "pkg/dynamic.py": "import importlib\n\ndef run(job):\n    importlib.import_module(f'pkg.jobs.{job}')\n"
                          "    importlib.import_module('pkg.low')\n"})

    def targets(mod: str) -> set[tuple[str, str]]:
        return {(e.target, e.how) for e in module_edges(mod, files[mod], files)}

    assert targets("pkg.low") == set()
    assert targets("pkg.preload") == {("pkg.high", "string")}
    assert targets("pkg.dynamic") == {("pkg.jobs", "string"), ("pkg.low", "string")}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_has_an_import_cycle(package):
    """Between modules, counting imports inside functions and modules named in strings."""
    graph = import_graph(ROOT / package)
    assert graph, "the graph reads the package"
    if package == "storage_format":
        assert len(graph) > 30 and graph["storage_format.kernels.warm"]
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    """A module importing a decorator, and the decorator's module importing it inside a function, is a cycle."""
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/jit.py": "def njit(f):\n    return f\n\n\ndef warm():\n"
                                                            "    from . import kernel\n",
                        "pkg/kernel.py": "from .jit import njit\n"})
    assert cycle(import_graph(tmp_path / "pkg")) == ["pkg.jit", "pkg.kernel", "pkg.jit"]


def test_storage_format_has_no_circle_at_package_level(edges):
    """A subpackage of storage_format is one node, each top-level module another: no circle between them."""
    units = storage_format_units(edges)
    assert f"{KERNELS}" in units and "storage_format.index_build" in units
    found = cycle(units)
    assert found is None, "circle: " + " -> ".join(found)


def test_the_jit_decorator_imports_nothing_of_the_package():
    assert import_graph(ROOT / "storage_format")[f"{KERNELS}.jit"] == set()


def test_shared_types_live_outside_the_kernels():
    """What decoding hands on (split_rows, index_keys) and the recovery rules import no kernel module: the
    reference decoder, the work files and recovery read these types without the kernels."""
    graph = import_graph(ROOT / "storage_format")

    def reaches(m: str, seen: set[str]) -> set[str]:
        for n in graph[m] - seen:
            seen.add(n)
            reaches(n, seen)
        return seen

    for mod in ("storage_format.split_rows", "storage_format.index_keys", "storage_format.commitlog",
                "storage_format.index_file"):
        kernels = sorted(m for m in reaches(mod, set()) if m.startswith(KERNELS + "."))
        assert not kernels, f"{mod} imports kernel modules: {kernels}"


def test_the_command_prints_the_layers_and_fails_on_an_edge_that_climbs(edges):
    out = io.StringIO()
    assert report(edges, out) == 0
    text = out.getvalue()
    assert "  6  scan" in text and "io -> runtime" in text and "no circle" in text
    climbing = Edge("jobs.pipeline.store.dispatch", "jobs.pipeline.scan.result", "jobs/pipeline/store/dispatch.py", 17,
                    "import")
    out = io.StringIO()
    assert report(edges + [climbing], out) == 1
    assert "jobs/pipeline/store/dispatch.py:17 jobs.pipeline.store.dispatch -> jobs.pipeline.scan.result" in \
        out.getvalue()
    done = subprocess.run([sys.executable, "-m", "tests.import_graph", "--packages"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "layers, lowest first" in done.stdout, done.stdout + done.stderr
