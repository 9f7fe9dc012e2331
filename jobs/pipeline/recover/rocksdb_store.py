"""`recover` of a store whose consume queues are a RocksDB database (`storeType=defaultRocksDB`, RocketMQ 5.3.3):
the commit log, the index and the checkpoint as the broker's recovery leaves them, the database never written.

* The start segment is RocksDB's (storage_format.rocksdb_dispatch.next_start over the database's checkpoint: after a
  crash the newest segment whose first record's PHYSICALOFFSET <= it), the validating scan and the truncation point
  as for a plain store; segments past it go.
* The index: files newer than the checkpoint's indexMsgTimestamp go and the rest is indexed again from that segment
  (recovery.plan_sequence's index resume, as 5.3.3 does), or whole with --full-index.
* The database is copied as it is (OUT) or left alone (in place): no file consume queue is written. The broker
  re-dispatches it at its next start. After a crash OUT keeps `abort`: a normal start would dispatch only the records
  after the database's checkpoint and never the one starting exactly there (RocketMQ 5.3.3 run on the crash image
  without `abort` lost that unit); the abnormal start re-dispatches every record from the start segment. With
  --full-index the checkpoint's indexMsgTimestamp is the rebuilt index's end, so that start keeps every index file.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from storage_format import recovery
from storage_format.markers import ABORT, ABORT_BAK
from storage_format.rocksdb_dispatch import ABNORMAL, HEAD_BYTES, NextStart, next_start, read_segment_head
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.rocksdb_db import open_cq_database
from ..io.store_gate import store_cq_layout
from ..store.markers import StoreMarkers
from ..store.segments import list_segments
from .gather import ValidatedLog, _key_store_ts, _warnings, gather_index, new_index_names, validate_from
from .plan import RecoveryPlan
from ..io.background_copy import CopyItem
from .write import RecoveryOutput, plan_output


@dataclass(kw_only=True)
class RocksRecoveryPlan(RecoveryPlan):
    """A RocksDB store's recovery plan: the plain plan's parts, the database's checkpoint, what the broker's next
    start re-dispatches into the database, and whether OUT keeps `abort` for it."""

    db_dir: str = "consumequeue"
    db_checkpoint: int | None = None
    db_files: list[tuple[str, int]] = field(default_factory=list)  # (name, size) of the database's files
    broker_next: NextStart | None = None
    keep_abort: bool = False

    @property
    def changes(self) -> bool:
        return bool(self.segments_deleted or self.index_changes or self.checkpoint_changes
                    or (self.timer is not None and self.timer.changes))

    def to_dict(self) -> dict:
        d = super().to_dict()
        end = self.truncation.offset
        d["consumequeue"].update({"layout": "rocksdb", "database": f"{self.db_dir}/", "written": False,
                                  "note": "the RocksDB database is never written: the broker re-dispatches it at "
                                          "its next start"})
        d["rocksdb"] = {"checkpoint": self.db_checkpoint, "files": len(self.db_files),
                        "next_start": None if self.broker_next is None else self.broker_next.to_dict(end),
                        "abort_kept": self.keep_abort}
        if self.keep_abort:
            d["markers"] = {"abort": "kept: the broker's next start runs its abnormal recovery, which re-dispatches "
                                     "the database from the start segment (a normal start would skip the record at "
                                     "the database's checkpoint)", "abort.bak": "unchanged"}
        return d


def db_next_start(store: Location, segments, abnormal: bool, checkpoint: int | None) -> NextStart:
    """RocksDB's start rule over the store's segments (first record headers read newest first, as needed)."""
    heads = (read_segment_head(bytes(Location(s.path).read_range(0, HEAD_BYTES)), s.start) for s in reversed(segments))
    return next_start(abnormal, checkpoint, [s.start for s in segments], heads)


def _database(store: Location, settings: BrokerSettings) -> tuple[str, int | None, list[tuple[str, int]]]:
    """(database directory relative to the store, its checkpoint, its regular files with their sizes)."""
    rel = store_cq_layout(store, settings).db_dir or "consumequeue"
    db = store.child(rel)
    with open_cq_database(Path(db.path), db.uri) as cq:
        checkpoint = cq.checkpoint()
    files = sorted((i.base_name, i.size) for i in db.list() if i.type.name == "File")
    return rel, checkpoint, files


def plan_rocksdb_recovery(sc, store: Location, settings: BrokerSettings, work: Location, *, split_size: int,
                          generation: int | None = None, full_index: bool = False, tz: dt.tzinfo = dt.timezone.utc,
                          quiet: bool = False, audit: bool = False,
                          on_validated: Callable[[ValidatedLog], None] | None = None) -> RocksRecoveryPlan:
    """Read the store and its database's checkpoint, run the validating scan from RocksDB's start segment, and plan
    the commit log, index and checkpoint as recovery.plan_sequence does (no consume-queue files)."""
    t0 = time.monotonic()
    markers = StoreMarkers.read(store)
    markers.checkpoint  # a damaged checkpoint stops recovery here, before any work
    gen = markers.generation(generation)
    if gen.generation < 5:
        raise recovery.RecoveryError(f"{store.uri}: RocksDB consume queues exist from RocketMQ 5.2 on, but the store "
                                     f"reads as {gen.label}: pass --rocketmq-version 5")
    abnormal = markers.abort is not None
    db_dir, db_cp, db_files = _database(store, settings)
    segments = list_segments(store, settings)
    if not segments:
        raise recovery.RecoveryError(f"{store.uri}: the commit log has no segments; nothing to recover")
    broker_next = db_next_start(store, segments, abnormal, db_cp)
    log = validate_from(sc, store, settings, markers, gen.generation, work, split_size, quiet, abnormal, segments,
                      recovery.StartChoice(broker_next.segment, broker_next.why))
    if on_validated is not None:
        on_validated(log)
    timings = {"validate_s": time.monotonic() - t0}
    skipped: list[str] = []
    index, index_facts = gather_index(sc, log, markers.checkpoint, full_index, skipped)
    queues = recovery.QueueFacts({}, {}, settings.consume_queue_file_size, _no_queue_files)
    seq = recovery.plan_sequence(recovery.RecoveryFacts(
        generation=gen.generation, abnormal=abnormal, settings=settings, checkpoint=markers.checkpoint,
        segment_starts=tuple(s.start for s in segments), start_offset=log.start.offset,
        truncate_at=log.truncation.offset, last_valid_record=log.last_valid,
        last_dispatched_record=log.last_dispatched, dispatched_end=log.dispatched_end, queues=queues,
        index=index_facts, last_cq_record_ts=lambda _: None))  # RocksDB dispatch never sets logicsMsgTimestamp
    index.resume = seq.index_resume
    if isinstance(index_facts, recovery.IndexResumeFacts):
        index.new_names = new_index_names(index.kept, len(seq.index_resume.new_files), tz)
    checkpoint, why = seq.checkpoint, dict(seq.checkpoint_why)
    if abnormal and full_index and index.full_rebuild_scan is not None:
        checkpoint, why = _full_index_kept(checkpoint, why, index.full_rebuild_scan, index.full_rebuild_work)
    timings["index_plan_s"] = time.monotonic() - t0 - timings["validate_s"]
    return RocksRecoveryPlan(
        store=store, settings=settings, generation=gen, markers=markers, abnormal=abnormal, segments=segments,
        start=log.start, scan=log.scan, work=work, truncation=log.truncation, segments_deleted=seq.segments_deleted,
        queue_dirs={}, loads={}, states={}, truncate_queues=False, max_phy_before=-1,
        reput_from=seq.queues.reput_from, index=index, checkpoint_after=checkpoint, checkpoint_why=why,
        warnings=skipped + _warnings(sc, log, markers, audit), timings=timings, dispatch=log.dispatch_dict(),
        db_dir=db_dir, db_checkpoint=db_cp, db_files=db_files, broker_next=broker_next, keep_abort=abnormal)


def _no_queue_files(key, start) -> bytes:
    raise recovery.RecoveryError(f"no consume-queue file {key}/{start} in a RocksDB store")


def _full_index_kept(cp, why: dict, scan, work: Location):
    """--full-index on a crashed store that keeps `abort`: the checkpoint's indexMsgTimestamp is the rebuilt index's
    last key's store time (every file written whole), so the broker's abnormal start deletes none of them."""
    keys = sum(s.keys for s in scan.accepted)
    last = _key_store_ts(scan, work, keys - 1) if keys else None
    if last is None or last <= cp.index_msg_timestamp:
        return cp, why
    why = dict(why, index_msg_timestamp="the rebuilt index's last key's store time (--full-index with `abort` kept: "
                                        "the broker's abnormal start keeps index files not newer than it)")
    return replace(cp, index_msg_timestamp=last), why


def rocksdb_output(plan: RocksRecoveryPlan, with_copies: bool) -> RecoveryOutput:
    """What to write: the plain output without consume-queue files, the database's files copied verbatim (OUT), and
    `abort` (with `abort.bak` as it is) kept after a crash."""
    out = plan_output(plan, with_copies=with_copies)
    if with_copies:
        db = plan.store.child(plan.db_dir)
        out.copies += [CopyItem(f"{plan.db_dir}/{name}", db.child(name).uri, size) for name, size in plan.db_files]
    if plan.keep_abort:
        out.deleted = [p for p in out.deleted if p != ABORT]
        out.render_bytes.pop(ABORT_BAK, None)
        if with_copies:
            out.copies += [CopyItem(name, plan.store.child(name).uri, plan.store.child(name).size())
                           for name in (ABORT, ABORT_BAK) if plan.store.child(name).exists()]
    return out


def next_start_line(summary: dict) -> str | None:
    """One line for the console: what the broker's next start re-dispatches into the database."""
    d = summary.get("rocksdb")
    if not d or not d.get("next_start"):
        return None
    n = d["next_start"]
    return (f"RocksDB consume queues ({summary['consumequeue']['database']}, not written): {n['message']}"
            + ("; OUT keeps `abort` so that this start is the abnormal one" if d["abort_kept"] and
               n["rule"] == ABNORMAL else ""))
