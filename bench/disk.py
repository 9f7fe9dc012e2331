"""The disk's rate for O_DIRECT writes, measured as convert's segment writers use it (two streams of 8 MiB writes
from page-aligned buffers, io.direct): convert waits for the device to take every byte of its new commit log,
rebuild writes its files through the page cache and never waits for the device, so on a slow or busy disk the
two jobs' ratio is bound by the disk, not by reput. The bench prints the bound beside the ratio.
"""
from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

BLOCK = 8 << 20  # convert.segments' read window: what one segment writer hands the device at a time
STREAMS = 2  # the local engine's two workers writing two segments at once


def direct_write_gbps(root: Path, total: int = 1 << 30, streams: int = STREAMS) -> float | None:
    """GB/s (10^9 bytes) of `total` bytes written with O_DIRECT in `streams` threads, each to a file of its own in
    `root` (removed afterwards); None where the filesystem refuses O_DIRECT."""
    if not hasattr(os, "O_DIRECT"):
        return None
    per = max(total // streams // BLOCK, 1) * BLOCK
    paths = [root / f"bench-disk-probe-{os.getpid()}-{i}" for i in range(streams)]
    errors: list[BaseException] = []

    def write(path: Path) -> None:
        buf = mmap.mmap(-1, BLOCK)  # anonymous maps are page-aligned, as O_DIRECT asks
        buf.write(b"\x5a" * BLOCK)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError as exc:
            errors.append(exc)
            return
        try:
            for _ in range(per // BLOCK):
                os.write(fd, buf)
        except OSError as exc:
            errors.append(exc)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=write, args=(p,)) for p in paths]
    try:
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
    finally:
        for p in paths:
            p.unlink(missing_ok=True)
    if errors:
        return None
    return round(per * streams / seconds / 1e9, 2)
