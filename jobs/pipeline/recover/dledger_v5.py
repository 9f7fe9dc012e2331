"""Spark side of `jobs.recover` on a 5.x DLedger-mode store (RocketMQ 5.3.3 + DLedger 0.3.1.2): gather the facts
`storage_format.recovery.dledger_v5.plan_dledger_v5` decides on; the plan and its output are the DLedger ones
(jobs.pipeline.recover.dledger: DLedgerRecoveryPlan, dledger_output).

1. DLedger's recovery walk (as for 4.x: one Spark task) and where start() dispatches from: the DLedger checkpoint's
   committedPos.
2. Abnormal: the data file the recovery's dispatch during load starts from, one scan (no CRC: start()'s dispatch
   checks none) from the earlier of that file and the reput start, the first body CRC that fails from that file on
   (checkCRCOnRecover: the load dispatch stops there) and the end 5.3.3 then computes.
3. Consume-queue load state and the scanned entries past each queue's end (or the cut point), the index keys from
   the last kept index file on.
"""
from __future__ import annotations

import datetime as dt
import struct
import time
from dataclasses import dataclass

from storage_format import dledger as fmt
from storage_format import recovery
from storage_format.markers import GenerationGuess
from storage_format.recovery import dledger_v5 as v5
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..scan import crc_audit
from ..scan.result import ScanResult
from ..scan.decode import list_segments, scan_store
from ..store.markers import StoreMarkers
from .dledger import (DLedgerRecoveryPlan, _committed, _committed_before, _Dispatch, _plan_warnings, _walk_member,
                      _Walked, dledger_dirs, plan_index_facts)
from .inputs import cq_tails, last_cq_record_offset, list_queues, load_queues, record_store_timestamp
from .plan import IndexPlan
from .gather import new_index_names

GENERATION = 5


def refuse_settings(settings: BrokerSettings) -> None:
    """What 5.3.3's DLedger recovery does differently under settings reput does not model: refused by name."""
    if settings.duplication_enable:
        raise recovery.RecoveryError("duplicationEnable=true in DLedger mode: 5.3.3's recovery then dispatches only "
                                     "records below the confirm offset during load, which reput does not model; "
                                     "recover without it set, or with the broker")


class Units:
    """Entry index -> (pos, size) from the DLedger index after DLedger's recovery (its rewritten units first), and
    the entry header at a data-file offset."""

    def __init__(self, walked: _Walked) -> None:
        self.walked = walked
        self.index = dict(walked.index_files)
        self.data = dict(walked.data)

    def unit(self, entry_index: int) -> tuple[int, int]:
        rw = self.walked.entries.index_rewrite
        if rw is not None and entry_index >= rw.from_index:
            raw = rw.units[(entry_index - rw.from_index) * fmt.INDEX_UNIT_SIZE:][:fmt.INDEX_UNIT_SIZE]
        else:
            f, at = divmod(entry_index * fmt.INDEX_UNIT_SIZE, fmt.INDEX_FILE_SIZE)
            uri = self.index.get(f * fmt.INDEX_FILE_SIZE)
            if uri is None:
                raise recovery.RecoveryError(f"the DLedger index has no unit for entry {entry_index}")
            raw = bytes(Location(uri).read_range(at, fmt.INDEX_UNIT_SIZE))
        _, pos, size, _, _ = struct.unpack(">iqiqq", raw.ljust(fmt.INDEX_UNIT_SIZE, b"\0"))
        return pos, size

    def end(self, entry_index: int) -> int:
        pos, size = self.unit(entry_index)
        return pos + size

    def entry_index_at(self, offset: int) -> int:
        """The index of the entry at a data-file offset; the one after the last entry at the write end."""
        e = self.walked.entries
        if offset >= e.write_end:
            return e.last_index + 1
        start = max(s for s in self.data if s <= offset)
        raw = bytes(Location(self.data[start]).read_range(offset - start, fmt.ENTRY_HEADER_SIZE))
        return fmt.read_entry_header(raw, 0).index


def dispatch_heads(walked: _Walked):
    """The first records of the data files DLedger's recovery keeps, newest first, read lazily."""
    gone = set(walked.entries.data_files_deleted)
    for start, uri in reversed(walked.data):
        if start not in gone:
            yield v5.dispatch_file_head(bytes(Location(uri).read_range(0, fmt.ENTRY_HEADER_SIZE
                                                                        + recovery.SEGMENT_HEAD_BYTES)), start)


def check_readable(scan: ScanResult, write_end: int, reput_from: int, committed_end: int) -> int:
    """Where RocketMQ's record checks stop the scan (the write end when they pass everything before it). Refused:
    a scan that reads past DLedger's write end, or a record start()'s dispatch cannot read (the broker logs '[BUG]'
    and skips data by a size it cannot trust)."""
    end = scan.end.offset if scan.end is not None else write_end
    if end > write_end:
        raise recovery.RecoveryError(f"RocketMQ's record walk reads on past DLedger's write end {write_end} (to "
                                     f"{end}: {scan.end.describe()}); 5.3.3's recovery dispatch would dispatch data "
                                     f"DLedger cut, which reput does not model")
    if end < write_end and reput_from <= end < committed_end:
        raise recovery.RecoveryError(f"the records the restarted broker dispatches, [{reput_from}, {committed_end}), "
                                     f"stop at {scan.end.describe()}: DLedger's recovery accepted that entry, but "
                                     f"RocketMQ's dispatch cannot read its record (the broker logs '[BUG]' and skips "
                                     f"data); reput does not guess")
    return min(end, write_end)


def load_dispatch(sc, scan: ScanResult, settings: BrokerSettings, choice: recovery.StartChoice, readable_end: int,
                  units: Units, quiet: bool) -> v5.LoadDispatch:
    """Where the load dispatch stops (RocketMQ's checks, the first failing body CRC with checkCRCOnRecover, DLedger's
    end) and the entries it walked in that last data file."""
    end, why = readable_end, ("DLedger's write end" if readable_end == units.walked.entries.write_end
                              else f"RocketMQ's record checks stop there ({scan.end.describe()})")
    if settings.check_crc_on_recover:
        bad = crc_audit.audit(sc, scan, settings, quiet, from_segment=choice.offset)
        first = min((b for b in bad.listed if b.offset < end), key=lambda b: b.offset, default=None)
        if first is not None:
            end, why = first.offset, f"the record's body CRC fails (checkCRCOnRecover): {first.detail}"
    last_file = max(s for s, _ in units.walked.data if s <= end)
    n = 0 if last_file >= end else units.entry_index_at(end) - units.entry_index_at(last_file)
    return v5.LoadDispatch(choice=choice, end=end, end_reason=why, last_file=last_file, entries_in_last_file=n)


def record_before(units: Units, entry_index: int, first: int) -> int | None:
    """Start of the record of the entry before `entry_index` (None when that is before `first`)."""
    if entry_index - 1 < max(first, 0):
        return None
    return units.unit(entry_index - 1)[0] + fmt.ENTRY_HEADER_SIZE


def plan_dledger_v5_recovery(sc, store: Location, settings: BrokerSettings, work: Location, *, split_size: int,
                             gen: GenerationGuess, full_index: bool = False, tz: dt.tzinfo = dt.timezone.utc,
                             quiet: bool = False, audit: bool = False,
                             dledger_reading: str | None = None) -> DLedgerRecoveryPlan:
    """Read a 5.x DLedger-mode store, run DLedger's recovery walk, gather the facts and apply RocketMQ 5.3.3's
    DLedger-mode recovery and restart; writes nothing."""
    refuse_settings(settings)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    dirs, markers = dledger_dirs(settings), StoreMarkers.read(store)
    walked = _walk_member(sc, store, settings, dirs, quiet)
    log = list_segments(store, settings)
    if any(not s.header for s in log):
        raise recovery.RecoveryError(f"{store.child('commitlog').uri}: plain commit-log segments beside "
                                     f"{dirs.name}/data/ (a store upgraded to DLedger mode): reput models 5.3.3's "
                                     f"DLedger recovery of a DLedger-only store; nothing is changed")
    timings["dledger_walk_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    d, facts, load = _gather(sc, store, settings, work, markers, walked, dirs, split_size, full_index,
                             dledger_reading, quiet, log)
    plan = v5.plan_dledger_v5(facts)
    index = d.index
    index.resume = plan.index_resume
    if isinstance(facts.index, recovery.IndexResumeFacts):
        index.new_names = new_index_names(index.kept, len(plan.index_resume.new_files), tz)
    timings["plan_s"] = time.monotonic() - t0
    q = plan.queues
    warnings = _plan_warnings(sc, store, settings, work, markers, d.dispatch, walked.entries, full_index, audit,
                              split_size, quiet, GENERATION)
    return DLedgerRecoveryPlan(
        store=store, settings=settings, generation=GenerationGuess(GENERATION, [*gen.evidence, v5.MODEL]),
        markers=markers, abnormal=markers.abort is not None, dirs=dirs, data=walked.data,
        index_files=walked.index_files, dledger_raw=walked.raw, plan=plan, queue_dirs=d.dispatch.queue_dirs,
        loads=d.dispatch.loads, states=q.states, truncate_queues=q.truncate_queues, max_phy_before=q.max_phy_before,
        reput_from=q.reput_from, index=index, checkpoint_after=plan.checkpoint, checkpoint_why=plan.checkpoint_why,
        scan=d.dispatch.scan, full_index=full_index, reading=d.reading, warnings=warnings, timings=timings,
        load_dispatch=None if load is None else load.to_dict())


@dataclass(frozen=True)
class _Gathered:
    """What _gather hands back beside the facts: the dispatch view the warnings read, the index plan, the reading."""

    dispatch: _Dispatch
    index: IndexPlan
    reading: fmt.CommittedReading


def _gather(sc, store: Location, settings: BrokerSettings, work: Location, markers: StoreMarkers, walked: _Walked,
            dirs, split_size: int, full_index: bool, dledger_reading: str | None, quiet: bool, log: list):
    """The facts of plan_dledger_v5: reput start, load dispatch, one scan, queues, index."""
    entries, units = walked.entries, Units(walked)
    reading, committed_index, committed_end = _committed(walked, settings, dledger_reading)
    log_min = min(s.start for s in log)
    reput_from, reput_why = v5.reput_start(entries, _committed_before(walked.raw["checkpoint"]), units.end, log_min)
    choice = None
    if markers.abort is not None:
        choice = v5.choose_dispatch_file([s for s, _ in walked.data], dispatch_heads(walked), markers.checkpoint,
                                         settings)
    scan_from = min(reput_from, choice.offset) if choice is not None else reput_from
    scan = scan_store(sc, store, settings, split_size=split_size, work=work, from_offset=scan_from,
                      label="DLedger dispatch", quiet=quiet, generation=GENERATION)
    readable = check_readable(scan, entries.write_end, reput_from, committed_end)
    load = None if choice is None else load_dispatch(sc, scan, settings, choice, readable, units, quiet)
    skipped: list[str] = []
    queue_dirs = {q.key: q for q in list_queues(store, skipped)}
    loads = load_queues(sc, list(queue_dirs.values()), settings.consume_queue_file_size, quiet, GENERATION)
    cut_at = load.computed_end if load is not None else entries.write_end
    tails = cq_tails(scan, work, {k: min(ld.max_phy, cut_at) for k, ld in loads.items()})
    last = None if committed_index < 0 or reput_from >= committed_end else \
        units.unit(committed_index)[0] + fmt.ENTRY_HEADER_SIZE
    dispatch = _Dispatch(queue_dirs=queue_dirs, loads=loads, log=log, log_min=log_min, reput_from=reput_from,
                         scan=scan, last_dispatched=last, tails=tails, skipped=skipped)
    # 5.3.3 resumes the index from the last kept file's end (both dispatches skip only records below it)
    index, index_facts = plan_index_facts(sc, store, settings, work, markers, scan, skipped, committed_end, split_size,
                                          full_index, quiet, GENERATION,
                                          lambda kept: kept[-1].header.end_phy_offset if kept else 0)

    def last_cq_ts(lo: int, hi: int) -> int | None:
        at = last_cq_record_offset(scan, work, lo, hi)
        return record_store_timestamp(scan.segments, at) if at is not None else None

    facts = v5.DLedgerV5Facts(
        settings=settings, checkpoint=markers.checkpoint, entries=entries, load=load,
        last_loaded_record=None if load is None else record_before(units, units.entry_index_at(load.end),
                                                                   units.entry_index_at(load.start)),
        reput_from=reput_from, reput_why=reput_why, committed_index=committed_index, committed_end=committed_end,
        last_committed_record=last, one_member=dirs.peers <= 1, self_id=dirs.self_id,
        currterm_raw=walked.raw["currterm"],
        queues=recovery.QueueFacts(loads, tails, settings.consume_queue_file_size,
                                   lambda key, start: Location(queue_dirs[key].file_uri(start)).read_bytes()),
        index=index_facts, last_cq_record_ts=last_cq_ts, index_deleted=tuple(i.name for i in index.deleted))
    return _Gathered(dispatch, index, reading), facts, load
