"""Spark side of `rebuild --since OUT1`: decode from the segment OUT1 ended in, build the consume-queue files the new
records reach in Spark tasks (each joined to OUT1's file of the same name: outputs.continued), continue OUT1's index
(since.plan), copy every other file of OUT1, and leave out what the clean service deletes once the log's head is gone.
OUT1 is only read."""
from __future__ import annotations

import datetime as dt
import mmap
import os
from dataclasses import dataclass, field

import numpy as np

from storage_format import recovery
from storage_format.clean_service import expired_queue_files, last_unit_at
from storage_format.consume_queue import CQ_DTYPE, CQ_UNIT_SIZE, file_name
from storage_format.index_file import append_to_index_file
from storage_format.index_keys import KeyBatch
from storage_format.settings import BrokerSettings

from ..io.copy import COPY_RANGE_HOLES, copy_file
from ..io.fs import Location
from ..io.paths import is_local
from ..recover.inputs import QueueDir, list_index_files, tail_keys
from ..recover.write import COPY_TASK_BYTES, copy_counts, new_index_file
from ..runtime.cli import JobError
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from .plan import IndexContinuation, continue_index
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
    expired_cq: list[str] = field(default_factory=list)
    expired_index: list[str] = field(default_factory=list)
    index_keys_added: int = 0
    index_written: list[str] = field(default_factory=list)

    def to_dict(self, prev: PreviousOutput, scan: ScanResult, min_offset: int) -> dict:
        """The report's `since` section."""
        return {"out": prev.out.uri, "built_to_before": prev.built.offset,
                "decoded_from": scan.segments[0].start if scan.segments else None,
                "bytes_decoded": scan.bytes_read, "bytes_reused": prev.built.offset - min_offset,
                "commitlog_min_offset": min_offset,
                "consumequeue_files_written": len(self.cq_written),
                "consumequeue_units_in_written_files": sum(self.cq_written.values()),
                "consumequeue_files_copied": len(self.cq_files) - len(self.cq_written),
                "index_files_written": self.index_written, "index_keys_added": self.index_keys_added,
                "expired": {"consumequeue_files": len(self.expired_cq), "index_files": self.expired_index},
                "copies": self.copied}


def last_dispatched_record(scan: ScanResult, from_offset: int) -> int | None:
    """The last record the scan found at or after `from_offset` (rebuild's index roll rule reads it), None: none."""
    last = max((s.last_record_offset for s in scan.accepted if s.last_record_offset is not None), default=None)
    return last if last is not None and last >= from_offset else None


def check_no_lost_files(old: dict[tuple[str, int], QueueDir], written: dict[str, int], earlier: Location) -> None:
    """A queue the scan reaches must not end, in OUT1, in a file after the last one the scan builds (OUT1 would hold
    units the commit log no longer gives)."""
    last_built: dict[tuple[str, int], int] = {}
    for rel in written:
        topic, qid, name = rel.rsplit("/", 2)
        key = (topic, int(qid))
        last_built[key] = max(last_built.get(key, -1), int(name))
    for key, last in last_built.items():
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
            unit = src.read_range(last_unit_at(task.file_size), CQ_UNIT_SIZE)
            return int(np.frombuffer(unit, CQ_DTYPE, 1)["phy"][0]) if len(unit) == CQ_UNIT_SIZE else 0
        gone += [f"{old_uri}/{file_name(s)}" for s in expired_queue_files(starts, last_phy, task.min_offset)]
    return gone


def expired_queue_uris(sc, old: dict[tuple[str, int], QueueDir], written: dict[str, int], built_root: Location,
                       file_size: int, min_offset: int, quiet: bool) -> set[str]:
    """OUT1's consume-queue files the clean service deletes at `min_offset` (its queues' final file lists: OUT1's
    and the scan's), read in Spark tasks (a unit or two per queue)."""
    built: dict[tuple[str, int], set[int]] = {}
    for rel in written:
        topic, qid, name = rel.rsplit("/", 2)
        built.setdefault((topic, int(qid)), set()).add(int(name))
    items = []
    for key, q in sorted(old.items()):
        mine = built.get(key, set())
        starts = tuple(sorted({s for s, _ in q.files} | mine))
        if len(starts) > 1:
            items.append((q.uri, built_root.child(key[0], str(key[1])).uri, starts, tuple(sorted(mine))))
    tasks = [ExpiryTask(tuple(items[i:i + QUEUES_PER_EXPIRY_TASK]), file_size, min_offset)
             for i in range(0, len(items), QUEUES_PER_EXPIRY_TASK)]
    return {u for part in run_tasks(sc, tasks, _expired, "expired consume-queue files", quiet=quiet) for u in part}


@dataclass(frozen=True)
class CopyTask:
    """OUT1 files one Spark task copies into OUT2 (source URI, destination URI)."""

    items: tuple[tuple[str, str], ...]


def _copy(task: CopyTask) -> list[tuple[str, int, str | None]]:
    """Copy OUT1's files verbatim, their all-zero blocks left as holes (OUT files are written sparse)."""
    return [copy_file(Location(src), Location(dst), False, True) for src, dst in task.items]


def copy_files(sc, pairs: list[tuple[str, str, int]], quiet: bool) -> dict:
    """(source, destination, size) copied in tasks of about COPY_TASK_BYTES; the copies' methods counted."""
    tasks, cur, size = [], [], 0
    for src, dst, n in pairs:
        cur.append((src, dst))
        size += n
        if size >= COPY_TASK_BYTES:
            tasks.append(CopyTask(tuple(cur)))
            cur, size = [], 0
    if cur:
        tasks.append(CopyTask(tuple(cur)))
    done = run_tasks(sc, tasks, _copy, "copy OUT1", total_bytes=sum(n for *_, n in pairs), quiet=quiet)
    counts = copy_counts([r for rs in done for r in rs])
    if COPY_RANGE_HOLES in counts:  # the expected method for sparse OUT files: not a fallback
        counts["copy_file_range"] = counts.pop(COPY_RANGE_HOLES)
    return counts


def queue_copies(old: dict[tuple[str, int], QueueDir], skip: set[str], expired: set[str], dest: Location,
                 result: SinceResult) -> list[tuple[str, str, int]]:
    """OUT1's consume-queue files that OUT2 holds as they are: neither built again from the scan nor expired."""
    pairs = []
    for key, q in sorted(old.items()):
        for start, size in q.files:
            rel = f"{key[0]}/{key[1]}/{file_name(start)}"
            uri = q.file_uri(start)
            if uri in expired:
                result.expired_cq.append(rel)
            elif rel not in skip:
                pairs.append((uri, dest.child(*rel.split("/")).uri, size))
                result.cq_files.add(rel)
    return pairs


def continue_index_files(prev: PreviousOutput, scan: ScanResult, work: Location, settings: BrokerSettings,
                         index_dir: Location, generation: int, min_offset: int, tz: dt.tzinfo, result: SinceResult,
                         warnings: list[str]) -> list[tuple[str, str, int]]:
    """OUT1's index continued into `index_dir`: the file appended to and the new files written here (the driver),
    the unchanged ones returned as copies."""
    listed = list_index_files(prev.out, settings, warnings)
    uris = {info.name: uri for info, uri in listed}
    start = prev.built.offset
    keys = tail_keys(scan, work, start) if scan.accepted else KeyBatch.concat([])
    last = last_dispatched_record(scan, start)
    last_ts = scan.accepted[-1].last_store_ts if last is not None else None
    plan = continue_index([i for i, _ in listed], keys, start, last, last_ts, settings.max_index_num, min_offset, tz)
    result.expired_index = plan.expired
    result.index_keys_added = len(keys)
    index_dir.makedirs()
    return _write_index(plan, uris, settings, index_dir, generation, result)


def _write_index(plan: IndexContinuation, uris: dict[str, str], settings: BrokerSettings, index_dir: Location,
                 generation: int, result: SinceResult) -> list[tuple[str, str, int]]:
    """Write the appended and new index files; the rest are copies (source, destination, size)."""
    copies = []
    for f in plan.files:
        result.index_names.append(f.name)
        keys = f.target.all_keys() if f.target is not None and f.target.keys else None
        dst = index_dir.child(f.name)
        if f.old_name is not None and (keys is None or not len(keys)):
            copies.append((uris[f.old_name], dst.uri, settings.index_file_size))
            continue
        if f.old_name is not None:
            append_to_copy(Location(uris[f.old_name]), dst, keys, settings)
        else:
            k = keys if keys is not None else KeyBatch.concat([])
            dst.write_with_zero_tail(new_index_file(k, settings, f.target.inherited, generation),
                                     settings.index_file_size)
        result.index_written.append(f.name)
    return copies


def append_to_copy(src: Location, dst: Location, keys: KeyBatch, settings: BrokerSettings) -> None:
    """OUT1's index file `src` with `keys` appended, as `dst`: on a local filesystem copied (a reflink where the
    filesystem shares extents; its zeros left as holes) and the keys put through a shared mapping of the copy (only
    the pages of the slots and entries written are touched, as the broker's own mapped file); elsewhere read, put
    and written whole."""
    if is_local(src) and is_local(dst):
        copy_file(src, dst, False, True)
        with open(dst.path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < settings.index_file_size:
                f.truncate(settings.index_file_size)  # a 0-byte file maps as zeros
            with mmap.mmap(f.fileno(), settings.index_file_size) as data:
                _put(data, keys, settings, src)
        return
    data = bytearray(src.read_bytes())
    data.extend(bytes(settings.index_file_size - len(data)))
    _put(data, keys, settings, src)
    dst.write_bytes(bytes(data))


def _put(data, keys: KeyBatch, settings: BrokerSettings, src: Location) -> None:
    put = append_to_index_file(data, keys.key_hash, keys.phy, keys.store_ts, settings.max_hash_slot_num,
                               settings.max_index_num)
    if put != len(keys):
        raise recovery.RecoveryError(f"{src.uri}: {len(keys) - put} keys did not fit the file")
