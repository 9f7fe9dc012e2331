"""What `jobs.recover` gathers from a store for the broker's recovery rules (Spark tasks, small results).

Consume-queue load state (ConsumeQueue.recover at start-up) is read in Spark tasks, a group of queues
per task; the re-dispatch tails - consume-queue entries past each queue's maxPhysicOffset and index keys
past the last kept index file's end - are cut by the driver from the scan's per-split Arrow files; in a real
crash they are a few seconds of traffic, so they are what reaches the driver, never the whole log.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from storage_format import recovery
from storage_format.commitlog import parse_segment_name
from storage_format.consume_queue import file_name
from storage_format.errors import StoreFormatError
from storage_format.index_file import HEADER_SIZE, IndexHeader, is_name
from storage_format.log_sources import QUEUE_DIR_SKIPPED, LogFile, broker_consequence, queue_dir_verdict
from storage_format.scan_plan import Segment
from storage_format.segment_names import java_parse_long
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.paths import is_local
from ..scan.result import ScanResult
from ..io.workdir import at_or_after, cq_columns, key_columns
from ..runtime.tasks import run_tasks

QUEUES_PER_LOAD_TASK = 256


# ---------------------------------------------------------------------------------------------
# store listing


@dataclass(frozen=True)
class QueueDir:
    """One consume queue on disk: topic, queue id and its files (start offset, size)."""

    topic: str
    queue_id: int
    uri: str
    files: tuple[tuple[int, int], ...]

    @property
    def key(self) -> tuple[str, int]:
        """(topic, queueId)."""
        return self.topic, self.queue_id

    def file_uri(self, start: int) -> str:
        """URI of one file of the queue."""
        return f"{self.uri}/{file_name(start)}"


def list_queues(store: Location, warnings: list[str] | None = None) -> list[QueueDir]:
    """consumequeue/<topic>/<queueId>/<20-digit files>, as the broker's loadConsumeQueue takes them. An entry the
    broker skips (a file where a topic belongs, a queue directory Integer.parseInt rejects) is skipped too and
    named in `warnings`; a queue directory the broker takes for another one (`01`, `+1`, `-0`) or a stray name in
    a queue directory (it does not start, or loads the file for another offset) is refused with the broker's
    consequence (log_sources.queue_dir_verdict, broker_consequence)."""
    root = store.child("consumequeue")
    out = []
    notes = [] if warnings is None else warnings
    for t in root.list():
        if t.type.name != "Directory":
            notes.append(f"{root.child(t.base_name).uri}: not a topic directory; the broker skips it (File.listFiles "
                         f"of it is null) and so does reput")
            continue
        tdir = root.child(t.base_name)
        for q in tdir.list():
            verdict = queue_dir_verdict(t.base_name, q.base_name, q.type.name == "Directory")
            if verdict is not None:
                kind, why = verdict
                if kind == QUEUE_DIR_SKIPPED:
                    notes.append(f"{tdir.child(q.base_name).uri}: not a queue directory: {why}; reput skips it too")
                    continue
                raise StoreFormatError(tdir.child(q.base_name).uri, 0,
                                       f"not a queue directory the broker reads back: {why}; reput refuses rather "
                                       f"than guess which directory holds the queue: rename it or move it out of "
                                       f"consumequeue/{t.base_name}/")
            qdir = tdir.child(q.base_name)
            listed = qdir.list()
            starts = {parse_segment_name(f.base_name) for f in listed} - {None}
            for f in listed:
                odd = qdir.child_kind(f)
                if odd or parse_segment_name(f.base_name) is None:  # the broker's load would not take it as written
                    why = broker_consequence(LogFile(f.base_name, f.size, "", odd or ""), None, starts,
                                             "consume-queue file")
                    raise StoreFormatError(qdir.child(f.base_name).uri, 0,
                                           (f"{odd}, not a regular file" if odd else
                                            "not a consume-queue file name (the 20-digit start offset)")
                                           + f": {why}; move it out of the queue directory")
            files = tuple((parse_segment_name(f.base_name), f.size) for f in listed)
            out.append(QueueDir(t.base_name, int(q.base_name), qdir.uri, tuple(sorted(files))))
    return out


def list_index_files(store: Location, settings: BrokerSettings,
                     warnings: list[str] | None = None) -> list[tuple[recovery.IndexFileInfo, str]]:
    """Index files (name, header) with their URI; a file of the wrong size is an error, except a 0-byte
    one (zeros, as the broker maps it). Other names, as RocketMQ 4.9.8's IndexService.load takes them (MappedFile
    parses the name with Long.parseLong before it opens the file): no number, skipped by the broker and here,
    named in `warnings`; another number, or a number that is no regular file, refused with the broker's
    consequence (it loads the file as an index file, or does not start)."""
    root = store.child("index")
    out = []
    notes = [] if warnings is None else warnings
    for info in root.list():
        loc = root.child(info.base_name)
        if java_parse_long(info.base_name) is None:
            notes.append(f"{loc.uri}: not an index file name (yyyyMMddHHmmssSSS) and no number: the broker skips it "
                         f"(IndexService.load logs the NumberFormatException) and never deletes it; reput skips it "
                         f"too")
            continue
        odd = root.child_kind(info)
        if odd:
            raise StoreFormatError(loc.uri, 0, f"{odd}, not a regular file, in index/: the broker does not start "
                                               f"(IndexService.load cannot map it: IOException); move it out of index/")
        if not is_name(info.base_name):
            raise StoreFormatError(loc.uri, 0, "not an index file name (yyyyMMddHHmmssSSS), but a number: the broker "
                                               "loads it as an index file (Long.parseLong of the name), in name order "
                                               "among the others, and writes new keys into it when it sorts last; "
                                               "reput refuses rather than guess: move it out of index/")
        if info.size == 0:  # a crash leftover: IndexFile maps it at full size, zero-filled, and loads it
            out.append((recovery.IndexFileInfo(info.base_name, IndexHeader(index_count=0), True), loc.uri))
            continue
        problem = settings.index_layout.size_problem(info.size)
        if problem is not None:
            raise StoreFormatError(loc.uri, info.size, problem)
        header = IndexHeader.from_bytes(bytes(loc.read_range(0, HEADER_SIZE)))
        out.append((recovery.IndexFileInfo(info.base_name, header), loc.uri))
    return out


# ---------------------------------------------------------------------------------------------
# consume-queue load state (Spark tasks)


@dataclass(frozen=True)
class LoadTask:
    """A group of queues whose load state one Spark task reads."""
    queues: tuple[QueueDir, ...]
    file_size: int
    generation: int = 4


def _prefetch(queues: tuple[QueueDir, ...]) -> None:
    """Ask the kernel to read, in the background and all at once, the local files the queue load walks (the last
    three of each queue): on a cold page cache (after a reboot) the load then finds them read instead of
    faulting them in file by file, one thread waiting on each (0.4-0.6 s -> 0.15-0.35 s for the bench's 64
    queues); on a warm cache the hint costs a system call per file. Elsewhere (HDFS, S3) nothing happens."""
    if not hasattr(os, "posix_fadvise") or not queues or not is_local(Location(queues[0].uri)):
        return
    for q in queues:
        for start, _ in sorted(q.files)[-3:]:
            try:
                fd = os.open(Location(q.file_uri(start)).path, os.O_RDONLY)
            except OSError:
                continue  # the load names a missing or unreadable file itself
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)


def _load_queues(task: LoadTask) -> list[recovery.QueueLoad] | StoreFormatError:
    """ConsumeQueue.recover for a group of queues (runs in a Spark task); bad files are returned as errors."""
    out = []
    _prefetch(task.queues)
    try:
        for q in task.queues:
            dropped = recovery.dropped_at_load(list(q.files), task.generation)
            files = [(start, size) for start, size in q.files if start not in dropped]
            for start, size in files:
                if size != task.file_size:
                    raise StoreFormatError(q.file_uri(start), size, f"consume-queue file is {size} bytes, expected "
                                                                    f"{task.file_size} (mappedFileSizeConsumeQueue); "
                                                                    f"the broker refuses to load it")
            ld = recovery.load_queue(q.topic, q.queue_id, [s for s, _ in files],
                                     lambda s, q=q: Location(q.file_uri(s)).read_bytes(), task.file_size,
                                     read_range=lambda s, at, n, q=q: Location(q.file_uri(s)).read_range(at, n))
            out.append(replace(ld, removed_at_load=ld.removed_at_load + dropped) if dropped else ld)
    except StoreFormatError as err:
        return err
    return out


def load_queues(sc, queues: list[QueueDir], file_size: int, quiet: bool,
                generation: int = 4) -> dict[tuple[str, int], recovery.QueueLoad]:
    """Load state of every queue, computed in Spark tasks (`sc` None: here, in this process); a bad file is
    raised here."""
    tasks = [LoadTask(tuple(queues[i:i + QUEUES_PER_LOAD_TASK]), file_size, generation)
             for i in range(0, len(queues), QUEUES_PER_LOAD_TASK)]
    out: dict[tuple[str, int], recovery.QueueLoad] = {}
    results = ([_load_queues(t) for t in tasks] if sc is None else
               run_tasks(sc, tasks, _load_queues, "consume-queue state", quiet=quiet))
    for result in results:
        if isinstance(result, StoreFormatError):
            raise result
        out.update({ld.key: ld for ld in result})
    return out


# ---------------------------------------------------------------------------------------------
# re-dispatch tails from the scan's work files


@dataclass(frozen=True)
class TailTask:
    """One split's consume-queue rows to cut the re-dispatch tail from."""
    work: Location
    split_index: int
    queues: tuple[tuple[str, int, int, int, int], ...]  # topic, queue, first row, rows, maxPhysicOffset


def _cq_tail(task: TailTask) -> dict[tuple[str, int], tuple[np.ndarray, ...]]:
    """Entries of one split whose end is past their queue's maxPhysicOffset (read from the work file's columns
    as stored, each queue's rows widened once: with much lag nearly every row is in the tail)."""
    cols = cq_columns(task.work, task.split_index)
    out = {}
    for topic, qid, row, rows, max_phy in task.queues:
        part = slice(row, row + rows)
        phy = cols["phy"].take(part)
        size = cols["size"].take(part)
        sel = phy.astype(np.int64) + size > max_phy
        if sel.all():
            out[(topic, qid)] = (cols["queue_offset"].take(part), phy, size, cols["tags"].take(part))
        elif sel.any():
            out[(topic, qid)] = (cols["queue_offset"].take(part)[sel], phy[sel], size[sel],
                                 cols["tags"].take(part)[sel])
    return out


def cq_tails(scan: ScanResult, work: Location,
             max_phy: dict[tuple[str, int], int]) -> dict[tuple[str, int], recovery.QueueEntries]:
    """Per queue, in commit-log order, the scanned entries the broker would not skip. Read by the driver from
    the scan's work files (as tail_keys reads the keys): the tails are what the recovery rules need in the
    driver anyway, and a Spark task would send them back through the JVM (seconds for a large lag)."""
    parts: dict[tuple[str, int], list[tuple[np.ndarray, ...]]] = {}
    for s in scan.accepted:
        qs = tuple((t, q, row, rows, max_phy.get((t, q), -1))
                   for t, q, row, rows in scan.split_queues(s).row_slices())
        if qs:
            for key, arrays in _cq_tail(TailTask(work, s.index, qs)).items():
                parts.setdefault(key, []).append(arrays)
    return {k: recovery.QueueEntries(*(v[0][i] if len(v) == 1 else np.concatenate([p[i] for p in v])
                                       for i in range(4))) for k, v in parts.items()}


def last_cq_record_offset(scan: ScanResult, work: Location, from_offset: int,
                          before: int | None = None) -> int | None:
    """Offset of the last scanned NOT/COMMIT record at or after `from_offset` (and below `before` when given),
    newest split first."""
    for s in reversed(scan.accepted):
        if not s.cq_rows:
            continue
        phy = cq_columns(work, s.index)["phy"].take()
        phy = phy[(phy >= from_offset) & (phy < before)] if before is not None else phy[phy >= from_offset]
        if len(phy):
            return int(phy.max())
        if s.last_record_offset is not None and s.last_record_offset < from_offset:
            return None
    return None


def tail_keys(scan: ScanResult, work: Location, from_phy: int) -> recovery.KeyBatch:
    """Index keys of scanned records at or after `from_phy`, in dispatch order (newest splits only). A split's
    keys lie in commit-log order, so its tail is a suffix of its work file's columns: sliced, not masked, and
    widened straight into the one batch returned (a lag's millions of keys are copied once)."""
    parts = []
    for s in reversed(scan.accepted):
        if s.last_key is None or not s.keys:
            if s.last_record_offset is not None and s.last_record_offset < from_phy:
                break
            continue
        if s.last_key[1] < from_phy:
            break
        cols = key_columns(work, s.index)
        rows = at_or_after(cols["phy"], from_phy)
        if isinstance(rows, slice):
            parts.append((cols, rows, None, rows.stop - rows.start))
        else:
            parts.append((cols, slice(None), rows, int(rows.sum())))
    parts.reverse()
    total = sum(n for *_, n in parts)
    out = recovery.KeyBatch(np.empty(total, np.int32), np.empty(total, np.int64), np.empty(total, np.int64))
    at = 0
    for cols, rows, keep, n in parts:
        for name in ("key_hash", "phy", "store_ts"):
            cols[name].take_into(rows, keep, getattr(out, name)[at:at + n])
        at += n
    return out


def record_store_timestamp(segments: list[Segment], offset: int) -> int:
    """storeTimestamp of the record at a commit-log offset (one small read)."""
    seg = next(s for s in segments if s.start <= offset < s.start + s.size)
    data = bytes(Location(seg.path).read_range(offset - seg.start, recovery.SEGMENT_HEAD_BYTES))
    return recovery.read_segment_head(data, offset).store_timestamp


def segment_heads(segments: list[Segment]) -> Iterator[recovery.SegmentHead]:
    """First record headers of the segments, newest first, read lazily."""
    for seg in reversed(segments):
        data = bytes(Location(seg.path).read_range(0, recovery.SEGMENT_HEAD_BYTES))
        yield recovery.read_segment_head(data, seg.start)
