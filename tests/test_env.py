"""The REPUT_* registry (jobs/pipeline/runtime/env.py): every variable the code reads is registered and in
docs/environment.md, and a non-default one is named on stderr and recorded in the run report."""
from __future__ import annotations

import json
import re

import pytest

from jobs.pipeline.runtime import env
from jobs.pipeline.runtime.cli import run_main
from tests.conftest import REPO

SOURCE_DIRS = ("jobs", "storage_format", "udfs", "storegen")
NOT_VARIABLES = {"_REPUT_WRITING"}  # the object-storage commit marker's file name


def _names_in_code() -> set[str]:
    names = set()
    for d in SOURCE_DIRS:
        for path in (REPO / d).rglob("*.py"):
            names |= set(re.findall(r"(?<![A-Za-z_])REPUT_[A-Z_]+", path.read_text()))
    return names - NOT_VARIABLES - {"REPUT_"}


def test_every_variable_in_the_code_is_registered_and_documented():
    registered = set(env.BY_NAME)
    assert _names_in_code() <= registered, _names_in_code() - registered
    doc = (REPO / "docs" / "environment.md").read_text()
    for v in env.REGISTRY:
        assert f"| `{v.name}` |" in doc, v.name
        assert (f"`{v.default}`" if v.default is not None else "unset") in doc.split(f"| `{v.name}` |")[1].split("\n")[0]


def test_only_the_registry_reads_reput_variables():
    """No module reads a REPUT_* variable from os.environ itself (but the warm daemon's socket, which reput
    sets for the processes it starts)."""
    reads = re.compile(r"os\.environ(?:\.get)?[\[(]\s*\"REPUT_")
    for d in SOURCE_DIRS:
        for path in (REPO / d).rglob("*.py"):
            if path.name != "env.py":
                assert not reads.search(path.read_text()), path


def test_non_default_values_are_noted_and_defaults_are_not(monkeypatch, capsys):
    for v in env.REGISTRY:
        monkeypatch.delenv(v.name, raising=False)
    monkeypatch.setenv("REPUT_SPARK_MASTER", "local[*]")  # the default: not named
    env.note_in_effect("rebuild")
    assert capsys.readouterr().err == "" and env.in_effect() == {}
    monkeypatch.setenv("REPUT_DECODE_KERNEL", "0")
    monkeypatch.setenv("REPUT_WARM_DAEMON", "/tmp/x")  # internal: not named
    assert env.in_effect() == {"REPUT_DECODE_KERNEL": "0"}
    with pytest.raises(SystemExit):
        run_main("rebuild", lambda argv: 0, [])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("reput rebuild: note: environment: REPUT_DECODE_KERNEL='0' (0: every")


def test_run_report_records_the_environment(spark, tmp_path, monkeypatch, capsys):
    """A rebuild with the kernel switched off records it, and counts every split under the reference decoder
    (chosen, not a fallback)."""
    from tests.rebuild_helpers import report, run_rebuild

    monkeypatch.setenv("REPUT_DECODE_KERNEL", "0")
    assert run_rebuild("clean-small-11", tmp_path / "out") == 0
    r = report(tmp_path / "out")
    assert r["environment"] == {"REPUT_DECODE_KERNEL": "0"}
    assert "kernel" not in r["decoders"]["splits"] and r["decoders"]["fallback_splits"] == 0
    assert json.loads(capsys.readouterr().out)["environment"] == {"REPUT_DECODE_KERNEL": "0"}
