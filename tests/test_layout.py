"""The code base's maps stay true: storage_format/__init__.py and jobs/pipeline/__init__.py name every module
of their package, docs/how-it-works.md names every storage_format module, docs/pipeline-map.md every
jobs/pipeline module."""
from __future__ import annotations

import re
from pathlib import Path

import jobs.pipeline
import storage_format

PACKAGE = Path(storage_format.__file__).parent
PIPELINE = Path(jobs.pipeline.__file__).parent
REPO = PACKAGE.parent


def module_names(skip: tuple[str, ...] = ("__init__",), package: Path = PACKAGE) -> set[str]:
    """Modules of the package, a subpackage's as `sub.module` (its `__init__` as `sub`)."""
    out = set()
    for p in package.rglob("*.py"):
        parts = p.relative_to(package).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] not in skip:
            out.add(".".join(parts))
    return out


def test_package_docstring_names_every_module():
    modules = module_names()
    named = {m for m in modules if f"`{m}`" in storage_format.__doc__}
    assert named == modules, f"not described in storage_format/__init__.py: {sorted(modules - named)}"


def test_docs_name_where_every_rule_lives():
    """docs/how-it-works.md's "Where each broker rule lives" table names every storage_format module."""
    page = (PACKAGE.parent / "docs" / "how-it-works.md").read_text()
    start = page.index("\n## Where each broker rule lives\n")
    section = page[start:page.index("\n## ", start + 1)]
    modules = module_names(("__init__", "errors", "ragged"))
    missing = sorted(m for m in modules if f"`{m}`" not in section)
    assert not missing, f"docs/how-it-works.md does not say where these modules' rules live: {missing}"


def named_modules(text: str) -> set[str]:
    """Names written as `name` or `sub.name` in a text."""
    return set(re.findall(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)`", text))


def test_pipeline_docstring_names_every_module_and_no_other():
    modules = module_names(package=PIPELINE)
    assert {m for m in modules if "." not in m} >= {"runtime", "io", "store", "scan", "outputs", "verify", "recover",
                                                   "catalog", "dump"}
    named = named_modules(jobs.pipeline.__doc__)
    assert modules <= named, f"not described in jobs/pipeline/__init__.py: {sorted(modules - named)}"
    stale = {m for m in named if m.split(".")[0] in {m.split(".")[0] for m in modules}} - modules
    assert not stale, f"jobs/pipeline/__init__.py names modules that do not exist: {sorted(stale)}"


def test_pipeline_map_table_names_every_module_and_no_other():
    """docs/pipeline-map.md: one table row per module, and every subpackage in the first column."""
    modules = module_names(package=PIPELINE)
    rows = [line.split("|")[1:-1] for line in (REPO / "docs" / "pipeline-map.md").read_text().splitlines()
            if line.startswith("| ") and "`" in line]
    in_rows = {cells[1].strip().strip("`") for cells in rows}
    packages = {cells[0].strip().strip("`") for cells in rows} - {""}
    assert in_rows == {m for m in modules if "." in m}, (sorted(in_rows ^ {m for m in modules if "." in m}))
    assert packages == {m for m in modules if "." not in m}


def test_no_loose_modules_in_the_pipeline():
    """jobs/pipeline holds subpackages only: a new module goes where it serves."""
    loose = sorted(p.name for p in PIPELINE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules directly in jobs/pipeline (put them in a subpackage and in the map): {loose}"


def test_only_the_project_packages_are_installed():
    """setuptools installs reput's own packages only: no top-level `bench` (or tests, notebooks) in
    site-packages; `python -m bench` runs from the repository root."""
    import tomllib

    from setuptools import find_packages

    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    installed = {name.split(".")[0] for name in find_packages(str(REPO), include=find["include"],
                                                              exclude=find.get("exclude", ()))}
    assert installed == {"storage_format", "jobs", "udfs", "storegen"}, installed


WIDE = 6  # a record with more fields than this is built with keywords only


def wide_positional_records(root: Path = REPO) -> list[str]:
    """Dataclasses of jobs/, storage_format/ and udfs/ with more than WIDE fields that are not kw_only."""
    import ast

    found = []
    for package in ("jobs", "storage_format", "udfs"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                decorators = [d for d in node.decorator_list
                              if "dataclass" in ast.dump(d.func if isinstance(d, ast.Call) else d)]
                fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.dump(s)]
                kw_only = any(k.arg == "kw_only" and getattr(k.value, "value", False)
                              for d in decorators if isinstance(d, ast.Call) for k in d.keywords)
                if decorators and len(fields) > WIDE and not kw_only:
                    found.append(f"{path.relative_to(root)}: {node.name} ({len(fields)} fields)")
    return found


def test_wide_records_are_built_with_keywords():
    """A dataclass with more than WIDE fields is kw_only: with many fields of one type, a reordered field would
    mis-assign positional arguments silently."""
    assert wide_positional_records() == []


def test_every_kernel_has_a_reference_and_a_test_in_the_kernels_table():
    """storage_format/kernels/__init__.py's table: every kernel warm() loads has a row; each row's kernel
    and reference exist, and its test is a test function of that file."""
    import ast
    import importlib

    import storage_format.kernels as kernels

    rows = [[c.strip().strip("`") for c in line.split("|")[1:-1]] for line in kernels.__doc__.splitlines()
            if line.startswith("| `")]
    warm_source = (PACKAGE / "kernels" / "warm.py").read_text()
    warmed = {f"{n.value.id}.{n.attr}" for n in ast.walk(ast.parse(warm_source))
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
              and n.value.id in ("split_kernel", "row_groups", "index_chain", "crc_kernel")}
    assert warmed and warmed <= {r[0] for r in rows}, sorted(warmed - {r[0] for r in rows})

    def resolve(dotted: str):
        module, _, name = dotted.rpartition(".")
        return getattr(importlib.import_module(module), name)

    for kernel, reference, test in rows:
        assert callable(resolve(f"storage_format.kernels.{kernel}")) and callable(resolve(reference)), kernel
        path, _, func = test.partition("::")
        tests = {n.name for n in ast.walk(ast.parse((REPO / path).read_text())) if isinstance(n, ast.FunctionDef)}
        assert func in tests and func.startswith("test_"), test
