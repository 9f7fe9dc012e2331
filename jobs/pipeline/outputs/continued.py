"""A consume-queue file of `rebuild --since`, continuing an earlier OUT's file of the same name: the earlier file's
bytes before the first unit the new scan gives, the scan's units from there. Where both hold units they must be the
same bytes: that checks the earlier OUT against the commit log and that the scan placed the queue's units where the
broker placed them (a queue whose units were written out of step refuses, naming the file and byte offset)."""
from __future__ import annotations

import numpy as np

from storage_format import recovery
from storage_format.consume_queue import CQ_UNIT_SIZE, QueuePlacer, file_name
from storage_format.errors import StoreFormatError
from storage_format.segment_names import parse_segment_name

from ..io.fs import Location

RERUN = "run a full rebuild"


def used_length(data: bytes | memoryview) -> int:
    """The end of a consume-queue file's last unit holding a non-zero byte (0: none)."""
    raw = np.frombuffer(data, np.uint8, len(data) - len(data) % CQ_UNIT_SIZE).reshape(-1, CQ_UNIT_SIZE)
    used = np.flatnonzero(raw.any(axis=1))
    return (int(used[-1]) + 1) * CQ_UNIT_SIZE if len(used) else 0


def first_difference(a: memoryview, b: memoryview) -> int | None:
    """Index of the first byte where two equally long buffers differ (None: equal)."""
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if len(diff) else None


def joined(earlier: Location, data: memoryview, first_pos: int, queue_known: bool) -> memoryview | bytes:
    """The file's bytes in OUT2 (up to its last unit): `data` is the scan's file (its units from `first_pos` on, the
    bytes before them blank); `earlier` the same file in OUT1, which may not exist; `queue_known` whether OUT1 holds
    the queue at all."""
    try:
        old = memoryview(earlier.read_bytes())
    except FileNotFoundError:
        if first_pos > 0 and queue_known:
            raise StoreFormatError(earlier.uri, 0, f"missing from OUT1, which holds the queue: the commit log gives "
                                                   f"units from byte offset {first_pos} of it; {RERUN}") from None
        return data
    old_used = used_length(old)
    if old_used < first_pos:
        raise StoreFormatError(earlier.uri, old_used, f"OUT1's units end here, the commit log's next unit for the "
                                                      f"queue lands at byte offset {first_pos} (the broker writes it "
                                                      f"at its write position: out of step); {RERUN}")
    end = max(old_used, len(data))
    if len(data) < old_used:
        at = len(data) + (first_difference(old[len(data):old_used], memoryview(bytes(old_used - len(data)))) or 0)
        raise StoreFormatError(earlier.uri, at, f"OUT1 holds units the commit log no longer gives; {RERUN}")
    at = first_difference(old[first_pos:old_used], data[first_pos:old_used])
    if at is not None:
        at += first_pos
        raise StoreFormatError(earlier.uri, at - at % CQ_UNIT_SIZE,
                               f"the unit OUT1 holds differs from the one the commit log gives (OUT1 changed or "
                               f"damaged since, or the queue's units were placed out of step); {RERUN}")
    return bytes(old[:first_pos]) + bytes(data[first_pos:end])


def earlier_placer(qdir: Location, file_size: int) -> QueuePlacer:
    """Where the broker puts the queue's next unit after OUT1, as ConsumeQueue.recover loads OUT1's files (its write
    position and maxPhysicOffset): the new units are placed from there by the broker's rules, so a queue whose units
    were written out of step (5.x LMQ offsets used up without a unit) continues where it is. A queue OUT1 does not
    hold starts fresh (its first unit at its own offset, pre-blank units before it)."""
    if not qdir.is_dir():
        return QueuePlacer()
    files = sorted(s for s in (parse_segment_name(i.base_name) for i in qdir.list()) if s is not None)
    ld = recovery.load_queue("", 0, files, lambda s: qdir.child(file_name(s)).read_bytes(), file_size,
                             read_range=lambda s, at, n: qdir.child(file_name(s)).read_range(at, n))
    if ld.max_phy < 0:
        return QueuePlacer()
    return QueuePlacer(write=ld.write_offset // CQ_UNIT_SIZE, max_end=ld.max_phy)
