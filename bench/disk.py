"""The disk's rate for O_DIRECT writes, measured as convert's segment writers write (io.direct's SegmentFileWriter,
convert.segments' read window at a time, two at once): convert waits for the device to take every byte of its new
commit log, rebuild writes its files through the page cache and never waits for the device, so on a slow or busy
disk the two jobs' ratio is bound by the disk, not by reput. The bench prints the bound beside the ratio.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from jobs.pipeline.convert.segments import CHUNK
from jobs.pipeline.io.direct import DIRECT_MODE, SegmentFileWriter
from jobs.pipeline.io.fs import location

STREAMS = 2  # the local engine's two workers writing two segments at once


def direct_write_gbps(root: Path, total: int = 1 << 30, streams: int = STREAMS) -> float | None:
    """GB/s (10^9 bytes) of `total` bytes written with O_DIRECT by `streams` segment writers at once, each to a file
    of its own in `root` (removed afterwards); None where the filesystem refuses O_DIRECT."""
    per = max(total // streams // CHUNK, 1) * CHUNK
    paths = [root / f"bench-disk-probe-{i}" for i in range(streams)]
    modes: list[str] = []
    errors: list[BaseException] = []

    def write(path: Path) -> None:
        out = SegmentFileWriter(location(str(path)), per)
        try:
            for _ in range(per // CHUNK):
                out.reserve(CHUNK)[:] = 0x5A
                out.commit(CHUNK)
            out.close()
            modes.append(out.mode)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            out.abort()
            errors.append(exc)

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
        raise errors[0]
    return round(per * streams / seconds / 1e9, 2) if modes == [DIRECT_MODE] * streams else None
