"""What a running broker means for a job: a read-only job says so and counts the tail in flight apart
(dispatched_end), a job that writes the store refuses it (refuse_if_running). Whether one runs is asked of the
store's lock (store_lock).
"""
from __future__ import annotations

from storage_format.consume_queue import CQ_UNIT_SIZE, PRE_BLANK_SIZE
from storage_format.index_file import HEADER_SIZE, IndexHeader

from ..runtime.cli import warn
from ..runtime.failure import JobError
from .fs import Location
from .store_lock import BrokerLock, broker_lock  # noqa: F401 (broker_lock: the jobs ask it here)


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
