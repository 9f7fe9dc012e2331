"""The dependency floors (.ci/floors.py): every dependency of pyproject.toml has one `>=` floor, read from
there alone and pinned with `==` for the venv that `.ci/floors` builds and runs the fast suite in."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.floors  # the floors themselves: make test-floors runs it at the dependency floors


def _floors():
    spec = importlib.util.spec_from_file_location("ci_floors", REPO / ".ci" / "floors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_floor_is_the_lower_bound_pinned():
    floors = _floors()
    assert floors.floor_pin("pyspark>=4.1,<5") == "pyspark==4.1"
    assert floors.floor_pin("moto[server]>=5.0.1") == "moto[server]==5.0.1"
    assert floors.floor_pin("numba >= 0.62 ; python_version >= '3.11'") == "numba==0.62"
    for no_floor in ("numpy", "numpy<3", "numpy>=1.26,>=2"):
        with pytest.raises(ValueError, match="needs exactly one '>=' lower bound"):
            floors.floor_pin(no_floor)


def test_every_dependency_has_a_floor_that_the_script_prints():
    """`python3 .ci/floors.py` prints one pin per dependency and dev dependency of pyproject.toml."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    done = subprocess.run([sys.executable, str(REPO / ".ci" / "floors.py"), str(REPO / "pyproject.toml")],
                          capture_output=True, text=True, check=True)
    pins = done.stdout.split()
    assert len(pins) == len(project["dependencies"]) + len(project["optional-dependencies"]["dev"])
    assert all("==" in pin for pin in pins) and any(pin.startswith("numba==") for pin in pins)
