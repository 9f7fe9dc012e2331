"""RocketMQ 5.3.3's recovery and restart of a DLedger-mode store as pure planning over facts (no Spark), checked
against golden `v5dledger/v5-dledger-unclean-11-recovered` (DLedgerCommitLog.dledgerRecoverNormally /
dledgerRecoverAbnormally on DLedger 0.3.1.2, DefaultMessageStore.load/start).

DLedger's own recovery walk is 4.9.8's (the same library: `dledger.walk_entries`); the rest differs:

1. Abnormal (abort present): the records are dispatched during load, from the newest data file whose first record
   has the V1 magic and a storeTimestamp at or before the checkpoint bound (else the first file:
   `choose_dispatch_file`) to where RocketMQ's walk (CRC checked) stops.
2. The end it then computes (`computed_end`) is the last walked file's start plus the sizes of the *messages* in it,
   without the 48-byte entry headers (5.3.3's bug); after a clean shutdown it is DLedger's write end. The consume
   queues are cut there when the highest maxPhysicOffset found at load reaches it.
3. start() dispatches from the DLedger checkpoint's committedPos (`reput_start`), not from the queues' end, up to the
   committed position: the cut units come back. Were that committedPos past the wrong end, the units between the
   two would be lost: `lost_units` counts them and reput refuses.
4. Index: files newer than the checkpoint go at load (abort); each dispatch skips records below the last file's
   endPhyOffset only, so the record at it is indexed again by each dispatch that starts at or before it (two
   records after a crash: the last kept file's last one, and the last one the load dispatch indexed).

`plan_dledger_v5(DLedgerV5Facts) -> DLedgerPlan`; the Spark stage (jobs.pipeline.recover.dledger_v5) gathers them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..checkpoint import Checkpoint
from ..confirm_offset import RecoveredConfirm
from ..dledger import ENTRY_HEADER_SIZE, READING_CHECKPOINT
from ..errors import RecoveryError
from ..index_keys import KeyBatch
from ..record import MAGIC_V1
from ..segment_names import segment_name
from ..settings import BrokerSettings
from .dledger import DLedgerPlan, EntryRecovery, committed_position, dledger_checkpoint_after, member_files_after
from .index import DispatchPass, IndexResume, resume_index
from .queues import QueueLoad, QueueState
from .sequence import FullIndexRebuild, IndexFacts, IndexOff, IndexResumeFacts, QueueFacts, QueuePlan
from .start import SEGMENT_HEAD_BYTES, SegmentHead, StartChoice, read_segment_head, start_bound

MODEL = "DLedger mode: modelled on RocketMQ 5.3.3 (DLedgerCommitLog) with DLedger 0.3.1.2"
END_BUG = ("5.3.3 computes the end as the last walked data file's start plus the message sizes in it, without the "
           f"{ENTRY_HEADER_SIZE}-byte entry headers")


def dispatch_file_head(data: bytes, start: int) -> SegmentHead:
    """Magic and storeTimestamp of the record in a data file's first entry (isMmapFileMatchedRecover reads them at
    DLedgerEntry.BODY_OFFSET); any bytes accepted."""
    return read_segment_head(bytes(data[ENTRY_HEADER_SIZE:ENTRY_HEADER_SIZE + SEGMENT_HEAD_BYTES]), start)


def choose_dispatch_file(starts: list[int], heads_newest_first: Iterable[SegmentHead], cp: Checkpoint,
                         settings: BrokerSettings) -> StartChoice:
    """dledgerRecoverAbnormally's start file: the newest data file whose first record has the V1 magic (not V2:
    5.3.3 checks MESSAGE_MAGIC_CODE only), a non-zero storeTimestamp at or before the checkpoint bound; else the
    first file. `heads_newest_first` is consumed until one matches."""
    bound, what = start_bound(cp, settings)
    looked: list[dict] = []
    for head in heads_newest_first:
        if head.magic != MAGIC_V1:
            ok, why = False, f"first record has magic 0x{head.magic & 0xFFFFFFFF:08X}, not the V1 message magic"
        elif head.store_timestamp == 0:
            ok, why = False, "first record has storeTimestamp 0"
        else:
            ok = head.store_timestamp <= bound
            why = f"first record storeTimestamp {head.store_timestamp} {'<=' if ok else '>'} {bound}"
        looked.append({"data_file": segment_name(head.start), "matches": ok, "why": why})
        if ok:
            return StartChoice(head.start, f"newest data file whose first record is older than the checkpoint bound "
                                           f"{bound} ({what}): {why}", looked)
    return StartChoice(starts[0], f"no data file's first record is a V1 message at or before the checkpoint bound "
                                  f"{bound} ({what}): the dispatch starts at the first data file", looked)


@dataclass(frozen=True, kw_only=True)
class LoadDispatch:
    """What dledgerRecoverAbnormally dispatches during load: records from `start` to `end` (where RocketMQ's walk
    stopped, in data file `last_file` after `entries_in_last_file` entries), and the end it then computes."""

    choice: StartChoice
    end: int
    end_reason: str
    last_file: int
    entries_in_last_file: int

    @property
    def start(self) -> int:
        return self.choice.offset

    @property
    def computed_end(self) -> int:
        """5.3.3's processOffset: the end without the entry headers of the last walked file."""
        return self.end - ENTRY_HEADER_SIZE * self.entries_in_last_file

    def to_dict(self) -> dict:
        """The plan's "load_dispatch" part."""
        return {"from_data_file": segment_name(self.start), "from_offset": self.start, "reason": self.choice.reason,
                "looked_at": self.choice.looked_at, "to_offset": self.end, "end_reason": self.end_reason,
                "computed_end": self.computed_end, "computed_end_short_by": self.end - self.computed_end,
                "entries_in_last_file": self.entries_in_last_file, "last_file": segment_name(self.last_file),
                "computed_end_rule": END_BUG}


def reput_start(entries: EntryRecovery, checkpoint_committed: int | None, unit_end: Callable[[int], int],
                log_min: int) -> tuple[int, str]:
    """Where start() dispatches from: commitLog.getConfirmOffset() = DLedger's committedPos, the end of the entry
    of the checkpoint's committedIndex (capped at the last entry; none below the ledger's begin), else the log's
    min offset (getMaxOffset's fallback, and ReputMessageService never starts below it)."""
    if checkpoint_committed is None or checkpoint_committed < max(entries.begin_index, 0) or entries.last_index < 0:
        return log_min, (f"the DLedger checkpoint holds no usable committedIndex ({checkpoint_committed}): "
                         f"committedPos stays unset, so dispatch starts at the log's min offset {log_min}")
    c, pos = committed_position(entries, READING_CHECKPOINT, checkpoint_committed, unit_end)
    return max(pos, log_min), (f"commitLog.getConfirmOffset() = DLedger's committedPos {pos}, the end of entry {c} "
                               f"(committedIndex {checkpoint_committed} in the DLedger checkpoint), not the consume "
                               f"queues' end (recheckReputOffsetFromCq=false)")


def lost_units(tails: dict, cut_at: int, reput_from: int, dispatched_to: int) -> int:
    """Consume-queue units the cut at `cut_at` removes and start()'s dispatch from `reput_from` never puts back:
    the records in [cut_at, reput_from) below the load dispatch's end (every queue held them before the cut)."""
    if reput_from <= cut_at:
        return 0
    return int(sum(int(((e.phy >= cut_at) & (e.phy < min(reput_from, dispatched_to))).sum()) for e in tails.values()))


@dataclass(frozen=True, kw_only=True)
class DLedgerV5Facts:
    """Everything 5.3.3's DLedger-mode recovery and restart decide on. `queues.tails` hold the scanned consume-queue
    entries past min(maxPhysicOffset at load, the cut point) per queue, from min(load dispatch start, reput start);
    `keys` the index keys from the last kept index file's end on (IndexResumeFacts when resuming);
    `last_cq_record_ts(lo, hi)` the store time of the last NOT/COMMIT record in [lo, hi)."""

    settings: BrokerSettings
    checkpoint: Checkpoint
    entries: EntryRecovery
    load: LoadDispatch | None  # None after a clean shutdown: nothing is dispatched during load
    last_loaded_record: int | None  # start of the last record the load dispatch reaches
    reput_from: int
    reput_why: str
    committed_index: int
    committed_end: int  # start()'s dispatch stops there
    last_committed_record: int | None  # start of the last record before committed_end
    one_member: bool
    self_id: str
    currterm_raw: bytes | None
    queues: QueueFacts
    index: IndexFacts
    last_cq_record_ts: Callable[[int, int], int | None]
    index_deleted: tuple[str, ...] = ()

    @property
    def cut_at(self) -> int:
        """Where the consume queues are cut when they reach it: the computed end (abnormal), else the write end."""
        return self.load.computed_end if self.load is not None else self.entries.write_end


def _pass(e, lo: int, hi: int):
    """The entries (or keys) of records in [lo, hi)."""
    return e.take((e.phy >= lo) & (e.phy < hi))


def plan_queues_v5(f: DLedgerV5Facts) -> QueuePlan:
    """The load dispatch into the queues, the cut at `cut_at` (when the highest maxPhysicOffset at load reaches it),
    then start()'s dispatch from the reput start to the committed position; duplicates skipped as the broker does."""
    q = f.queues
    states: dict = {}

    def state(key) -> QueueState:
        if key not in states:
            states[key] = QueueState.start(q.loads.get(key) or QueueLoad(key[0], key[1], (), 0, -1), q.file_size)
        return states[key]

    max_before = max((ld.max_phy for ld in q.loads.values()), default=-1)
    if f.load is not None:
        for key, e in q.tails.items():
            state(key).dispatch(_pass(e, f.load.start, f.load.end))
    truncate = max_before >= f.cut_at
    if truncate:
        for key in sorted(set(q.loads) | set(states)):
            now = states[key].max_phy if key in states else q.loads[key].max_phy
            if now > f.cut_at:
                state(key).truncate(f.cut_at, lambda start, key=key: q.read_file(key, start))
    for key, e in q.tails.items():
        state(key).dispatch(_pass(e, f.reput_from, f.committed_end))
    return QueuePlan(states, truncate, max_before, f.reput_from, f.reput_from if f.reput_from < f.committed_end
                     else None)


def index_passes_v5(f: DLedgerV5Facts, keys: KeyBatch) -> list[DispatchPass]:
    """The dispatches the index sees: the load dispatch (abnormal), then start()'s from the reput start."""
    passes = []
    if f.load is not None:
        passes.append(DispatchPass("the recovery's dispatch during load", f.load.start, f.last_loaded_record,
                                   _pass(keys, f.load.start, f.load.end)))
    if f.reput_from < f.committed_end:
        passes.append(DispatchPass("start()'s dispatch from the DLedger committedPos", f.reput_from,
                                   f.last_committed_record, _pass(keys, f.reput_from, f.committed_end)))
    return passes


def plan_index_v5(f: DLedgerV5Facts) -> tuple[IndexResume | None, list[int]]:
    """(index resume, end times of the full files rolled away from) for the index mode in the facts."""
    idx = f.index
    if isinstance(idx, IndexOff):
        return IndexResume([], [], []), []
    if isinstance(idx, FullIndexRebuild):
        return None, list(idx.rolled_full_end_ts)
    assert isinstance(idx, IndexResumeFacts)
    resume = resume_index(idx.last_kept, index_passes_v5(f, idx.keys), idx.max_entries)
    return resume, resume.rolled_full_end_ts


def _last_cq_ts(f: DLedgerV5Facts) -> int | None:
    """Store time of the last NOT/COMMIT record dispatched: start()'s dispatch when it reached one, else the load's."""
    ts = f.last_cq_record_ts(f.reput_from, f.committed_end) if f.reput_from < f.committed_end else None
    if ts is None and f.load is not None:
        ts = f.last_cq_record_ts(f.load.start, f.load.end)
    return ts


def _refuse_lost_units(f: DLedgerV5Facts, queues: QueuePlan) -> None:
    """The case 5.3.3's end bug loses units in: refused, naming the DLedger checkpoint and the way out."""
    if f.load is None or not queues.truncate_queues:
        return
    n = lost_units(f.queues.tails, f.cut_at, f.reput_from, f.load.end)
    if n:
        raise RecoveryError(
            f"dledger-{f.self_id}/checkpoint: its committedIndex puts the restart's dispatch at {f.reput_from}, past "
            f"the end 5.3.3 computes ({f.cut_at}, {f.load.end - f.cut_at} bytes short: {END_BUG}): the broker would "
            f"cut {n} consume-queue units of [{f.cut_at}, {f.reput_from}) and not dispatch them again (its queues then "
            f"end before them: it does not serve them, and its next messages to those queues overwrite them); reput "
            f"does not reproduce that loss: re-derive the consume queues and index from the log with `reput rebuild` "
            f"instead")


def plan_dledger_v5(f: DLedgerV5Facts) -> DLedgerPlan:
    """5.3.3's DLedger-mode recovery and restart over the facts."""
    queues = plan_queues_v5(f)
    _refuse_lost_units(f, queues)
    resume, rolled = plan_index_v5(f)
    confirm = RecoveredConfirm(f.checkpoint.confirm_phy_offset, "unchanged: DLedgerCommitLog.setConfirmOffset is a "
                                                                "no-op (DLedger mode stores no confirm offset)")
    last_ts = _last_cq_ts(f)
    cp, why = dledger_checkpoint_after(f.checkpoint, 5, last_ts, rolled, confirm)
    files, notes = member_files_after(f.committed_index, f.entries.last_index, f.one_member, f.self_id,
                                      f.currterm_raw)
    dispatch = {"from_offset": f.reput_from, "to_offset": f.committed_end, "committed_index": f.committed_index,
                "rule": f"start(): ReputMessageService from {f.reput_why} to the DLedger committed position"}
    named = _notes(f, queues, resume)
    return DLedgerPlan(entries=f.entries, queues=queues, index_resume=resume, rolled_full_end_ts=rolled,
                       checkpoint=cp, checkpoint_why=why, dledger_files=files, dispatch=dispatch,
                       notes=notes + named, named=named)


def _notes(f: DLedgerV5Facts, queues: QueuePlan, resume: IndexResume | None) -> list[str]:
    """What the plan names: the end bug where it changes bytes, the records indexed twice."""
    out = []
    if f.load is not None:
        short = f.load.end - f.cut_at
        out.append(f"{END_BUG}: {f.cut_at} instead of {f.load.end} ({short} bytes short); "
                   + (f"the consume queues reached {queues.max_phy_before}, so every queue is cut at {f.cut_at} and "
                      f"start()'s dispatch from {f.reput_from} puts the cut units back" if queues.truncate_queues
                      else f"the consume queues end at {queues.max_phy_before}, below it: nothing is cut"))
    for b in (resume.boundary_reindexed if resume is not None else []):
        keys = f"{b['keys']} key{'' if b['keys'] == 1 else 's'}"
        out.append(f"the record at offset {b['record_offset']}, the last one indexed so far, is indexed again (its "
                   f"{keys} put by {b['pass']}: IndexService.buildIndex skips only records below the last index "
                   f"file's endPhyOffset), as the broker does")
    return out

