"""The run's leftover check itself (tests/leftovers.py, enforced by tests/conftest.py at the session's end): it
finds a `reput-*` directory and a Spark socket made after the snapshot, and a process still running below the
test process; it spares what was there before and the processes it is told to spare."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

from tests.leftovers import left_behind, temp_entries


def test_new_temp_entries_and_running_children_are_found(tmp_path):
    (tmp_path / "reput-old").mkdir()
    before = temp_entries(tmp_path)
    (tmp_path / "reput-in-index-write-x").mkdir()
    (tmp_path / "unrelated").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    name = f".{uuid.uuid4()}.sock"
    sock.bind(str(tmp_path / name))
    sock.close()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = left_behind(before, os.getpid(), wait_s=0, temp=tmp_path)
        assert left.entries == tuple(sorted(["reput-in-index-write-x", name]))
        assert child.pid in left.processes and "time.sleep(60)" in left.processes[child.pid]
        assert child.pid not in left_behind(before, os.getpid(), spared={child.pid}, wait_s=0, temp=tmp_path).processes
    finally:
        child.kill()
        child.wait()
    assert not left_behind(temp_entries(tmp_path), os.getpid(), wait_s=0, temp=tmp_path)
