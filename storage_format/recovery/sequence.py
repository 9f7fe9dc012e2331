"""The broker's recovery sequence as one pure function: named facts in, a plan value out (no I/O, no Spark).

Order as in DefaultMessageStore.load/recover/start: recoverAbnormally re-dispatches [start, P) into the
consume queues (recoverNormally dispatches nothing); truncateDirtyLogicFiles(P) runs when a queue holds
a unit at or past P; 4.x start() re-dispatches [max maxPhysicOffset, P) again (5.x: nothing); the index
follows the same passes; then the checkpoint the broker leaves. The Spark stage only gathers the facts
(`RecoveryFacts`) and writes what `plan_sequence` returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

from ..checkpoint import Checkpoint
from ..commitlog import segment_name
from ..confirm_offset import RecoveredConfirm, confirm_after_abnormal, confirm_after_normal
from ..errors import RecoveryError
from ..settings import BrokerSettings
from .checkpoint_after import checkpoint_after
from ..index_keys import KeyBatch
from .index import DispatchPass, IndexFileInfo, IndexResume, resume_index
from .queues import QueueEntries, QueueLoad, QueueState
from .post_start import post_start_reput_from
from .start import segments_to_delete

QueueKey = tuple[str, int]  # (topic, queueId)


@dataclass(frozen=True)
class QueueFacts:
    """The consume queues as found: load state per queue, the scanned entries past each queue's
    maxPhysicOffset (commit-log order), the file size, and a reader of crash-time file bytes."""

    loads: dict[QueueKey, QueueLoad]
    tails: dict[QueueKey, QueueEntries]
    file_size: int
    read_file: Callable[[QueueKey, int], bytes]  # (queue, file start) -> the file's bytes


@dataclass(frozen=True)
class IndexOff:
    """messageIndexEnable=false: the index is neither read nor written."""


@dataclass(frozen=True)
class IndexResumeFacts:
    """Index resume (broker rules): the last file kept at load and the scanned keys at or after its end."""

    last_kept: IndexFileInfo | None
    keys: KeyBatch
    max_entries: int  # maxIndexNum


@dataclass(frozen=True)
class FullIndexRebuild:
    """--full-index: the rebuild writes every file; `rolled_full_end_ts` is the end time of the last full
    file it rolls away from (empty when it writes one file)."""

    rolled_full_end_ts: tuple[int, ...] = ()


IndexFacts = Union[IndexOff, IndexResumeFacts, FullIndexRebuild]


@dataclass(frozen=True, kw_only=True)
class RecoveryFacts:
    """Everything the recovery sequence decides on, gathered from the store and the validating scan."""

    generation: int  # 4 or 5
    abnormal: bool  # an abort file is present
    settings: BrokerSettings
    checkpoint: Checkpoint  # as found (zeros when absent)
    segment_starts: tuple[int, ...]  # commit-log segments, oldest first
    start_offset: int  # the start segment (start.choose_start_segment)
    truncate_at: int  # P (start.truncation_point)
    last_valid_record: int | None  # start of the last valid record the scan found
    last_dispatched_record: int | None  # start of the last record the dispatch reached (confirm-offset limit)
    dispatched_end: int | None  # end of the dispatched range (None when nothing valid was found)
    queues: QueueFacts
    index: IndexFacts
    last_cq_record_ts: Callable[[int], int | None]  # store time of the last NOT/COMMIT record at or after an offset


@dataclass
class QueuePlan:
    """Consume queues after recovery and 4.x start(): the changed queues' states and why."""

    states: dict[QueueKey, QueueState]
    truncate_queues: bool  # truncateDirtyLogicFiles ran (the largest maxPhysicOffset was >= P)
    max_phy_before: int  # the largest maxPhysicOffset over queues at load
    reput_from: int  # where ReputMessageService starts after recovery
    post_start_from: int | None  # 4.x: start of the post-start re-dispatch [reput_from, P), None if none


@dataclass(kw_only=True)
class SequencePlan:
    """What the broker's recovery sequence does to the store, with the reasons for the checkpoint."""

    segments_deleted: list[int]
    queues: QueuePlan
    index_resume: IndexResume | None  # None with --full-index
    rolled_full_end_ts: list[int]
    confirm: RecoveredConfirm
    checkpoint: Checkpoint
    checkpoint_why: dict[str, str] = field(default_factory=dict)


def plan_queues(facts: RecoveryFacts) -> QueuePlan:
    """Re-dispatch into the queues, truncate them at P, then 4.x start()'s re-dispatch from the queues' end."""
    q, p = facts.queues, facts.truncate_at
    states: dict[QueueKey, QueueState] = {}

    def state(key: QueueKey) -> QueueState:
        """The queue's recovery state, created on first use."""
        if key not in states:
            ld = q.loads.get(key) or QueueLoad(key[0], key[1], (), 0, -1)
            states[key] = QueueState.start(ld, q.file_size)
        return states[key]

    max_phy_before = max((ld.max_phy for ld in q.loads.values()), default=-1)
    truncate = max_phy_before >= p
    if facts.abnormal:  # recoverAbnormally dispatches [start, P); recoverNormally dispatches nothing
        for key, entries in q.tails.items():
            state(key).dispatch(entries)
    if truncate:
        for key, ld in q.loads.items():
            if ld.max_phy > p:  # only queues holding a unit past P change; the rest keep their state
                state(key).truncate(p, lambda start, key=key: q.read_file(key, start))
    queue_max = {k: ld.max_phy for k, ld in q.loads.items()}
    queue_max.update({k: st.max_phy for k, st in states.items()})
    reput_from = post_start_reput_from(facts.generation, queue_max.values(), facts.segment_starts[0], p)
    post_start_from = None
    if reput_from < p:
        if reput_from < facts.start_offset:
            raise RecoveryError(
                f"the consume queues end at commit-log offset {reput_from}, before the validated range that "
                f"starts at segment {segment_name(facts.start_offset)}: after start the 4.x broker re-dispatches "
                f"[{reput_from}, {p}), which reput does not model; rebuild the consume queues with jobs.rebuild")
        post_start_from = reput_from
        for key, entries in q.tails.items():
            e = entries.take(entries.phy >= reput_from)
            if len(e):
                state(key).dispatch(e)
    return QueuePlan(states, truncate, max_phy_before, reput_from, post_start_from)


def index_passes(facts: RecoveryFacts, queues: QueuePlan, keys: KeyBatch) -> list[DispatchPass]:
    """The dispatch passes the index sees: recovery's [start, P) (abnormal only), then 4.x start()'s
    re-dispatch [reput_from, P), which indexes its records again."""
    last = facts.last_dispatched_record
    passes = []
    if facts.abnormal:
        passes.append(DispatchPass("recovery", facts.start_offset, last, keys))
    if facts.generation < 5 and queues.reput_from < facts.truncate_at:
        passes.append(DispatchPass("post-start re-dispatch", queues.reput_from,
                                   last if last is not None and last >= queues.reput_from else None, keys))
    return passes


def plan_index(facts: RecoveryFacts, queues: QueuePlan) -> tuple[IndexResume | None, list[int]]:
    """(index resume, end times of full files rolled away from) for the index mode in the facts."""
    idx = facts.index
    if isinstance(idx, IndexOff):
        return IndexResume([], [], []), []
    if isinstance(idx, FullIndexRebuild):
        return None, list(idx.rolled_full_end_ts)
    resume = resume_index(idx.last_kept, index_passes(facts, queues, idx.keys), idx.max_entries)
    return resume, resume.rolled_full_end_ts


def checkpoint_cq_from(facts: RecoveryFacts, queues: QueuePlan) -> int | None:
    """Where the dispatches that set logicsMsgTimestamp begin: the recovery pass (abnormal), else 4.x's
    post-start re-dispatch; None when no record reaches the consume queues."""
    return facts.start_offset if facts.abnormal else queues.post_start_from


def recovered_confirm(facts: RecoveryFacts) -> RecoveredConfirm:
    """The confirm offset recovery leaves (confirm_offset: controller mode, duplicationEnable, or plain)."""
    first = facts.segment_starts[0]
    if facts.abnormal:
        return confirm_after_abnormal(facts.settings, facts.checkpoint, first, facts.start_offset,
                                      facts.last_valid_record, facts.dispatched_end)
    return confirm_after_normal(facts.settings, facts.checkpoint, first, facts.truncate_at, facts.last_valid_record)


def plan_sequence(facts: RecoveryFacts) -> SequencePlan:
    """The broker's recovery sequence over the facts: segments deleted, queues, index, checkpoint."""
    if not facts.segment_starts:
        raise RecoveryError("the commit log has no segments")
    queues = plan_queues(facts)
    cq_from = checkpoint_cq_from(facts, queues)
    last_cq_ts = facts.last_cq_record_ts(cq_from) if cq_from is not None else None
    resume, rolled = plan_index(facts, queues)
    confirm = recovered_confirm(facts)
    cp, why = checkpoint_after(facts.checkpoint, facts.generation, last_cq_ts, rolled, confirm,
                               physic_from_queue="SLAVE" if facts.settings.broker_role == "SLAVE" else None)
    return SequencePlan(segments_deleted=segments_to_delete(list(facts.segment_starts), facts.truncate_at),
                        queues=queues, index_resume=resume, rolled_full_end_ts=rolled,
                        confirm=confirm, checkpoint=cp, checkpoint_why=why)
