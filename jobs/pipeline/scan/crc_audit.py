"""Every valid record whose body CRC fails, listed. DLedger never checks body CRCs, so a DLedger broker serves such
a record; a plain broker checks them when it recovers (checkCRCOnRecover, default on) and cuts its commit log and
consume queues at the first that fails in the segments it checks: after a conversion that is every later message
of those segments. convert and verify of a DLedger store list them with this audit (issue 35).

One task per accepted split walks its records with body CRCs checked (the kernel where it can, the reference
otherwise): the walk ends at a failing record, which is noted, and goes on right after it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from storage_format.commitlog import END_CRC_MISMATCH
from storage_format.dledger import AT_SIZE
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..runtime import env
from ..runtime.engine import TaskRunner
from ..runtime.tasks import run_tasks
from .result import ScanResult, SplitTask
from .decode import KERNEL_ENV, decode_split

LISTED_PER_SPLIT = 1000  # records listed per split; the count goes on


@dataclass(frozen=True, kw_only=True)
class BadCrc:
    """A valid record whose body CRC fails: the file holding it and the byte offset of its entry (DLedger) or record
    there, its commit-log offset (the entry's, in a DLedger data file), its size on disk, and the mismatch."""

    path: str
    byte_offset: int
    offset: int
    size: int
    detail: str

    def to_dict(self) -> dict:
        return {"file": self.path, "byte_offset": self.byte_offset, "offset": self.offset, "size": self.size,
                "detail": self.detail}


@dataclass(frozen=True)
class CrcAudit:
    """The audit's answer: how many records fail, the first LISTED_PER_SPLIT of each split, in log order."""

    count: int
    listed: tuple[BadCrc, ...]

    def __bool__(self) -> bool:
        return self.count > 0


def audit_split(task: SplitTask) -> tuple[int, list[BadCrc]]:
    """(failing records, the first LISTED_PER_SPLIT of them) among the records that start in the task's split
    from its exact start on. Runs in a task."""
    seg = task.split.segment
    found: list[BadCrc] = []
    count = 0
    while task.exact_start is not None and task.exact_start < task.split.stop:
        summary = decode_split(task)
        end = summary.end
        if end.reason != END_CRC_MISMATCH:
            break
        at = end.offset - seg.start
        size = struct.unpack(">i", bytes(Location(seg.path).read_range(at + (AT_SIZE if seg.header else 0), 4)))[0]
        count += 1
        if len(found) < LISTED_PER_SPLIT:
            found.append(BadCrc(path=seg.path, byte_offset=at, offset=end.offset, size=size, detail=end.detail))
        task = replace(task, exact_start=at + size)
    return count, found


def audit(sc: TaskRunner, scan: ScanResult, settings: BrokerSettings, quiet: bool = False,
          from_segment: int = 0) -> CrcAudit:
    """Audit the scan's accepted splits, one task each (those of the segments from `from_segment` on)."""
    kernel = env.value(KERNEL_ENV) != "0"
    tasks = [SplitTask(split=scan.splits[s.index], settings=settings, check_crc=True, with_cq=False, with_keys=False,
                       exact_start=s.first_offset - scan.splits[s.index].segment.start, kernel=kernel)
             for s in scan.accepted if s.records and s.first_offset is not None
             and scan.splits[s.index].segment.start >= from_segment]
    results = run_tasks(sc, tasks, audit_split, "body CRCs", quiet=quiet) if tasks else []
    return CrcAudit(sum(n for n, _ in results), tuple(b for _, listed in results for b in listed))
