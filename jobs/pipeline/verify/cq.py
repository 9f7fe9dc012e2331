"""Verify, consume queues: each consume-queue file the commit log implies, built as the rebuild builds it,
compared unit by unit with the store's file; files on disk the commit log implies none for are extras."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from storage_format.arrow_numpy import to_arrow
from storage_format.consume_queue import CQ_UNIT_SIZE, PRE_BLANK_SIZE, file_name, parse_file_name, unpack_entries
from storage_format.rocksdb_files import database_files
from storage_format.log_sources import LogFile, broker_consequence, queue_dir_verdict

from ..io.paths import is_local
from ..outputs.cq_tail import read_data
from ..outputs.build import CqTask, QueueFiles, cq_file_bytes
from .findings import Findings
from ..io.fs import Location
from ..scan.result import ScanResult
from .pointer import PointerCheck

CQ_FIELDS = (("phy", "phyOffset"), ("size", "size"), ("tags", "tagsCode"))


@dataclass(frozen=True)
class CqCheckTask:
    """A rebuild CqTask (its `out` = the store's consumequeue/) plus what the comparison needs."""

    build: CqTask
    queue_ends: dict[tuple[str, int], int]  # first queue offset past each queue's last expected entry
    pointers: PointerCheck
    extra_files: tuple[tuple[str, int, str], ...] = ()  # (topic, queueId, name) outside every planned run


def cq_rel(topic: str, queue_id: int, name: str) -> str:
    """A consume-queue file's path relative to the store, as findings name it."""
    return f"consumequeue/{topic}/{queue_id}/{name}"


def _cq_entry(u: np.void) -> dict:
    """A consume-queue unit with the broker's field names."""
    return {"phyOffset": int(u["phy"]), "size": int(u["size"]), "tagsCode": int(u["tags"])}


def compare_cq_file(expected: bytes | None, disk: bytes, rel: str, topic: str, queue_id: int, start: int,
                    file_size: int, queue_end: int, pointers: PointerCheck, out: Findings,
                    disk_size: int | None = None) -> None:
    """Compare one consume-queue file with the bytes the commit log implies (None: no file expected; bytes
    shorter than the file stand for the file with zeros after them). `disk_size`: the file's size when `disk` holds
    only its head (a sparse file's data up to its hole: zeros after it)."""
    art = "consumequeue"
    size = len(disk) if disk_size is None else disk_size
    if size != file_size:
        out.add(art, "wrong_size", rel, expected=file_size, found=size,
                detail=f"file is {size} bytes, expected {file_size} (mappedFileSizeConsumeQueue); "
                       + (f"entries from {start // CQ_UNIT_SIZE + size // CQ_UNIT_SIZE} on are cut off"
                          if size < file_size else "bytes past the configured size are ignored"))
    if expected is not None and size == file_size and disk.startswith(expected) \
            and disk.count(0, len(expected)) == len(disk) - len(expected):
        return  # equal (expected may stop at its last unit: the rest must be zeros), the common case
    span = file_size if disk_size is None else min(file_size, -(-max(len(expected or b""), len(disk)) // CQ_UNIT_SIZE)
                                                   * CQ_UNIT_SIZE)  # past both heads both hold zeros
    exp = unpack_entries(expected or b"", span)
    got = unpack_entries(disk, span)
    differ = (exp["phy"] != got["phy"]) | (exp["size"] != got["size"]) | (exp["tags"] != got["tags"])
    differ &= ~_expired_units(exp, got, pointers, out)
    if not differ.any():
        return
    first = start // CQ_UNIT_SIZE
    exp_zero = (exp["phy"] == 0) & (exp["size"] == 0) & (exp["tags"] == 0)
    got_zero = (got["phy"] == 0) & (got["size"] == 0) & (got["tags"] == 0)
    local_end = max(0, queue_end - first)
    readable = (got["phy"] >= 0) & (got["size"] > 0)  # the broker reads units while offset >= 0 && size > 0
    unreadable_after = np.flatnonzero(~readable[local_end:])
    run_end = local_end + (int(unreadable_after[0]) if len(unreadable_after) else len(got) - local_end)
    idx = np.arange(len(got))
    stale = differ & exp_zero & ~got_zero & (idx >= run_end)
    for i in np.flatnonzero(differ & ~stale).tolist():
        e, g = exp[i], got[i]
        where = {"queue": f"{topic}/{queue_id}", "entry": first + i, "byte_offset": i * CQ_UNIT_SIZE}
        if got_zero[i]:
            if pointers.in_flight(int(e["phy"])):
                out.add_in_flight(art, "missing_entry")
            else:
                out.add(art, "missing_entry", rel, **where, expected=_cq_entry(e), found=_cq_entry(g))
            continue
        if exp_zero[i] and pointers.in_flight(int(g["phy"])):  # dispatched while this check ran
            out.add_in_flight(art, "extra_entry")
            continue
        points_at = pointers.classify(int(g["phy"]), int(g["size"]), (topic, queue_id, first + i))
        if exp_zero[i]:
            out.add(art, "extra_entry", rel, **where, found=_cq_entry(g), points_at=points_at)
        else:
            fields = [name for key, name in CQ_FIELDS if e[key] != g[key]]
            out.add(art, "entry_differs", rel, **where, fields=fields, expected=_cq_entry(e), found=_cq_entry(g),
                    points_at=points_at)
    if stale.any():
        at = np.flatnonzero(stale)
        out.add(art, "stale_bytes", rel, count=1, queue=f"{topic}/{queue_id}", entry=first + int(at[0]),
                byte_offset=int(at[0]) * CQ_UNIT_SIZE, units=int(len(at)),
                detail=f"{len(at)} non-zero units past the queue's logical end (entry {queue_end}) "
                       f"and past the first unit the broker stops at")


def _expired_units(exp: np.ndarray, got: np.ndarray, pointers: PointerCheck, out: Findings) -> np.ndarray:
    """The units before the first one the scan gives, where a rebuild puts its fillers: those the broker keeps of the
    log's expired head (a queue's first remaining file: ConsumeQueue.deleteExpiredFile keeps it whole), and with
    verify --since those the earlier verify checked; counted apart, not findings."""
    filler = (exp["phy"] == 0) & (exp["size"] == PRE_BLANK_SIZE) & (exp["tags"] == 0) & (got["size"] > 0)
    expired = filler & pointers.expired(got["phy"])
    earlier = filler & pointers.checked_earlier(got["phy"])
    out.add_expired("consumequeue", "units", int(expired.sum()))
    out.add_earlier("consumequeue", "units", int(earlier.sum()))
    return expired | earlier


def _file_before(units: np.ndarray, pointers: PointerCheck, out: Findings) -> bool:
    """Whether every used unit of a file the scan gives none for points below where this check starts: into the
    log's expired head (the clean service keeps a queue's last file however old, and deletes the rest only when it
    runs), or with verify --since into what the earlier verify checked. Counted apart when so."""
    used = ~((units["phy"] == 0) & (units["size"] == 0) & (units["tags"] == 0))
    phy = units["phy"][used]
    if not used.any() or not bool((units["size"][used] > 0).all()):
        return False
    records = int(np.count_nonzero(used & (units["size"] != PRE_BLANK_SIZE)))  # fillers are no units of records
    if bool(pointers.expired(phy).all()):
        out.add_expired("consumequeue", "files")
        out.add_expired("consumequeue", "units", records)
        return True
    if bool((pointers.expired(phy) | pointers.checked_earlier(phy)).all()):
        out.add_earlier("consumequeue", "files")
        out.add_earlier("consumequeue", "units", records)
        return True
    return False


HOLE_ALIGN = 4096  # a filesystem keeps data in blocks: the hole after a file's last unit starts at a block edge


def _equal_up_to_a_hole(loc: Location, expected: bytes, file_size: int) -> bool:
    """The file equals `expected` followed by zeros, proven reading only up to the block after `expected` ends: the
    rest is a hole of a sparse local file (a queue of a few hundred units in a 6 MB file; 12,000 queues would
    otherwise read and scan 72 GB of zeros). False when that cannot be shown this way (the full comparison
    decides then)."""
    head = min(file_size, -(-len(expected) // HOLE_ALIGN) * HOLE_ALIGN)
    if head >= file_size or loc.size() != file_size or not loc.is_hole(head, file_size):
        return False
    disk = loc.read_range(0, head)
    return len(disk) == head and bytes(disk) == expected + bytes(head - len(expected))


def check_cq(task: CqCheckTask) -> Findings:
    """Compare every file of the task's runs with the store; files the commit log implies none for
    inside the runs (and the task's extra_files) are compared with zeros."""
    out = Findings()
    b = task.build
    file_size = b.file_size
    seen: dict[tuple[str, int], set[int]] = defaultdict(set)
    for f in cq_file_bytes(b, trim=True):
        item, start, data, entries = f.item, f.start, f.data, f.entries
        key = (item.topic, item.queue_id)
        seen[key].add(start)
        rel = cq_rel(item.topic, item.queue_id, file_name(start))
        loc = b.out.child(item.topic, str(item.queue_id), file_name(start))
        end = task.queue_ends.get(key, 0)
        odd = loc.not_regular()
        if not odd and not loc.exists() and task.pointers.in_flight(_first_phy(data, file_size)):
            out.add_in_flight("consumequeue", "missing_file")  # a file the broker has not created yet
            continue
        if odd or not loc.exists():
            out.add("consumequeue", "missing_file", rel, queue=f"{item.topic}/{item.queue_id}",
                    entry=start // CQ_UNIT_SIZE, entries=entries,
                    detail=(f"{odd} in place of the file" if odd else "file missing")
                    + f": {entries} entries from entry {start // CQ_UNIT_SIZE} on")
            continue
        out.files_checked += 1
        if _equal_up_to_a_hole(loc, data, file_size):
            continue
        disk, size = _head(loc)
        compare_cq_file(data, disk, rel, item.topic, item.queue_id, start, file_size, end, task.pointers, out, size)
    extra: list[tuple[str, int, str]] = list(task.extra_files)
    for item in b.items:
        qdir = b.out.child(item.topic, str(item.queue_id))
        for info in qdir.list():
            if qdir.child(info.base_name).not_regular():
                continue  # reported by disk_cq_files
            start = parse_file_name(info.base_name)
            start = -1 if start is None else start
            lo, hi = run_range(item)
            if task.pointers.checked_from and seen[(item.topic, item.queue_id)]:  # --since: older files not read
                lo = max(lo, min(seen[(item.topic, item.queue_id)]))
            if lo <= start <= hi and start not in seen[(item.topic, item.queue_id)]:
                extra.append((item.topic, item.queue_id, info.base_name))
    for topic, qid, name in extra:
        rel = cq_rel(topic, qid, name)
        data, size = _head(b.out.child(topic, str(qid), name))
        units = unpack_entries(data)
        if _file_before(units, task.pointers, out):
            continue
        used = int((~((units["phy"] == 0) & (units["size"] == 0) & (units["tags"] == 0))).sum())
        out.add("consumequeue", "extra_file", rel, queue=f"{topic}/{qid}", entry=int(name) // CQ_UNIT_SIZE,
                units=used, detail=f"the commit log implies no such file ({used} non-zero units)")
        out.files_checked += 1
        compare_cq_file(None, data, rel, topic, qid, int(name), file_size, task.queue_ends.get((topic, qid), 0),
                        task.pointers, out, size)
    return out


def _head(loc: Location) -> tuple[bytes, int]:
    """A file's bytes up to the end of its last data extent (the zeros of a sparse file's hole after it are not read:
    12,000 queues of 6 MB files would read 72 GB) and its size."""
    data = read_data(loc)
    return data, (loc.size() if is_local(loc) else len(data))


def run_range(item: QueueFiles) -> tuple[int, int]:
    """The files a run's task answers for: its own, and for a placed queue every file before them too (its units may
    land below the files its queue offsets name: 5.x LMQ offsets used up without a unit)."""
    return (0 if item.placed else item.first_file), item.last_file


def _first_phy(data: bytes, file_size: int) -> int:
    """phyOffset of a consume-queue file's first used unit (-1 when it has none)."""
    units = unpack_entries(data, file_size)
    used = units["phy"][units["size"] > 0]
    return int(used[0]) if len(used) else -1


def queue_ends(scan: ScanResult) -> dict[tuple[str, int], int]:
    """Per queue with consume-queue entries: one past its highest queue offset in the valid commit log."""
    q = scan.queue_table()
    sel = np.flatnonzero(q.cq_rows > 0)
    return dict(zip(zip(q.topic.take(to_arrow(sel)).to_pylist(), q.queue_id[sel].tolist()),
                    np.maximum(q.max_offset[sel] + 1, 0).tolist()))


def disk_cq_files(cq_dir: Location, out: Findings) -> list[tuple[str, int, str]]:
    """(topic, queueId, name) of every consume-queue file in the store; anything else is reported but a double-write
    store's RocksDB database beside the queues (the store gate named it as not read)."""
    files = []
    listed = cq_dir.list()
    database = database_files([i.base_name for i in listed if i.type.name != "Directory"])
    for topic in listed:
        tdir = cq_dir.child(topic.base_name)
        if topic.base_name in database:
            continue
        if topic.type.name != "Directory":
            out.add("consumequeue", "unexpected_file", f"consumequeue/{topic.base_name}",
                    detail="a file where a topic directory belongs")
            continue
        for q in tdir.list():
            rel_q = f"consumequeue/{topic.base_name}/{q.base_name}"
            verdict = queue_dir_verdict(topic.base_name, q.base_name, q.type.name == "Directory")
            if verdict is not None:
                out.add("consumequeue", "unexpected_file", rel_q,
                        detail="not a queue directory the broker reads back: " + verdict[1])
                continue
            listed = tdir.child(q.base_name).list()
            starts = {parse_file_name(f.base_name) for f in listed} - {None}
            for f in listed:
                odd = tdir.child(q.base_name).child_kind(f)
                if odd or parse_file_name(f.base_name) is None:
                    why = broker_consequence(LogFile(f.base_name, f.size, "", odd or ""), None, starts,
                                             "consume-queue file")
                    out.add("consumequeue", "unexpected_file", f"{rel_q}/{f.base_name}",
                            detail=(f"{odd}, not a regular file" if odd else "not a 20-digit consume-queue file")
                            + f": {why}")
                    continue
                files.append((topic.base_name, int(q.base_name), f.base_name))
    return files


def plan_cq_checks(tasks: list[CqTask], scan: ScanResult, pointers: PointerCheck,
                   found: Findings) -> list[CqCheckTask]:
    """Wrap the rebuild's tasks; files on disk outside every planned run go to the tasks as extras."""
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for t in tasks:
        for item in t.items:
            key = (item.topic, item.queue_id)
            first, last = run_range(item)
            lo, hi = ranges.get(key, (first, last))
            ranges[key] = (min(lo, first), max(hi, last))
    if not tasks:
        return []
    ends = queue_ends(scan)
    outside = [(t, q, n) for t, q, n in disk_cq_files(tasks[0].out, found)
               if not ((t, q) in ranges and ranges[(t, q)][0] <= int(n) <= ranges[(t, q)][1])]
    if pointers.checked_from:  # verify --since: only files past a run the new records reach (older ones were checked)
        outside = [(t, q, n) for t, q, n in outside if (t, q) in ranges and int(n) > ranges[(t, q)][1]]
    checks = []
    for i, t in enumerate(tasks):
        keys = {(item.topic, item.queue_id) for item in t.items}
        mine = tuple(outside[i::len(tasks)])
        keys |= {(tp, q) for tp, q, _ in mine}
        checks.append(CqCheckTask(t, {k: ends[k] for k in keys if k in ends}, pointers, mine))
    return checks


def orphan_cq_task(cq_dir: Location, work: Location, file_size: int, pointers: PointerCheck,
                   found: Findings) -> list[CqCheckTask]:
    """When the commit log implies no consume queue at all, every file on disk is an extra."""
    files = tuple(disk_cq_files(cq_dir, found))
    if not files:
        return []
    return [CqCheckTask(CqTask(items=(), work=work, out=cq_dir, file_size=file_size), {}, pointers, files)]
