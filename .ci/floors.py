"""The dependency floors of pyproject.toml as pip pins: `python3 .ci/floors.py` prints one `NAME==FLOOR` a line
(extras kept), for every dependency and every dev dependency. pyproject.toml is the one home of each floor: a
dependency without a `>=` lower bound is an error here, so every floor is installed and tested by .ci/floors."""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


def floor_pin(requirement: str) -> str:
    """`name[extra]>=X,<Y` -> `name[extra]==X`; ValueError when the requirement has no `>=` lower bound."""
    match = REQUIREMENT.match(requirement.split(";")[0])
    if not match:
        raise ValueError(f"pyproject.toml: cannot read the requirement {requirement!r}")
    name, extras, specifiers = match.group(1), match.group(2) or "", match.group(3)
    floors = [s.strip()[2:].strip() for s in specifiers.split(",") if s.strip().startswith(">=")]
    if len(floors) != 1:
        raise ValueError(f"pyproject.toml: {requirement!r} needs exactly one '>=' lower bound (its tested floor)")
    return f"{name}{extras}=={floors[0]}"


def floor_pins(pyproject: Path) -> list[str]:
    """Every dependency of the project and of its `dev` extra, pinned at its floor."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [floor_pin(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


if __name__ == "__main__":
    try:
        print("\n".join(floor_pins(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
    except ValueError as e:
        sys.exit(f"floors: {e}")
