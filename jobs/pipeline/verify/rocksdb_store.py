"""Verify, RocksDB consume queues (`storeType=defaultRocksDB`): both column families of the database against what
the commit log implies under RocksDB's dispatch rules (storage_format.rocksdb_dispatch). The `default` family is
compared in tasks, queue by queue and key range by key range (verify.rocksdb_units: memory flat in the message
count); the `offset` family (a "max" and maybe a "min" record per queue, the checkpoint) here on the driver, which
holds one small record per queue. The database is opened read-only through a private directory of links
(io.rocksdb_db): nothing is written into the store."""
from __future__ import annotations

import sys

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from storage_format.rocksdb_cq import (CHECKPOINT_KEY, MAX_KIND, OFFSET_CF, RocksCqFormatError, is_checkpoint_key,
                                       offset_key, parse_checkpoint_value, parse_offset_key, parse_offset_value,
                                       queue_key_range, unit_key)
from storage_format.rocksdb_dispatch import (MAX_DIFFERS, MAX_PENDING, NextStart, Position, QueueTail, max_verdict,
                                             next_start, read_segment_head, HEAD_BYTES)
from storage_format.consume_queue import CQ_UNIT_SIZE
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.rocksdb_db import open_cq_database
from ..outputs.build import CqTask, plan_cq
from ..runtime.contract import TaskRunner
from ..scan.result import ScanResult
from ..store.markers import StoreMarkers
from .findings import Findings
from .rocksdb_units import RocksCheckResult, RocksCheckTask, RocksRun

QueueKey = tuple[bytes, int]  # (topic bytes, queueId) as the database's keys hold them


@dataclass(kw_only=True)
class OffsetFamily:
    """The `offset` family as read: "max" and "min" records per queue, the checkpoint (None: absent)."""

    maxes: dict[QueueKey, Position] = field(default_factory=dict)
    mins: dict[QueueKey, Position] = field(default_factory=dict)
    checkpoint: int | None = None
    records: int = 0


def read_offset_family(db, label: str, found: Findings) -> OffsetFamily:
    """Every `offset` record; one that does not parse is a finding naming its key."""
    fam = OffsetFamily()
    for key, value in db.offset_items():
        fam.records += 1
        try:
            if is_checkpoint_key(key):
                fam.checkpoint = parse_checkpoint_value(value)
                continue
            k, v = parse_offset_key(key), parse_offset_value(value)
        except RocksCqFormatError as exc:
            found.add("consumequeue", "malformed_key", f"consumequeue/{OFFSET_CF}", key=key.hex(), column_family=OFFSET_CF,
                      detail=f"{label}: {exc}")
            continue
        (fam.maxes if k.kind == MAX_KIND else fam.mins)[(k.topic, k.queue_id)] = (v.phy_offset, v.queue_offset)
    return fam


def store_next_start(store: Location, scan: ScanResult, checkpoint: int | None) -> NextStart:
    """What the broker's next start re-dispatches: abnormal recovery when `abort` is present, else normal."""
    segs = scan.segments
    heads = (read_segment_head(bytes(Location(s.path).read_range(0, HEAD_BYTES)), s.start) for s in reversed(segs))
    return next_start(StoreMarkers.read(store).abort is not None, checkpoint, [s.start for s in segs], heads)


def plan_checks(scan: ScanResult, settings: BrokerSettings, work: Location, db_dir: Path, label: str,
                fam: OffsetFamily, start: NextStart, log_min: int, target: int) -> list[RocksCheckTask]:
    """The rebuild's consume-queue tasks as comparisons of key ranges (a queue's first run from the bottom of its
    range, its last up to the top), and one task for the key ranges between the expected queues."""
    builds = plan_cq(scan, settings, work, work.child("rocksdb-unused"), target_tasks=target, place_all=False)
    first: dict[tuple[str, int], int] = {}
    last: dict[tuple[str, int], int] = {}
    for b in builds:
        for item in b.items:
            key = (item.topic, item.queue_id)
            first[key] = min(first.get(key, item.first_file), item.first_file)
            last[key] = max(last.get(key, item.last_file), item.last_file)
    common = dict(db_dir=str(db_dir), label=label, segments=tuple(scan.segments), next_start=start, log_min=log_min)
    tasks = [RocksCheckTask(**common, build=b, runs=tuple(_run(item, b, first, last, fam) for item in b.items))
             for b in builds]
    ranges = sorted(queue_key_range(t.encode(), q) for t, q in first)
    bounds = [None] + [x for r in ranges for x in r] + [None]
    gaps = tuple((bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2))
    expected = {(t.encode(), q) for t, q in first}
    gap_max = {k: v[1] for k, v in fam.maxes.items() if k not in expected}
    return tasks + [RocksCheckTask(**common, gaps=gaps, gap_max=gap_max)]


def _run(item, build: CqTask, first: dict, last: dict, fam: OffsetFamily) -> RocksRun:
    """A run's key range: its files' queue offsets, widened to the queue's whole range at its ends."""
    topic, key = item.topic.encode(), (item.topic, item.queue_id)
    lower, upper = queue_key_range(topic, item.queue_id)
    if item.first_file > first[key]:
        lower = unit_key(topic, item.queue_id, item.first_file // CQ_UNIT_SIZE)
    if item.last_file < last[key]:
        upper = unit_key(topic, item.queue_id, (item.last_file + build.file_size) // CQ_UNIT_SIZE)
    db_max = fam.maxes.get((topic, item.queue_id))
    return RocksRun(topic=item.topic, queue_id=item.queue_id, lower=lower, upper=upper,
                    db_max_offset=None if db_max is None else db_max[1])


@dataclass(frozen=True, kw_only=True)
class RocksPlan:
    """The RocksDB check as planned on the driver: the database's column families and `offset` family, what the next
    start re-dispatches, and the tasks over the `default` family (run in verify's queue stage, beside the index
    files' checks)."""

    label: str
    families: list[str]
    fam: OffsetFamily
    start: NextStart
    log_min: int
    tasks: list[RocksCheckTask]
    unreferenced: list[str]  # *.sst files beside the database its MANIFEST does not reference: not read, named


def plan_rocksdb(sc: TaskRunner, store: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                 db_dir: Location, log_min: int, found: Findings) -> RocksPlan:
    """Open the database read-only on the driver for its families and `offset` records (findings into `found`), and
    plan the `default` family's tasks."""
    label = db_dir.uri
    with open_cq_database(Path(db_dir.path), label) as db:
        families = db.column_families()
        fam = read_offset_family(db, label, found)
        unreferenced = db.unreferenced_files()
    if unreferenced:
        print(f"reput verify: note: {len(unreferenced)} *.sst files in {label} are not in the database's MANIFEST "
              f"and are not read (the broker's next read-write open deletes them): {', '.join(unreferenced[:5])}"
              + (", ..." if len(unreferenced) > 5 else ""), file=sys.stderr)
    start = store_next_start(store, scan, fam.checkpoint)
    tasks = plan_checks(scan, settings, work, Path(db_dir.path), label, fam, start, log_min,
                        4 * sc.default_parallelism)
    return RocksPlan(label=label, families=families, fam=fam, start=start, log_min=log_min, tasks=tasks,
                     unreferenced=unreferenced)


def rocksdb_section(plan: RocksPlan, results: list[RocksCheckResult], scan: ScanResult, found: Findings) -> dict:
    """The tasks' results merged (findings into `found`), the "max" records and the checkpoint checked; the
    report's `rocksdb` section."""
    counts: Counter = Counter()
    tails: dict[tuple[str, int], QueueTail] = {}
    dispatched_end = 0
    for r in results:
        _merge(r, found, counts, tails)
        dispatched_end = max(dispatched_end, r.dispatched_end)
    fam, start = plan.fam, plan.start
    _check_maxes(fam, tails, plan.log_min, found, counts)
    log_end = scan.max_physical_offset
    return {"database": plan.label, "column_families": plan.families, **{k: counts[k] for k in sorted(counts)},
            "offset_records": fam.records, "max_records": len(fam.maxes), "min_records": len(fam.mins),
            "checkpoint": _checkpoint(fam.checkpoint, dispatched_end, start, log_end, found),
            "next_start": start.to_dict(log_end), "unreferenced_files": plan.unreferenced}


def _merge(r: RocksCheckResult, found: Findings, counts: Counter, tails: dict) -> None:
    found.merge(r.found)
    counts.update(r.counts)
    for key, tail in r.tails.items():
        tails[key] = tails[key].then(tail) if key in tails else tail


def _check_maxes(fam: OffsetFamily, tails: dict[tuple[str, int], QueueTail], log_min: int, found: Findings,
                 counts: Counter) -> None:
    """Each queue's "max" record against its units; "max" records of queues the log implies no unit for."""
    for (topic, qid), tail in sorted(tails.items()):
        raw = topic.encode()
        db_max = fam.maxes.get((raw, qid))
        verdict = max_verdict(tail, db_max)
        if verdict == MAX_PENDING:
            counts["max_records_rewritten_at_next_start"] += 1
        elif verdict == MAX_DIFFERS:
            found.add("consumequeue", "offset_record_differs", f"consumequeue/{topic}/{qid}/{OFFSET_CF}", queue=f"{topic}/{qid}",
                      key=offset_key(raw, MAX_KIND, qid).hex(), expected=_pos(tail.last), found=_pos(db_max),
                      detail="the queue's \"max\" record does not name its last unit" + (
                          "" if db_max is not None else " (no \"max\" record)"))
    seen = {(t.encode(), q) for t, q in tails}
    for (raw, qid), pos in sorted(fam.maxes.items()):
        if (raw, qid) in seen:
            continue
        topic = raw.decode("utf-8", "replace")
        if 0 <= pos[0] < log_min:
            counts["expired_max_records"] += 1
            continue
        found.add("consumequeue", "offset_record_differs", f"consumequeue/{topic}/{qid}/{OFFSET_CF}", queue=f"{topic}/{qid}",
                  key=offset_key(raw, MAX_KIND, qid).hex(), expected=None, found=_pos(pos),
                  detail="a \"max\" record for a queue the commit log implies no unit for")


def _pos(p: Position | None) -> dict | None:
    return None if p is None else {"phyOffset": p[0], "queueOffset": p[1]}


def _checkpoint(value: int | None, expected: int, start: NextStart, log_end: int, found: Findings) -> dict:
    """The dispatch checkpoint against the end of the last record with a unit: equal, behind (the next start
    re-dispatches, said), or past it (a finding)."""
    state = "absent" if value is None else "equal" if value == expected else "behind" if value < expected \
        else "ahead"
    out = {"value": value, "expected": expected, "state": state}
    if state in ("absent", "behind"):
        out["message"] = (f"the database's dispatch checkpoint ({'absent, read as 0' if value is None else value}) is "
                          f"behind the end of the last dispatched record ({expected}): {start.describe(log_end)}")
    if state == "absent" and expected == 0:
        out.pop("message", None)  # no record got a unit: nothing to dispatch
    if state == "ahead":
        found.add("consumequeue", "offset_record_differs", f"consumequeue/{OFFSET_CF}", key=CHECKPOINT_KEY.hex(),
                  expected=expected, found=value, detail=f"the dispatch checkpoint lies past the end of the last record with a unit ({expected}): the "
                         f"database holds dispatch state of a longer commit log")
    return out
