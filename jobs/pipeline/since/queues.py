"""OUT1's consume-queue files after a `rebuild --since` build (since.run): the check that no queue of OUT1 ends past
what the scan built, the files the clean service deletes once the log's head is gone (read in Spark tasks), and the
rest as copies. OUT1 is only read."""
from __future__ import annotations

from dataclasses import dataclass

from storage_format.clean_service import expired_queue_files, last_unit_at
from storage_format.consume_queue import CQ_UNIT_SIZE, file_name, unpack_entries

from ..io.background_copy import CopyItem
from ..io.fs import Location
from ..recover.inputs import QueueDir
from ..runtime.cli import JobError
from ..runtime.tasks import run_tasks
from .report import SinceResult

QUEUES_PER_EXPIRY_TASK = 512
Queues = dict[tuple[str, int], QueueDir]  # a directory's consume queues by (topic, queueId)


def built_files(written: dict[str, int]) -> dict[tuple[str, int], set[int]]:
    """The consume-queue files the scan built ("topic/queueId/start" paths) as their starts per queue."""
    built: dict[tuple[str, int], set[int]] = {}
    for rel in written:
        topic, qid, name = rel.rsplit("/", 2)
        built.setdefault((topic, int(qid)), set()).add(int(name))
    return built


def check_no_lost_files(out1_queues: Queues, written: dict[str, int], out1_cq: Location) -> None:
    """A queue the scan reaches must not end, in OUT1, in a file after the last one the scan builds (OUT1 would hold
    units the commit log no longer gives)."""
    for key, starts in built_files(written).items():
        last = max(starts)
        q = out1_queues.get(key)
        if q is not None and q.files and q.files[-1][0] > last:
            raise JobError(f"--since {out1_cq.uri}: {q.file_uri(q.files[-1][0])}: OUT1 holds units past those the "
                           f"commit log gives the queue (its last file is {file_name(last)}); run a full rebuild")


@dataclass(frozen=True)
class ExpiryQueue:
    """One queue whose oldest files the clean service may delete: its directory in OUT1 and in the staging area, the
    starts of its files once built (OUT1's and the scan's), and those of the files built from the scan (staged)."""

    out1_uri: str
    staged_uri: str
    starts: tuple[int, ...]
    built: tuple[int, ...]

    def last_phy(self, start: int, file_size: int) -> int:
        """The commit-log offset of the last unit of the file at `start` (0: none): staged if built, else OUT1's."""
        src = Location(f"{self.staged_uri if start in self.built else self.out1_uri}/{file_name(start)}")
        units = unpack_entries(src.read_range(last_unit_at(file_size), CQ_UNIT_SIZE))
        return int(units["phy"][0]) if len(units) else 0


@dataclass(frozen=True)
class ExpiryTask:
    """Queues whose oldest files a Spark task checks against the commit log's min offset."""

    queues: tuple[ExpiryQueue, ...]
    file_size: int
    min_offset: int


def _expired(task: ExpiryTask) -> list[str]:
    """URIs (in OUT1) of the files ConsumeQueue.deleteExpiredFile deletes, queue by queue."""
    gone = []
    for q in task.queues:
        expired = expired_queue_files(q.starts, lambda start, q=q: q.last_phy(start, task.file_size), task.min_offset)
        gone += [f"{q.out1_uri}/{file_name(s)}" for s in expired]
    return gone


def expired_queue_uris(sc, out1_queues: Queues, written: dict[str, int], built_root: Location, file_size: int,
                       min_offset: int, quiet: bool) -> set[str]:
    """OUT1's consume-queue files the clean service deletes at `min_offset` (its queues' final file lists: OUT1's
    and the scan's), read in Spark tasks (a unit or two per queue)."""
    built = built_files(written)
    items = []
    for key, q in sorted(out1_queues.items()):
        mine = built.get(key, set())
        starts = tuple(sorted({s for s, _ in q.files} | mine))
        if len(starts) > 1:
            items.append(ExpiryQueue(q.uri, built_root.child(key[0], str(key[1])).uri, starts, tuple(sorted(mine))))
    tasks = [ExpiryTask(tuple(items[i:i + QUEUES_PER_EXPIRY_TASK]), file_size, min_offset)
             for i in range(0, len(items), QUEUES_PER_EXPIRY_TASK)]
    return {u for part in run_tasks(sc, tasks, _expired, "expired consume-queue files", quiet=quiet) for u in part}


def queue_copies(out1_queues: Queues, skip: set[str], expired: set[str], result: SinceResult) -> list[CopyItem]:
    """OUT1's consume-queue files that OUT2 holds as they are, neither built again from the scan nor expired, as
    copies (recover.write.copy_tasks)."""
    copies = []
    for key, q in sorted(out1_queues.items()):
        for start, size in q.files:
            rel = f"{key[0]}/{key[1]}/{file_name(start)}"
            uri = q.file_uri(start)
            if uri in expired:
                result.expired_cq.append(rel)
            elif rel not in skip:
                copies.append(CopyItem(f"consumequeue/{rel}", uri, size))
                result.cq_files.add(rel)
    return copies
