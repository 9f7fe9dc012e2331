"""The embedded JVM's output on its way to stderr (jobs.pipeline.runtime.jvm_output): Spark's stock daemon's
goodbye when the JVM closes an idle worker (printed by the real pyspark.daemon here) is dropped, in whatever
pieces it arrives; every other line and traceback is copied as printed; REPUT_DEBUG's mode keeps the goodbye."""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.pipeline.runtime.jvm_output import INCUBATOR_NOTICE, OutputFilter, relay

# What CI's log held (Spark's daemon from pyspark.zip, no source lines).
ZIP_GOODBYE = (b"Traceback (most recent call last):\n"
               b'  File "/v/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 264, in manager\n'
               b'  File "/v/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 95, in worker\n'
               b"BrokenPipeError: [Errno 32] Broken pipe\n")
FLUSH_GOODBYE = (b"PySpark daemon failed to flush the output to the worker process:\n"
                 b"Traceback (most recent call last):\n"
                 b'  File "/v/pyspark/daemon.py", line 95, in worker\n'
                 b"    outfile.flush()\n"
                 b"ConnectionResetError: [Errno 104] Connection reset by peer\n")
TASK_FAILURE = (b"Traceback (most recent call last):\n"
                b'  File "/v/pyspark/daemon.py", line 264, in manager\n'
                b'  File "/repo/jobs/pipeline/scan/decode.py", line 12, in decode\n'
                b"BrokenPipeError: [Errno 32] Broken pipe\n")
DAEMON_OTHER = (b"Traceback (most recent call last):\n"
                b'  File "/v/pyspark/daemon.py", line 264, in manager\n'
                b"MemoryError\n")
LOG = b"26/12/06 09:30:01 WARN NativeCodeLoader: Unable to load native-hadoop library\n"


def filtered(data: bytes, pieces: list[int] | None = None, goodbyes: bool = False) -> bytes:
    """`data` through one OutputFilter, fed in pieces of the given sizes (then the rest), then closed."""
    noise, out, at = OutputFilter(goodbyes), [], 0
    for size in pieces or []:
        out.append(noise.feed(data[at:at + size]))
        at += size
    out.append(noise.feed(data[at:]))
    return b"".join(out) + noise.close()


def stock_daemon_goodbye(sock_dir: str) -> bytes:
    """What Spark's own pyspark.daemon prints when the JVM's end of an idle reused worker's socket closes: a
    worker forked over a Unix socket (as reput's sessions ask), that socket closed, the daemon then told to end."""
    env = dict(os.environ, PYTHON_UNIX_DOMAIN_ENABLED="true", PYTHON_WORKER_FACTORY_SOCK_DIR=sock_dir,
               SPARK_REUSE_WORKER="1", PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE="1")
    daemon = subprocess.Popen([sys.executable, "-m", "pyspark.daemon", "pyspark.sql.worker.lookup_data_sources"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    head = daemon.stdout.read(4)
    assert len(head) == 4, daemon.communicate(timeout=30)[1].decode(errors="replace")
    size = struct.unpack(">i", head)[0]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(daemon.stdout.read(size).decode())
    worker = struct.unpack(">i", conn.recv(4))[0]
    conn.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists() and not _zombie(worker):
        time.sleep(0.02)
    return daemon.communicate(timeout=30)[1]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def test_the_stock_daemons_goodbye_is_dropped_and_the_rest_kept():
    """The real daemon prints its traceback (site-packages, with source lines); through the filter it is gone
    while the log lines around it and the JVM's incubator notice (dropped) behave as before."""
    with tempfile.TemporaryDirectory(prefix="reput-t-") as sock_dir:  # short: a socket path has 107 bytes at most
        goodbye = stock_daemon_goodbye(sock_dir)
    assert goodbye.startswith(b"Traceback") and b"BrokenPipeError" in goodbye and b"pyspark/daemon.py" in goodbye
    assert filtered(INCUBATOR_NOTICE + LOG + goodbye + LOG) == LOG + LOG
    assert filtered(goodbye, goodbyes=True) == goodbye


def test_spark_zip_and_flush_failure_forms_are_dropped():
    assert filtered(LOG + ZIP_GOODBYE + FLUSH_GOODBYE + LOG) == LOG + LOG


def test_other_tracebacks_are_copied_whole():
    """A frame outside pyspark/daemon.py, or another exception, is not a goodbye: the block comes through as is."""
    data = LOG + TASK_FAILURE + DAEMON_OTHER + ZIP_GOODBYE + LOG
    assert filtered(data) == LOG + TASK_FAILURE + DAEMON_OTHER + LOG


def test_a_partial_line_or_a_cut_off_block_is_printed_at_close():
    assert filtered(LOG + b"no newline") == LOG + b"no newline"
    assert filtered(ZIP_GOODBYE[:60]) == ZIP_GOODBYE[:60]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 80), max_size=40))
def test_any_pieces_give_the_same_output(pieces):
    data = LOG + ZIP_GOODBYE + TASK_FAILURE + INCUBATOR_NOTICE + FLUSH_GOODBYE + LOG + b"tail"
    assert filtered(data, pieces) == LOG + TASK_FAILURE + LOG + b"tail"


def test_relay_copies_a_pipe_through_the_filter():
    """relay(): the JVM's pipe in, the filtered bytes out, until the writer closes."""
    src_r, src_w = os.pipe()
    out_r, out_w = os.pipe()
    copier = threading.Thread(target=relay, args=(src_r, out_w))
    copier.start()
    for piece in (LOG, ZIP_GOODBYE[:50], ZIP_GOODBYE[50:], TASK_FAILURE):
        os.write(src_w, piece)
    os.close(src_w)
    copier.join(timeout=10)
    os.close(out_w)
    with os.fdopen(out_r, "rb") as got:
        assert got.read() == LOG + TASK_FAILURE
