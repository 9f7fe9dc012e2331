"""The project's import graph and its layers (docs/pipeline-map.md): which package may import which.

`python -m tests.import_graph --packages` prints the layers and every edge between packages, and exits 1 when an
edge climbs a layer or joins two packages of one layer, naming the module and the line. An edge is an import
anywhere in a module (module level or in a function), or a module of the project named in a string: an
`importlib.import_module` argument (an f-string names the package its constant part names), a list of modules a
process preloads. Importing an enclosing package (`from jobs import __version__`) is no edge: Python has run its
`__init__` already; the package that holds layers (`jobs.pipeline`) therefore imports and names nothing.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("storage_format", "udfs", "storegen", "jobs")  # what is installed: the graph's modules
PIPELINE = "jobs.pipeline"
CONTAINERS = (PIPELINE,)  # a package whose subpackages are layers of their own: its __init__ names nothing
LAYERS: tuple[tuple[str, ...], ...] = (  # lowest first; the same list as docs/pipeline-map.md's "Layers"
    ("storage_format",),
    ("udfs", "storegen"),
    ("runtime",),
    ("io",),
    ("store",),
    ("scan",),
    ("outputs",),
    ("recover",),
    ("verify", "since", "convert", "dump", "catalog"),
    ("jobs",),
)
SF_SUBPACKAGES = ("kernels", "recovery", "timer")


@dataclass(frozen=True)
class Edge:
    """One module of the project importing (or naming) another, where it does so."""

    source: str
    target: str
    path: str  # the importing file, relative to the repository
    line: int
    how: str  # "import", or "string": a module named in a string

    def where(self) -> str:
        named = " (named in a string)" if self.how == "string" else ""
        return f"{self.path}:{self.line} {self.source} -> {self.target}{named}"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_files(packages: tuple[Path, ...]) -> dict[str, Path]:
    """Module name -> file, for every module of these package directories."""
    return {module_name(p, pkg.parent): p for pkg in packages for p in sorted(pkg.rglob("*.py"))}


def _resolved(target: str, name: str, files: dict[str, Path]) -> str:
    """`from target import name`: the module target.name when there is one, else target."""
    return f"{target}.{name}" if f"{target}.{name}" in files else target


def _named_in_call(node: ast.Call, files: dict[str, Path]) -> str | None:
    """The module an `import_module(...)` / `__import__(...)` call names: its constant argument, or the package
    an f-string's constant part names."""
    func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if func not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.JoinedStr):
        head = arg.values[0].value if arg.values and isinstance(arg.values[0], ast.Constant) else ""
        prefix = head.rpartition(".")[0]
        return prefix if prefix in files else None
    return arg.value if isinstance(arg, ast.Constant) and arg.value in files else None


def module_edges(mod: str, path: Path, files: dict[str, Path]) -> list[Edge]:
    """Every edge from one module: its imports (module level or in a function, relative ones resolved) and the
    project's modules it names in strings (docstrings and other bare strings aside)."""
    here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    tree = ast.parse(path.read_text())
    bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = here.split(".")
            base = parts[:len(parts) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found += [(_resolved(target, a.name, files), node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.Call) and (named := _named_in_call(node, files)):
            found.append((named, node.lineno, "string"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in files and id(node) not in bare:  # a dotted name: "jobs" alone is a word
            found.append((node.value, node.lineno, "string"))
    edges = {}
    for target, line, how in sorted(found, key=lambda f: (f[1], f[2] != "import")):
        if target in files and target != mod and (target, how) not in edges:
            edges[(target, how)] = Edge(mod, target, rel, line, how)
    return list(edges.values())


def project_edges(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Edge]:
    """Every edge between modules of the project's packages."""
    files = module_files(tuple(root / p for p in packages))
    return [e for mod, path in files.items() for e in module_edges(mod, path, files)]


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports or names anywhere in its source."""
    files = module_files((package,))
    return {mod: {e.target for e in module_edges(mod, path, files)} for mod, path in files.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (as the path of its nodes), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
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


def package_of(module: str) -> str:
    """The layered package a module belongs to: a top-level package, a subpackage of jobs.pipeline, or `jobs`
    (the entry points); a package that holds layers is its own (CONTAINERS)."""
    if module in CONTAINERS:
        return module
    if module.startswith(PIPELINE + "."):
        return module.split(".")[2]
    return module.split(".")[0]


def layer_of(package: str) -> int:
    """The package's layer (1 is the lowest); a package missing from LAYERS is refused by name."""
    for number, layer in enumerate(LAYERS, 1):
        if package in layer:
            return number
    raise KeyError(f"package {package!r} is in no layer: add it to LAYERS and docs/pipeline-map.md")


def counted(edge: Edge) -> bool:
    """An edge that counts between packages: all but an import of an enclosing package (its __init__ has run
    already; a string naming a module under it counts)."""
    return edge.how != "import" or not edge.source.startswith(edge.target + ".")


def violation(edge: Edge) -> str | None:
    """Why an edge breaks the layers (it climbs, joins two peers, or leaves a package that holds layers), or None."""
    if not counted(edge):
        return None
    source, target = package_of(edge.source), package_of(edge.target)
    if source in CONTAINERS:
        return f"{source} holds layers and names no module"
    if source == target or target in CONTAINERS:  # a package that holds layers names nothing: importing it adds none
        return None
    low, high = layer_of(source), layer_of(target)
    if high > low:
        return f"climbs from {source} (layer {low}) to {target} (layer {high})"
    if high == low:
        return f"joins peers {source} and {target} (layer {low})"
    return None


def violations(edges: list[Edge]) -> list[tuple[Edge, str]]:
    """Every edge that breaks the layers, with why."""
    return [(e, why) for e in edges if (why := violation(e))]


def storage_format_units(edges: list[Edge]) -> dict[str, set[str]]:
    """storage_format's graph at package level: a subpackage is one node, a top-level module another."""

    def unit(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module

    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.source.startswith("storage_format.") and counted(e):
            graph[unit(e.source)].add(unit(e.target))
    return {u: targets - {u} for u, targets in graph.items()}


def report(edges: list[Edge], out=sys.stdout) -> int:
    """The layers, the edges between packages (and what breaks them), storage_format's circle if any; 0 or 1."""
    print("layers, lowest first (a package imports only packages of lower layers, none of its own):", file=out)
    for number, layer in enumerate(LAYERS, 1):
        print(f"  {number:2}  {'  '.join(layer)}", file=out)
    by_pair: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for e in edges:
        if counted(e) and package_of(e.source) != package_of(e.target):
            by_pair[(package_of(e.source), package_of(e.target))].append(e)
    broken = dict((e, why) for e, why in violations(edges))
    print("edges between packages (importer -> imported: modules importing):", file=out)
    for (source, target), found in sorted(by_pair.items(), key=lambda kv: (-_layer_or_top(kv[0][0]), kv[0])):
        bad = [e for e in found if e in broken]
        print(f"  {source + ' -> ' + target:24} {len(found):3}{'  ' + broken[bad[0]] if bad else ''}", file=out)
        for e in bad:
            print(f"      {e.where()}", file=out)
    units = storage_format_units(edges)
    print("storage_format's subpackages (importer -> imported):", file=out)
    for unit in sorted(u for u in units if u.split(".")[1] in SF_SUBPACKAGES):
        print(f"  {unit.split('.')[1]} -> {' '.join(sorted(u.split('.')[1] for u in units[unit])) or '-'}", file=out)
    found_cycle = cycle(units)
    print("storage_format, a node per subpackage and per top-level module: "
          + ("circle " + " -> ".join(found_cycle) if found_cycle else "no circle"), file=out)
    return 1 if broken or found_cycle else 0


def _layer_or_top(package: str) -> int:
    try:
        return layer_of(package)
    except KeyError:
        return len(LAYERS) + 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.import_graph",
                                description="the project's layers and the imports between its packages")
    p.add_argument("--packages", action="store_true", help="print the layers and the package edges (the default)")
    p.parse_args(argv)
    return report(project_edges())


if __name__ == "__main__":
    sys.exit(main())
