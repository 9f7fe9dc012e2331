"""Spark side of `jobs.recover` on a DLedger-mode store (enableDLegerCommitLog, 4.9.8 + DLedger 0.3.1.2): gather
the facts `storage_format.recovery.dledger.plan_dledger` decides on, and hand `recovery_write` what to write.

1. DLedger's own recovery walk over the data files (one Spark task: it reads at most the last three files).
2. Consume-queue load state (Spark tasks, as for a plain store), the cut at the DLedger write end, and where
   start() resumes dispatch (the queues' highest physical offset).
3. The records the restart dispatches, [resume point, committed position): the read path's scan (scan_store over
   the DLedger data files) from the data file holding the resume point, its consume-queue rows and index keys cut
   as for a plain recovery (recovery_inputs); --full-index: the rebuild stage's index from a scan of every file.
The written output: consume queues, index and checkpoint as for a plain store (recovery_write), plus the
DLedger member's directory: data files past the write end deleted, the DLedger index cut/rewritten, the
DLedger checkpoint (and currterm for a one-member group) as the restarted broker leaves them. The plan
(DLedgerRecoveryPlan), the member's walk and that output are also 5.x's (jobs.pipeline.recover.dledger_v5).
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Callable

from storage_format import dledger as fmt
from storage_format import recovery
from storage_format.errors import StoreFormatError
from storage_format.log_sources import LogFile, broker_consequence
from storage_format.markers import GenerationGuess
from storage_format.recovery import dledger as drules
from storage_format.segment_names import parse_segment_name, segment_name
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from .inputs import (cq_tails, last_cq_record_offset, list_index_files, list_queues, load_queues,
                     record_store_timestamp, tail_keys)
from ..store.markers import StoreMarkers
from .plan import CommonPlan, IndexPlan
from . import dledger_audit
from .gather import new_index_names
from .write import CopyItem, RecoveryOutput, plan_output
from ..scan.decode import list_segments, scan_store
from ..scan.result import ScanResult
from ..runtime.tasks import run_tasks



# ---------------------------------------------------------------------------------------------
# the member's directory


@dataclass(frozen=True)
class DLedgerDirs:
    """The DLedger member's directory in the store (dledger-<selfId>) and its data and index directories."""

    name: str
    self_id: str
    peers: int

    def home(self, store: Location) -> Location:
        return store.child(self.name)

    def data(self, store: Location) -> Location:
        return self.home(store).child(fmt.DATA_DIR)

    def index(self, store: Location) -> Location:
        return self.home(store).child(fmt.INDEX_DIR)


def dledger_dirs(settings: BrokerSettings) -> DLedgerDirs:
    """The member's files (the store gate found dLegerSelfId, from the config or the one dledger-*/data/); DLedger
    data outside the store root (storePathDLedgerCommitLog) and LMQ dispatch are refused by name."""
    path = (settings.store_path_dledger_commit_log or "").strip()
    if path:
        raise recovery.RecoveryError(f"storePathDLedgerCommitLog={path}: DLedger data outside the store; recover does "
                                     f"not implement it (OUT and the in-place switch cover the store root only)")
    if settings.enable_multi_dispatch:
        raise recovery.RecoveryError("enableMultiDispatch=true in DLedger mode: recover does not implement the LMQ "
                                     "dispatch of a DLedger store")
    self_id = settings.d_leger_self_id or ""
    return DLedgerDirs(fmt.home_dir(self_id), self_id, fmt.peer_count(settings.d_leger_peers))


def _files(loc: Location, size: int, what: str) -> list[tuple[int, str]]:
    """(start, URI) of the 20-digit files of a directory, each of `size` bytes (the broker refuses others)."""
    out = []
    if not loc.is_dir():
        return out
    listed = loc.list()
    starts = {parse_segment_name(info.base_name) for info in listed} - {None}
    for info in listed:
        start = parse_segment_name(info.base_name)
        odd = loc.child_kind(info)
        if start is None or odd:  # DLedger's MmapFileList.load takes every entry: it never skips one
            why = broker_consequence(LogFile(info.base_name, info.size, "", odd or ""), size, starts, what)
            kind = f"{odd}, not a regular file" if odd else f"not a {what} name (the 20-digit start offset)"
            raise StoreFormatError(loc.child(info.base_name).uri, 0, f"{kind}: {why}; move it out of the directory")
        if info.size != size:
            raise StoreFormatError(loc.child(info.base_name).uri, min(info.size, size),
                                   f"{what} is {info.size} bytes, expected {size}: DLedger refuses to load it "
                                   f"('length not matched message store config value')")
        out.append((start, loc.child(info.base_name).uri))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# Spark tasks


@dataclass(frozen=True)
class WalkTask:
    """DLedger's recovery walk over the data files, checking the index (one task)."""

    data: tuple[tuple[int, str], ...]
    index: tuple[tuple[int, str], ...]
    file_size: int


def _walk(task: WalkTask) -> drules.EntryRecovery | Exception:
    """DLedgerMmapFileStore.recover in a Spark task; a refusal comes back as the error."""
    data, index = dict(task.data), dict(task.index)
    try:
        return drules.walk_entries(list(data), task.file_size,
                                   lambda s, pos, n: bytes(Location(data[s]).read_range(pos, n)),
                                   list(index), lambda s, pos, n: bytes(Location(index[s]).read_range(pos, n)))
    except (recovery.RecoveryError, StoreFormatError) as err:
        return err


# ---------------------------------------------------------------------------------------------
# the plan


@dataclass(kw_only=True)
class DLedgerRecoveryPlan(CommonPlan):
    """What `jobs.recover` does to a DLedger-mode store, with the facts behind it; `to_dict` is the dry run.
    Shaped like RecoveryPlan where recover/write.py reads it (`segments`: only an upgraded store's plain ones)."""

    dirs: DLedgerDirs
    data: list[tuple[int, str]]
    index_files: list[tuple[int, str]]
    dledger_raw: dict[str, bytes | None]
    plan: drules.DLedgerPlan
    scan: ScanResult
    full_index: bool
    reading: fmt.CommittedReading
    load_dispatch: dict | None = None  # 5.x: what the recovery dispatches during load (None: 4.x, nothing)
    segments: list = field(default_factory=list)  # plain segments of an upgraded store: never changed, copied
    segments_deleted: list = field(default_factory=list)

    @property
    def index_changes(self) -> bool:
        """True when recovery deletes, appends to or creates index files."""
        r = self.index.resume
        return bool(self.index.deleted or (r is not None and (r.appended or r.new_files)))

    def _rewritten_index_files(self) -> list[int]:
        """Start offsets of the DLedger index files DLedger's unit rewrite writes into (and keeps)."""
        rw = self.plan.entries.index_rewrite
        if rw is None:
            return []
        gone = set(self.plan.entries.index_files_deleted)
        return [s for s in rw.files() if s not in gone]

    def dledger_rewritten(self) -> list[str]:
        """Member-directory files whose bytes change (store-relative names; nothing is read or rendered)."""
        names = [f"{self.dirs.name}/{k}" for k, v in self.plan.dledger_files.items() if self.dledger_raw.get(k) != v]
        return sorted(names + [f"{self.dirs.name}/index/{segment_name(s)}" for s in self._rewritten_index_files()])

    def dledger_renders(self) -> dict[str, bytes]:
        """The bytes of the member-directory files that change (a rewritten DLedger index file is 160 MiB: this
        renders them, once, for the writer)."""
        out = {f"{self.dirs.name}/{k}": v for k, v in self.plan.dledger_files.items() if self.dledger_raw.get(k) != v}
        rw = self.plan.entries.index_rewrite
        uris = dict(self.index_files)
        for start in self._rewritten_index_files():
            old = None if start in rw.fresh_files or start not in uris else Location(uris[start]).read_bytes()
            out[f"{self.dirs.name}/index/{segment_name(start)}"] = rw.render(start, old)
        return out

    def dledger_deleted(self) -> list[str]:
        """Member-directory files recovery deletes (data files past the write end, index files cut away)."""
        e = self.plan.entries
        return ([f"{self.dirs.name}/data/{segment_name(s)}" for s in e.data_files_deleted]
                + [f"{self.dirs.name}/index/{segment_name(s)}" for s in e.index_files_deleted])

    @property
    def changes(self) -> bool:
        """True when recovery changes any file of the store."""
        rewritten, created, deleted = self.cq_changes()
        return bool(self.abnormal or rewritten or created or deleted or self.index_changes or self.checkpoint_changes
                    or self.dledger_rewritten() or self.dledger_deleted())

    def _index_dict(self) -> dict:
        """The plan's "index" part: what happens to the index files (the broker's resume, or --full-index)."""
        cp0 = self.markers.checkpoint
        idx = self.index
        r = idx.resume
        app = r.appended if r is not None else None
        index = {"files_before": len(idx.kept) + len(idx.deleted),
                 "checkpoint_index_msg_timestamp": cp0.index_msg_timestamp,
                 "mode": "full rebuild (--full-index)" if self.full_index else "resume (broker rules)",
                 "deleted_newer_than_checkpoint": [f.name for f in idx.deleted] if not self.full_index else [],
                 "deleted": [f.name for f in idx.deleted],
                 "last_kept": idx.kept[-1].name if idx.kept else None,
                 "appended_to": None if app is None else {"file": app.appends_to, "entries": len(app.all_keys())},
                 "to_create": [] if r is None else [
                     {"file": n, "entries": len(t.all_keys()), "inherits_end_timestamp": t.inherited.end_timestamp,
                      "inherits_end_phy_offset": t.inherited.end_phy_offset}
                     for n, t in zip(idx.new_names, r.new_files)],
                 "boundary_records_indexed_again": [] if r is None else r.boundary_reindexed}
        if self.full_index:
            index["full_index_note"] = ("--full-index (not the broker's behaviour): every committed record is "
                                        "indexed again, including those the broker never re-indexes")
        return index

    def continued_to(self) -> tuple[None, str]:
        """A recovered DLedger-mode store is not continued by `rebuild --since`: DLedger's recovery rewrites the
        data files' tail and leaves keys unindexed (verify.index_gap), which a continuation cannot tell apart."""
        return None, ("a recovered DLedger-mode store (DLedger's recovery rewrites its data files' tail and leaves "
                      "keys unindexed)")

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (the --dry-run output), in the plain plan's shape plus "dledger"."""
        e, cp0 = self.plan.entries, self.markers.checkpoint
        holding = next((s for s, _ in self.data if s <= e.write_end < s + self.settings.mapped_file_size_commitlog),
                       None)
        index = self._index_dict()
        stop = e.stop
        return {
            "job": "recover", "store": self.store.uri, "mode": "dledger",
            "generation": self.generation.label, "generation_evidence": self.generation.evidence,
            "state": "unclean (abort file present)" if self.abnormal else "clean (no abort file)",
            "recovery": "dledger",
            "changes": self.changes,
            "checkpoint": {"before": cp0.to_dict(), "after": self.checkpoint_after.to_dict(),
                           "why": self.checkpoint_why, "min_timestamp": cp0.min_timestamp,
                           "min_timestamp_index": cp0.min_timestamp_index},
            "start_segment": {"offset": e.walk_from, "name": segment_name(e.walk_from),
                              "reason": "DLedger recovery walks from the third-last data file (or the newest "
                                        "earlier one whose first entry matches its index unit)",
                              "segments_looked_at": len(e.precheck), "looked_at": list(e.precheck)},
            "validation": {"from_offset": e.walk_from, "crc": False, "splits": 1, "records": e.entries_walked,
                           "segments": len(self.data)},
            "truncation": {"offset": e.write_end, "reason": stop.reason, "detail": stop.detail,
                           "invalid_record_offset": stop.offset if stop.reason == drules.STOP_BAD_ENTRY else None,
                           "segment": None if holding is None else segment_name(holding),
                           "position_in_segment": None if holding is None else e.write_end - holding},
            "commitlog": {"segments": len(self.data), "to_delete": [segment_name(s) for s in e.data_files_deleted],
                          "note": f"DLedger data files in {self.dirs.name}/data/: the file holding the write end "
                                  f"keeps its bytes; files after it are deleted"},
            "consumequeue": self._consumequeue_dict(),
            "index": index,
            "load_dispatch": self._load_dispatch_dict(),
            "dispatch": self.plan.dispatch,
            "post_start_redispatch": {"from_offset": self.reput_from, "to_offset": self.plan.dispatch["to_offset"],
                                      "rule": self.plan.dispatch["rule"]},
            "dledger": {"member": self.dirs.name, "peers": self.dirs.peers, **e.to_dict(),
                        "committed_index": self.plan.dispatch["committed_index"],
                        "committed_position": self.plan.dispatch["to_offset"], "reading": self.reading.to_dict(),
                        "checkpoint_committed_index_before": _committed_before(self.dledger_raw.get("checkpoint")),
                        "entries_past_checkpoint_committed_index": _past(e.last_index,
                                                                         self.dledger_raw.get("checkpoint")),
                        "files_rewritten": self.dledger_rewritten(), "files_deleted": self.dledger_deleted(),
                        "records_scanned_from_resume_point": self.scan.message_records, "notes": self.plan.notes},
            "markers": {"abort": "removed" if self.abnormal else "absent",
                        "abort.bak": ("crash-time abort content (5.x createTempFile backs it up)"
                                      if self.abnormal and self.generation.generation >= 5 else "unchanged"),
                        **({"compaction/position-checkpoint": COMPACTION_NOTE} if self.generation.generation >= 5
                           else {})},
            "warnings": self.warnings,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


    def _load_dispatch_dict(self) -> dict:
        """The plan's "load_dispatch" part: 5.x's dispatch during an abnormal recovery's load, or why none runs."""
        if self.load_dispatch is not None:
            return self.load_dispatch
        why = ("4.9.8's DLedger recovery dispatches nothing during load" if self.generation.generation < 5 else
               "a clean shutdown (no abort file): 5.x's normal DLedger recovery dispatches nothing during load")
        return {"from_offset": None, "to_offset": None, "reason": why}


COMPACTION_NOTE = ("not written: the 5.x compaction service writes its position checkpoint at a clean shutdown "
                   "(copied when the store has one)")


def _committed_before(raw: bytes | None) -> int | None:
    """committedIndex in the DLedger checkpoint as found."""
    if raw is None:
        return None
    try:
        return fmt.parse_checkpoint(raw.decode("latin-1")).get("committedIndex")
    except ValueError:
        return None


def _past(last_index: int, raw: bytes | None) -> int | None:
    """Entries after the checkpoint's committedIndex (the issue asks to report them)."""
    c = _committed_before(raw)
    return None if c is None else max(0, last_index - c)


def _read_opt(loc: Location) -> bytes | None:
    return loc.read_bytes() if loc.exists() else None


@dataclass(frozen=True)
class _Walked:
    """Step 1: the member's files as found and DLedger's recovery walk over them."""

    data: list[tuple[int, str]]  # (start, uri) of the data files
    index_files: list[tuple[int, str]]
    raw: dict[str, bytes | None]  # checkpoint, checkpoint.bak, currterm, currterm.bak
    entries: drules.EntryRecovery


@dataclass(frozen=True, kw_only=True)
class _Dispatch:
    """Step 2: the queues' load state, where start() resumes dispatch, and the scan of what it dispatches."""

    queue_dirs: dict
    loads: dict
    log: list
    log_min: int
    reput_from: int
    scan: ScanResult
    last_dispatched: int | None
    tails: dict
    skipped: list[str]  # store entries the broker skips (and so does recovery), named as warnings


def plan_dledger_recovery(sc, store: Location, settings: BrokerSettings, work: Location, *, split_size: int,
                          gen: GenerationGuess, full_index: bool = False,
                          tz: dt.tzinfo = dt.timezone.utc, quiet: bool = False, audit: bool = False,
                          dledger_reading: str | None = None) -> DLedgerRecoveryPlan:
    """Read a 4.x DLedger-mode store (`gen`: the generation and its evidence), run DLedger's recovery walk, gather
    the facts and apply RocketMQ 4.9.8's DLedger-mode recovery and restart; writes nothing."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    dirs, markers = dledger_dirs(settings), StoreMarkers.read(store)
    walked = _walk_member(sc, store, settings, dirs, quiet)
    timings["dledger_walk_s"] = time.monotonic() - t0
    reading, committed_index, committed_end = _committed(walked, settings, dledger_reading)
    t0 = time.monotonic()
    limit = None if committed_end >= walked.entries.write_end else committed_end
    d = _dispatch(sc, store, settings, work, walked, committed_end, limit, split_size, quiet)
    timings["consumequeue_plan_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    index, index_facts = plan_index_facts(sc, store, settings, work, markers, d.scan, d.skipped, limit, split_size,
                                          full_index, quiet, 4, lambda kept: d.reput_from)
    cq_size = settings.consume_queue_file_size

    def last_cq_ts(offset: int) -> int | None:
        last = last_cq_record_offset(d.scan, work, offset)
        return record_store_timestamp(d.scan.segments, last) if last is not None else None

    facts = drules.DLedgerFacts(
        abort_present=markers.abort is not None, settings=settings, checkpoint=markers.checkpoint,
        log_starts=tuple(sorted({d.log_min} | {s for s, _ in walked.data})), entries=walked.entries,
        committed_index=committed_index, committed_end=committed_end, one_member=dirs.peers <= 1, self_id=dirs.self_id,
        currterm_raw=walked.raw["currterm"], queues=recovery.QueueFacts(d.loads, d.tails, cq_size, _cq_reader(d)),
        tail_from=d.reput_from, last_dispatched_record=d.last_dispatched, index=index_facts,
        last_cq_record_ts=last_cq_ts, index_deleted=tuple(i.name for i in index.deleted))
    plan = drules.plan_dledger(facts)
    index.resume = plan.index_resume
    if isinstance(index_facts, recovery.IndexResumeFacts):
        index.new_names = new_index_names(index.kept, len(plan.index_resume.new_files), tz)
    timings["index_plan_s"] = time.monotonic() - t0
    q = plan.queues
    warnings = _plan_warnings(sc, store, settings, work, markers, d, walked.entries, full_index, audit, split_size,
                              quiet, 4)
    return DLedgerRecoveryPlan(
        store=store, settings=settings, generation=GenerationGuess(4, [*gen.evidence, DLEDGER_MODEL]), markers=markers,
        abnormal=markers.abort is not None, dirs=dirs, data=walked.data, index_files=walked.index_files,
        dledger_raw=walked.raw, plan=plan, queue_dirs=d.queue_dirs, loads=d.loads, states=q.states,
        truncate_queues=q.truncate_queues, max_phy_before=q.max_phy_before, reput_from=q.reput_from, index=index,
        checkpoint_after=plan.checkpoint, checkpoint_why=plan.checkpoint_why, scan=d.scan, full_index=full_index,
        reading=reading, warnings=warnings, timings=timings, segments=[x for x in d.log if not x.header])


DLEDGER_MODEL = "DLedger mode: modelled on RocketMQ 4.9.8 with DLedger 0.3.1.2"


def _walk_member(sc, store: Location, settings: BrokerSettings, dirs: "DLedgerDirs", quiet: bool) -> _Walked:
    """The data files as every job lists them (store.segments: a stray entry, a gap, a wrong size refused alike),
    the DLedger index files, checkpoint and currterm, and DLedger's recovery walk (one Spark task)."""
    data = [(s.start, s.path) for s in list_segments(store, settings) if s.header]
    index_files = _files(dirs.index(store), fmt.INDEX_FILE_SIZE, "DLedger index file")
    raw = {name: _read_opt(dirs.home(store).child(name)) for name in ("checkpoint", "checkpoint.bak", "currterm",
                                                                      "currterm.bak")}
    if not data:
        raise recovery.RecoveryError(f"{dirs.data(store).uri} holds no data file: the broker's first start in DLedger "
                                     f"mode recovers the plain commit log and closes it with a BLANK (the upgrade); "
                                     f"recover does not implement that step")
    walked = run_tasks(sc, [WalkTask(tuple(data), tuple(index_files), settings.mapped_file_size_commitlog)], _walk,
                       "DLedger recovery", quiet=quiet)[0]
    if isinstance(walked, Exception):
        raise walked
    return _Walked(data, index_files, raw, walked)


def _committed(walked: _Walked, settings: BrokerSettings, flag: str | None) -> tuple:
    """(the committed-position reading, committedIndex, its end offset) as the restarted broker settles them."""
    cp_committed = _committed_before(walked.raw["checkpoint"])
    reading = fmt.committed_reading(settings.d_leger_peers, cp_committed, flag)
    return (reading, *drules.committed_position(walked.entries, reading.reading, cp_committed, unit_ends(walked)))


def unit_ends(walked: _Walked):
    """entry index -> pos + size from its DLedger index unit as found (a committedIndex's unit)."""
    index_uris = dict(walked.index_files)

    def unit_end(entry_index: int) -> int:
        """pos + size of an entry from its DLedger index unit."""
        f, at = divmod(entry_index * fmt.INDEX_UNIT_SIZE, fmt.INDEX_FILE_SIZE)
        uri = index_uris.get(f * fmt.INDEX_FILE_SIZE)
        if uri is None:
            raise recovery.RecoveryError(f"the DLedger index has no unit for committedIndex {entry_index}")
        try:
            return fmt.committed_end(bytes(Location(uri).read_range(at, fmt.INDEX_UNIT_SIZE)))
        except ValueError as exc:
            raise StoreFormatError(uri, at, f"the unit of committedIndex {entry_index}: {exc}") from None
    return unit_end


def _cq_reader(d: _Dispatch):
    """read_cq(key, start) over the store's consume-queue files, as QueueFacts takes it."""
    return lambda key, start: Location(d.queue_dirs[key].file_uri(start)).read_bytes()


def _dispatch(sc, store: Location, settings: BrokerSettings, work: Location, walked: _Walked, committed_end: int,
              limit: int | None, split_size: int, quiet: bool) -> _Dispatch:
    """Consume-queue load state, the cut at the write end, where start() resumes dispatch (DLedgerCommitLog.
    getMinOffset: the plain segments' first offset in the upgraded mixed layout, else DLedger's), and the records
    it dispatches: the scan from the data file holding the resume point, dispatch limited to the committed
    position (the read path's decoder: entries, RocketMQ's record checks, consume-queue rows, keys)."""
    entries, skipped = walked.entries, []
    queue_dirs = {q.key: q for q in list_queues(store, skipped)}
    cq_size = settings.consume_queue_file_size
    loads = load_queues(sc, list(queue_dirs.values()), cq_size, quiet, 4)
    bare = recovery.QueueFacts(loads, {}, cq_size, lambda key, start: Location(queue_dirs[key].file_uri(start))
                               .read_bytes())
    log = list_segments(store, settings)
    log_min = min([s.start for s in log] or [0])
    reput_from = drules.dledger_reput_from({k: ld.max_phy for k, ld in loads.items()},
                                           drules.queues_after_cut(bare, entries.write_end), log_min,
                                           entries.write_end)
    scan = scan_store(sc, store, settings, split_size=split_size, work=work, from_offset=reput_from,
                      dispatch_limit=limit, label="DLedger dispatch", quiet=quiet, generation=4)
    if scan.end.offset < min(committed_end, entries.write_end) and reput_from < committed_end:
        raise recovery.RecoveryError(f"the records the restarted broker dispatches, [{reput_from}, {committed_end}), "
                                     f"stop at {scan.end.describe()}: DLedger's recovery accepted that entry, but "
                                     f"RocketMQ's dispatch cannot read its record (the broker logs '[BUG]' and skips "
                                     f"data); reput does not guess")
    last_valid = max((x.last_record_offset for x in scan.accepted if x.last_record_offset is not None), default=None)
    last_dispatched = last_valid if limit is None else scan.dispatch_stop().last_offset
    tails = cq_tails(scan, work, {k: ld.max_phy for k, ld in loads.items()})
    return _Dispatch(queue_dirs=queue_dirs, loads=loads, log=log, log_min=log_min, reput_from=reput_from, scan=scan,
                     last_dispatched=last_dispatched, tails=tails, skipped=skipped)


def plan_index_facts(sc, store: Location, settings: BrokerSettings, work: Location, markers: StoreMarkers,
                     scan: ScanResult, skipped: list[str], limit: int | None, split_size: int, full_index: bool,
                     quiet: bool, generation: int, resume_at: Callable[[list], int]) -> tuple[IndexPlan, object]:
    """The index files kept and deleted at load, and what the index side of the plan is decided from: off, a full
    rebuild (--full-index: a scan of every file up to `limit` for its keys), or the broker's resume from the last kept
    file with the keys from `resume_at(kept)` on (4.9.8: the reput position; 5.3.3: the last kept file's end)."""
    infos = list_index_files(store, settings, skipped) if settings.message_index_enable else []
    kept, deleted = recovery.index_files_after_load([i for i, _ in infos], markers.checkpoint,
                                                    markers.abort is not None)
    uris = {i.name: u for i, u in infos}
    if not settings.message_index_enable:
        return IndexPlan(kept=kept, deleted=deleted, uris=uris, resume=None, new_names=[]), recovery.IndexOff()
    if full_index:
        full_work = work.child("full-index")
        full = scan_store(sc, store, settings, split_size=split_size, work=full_work, with_cq=False,
                          dispatch_limit=limit, label="DLedger index keys", quiet=quiet, generation=generation)
        return (IndexPlan(kept=[], deleted=kept + deleted, uris=uris, resume=None, new_names=[],
                          full_rebuild_scan=full, full_rebuild_work=full_work),
                recovery.FullIndexRebuild(_rolled(full, full_work, settings)))
    return (IndexPlan(kept=kept, deleted=deleted, uris=uris, resume=None, new_names=[]),
            recovery.IndexResumeFacts(kept[-1] if kept else None, tail_keys(scan, work, resume_at(kept)),
                                      settings.max_index_num))


def _plan_warnings(sc, store: Location, settings: BrokerSettings, work: Location, markers: StoreMarkers,
                   d: _Dispatch, entries: drules.EntryRecovery, full_index: bool, audit: bool, split_size: int,
                   quiet: bool, generation: int) -> list[str]:
    """The plan's warnings: entries skipped, no checkpoint, --full-index, and the --dry-run audit (or what the
    dispatch scan found: negative queue ids, out-of-step queue offsets)."""
    warnings = list(d.skipped)
    if markers.checkpoint_raw is None:
        warnings.append("the store has no checkpoint file; the broker starts from zeros and so does reput")
    if full_index:
        warnings.append("--full-index: every committed record is indexed again (the broker would leave the records "
                        "between the last kept index file and the resume point unindexed)")
    if audit:
        warnings.extend(dledger_audit.audit(sc, store, settings, work, split_size, quiet, entries, generation))
    else:
        warnings.extend(p.describe() for p in (d.scan.negative_queue_ids, d.scan.out_of_step_queues) if p is not None)
    return warnings


def _rolled(scan, work: Location, settings: BrokerSettings) -> tuple[int, ...]:
    """--full-index: the end time of the last full index file the rebuild rolls away from (the checkpoint's
    indexMsgTimestamp, as the broker's flush thread would set it); empty when it writes one file."""
    from ..outputs.build import plan_index
    from .gather import _key_store_ts

    n_files = sum(len(t.files) for t in plan_index(scan, settings, work, work))
    if n_files < 2:
        return ()
    ts = _key_store_ts(scan, work, (n_files - 1) * (settings.max_index_num - 1) - 1)
    return () if ts is None else (ts,)


def dledger_output(plan: DLedgerRecoveryPlan, with_copies: bool) -> RecoveryOutput:
    """recovery_write's output for the plan, plus the DLedger member's directory (rendered, deleted, copied)."""
    out = plan_output(plan, with_copies, handled=(plan.dirs.name,))
    out.dirs = ("commitlog", "consumequeue", "index") if plan.segments else ("consumequeue", "index")
    renders = plan.dledger_renders()
    out.render_bytes.update(renders)
    deleted = plan.dledger_deleted()
    out.deleted += deleted
    if with_copies:
        home = plan.dirs.home(plan.store)
        prefix = plan.store.path.rstrip("/") + "/"
        skip = set(renders) | set(deleted)
        for info in home.walk_files():
            rel = info.path[len(prefix):]
            if rel not in skip:
                out.copies.append(CopyItem(rel, plan.store.child(rel).uri, info.size))
    return out
