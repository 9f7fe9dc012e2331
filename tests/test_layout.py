"""The code base's map stays true: storage_format/__init__.py names every module of the package."""
from __future__ import annotations

from pathlib import Path

import storage_format

PACKAGE = Path(storage_format.__file__).parent


def module_names(skip: tuple[str, ...] = ("__init__",)) -> set[str]:
    """Modules of the package, a subpackage's as `sub.module` (its `__init__` as `sub`)."""
    out = set()
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] not in skip:
            out.add(".".join(parts))
    return out


def test_package_docstring_names_every_module():
    modules = module_names()
    named = {m for m in modules if f"`{m}`" in storage_format.__doc__}
    assert named == modules, f"not described in storage_format/__init__.py: {sorted(modules - named)}"


def test_readme_names_where_every_rule_lives():
    """README's "How it works" table names every storage_format module."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme[readme.index("## How it works"):readme.index("### Changes from the starting architecture")]
    modules = module_names(("__init__", "errors", "ragged"))
    missing = sorted(m for m in modules if f"`{m}`" not in section)
    assert not missing, f"README's How it works does not say where these modules' rules live: {missing}"
