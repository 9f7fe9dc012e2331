"""Is a broker running on this store? Asked the way the broker itself takes the store: at start-up
DefaultMessageStore opens STORE/lock read-write and `tryLock(0, 1, false)`s it (an exclusive fcntl
record lock on byte 0, held until shutdown; 4.9.x and 5.x alike). The question is asked without taking
the lock (F_GETLK), so a broker starting at that moment never finds the lock held by reput.
"""
from __future__ import annotations

import fcntl
import os
import struct
import sys
from dataclasses import dataclass

from storage_format.markers import LOCK

from .fs import Location
from .paths import is_local

# struct flock on Linux (x86-64, arm64): short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid.
_FLOCK = struct.Struct("@hhqqi4x")


@dataclass(frozen=True)
class BrokerLock:
    """The store's lock file and, when a process holds it, that process."""

    path: str
    holder_pid: int | None  # None: not held (or the store is not local, e.g. s3://: no broker runs there)

    @property
    def running(self) -> bool:
        return self.holder_pid is not None

    def describe(self) -> str:
        """`STORE/lock is held by process N (a running broker)`."""
        who = f"process {self.holder_pid}" if self.holder_pid and self.holder_pid > 0 else "another process"
        return f"{self.path} is locked by {who}: a broker is running on this store"


def broker_lock(store: Location) -> BrokerLock:
    """Who holds the store's lock, asked without taking it."""
    path = os.path.join(store.path, LOCK)
    if not is_local(store) or not os.path.isfile(path):
        return BrokerLock(path, None)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return BrokerLock(path, None)
    try:
        return BrokerLock(path, _holder(fd))
    finally:
        os.close(fd)


def _holder(fd: int) -> int | None:
    """The pid holding a lock that conflicts with an exclusive lock on byte 0, else None."""
    if sys.platform.startswith("linux"):
        query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if l_type == fcntl.F_UNLCK else (pid or -1)
    try:  # elsewhere: a shared lock conflicts with the broker's exclusive one; released at once
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
    except OSError:
        return -1
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
    return None
