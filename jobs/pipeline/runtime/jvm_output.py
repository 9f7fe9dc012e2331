"""What the embedded driver JVM and the Python processes it starts print, on its way to the operator's stderr.

Copied through whole, less two kinds of Spark's own noise that say nothing about the run:
- INCUBATOR_NOTICE, printed at every JVM start (Spark's launcher adds --add-modules=jdk.incubator.vector);
- a Python worker's goodbye when the JVM closes an idle one: Spark stops a reused worker after a minute idle
  by closing its socket, and Spark's stock daemon (`pyspark.daemon`, which Spark 4 uses for the Python data
  source's planning whatever spark.python.daemon.module says) then prints a traceback whose every frame is in
  pyspark/daemon.py and whose exception is a closed socket's (DAEMON_GOODBYES). reput's own daemon leaves
  quietly in that case (worker_daemon.quiet_when_gone); this removes the stock daemon's.
Any other traceback is copied as printed, and under REPUT_DEBUG the goodbyes too.
"""
from __future__ import annotations

import os
import re

INCUBATOR_NOTICE = b"WARNING: Using incubator modules: jdk.incubator.vector\n"
TRACEBACK = b"Traceback (most recent call last):\n"
# The line Spark's daemon prints before the traceback when spark.python.daemon.killWorkerOnFlushFailure is off.
FLUSH_FAILED = b"PySpark daemon failed to flush the output to the worker process:\n"
DAEMON_GOODBYES = (b"BrokenPipeError", b"ConnectionResetError")
_FRAME = re.compile(rb'^  File "(?P<path>[^"]*)", line \d+, in ')


def is_daemon_goodbye(block: list[bytes]) -> bool:
    """A held traceback (its lines, the exception's last) is a stock daemon's closed-socket goodbye."""
    frames = [m.group("path") for m in map(_FRAME.match, block) if m]
    return (bool(frames) and all(p.endswith(b"pyspark/daemon.py") for p in frames)
            and block[-1].startswith(DAEMON_GOODBYES))


class OutputFilter:
    """Line by line, what of the JVM's output reaches stderr. A traceback is held until its exception line
    (the first line not indented after it) and then dropped or let through whole; a partial line waits for
    its newline, or for `close`. With `goodbyes` the daemon's goodbyes are let through too."""

    def __init__(self, goodbyes: bool = False) -> None:
        self._goodbyes = goodbyes
        self._partial = b""
        self._held: list[bytes] = []

    def feed(self, data: bytes) -> bytes:
        """What to print now of `data`, the next bytes the JVM wrote."""
        *lines, self._partial = (self._partial + data).split(b"\n")
        return b"".join(self._line(line + b"\n") for line in lines)

    def close(self) -> bytes:
        """What is left to print once the JVM's output has ended (a held block or partial line as written)."""
        rest = b"".join(self._held) + self._partial
        self._held, self._partial = [], b""
        return rest

    def _line(self, line: bytes) -> bytes:
        if line == INCUBATOR_NOTICE:
            return b""
        if not self._held:
            if line in (TRACEBACK, FLUSH_FAILED) and not self._goodbyes:
                self._held = [line]
                return b""
            return line
        self._held.append(line)
        if line.startswith((b" ", b"\t")) or (len(self._held) == 2 and line == TRACEBACK):
            return b""
        block, self._held = self._held, []
        return b"" if is_daemon_goodbye(block) else b"".join(block)


def relay(fd: int, out: int = 2, goodbyes: bool = False) -> None:
    """Copy the JVM's output from `fd` to `out` through an OutputFilter until the JVM closes it; when `out` is
    gone, keep reading (a JVM writing into a full pipe would stop)."""
    noise = OutputFilter(goodbyes)
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            break
        _write(out, noise.feed(data) if data else noise.close())
        if not data:
            break
    os.close(fd)


def _write(out: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(out, data):]
    except OSError:
        pass
