"""notebooks/: every notebook is committed without outputs and runs headless against a sample store."""
from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.client import KernelClient
from nbclient import NotebookClient

from jobs.rebuild import main as rebuild_main
from storegen.sample import write_sample_store
from tests.conftest import REPO

pytestmark = pytest.mark.floors  # nbclient and matplotlib: make test-floors runs it at the dependency floors

NOTEBOOKS = REPO / "notebooks"
AUDIT = NOTEBOOKS / "audit.ipynb"
FIGURES = ("records_per_topic", "records_per_queue", "volume_per_minute", "size_distribution")
KERNEL = "reput-test-venv"


def kernelspec(root: Path) -> Path:
    """A Jupyter data dir whose one kernel runs this interpreter (the venv), for nbclient."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "reput test venv", "language": "python"}))
    return root


@pytest.fixture(scope="module")
def complete_sample_store(spark, tmp_path_factory) -> tuple[Path, dict]:
    """A sample store plus the consume queues and index files jobs.rebuild derives from it."""
    root = tmp_path_factory.mktemp("nb")
    store = root / "store"
    summary = write_sample_store(store, n=1500)
    out = root / "rebuilt"
    assert rebuild_main(["--store", str(store), "--out", str(out), "--broker-config", str(store / "broker.conf"),
                         "--json"]) == 0
    for part in ("consumequeue", "index"):
        shutil.move(str(out / part), str(store / part))
    return store, summary


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs(path):
    """No stale outputs or execution counts in the repository's notebooks."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert "STORE" in code[0].source and "BROKER_CONFIG" in code[0].source


def _texts(nb) -> str:
    """All text the executed notebook printed or displayed."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif "data" in out and "text/plain" in out.data:
                parts.append(out.data["text/plain"])
            elif out.output_type == "error":
                parts.append("\n".join(out.traceback))
    return "\n".join(parts)


def without_heartbeat(monkeypatch) -> None:
    """The kernel client's channels without the heartbeat: nbclient asks its kernel manager whether the kernel
    lives, and jupyter_client 8's heartbeat thread can block for ever in a ping to a kernel already shut down
    (after a missed beat on a loaded machine it reconnects a REQ socket to nobody): the test then hung in cleanup,
    after the notebook had run."""
    start = KernelClient.start_channels
    monkeypatch.setattr(KernelClient, "start_channels", lambda self, *a, **k: start(self, *a, **{**k, "hb": False}))


def test_audit_notebook_runs_headless(complete_sample_store, tmp_path, monkeypatch):
    """The audit notebook, executed by nbclient on the venv kernel against a sample store with rebuilt
    consume queues and index: figures are produced, the key is found by the index lookup and by a
    scan, the record count is the store's, and verify reports the store consistent."""
    store, summary = complete_sample_store
    figures = tmp_path / "figures"
    monkeypatch.setenv("JUPYTER_PATH", str(kernelspec(tmp_path / "jupyter")))
    monkeypatch.setenv("REPUT_NOTEBOOK_STORE", str(store))
    monkeypatch.setenv("REPUT_NOTEBOOK_FIGURES", str(figures))
    monkeypatch.setenv("REPUT_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("REPUT_DRIVER_MEMORY", "1g")
    for name in ("REPUT_NOTEBOOK_BROKER_CONFIG", "REPUT_NOTEBOOK_KEY", "REPUT_NOTEBOOK_TOPIC"):
        monkeypatch.delenv(name, raising=False)
    without_heartbeat(monkeypatch)
    nb = nbformat.read(AUDIT, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = _texts(nb)

    for name in FIGURES:
        png = figures / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    shown = [out for c in nb.cells for out in c.get("outputs", []) if "image/png" in out.get("data", {})]
    assert len(shown) >= len(FIGURES)
    assert all(base64.b64decode(out.data["image/png"])[:4] == b"\x89PNG" for out in shown)

    assert f"{summary['records']} records in {store}" in text
    assert f"{len(summary['topics'])} topics" in text
    assert "index lookup found 1 record(s)" in text and "a full scan finds 1; agree: True" in text
    assert "picked the first key carried by at most 64 records" in text
    # topic names with CJK characters are drawn with a CJK font (make system-deps installs it), no box glyphs
    assert "fonts: DejaVu Sans, Droid Sans Fallback" in text and "missing from" not in text
    panels = re.findall(r"panel \d+: .* UTC, (\d+) bars of (\d+ \w+), (\d+) records", text)
    assert panels and all(0 < int(n) <= 60 for n, _, _ in panels)
    assert sum(int(r) for _, _, r in panels) == summary["records"]
    assert "verify: consistent (exit code 0, 0 findings)" in text
    report = json.loads((figures / "verify-report.json").read_text())
    assert report["status"] == "consistent" and report["commitlog"]["message_records"] == summary["records"]
