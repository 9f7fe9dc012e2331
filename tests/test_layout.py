"""The code base's map stays true: storage_format/__init__.py names every module of the package."""
from __future__ import annotations

from pathlib import Path

import storage_format

PACKAGE = Path(storage_format.__file__).parent


def test_package_docstring_names_every_module():
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    named = {m for m in modules if f"`{m}`" in storage_format.__doc__}
    assert named == modules, f"not described in storage_format/__init__.py: {sorted(modules - named)}"
