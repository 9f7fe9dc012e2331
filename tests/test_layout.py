"""The code base's map stays true: storage_format/__init__.py names every module of the package."""
from __future__ import annotations

from pathlib import Path

import storage_format

PACKAGE = Path(storage_format.__file__).parent


def test_package_docstring_names_every_module():
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    named = {m for m in modules if f"`{m}`" in storage_format.__doc__}
    assert named == modules, f"not described in storage_format/__init__.py: {sorted(modules - named)}"


def test_readme_names_where_every_rule_lives():
    """README's "How it works" table names every storage_format module."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme[readme.index("## How it works"):readme.index("### Changes from the starting architecture")]
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "errors", "ragged")}
    missing = sorted(m for m in modules if f"`{m}`" not in section)
    assert not missing, f"README's How it works does not say where these modules' rules live: {missing}"
