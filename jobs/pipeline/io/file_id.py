"""A local file known again: its sha256 (read whole) or its fingerprint (inode, size, modification time;
nothing read), as recover --in-place's journal and backup manifest record files."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def sha256_file(path: Path) -> str:
    """sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(path: Path) -> str:
    """A file's identity without reading it: inode, size, modification time (ns); not the device number,
    which some filesystems renumber across the reboot after a crash."""
    st = os.stat(path)
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def mtime_of(file_id: str) -> int:
    """The modification time (ns) a fingerprint records."""
    return int(file_id.split(":")[2])
