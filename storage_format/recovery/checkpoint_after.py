"""The checkpoint a broker leaves after recovery, a start and a clean shutdown.

physicMsgTimestamp unchanged (nothing is appended; a SLAVE's and a DLedger store's consume-queue puts set it as
logicsMsgTimestamp); logicsMsgTimestamp = store time of the last
dispatched NOT/COMMIT record; indexMsgTimestamp = end time of the last full index file the dispatch
rolled away from (the flush thread writes it), else unchanged; 5.x confirmPhyOffset = start offset of
the last valid record found (the start segment's offset if none), or the controller's confirm offset.
"""
from __future__ import annotations

from dataclasses import replace

from ..checkpoint import Checkpoint
from ..confirm_offset import RecoveredConfirm


PHYSIC_FROM_QUEUE = {"SLAVE": "a SLAVE's every consume-queue put sets it",
                     "DLedger": "in DLedger mode every consume-queue put sets it (no commit-log flush thread does)"}


def checkpoint_after(cp: Checkpoint, generation: int, last_cq_record_ts: int | None, rolled_full_end_ts: list[int],
                     confirm: RecoveredConfirm,
                     physic_from_queue: str | None = None) -> tuple[Checkpoint, dict[str, str]]:
    """The checkpoint a broker leaves after this recovery, a start and a clean shutdown, with why.
    `confirm` is the confirm offset recovery keeps (confirm_offset.py, its one home); 5.x stores it.
    `physic_from_queue`: a PHYSIC_FROM_QUEUE key where every consume-queue put also sets physicMsgTimestamp
    (ConsumeQueue.putMessagePositionInfoWrapper: brokerRole SLAVE or DLedger mode), None where none does."""
    why: dict[str, str] = {"physic_msg_timestamp": "unchanged: recovery appends nothing to the commit log, "
                                                   "so the commit-log flush never moves it"}
    logics = cp.logics_msg_timestamp
    if last_cq_record_ts is not None:
        logics = last_cq_record_ts
        why["logics_msg_timestamp"] = ("store time of the last re-dispatched NOT/COMMIT record (set on every "
                                       "consume-queue put, including skipped ones)")
    else:
        why["logics_msg_timestamp"] = "unchanged: no NOT/COMMIT record was re-dispatched"
    index = cp.index_msg_timestamp
    if rolled_full_end_ts:
        index = rolled_full_end_ts[-1]
        why["index_msg_timestamp"] = ("endTimestamp of the last full index file recovery rolled away from (the "
                                      "index flush thread stores it when it flushes a full file)")
    else:
        why["index_msg_timestamp"] = "unchanged: recovery did not roll away from a full index file"
    out = replace(cp, logics_msg_timestamp=logics, index_msg_timestamp=index)
    if physic_from_queue is not None and last_cq_record_ts is not None:
        out = replace(out, physic_msg_timestamp=last_cq_record_ts)
        why["physic_msg_timestamp"] = (f"store time of the last re-dispatched NOT/COMMIT record: "
                                       f"{PHYSIC_FROM_QUEUE[physic_from_queue]}")
    if generation >= 5:
        why["master_flushed_offset"] = "unchanged (only set in controller / slave roles)"
        why["confirm_phy_offset"] = confirm.why
        out = replace(out, confirm_phy_offset=confirm.offset)
    return out, why
