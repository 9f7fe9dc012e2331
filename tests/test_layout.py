"""The code base's map stays true: storage_format/__init__.py and docs/how-it-works.md name every module of the
package."""
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


def test_docs_name_where_every_rule_lives():
    """docs/how-it-works.md's "Where each broker rule lives" table names every storage_format module."""
    page = (PACKAGE.parent / "docs" / "how-it-works.md").read_text()
    start = page.index("\n## Where each broker rule lives\n")
    section = page[start:page.index("\n## ", start + 1)]
    modules = module_names(("__init__", "errors", "ragged"))
    missing = sorted(m for m in modules if f"`{m}`" not in section)
    assert not missing, f"docs/how-it-works.md does not say where these modules' rules live: {missing}"
