"""Stages 3-4: consume-queue files and index files from the decode stage's per-split Arrow files.

The driver plans from split summaries only (counts and ranges); each task reads the slices it needs
from the work directory, packs whole files with numpy and writes them. Index keys are numbered
globally by a prefix sum over splits, so every index file is built independently.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_format.consume_queue import CQ_UNIT_SIZE, build_queue_files, file_name, keep_first_of_each_offset
from storage_format.index_file import IndexState, build_index_file, names_for
from storage_format.settings import BrokerSettings

from .fs import Location
from .scan import ScanResult, read_ipc

TARGET_CQ_ENTRIES_PER_TASK = 4_000_000
TARGET_INDEX_ENTRIES_PER_TASK = 2_000_000


@dataclass(frozen=True)
class QueueSlice:
    """Rows of one queue in one split's consume-queue file."""

    split_index: int
    row_start: int
    rows: int


@dataclass(frozen=True)
class QueueFiles:
    """A run of consecutive files of one queue [first_file, last_file] (logical start offsets)."""

    topic: str
    queue_id: int
    first_file: int
    last_file: int
    queue_first_offset: int
    sources: tuple[QueueSlice, ...]


@dataclass(frozen=True)
class CqTask:
    items: tuple[QueueFiles, ...]
    work: Location
    out: Location  # the consumequeue/ directory
    file_size: int


def plan_cq(scan: ScanResult, settings: BrokerSettings, work: Location, out: Location,
            topics: set[str] | None = None, target_tasks: int = 4) -> list[CqTask]:
    """Cut every queue into runs of whole files and pack the runs into tasks of bounded size."""
    fs = settings.consume_queue_file_size
    units = fs // CQ_UNIT_SIZE
    queues: dict[tuple[str, int], list] = {}
    for s in scan.accepted:
        for key, (_, cq_rows, row, lo, hi) in s.queues.items():
            if cq_rows == 0 or (topics is not None and key[0] not in topics):
                continue
            q = queues.setdefault(key, [lo, hi, []])
            q[0], q[1] = min(q[0], lo), max(q[1], hi)
            q[2].append(QueueSlice(s.index, row, cq_rows))
    runs: list[QueueFiles] = []
    files_per_run = max(1, TARGET_CQ_ENTRIES_PER_TASK // units)
    for (topic, qid), (lo, hi, sources) in sorted(queues.items()):
        first, last = (lo * CQ_UNIT_SIZE) // fs, (hi * CQ_UNIT_SIZE) // fs
        for f in range(first, last + 1, files_per_run):
            runs.append(QueueFiles(topic, qid, f * fs, min(last, f + files_per_run - 1) * fs, lo, tuple(sources)))
    total = sum((r.last_file - r.first_file) // fs + 1 for r in runs) * units
    per_task = max(units, min(TARGET_CQ_ENTRIES_PER_TASK, -(-total // max(1, target_tasks))))
    tasks, current, size = [], [], 0
    for r in runs:
        current.append(r)
        size += ((r.last_file - r.first_file) // fs + 1) * units
        if size >= per_task:
            tasks.append(CqTask(tuple(current), work, out, fs))
            current, size = [], 0
    if current:
        tasks.append(CqTask(tuple(current), work, out, fs))
    return tasks


def _queue_entries(item: QueueFiles, work: Location, file_size: int) -> pa.Table:
    parts = []
    lo, hi = item.first_file // CQ_UNIT_SIZE, (item.last_file + file_size) // CQ_UNIT_SIZE
    for src in item.sources:
        t = read_ipc(work.child(f"cq-{src.split_index:06d}.arrow")).slice(src.row_start, src.rows)
        qo = t.column("queue_offset")
        parts.append(t.filter(pc.and_(pc.greater_equal(qo, lo), pc.less(qo, hi))))
    return pa.concat_tables(parts)


def build_cq(task: CqTask) -> dict:
    """Write the task's consume-queue files; returns {relative path: entries} for the report."""
    written: dict[str, int] = {}
    for item in task.items:
        t = _queue_entries(item, task.work, task.file_size)
        qo = t.column("queue_offset").to_numpy()
        keep = keep_first_of_each_offset(qo)
        files = build_queue_files(qo[keep], t.column("phy").to_numpy()[keep], t.column("size").to_numpy()[keep],
                                  t.column("tags").to_numpy()[keep], task.file_size, item.queue_first_offset)
        for start, data in files.items():
            rel = f"{item.topic}/{item.queue_id}/{file_name(start)}"
            task.out.child(item.topic, str(item.queue_id), file_name(start)).write_bytes(data)
            lo, hi = start // CQ_UNIT_SIZE, (start + task.file_size) // CQ_UNIT_SIZE
            written[rel] = int(((qo[keep] >= lo) & (qo[keep] < hi)).sum())
    return written


@dataclass(frozen=True)
class KeySlice:
    split_index: int
    lo: int
    hi: int


@dataclass(frozen=True)
class IndexFilePlan:
    """One index file: its number, the key slices it holds, and where its inherited end comes from."""

    file_no: int
    sources: tuple[KeySlice, ...]
    inherited_from: KeySlice | None  # the key just before the file (previous file's last entry)


@dataclass(frozen=True)
class IndexTask:
    """Consecutive index files built by one task."""

    files: tuple[IndexFilePlan, ...]
    work: Location
    out: Location  # the index/ directory
    slots: int
    max_entries: int


def pending_name(file_no: int) -> str:
    return f".pending-{file_no:010d}"


def plan_index(scan: ScanResult, settings: BrokerSettings, work: Location, out: Location) -> list[IndexTask]:
    """Number keys globally (prefix sum over accepted splits) and cut them into files of
    maxIndexNum - 1 keys; add the empty file the broker opens when a full file is followed by
    more records. Small files are grouped so a task holds about TARGET_INDEX_ENTRIES_PER_TASK keys."""
    per = settings.max_index_num - 1
    acc = [s for s in scan.accepted if s.records]
    if not acc:
        return []
    counts = np.array([s.keys for s in acc], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    total = int(starts[-1])
    n_files = -(-total // per)
    last_key_record = max((s.last_key[1] for s in acc if s.last_key), default=None)
    last_record = acc[-1].last_record_offset
    if total % per == 0 and (last_key_record is None or last_record > last_key_record):
        n_files += 1  # a record after a full file makes the broker open a new, empty file

    def slices(lo: int, hi: int) -> tuple[KeySlice, ...]:
        out_slices = []
        for i, s in enumerate(acc):
            a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
            if a < b:
                out_slices.append(KeySlice(s.index, a - int(starts[i]), b - int(starts[i])))
        return tuple(out_slices)

    plans = []
    for f in range(n_files):
        lo, hi = f * per, min(total, (f + 1) * per)
        plans.append(IndexFilePlan(f, slices(lo, hi), slices(lo - 1, lo)[0] if lo > 0 else None))
    group = max(1, TARGET_INDEX_ENTRIES_PER_TASK // per)
    return [IndexTask(tuple(plans[i:i + group]), work, out, settings.max_hash_slot_num, settings.max_index_num)
            for i in range(0, len(plans), group)]


def _keys(work: Location, sl: KeySlice) -> pa.Table:
    return read_ipc(work.child(f"keys-{sl.split_index:06d}.arrow")).slice(sl.lo, sl.hi - sl.lo)


def build_index(task: IndexTask) -> list[tuple[int, int | None]]:
    """Write the task's index files under pending names; returns (file number, first entry's store time)."""
    return [_build_one(task, plan) for plan in task.files]


def _build_one(task: IndexTask, plan: IndexFilePlan) -> tuple[int, int | None]:
    inherited = IndexState()
    if plan.inherited_from is not None:
        row = _keys(task.work, plan.inherited_from).to_pylist()[0]
        inherited = IndexState(row["store_ts"], row["phy"])
    if plan.sources:
        t = pa.concat_tables([_keys(task.work, s) for s in plan.sources])
        kh, phy, ts = (t.column(c).to_numpy() for c in ("key_hash", "phy", "store_ts"))
    else:
        kh = phy = ts = np.zeros(0, np.int64)
    data = build_index_file(kh.astype(np.int32), phy, ts, task.slots, task.max_entries, inherited)
    task.out.child(pending_name(plan.file_no)).write_bytes(data)
    return plan.file_no, (int(ts[0]) if len(ts) else None)


def name_index_files(scan: ScanResult, firsts: list[tuple[int, int | None]], tz) -> dict[int, str]:
    """Names for built index files: the store time of the record that opened each file (the first
    dispatched record for file 0, the first entry's record otherwise, the last record for a trailing
    empty file), formatted yyyyMMddHHmmssSSS in `tz` and bumped to be strictly increasing."""
    acc = [s for s in scan.accepted if s.records]
    first_record_ts = acc[0].first_store_ts if acc else 0
    last_record_ts = acc[-1].last_store_ts if acc else 0
    ordered = sorted(firsts)
    opening = []
    for no, ts in ordered:
        opening.append(first_record_ts if no == 0 else (ts if ts is not None else last_record_ts))
    return dict(zip((no for no, _ in ordered), names_for(opening, tz)))
