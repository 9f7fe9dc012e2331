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

from storage_format.consume_queue import CQ_UNIT_SIZE, PRE_BLANK_SIZE
from storage_format.index_file import HEADER_SIZE, IndexHeader
from storage_format.markers import LOCK

from ..runtime.cli import warn
from ..runtime.failure import JobError
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


def dispatched_end(store: Location) -> int:
    """Where a running broker's dispatch has got to, as far as its files show: one past the last record
    in any consume queue, or past the start of the last indexed record. Records from here on may not be
    in the consume queues and the index yet (the tail in flight). Reads one header and a few units per
    queue (a binary search in each queue's last file), never whole files."""
    end = 0
    index = [i for i in store.child("index").list() if i.type.name == "File" and i.size >= HEADER_SIZE]
    if index:
        loc = store.child("index", index[-1].base_name)
        if not loc.not_regular():
            end = IndexHeader.from_bytes(bytes(loc.read_range(0, HEADER_SIZE))).end_phy_offset + 1
    for topic in store.child("consumequeue").list():
        for queue in store.child("consumequeue", topic.base_name).list():
            qdir = store.child("consumequeue", topic.base_name, queue.base_name)
            files = [f for f in qdir.list() if f.type.name == "File" and f.base_name.isdigit()]
            for f in reversed(files):  # the newest file with an entry (a new file may have none yet)
                last = 0 if qdir.child(f.base_name).not_regular() else _last_unit_end(qdir.child(f.base_name), f.size)
                if last:
                    end = max(end, last)
                    break
    return end


def _last_unit_end(loc: Location, size: int) -> int:
    """phyOffset + size of a consume-queue file's last used unit (units are filled front to back; the
    broker's filler units before a queue's first entry count as used but point at nothing)."""
    lo, hi = 0, size // CQ_UNIT_SIZE  # units [0, lo) are used, [hi, n) are not
    found = 0
    while lo < hi:
        mid = (lo + hi) // 2
        unit = bytes(loc.read_range(mid * CQ_UNIT_SIZE, CQ_UNIT_SIZE))
        phy, unit_size = int.from_bytes(unit[:8], "big", signed=True), int.from_bytes(unit[8:12], "big", signed=True)
        if unit_size > 0 and phy >= 0:
            found = found if unit_size == PRE_BLANK_SIZE else phy + unit_size  # fillers point at nothing
            lo = mid + 1
        else:
            hi = mid
    return found


def warn_if_running(job: str, store: Location, what_then: str = "") -> BrokerLock:
    """For a job that only reads the store: say once (stderr) that a broker is running on it."""
    lock = broker_lock(store)
    if lock.running:
        warn(job, f"{lock.describe()}; what it writes after the last dispatched position is in flight (not yet "
                  f"in the consume queues and index files){what_then}")
    return lock


def refuse_if_running(store: Location, force: bool | None, forceable: bool = True) -> BrokerLock:
    """A running broker's store is refused (one line naming the lock) unless --force, which only a mode that does
    not write into the store accepts (recover); force None: the job has no --force (convert), none is offered."""
    lock = broker_lock(store)
    if lock.running and not (force and forceable):
        how = ("stop it first (its log would still grow)" if force is None else
               "stop it first, or pass --force to plan or copy anyway" if forceable else
               "stop it first (--force does not apply to a mode that changes the store)")
        raise JobError(f"{lock.describe()}; {how}")
    return lock
