"""storage_format's import graph, counting imports inside functions, has no cycle; the kernels' decorator
imports nothing else of the package, and the shared types decoding hands on live in kernel-free modules.
(Once 15 modules formed a circle around kernel_cache: the kernels imported njit from it, its warm() imported
the kernels.)"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import storage_format

PACKAGE = Path(storage_format.__file__).parent
KERNELS = "storage_format.kernels"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its source (module level or in a function).
    `from X import name` counts as an import of X.name when that is a module, else of X."""
    files = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[:len(here.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    edges.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in files else target)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[mod] = {e for e in edges if e in files and e != mod}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as the path of modules), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.mark.parametrize("package", ["storage_format", "jobs", "udfs", "storegen"])
def test_no_package_has_an_import_cycle(package):
    """No import circle anywhere (issue 34): the runtime once imported the stages it preloads (worker_daemon ->
    scan.stage -> runtime.engine -> runtime.local -> worker_daemon), and the engine and the session each other."""
    graph = import_graph(PACKAGE.parent / package)
    assert graph, "the graph reads the package"
    if package == "storage_format":
        assert len(graph) > 30 and graph["storage_format.kernels.warm"]
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    """The check itself: a kernel importing njit, and the decorator importing the kernel inside a function
    (as kernel_cache's warm() once did), is a cycle."""
    pkg = tmp_path / "storage_format"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "jit.py").write_text("def njit(f):\n    return f\n\n\ndef warm():\n    from . import kernel\n")
    (pkg / "kernel.py").write_text("from .jit import njit\n")
    assert cycle(import_graph(pkg)) == ["storage_format.jit", "storage_format.kernel", "storage_format.jit"]


def test_the_jit_decorator_imports_nothing_of_the_package():
    assert import_graph()[f"{KERNELS}.jit"] == set()


def test_shared_types_live_outside_the_kernels():
    """What decoding hands on (split_rows, index_keys) and the recovery rules import no kernel module: the
    reference decoder, the work files and recovery read these types without the kernels."""
    graph = import_graph()

    def reaches(m: str, seen: set[str]) -> set[str]:
        for n in graph[m] - seen:
            seen.add(n)
            reaches(n, seen)
        return seen

    for mod in ("storage_format.split_rows", "storage_format.index_keys", "storage_format.commitlog"):
        kernels = sorted(m for m in reaches(mod, set()) if m.startswith(KERNELS + "."))
        assert not kernels, f"{mod} imports kernel modules: {kernels}"
