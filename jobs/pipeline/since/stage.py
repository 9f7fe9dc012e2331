"""OUT1's consume-queue files after a `rebuild --since` build (since.run): the report's `since` counts (SinceResult),
the check that no queue of OUT1 ends past what the scan built, the files the clean service deletes once the log's head
is gone (read in Spark tasks), and the rest as copies. OUT1 is only read."""
from __future__ import annotations

from dataclasses import dataclass, field

from storage_format.clean_service import expired_queue_files, last_unit_at
from storage_format.consume_queue import CQ_UNIT_SIZE, file_name, unpack_entries

from ..io.fs import Location
from ..recover.inputs import QueueDir
from ..runtime.cli import JobError
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from .previous import PreviousOutput

QUEUES_PER_EXPIRY_TASK = 512


@dataclass(kw_only=True)
class SinceResult:
    """What a --since run wrote and reused: every file of OUT2 (consume-queue files by path, index names) and the
    counts the report gives."""

    cq_files: set[str] = field(default_factory=set)  # consumequeue-relative paths
    index_names: list[str] = field(default_factory=list)
    cq_written: dict[str, int] = field(default_factory=dict)  # files built from the scan: units each
    copied: dict = field(default_factory=dict)
    cq_prefixes: dict = field(default_factory=dict)  # how OUT1's units ahead of the scan's came into written files
    expired_cq: list[str] = field(default_factory=list)
    expired_index: list[str] = field(default_factory=list)
    index_keys_added: int = 0
    index_written: list[str] = field(default_factory=list)
    index_listed: list[str] = field(default_factory=list)  # OUT1's index files as listed (not what they skipped)

    def take_index(self, index) -> None:
        """What the index work (since.index.IndexWork) wrote, copied and left out."""
        self.index_names = [f.name for f in index.plan.files]
        self.index_written = [f.name for f in index.plan.files
                              if f.span is not None and (f.old_name is None or f.span.hi > f.span.lo)]
        self.expired_index = index.plan.expired
        self.index_keys_added = index.keys_added
        self.index_listed = sorted({f.old_name for f in index.plan.files if f.old_name} | set(index.plan.expired))

    @property
    def index_dropped(self) -> list[str]:
        """OUT1's index files OUT2 holds no file of that name for: the clean service's deletions, and OUT1's trailing
        empty file once named anew."""
        return sorted(set(self.index_listed) - set(self.index_names))

    def to_dict(self, prev: PreviousOutput, scan: ScanResult, min_offset: int) -> dict:
        """The report's `since` section."""
        decoded_from = scan.segments[0].start if scan.segments else prev.built.offset
        return {"out": prev.out.uri, "built_to_before": prev.built.offset, "decoded_from": decoded_from,
                "bytes_decoded": scan.bytes_read, "bytes_reused": max(0, decoded_from - min_offset),
                "commitlog_min_offset": min_offset,
                "consumequeue_files_written": len(self.cq_written),
                "consumequeue_units_in_written_files": sum(self.cq_written.values()),
                "consumequeue_files_copied": len(self.cq_files) - len(self.cq_written),
                "index_files_written": self.index_written, "index_keys_added": self.index_keys_added,
                "expired": {"consumequeue_files": len(self.expired_cq), "index_files": self.expired_index},
                "copies": self.copied, "consumequeue_prefixes": self.cq_prefixes}


def built_files(written: dict[str, int]) -> dict[tuple[str, int], set[int]]:
    """The consume-queue files the scan built ("topic/queueId/start" paths) as their starts per queue."""
    built: dict[tuple[str, int], set[int]] = {}
    for rel in written:
        topic, qid, name = rel.rsplit("/", 2)
        built.setdefault((topic, int(qid)), set()).add(int(name))
    return built


def check_no_lost_files(old: dict[tuple[str, int], QueueDir], written: dict[str, int], earlier: Location) -> None:
    """A queue the scan reaches must not end, in OUT1, in a file after the last one the scan builds (OUT1 would hold
    units the commit log no longer gives)."""
    for key, starts in built_files(written).items():
        last = max(starts)
        q = old.get(key)
        if q is not None and q.files and q.files[-1][0] > last:
            raise JobError(f"--since {earlier.uri}: {q.file_uri(q.files[-1][0])}: OUT1 holds units past those the "
                           f"commit log gives the queue (its last file is {file_name(last)}); run a full rebuild")


@dataclass(frozen=True)
class ExpiryTask:
    """Queues whose oldest files a Spark task checks against the commit log's min offset."""

    queues: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...]], ...]  # OUT1 dir URI, staged dir URI, final
    file_size: int  # files, the files built from the scan (staged)
    min_offset: int


def _expired(task: ExpiryTask) -> list[str]:
    """URIs (in OUT1) of the files ConsumeQueue.deleteExpiredFile deletes, queue by queue."""
    gone = []
    for old_uri, staged_uri, starts, built in task.queues:
        def last_phy(start: int, old_uri=old_uri, staged_uri=staged_uri, built=built) -> int:
            src = Location(f"{staged_uri if start in built else old_uri}/{file_name(start)}")
            units = unpack_entries(src.read_range(last_unit_at(task.file_size), CQ_UNIT_SIZE))
            return int(units["phy"][0]) if len(units) else 0
        gone += [f"{old_uri}/{file_name(s)}" for s in expired_queue_files(starts, last_phy, task.min_offset)]
    return gone


def expired_queue_uris(sc, old: dict[tuple[str, int], QueueDir], written: dict[str, int], built_root: Location,
                       file_size: int, min_offset: int, quiet: bool) -> set[str]:
    """OUT1's consume-queue files the clean service deletes at `min_offset` (its queues' final file lists: OUT1's
    and the scan's), read in Spark tasks (a unit or two per queue)."""
    built = built_files(written)
    items = []
    for key, q in sorted(old.items()):
        mine = built.get(key, set())
        starts = tuple(sorted({s for s, _ in q.files} | mine))
        if len(starts) > 1:
            items.append((q.uri, built_root.child(key[0], str(key[1])).uri, starts, tuple(sorted(mine))))
    tasks = [ExpiryTask(tuple(items[i:i + QUEUES_PER_EXPIRY_TASK]), file_size, min_offset)
             for i in range(0, len(items), QUEUES_PER_EXPIRY_TASK)]
    return {u for part in run_tasks(sc, tasks, _expired, "expired consume-queue files", quiet=quiet) for u in part}


def queue_copies(old: dict[tuple[str, int], QueueDir], skip: set[str], expired: set[str],
                 result: SinceResult) -> list[tuple[str, str, int]]:
    """OUT1's consume-queue files that OUT2 holds as they are, neither built again from the scan nor expired, as
    copies (path in OUT2, source URI, size: recover.write.copy_tasks)."""
    copies = []
    for key, q in sorted(old.items()):
        for start, size in q.files:
            rel = f"{key[0]}/{key[1]}/{file_name(start)}"
            uri = q.file_uri(start)
            if uri in expired:
                result.expired_cq.append(rel)
            elif rel not in skip:
                copies.append((f"consumequeue/{rel}", uri, size))
                result.cq_files.add(rel)
    return copies
