"""After an interrupt reput sweeps the Unix sockets its killed JVM bound for the Python side and never unlinked
(`.<uuid>.sock` in java.io.tmpdir; tests/test_signals.py's "no temp files left"): only those nobody binds any
more, made since the job's JVM started; a socket another job still listens on is kept."""
from __future__ import annotations

import os
import socket
import time
import uuid

from jobs.pipeline.runtime import interrupt


def _socket_file(directory, name: str, keep_bound: bool) -> tuple[str, socket.socket | None]:
    path = os.path.join(directory, name)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    if keep_bound:
        return path, s
    s.close()  # the file stays, bound by nobody: what a JVM killed before its unlink leaves
    return path, None


def test_only_unbound_spark_sockets_made_since_the_start_are_swept(short_tmp) -> None:
    tmp_path = short_tmp  # Unix sockets are bound under it
    old, _ = _socket_file(tmp_path, f".{uuid.uuid4()}.sock", keep_bound=False)
    past = time.time() - 3600
    os.utime(old, (past, past))
    since = time.time() - 1
    left, _ = _socket_file(tmp_path, f".{uuid.uuid4()}.sock", keep_bound=False)
    live, listener = _socket_file(tmp_path, f".{uuid.uuid4()}.sock", keep_bound=True)
    other, _ = _socket_file(tmp_path, "daemon.sock", keep_bound=False)
    plain = tmp_path / f".{uuid.uuid4()}.sock.txt"
    plain.write_text("x")
    try:
        interrupt.sweep_sockets_in(str(tmp_path), since)
        interrupt._sweep_sockets()
        assert not os.path.exists(left)
        assert os.path.exists(live) and os.path.exists(old) and os.path.exists(other) and plain.exists()
        assert interrupt._socket_dirs == []
    finally:
        listener.close()


def test_without_proc_net_unix_nothing_is_swept(short_tmp, monkeypatch) -> None:
    tmp_path = short_tmp  # a Unix socket is bound under it
    left, _ = _socket_file(tmp_path, f".{uuid.uuid4()}.sock", keep_bound=False)
    monkeypatch.setattr(interrupt, "_bound_unix_paths", lambda: None)
    interrupt.sweep_sockets_in(str(tmp_path), time.time() - 60)
    interrupt._sweep_sockets()
    assert os.path.exists(left)
    interrupt._socket_dirs.clear()
