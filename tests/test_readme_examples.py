"""README.md's examples run as written: every `.venv/bin/reput JOB ...` line of its bash blocks that names the
demo store is run, through the job's main(), on the directories `make demo` leaves (demo/store, demo/rebuilt,
demo/dledger-store and demo/checked, made here the way the Makefile makes them); their `/tmp/...` outputs go to a temporary
directory. Every job has such an example, and each one exits 0."""
from __future__ import annotations

import importlib
import json
import re
import shlex
from pathlib import Path

import pytest

from jobs.__main__ import JOBS
from jobs.rebuild import main as rebuild_main
from storegen.sample import write_sample_store
from tests.conftest import REPO

pytestmark = pytest.mark.floors  # a smoke of every job: make test-floors runs it at the dependency floors

README = REPO / "README.md"


def readme_commands() -> list[list[str]]:
    """The `reput` command lines of README.md's bash blocks, as argument lists (comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == [".venv/bin/reput"]:
                commands.append(words[1:])
    return commands


def demo_commands() -> list[list[str]]:
    """The README commands that run on the demo store."""
    return [c for c in readme_commands() if c[c.index("--store") + 1].startswith("demo/")]


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory) -> Path:
    """A directory holding what `make demo` leaves (demo/store, demo/rebuilt, demo/checked linking the two), and
    tmp/ for the examples' outputs."""
    root = tmp_path_factory.mktemp("readme")
    demo = root / "demo"
    write_sample_store(demo / "store")
    write_sample_store(demo / "dledger-store", dledger=True)
    assert rebuild_main(["--store", str(demo / "store"), "--broker-config", str(demo / "store" / "broker.conf"),
                         "--out", str(demo / "rebuilt"), "--quiet", "--json"]) == 0
    (demo / "checked").mkdir()
    (root / "tmp").mkdir()
    for name, target in (("commitlog", "../store/commitlog"), ("consumequeue", "../rebuilt/consumequeue"),
                         ("index", "../rebuilt/index")):
        (demo / "checked" / name).symlink_to(target)
    return root


def test_every_job_has_a_demo_example():
    assert sorted({c[0] for c in demo_commands()}) == sorted(JOBS)


@pytest.mark.parametrize("command", demo_commands(), ids=lambda c: c[0])
def test_readme_example_runs(command, demo, monkeypatch, capsys):
    monkeypatch.chdir(demo)
    args = [str(demo / "tmp" / a.removeprefix("/tmp/")) if a.startswith("/tmp/") else a for a in command[1:]]
    main = importlib.import_module(f"jobs.{command[0]}").main
    assert main([*args, "--json"] if command[0] != "dump" else args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.strip()
    if command[0] != "dump":  # the other jobs' --json output is one JSON document
        assert isinstance(json.loads(out), dict)
