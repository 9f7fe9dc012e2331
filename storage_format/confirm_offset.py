"""Controller mode and duplicationEnable (5.x): how far dispatch goes, and the confirm offset recovery keeps.

Rules read from 5.3.3's CommitLog.getConfirmOffset / recoverNormally / recoverAbnormally and
DefaultMessageStore.ReputMessageService.doReput:

* The confirm offset is the commit log's max offset unless the store runs with duplicationEnable, or in
  controller mode as a SLAVE, or as a controller-mode master with allAckInSyncStateSet and a sync-state set
  of more than one member. Then it is the stored value: the checkpoint's confirmPhyOffset (bytes 32-39),
  set by HA at run time. At start-up (load and recovery) the sync-state set is still empty, so a master
  with allAckInSyncStateSet uses the stored value; offline, reput assumes the same.
* Dispatch (reput, and abnormal recovery when the confirm offset applies) takes a record only when
  start + size <= confirm offset; the record straddling it and every later one are not dispatched.
* Abnormal recovery in controller mode then lowers the confirm offset to the end of the last dispatched
  record (raises it to the commit log's min offset when below); with duplicationEnable alone, and
  without either, it becomes the start of the last valid record. Normal recovery in controller mode
  clamps it to [min offset, end of valid data].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checkpoint import Checkpoint
from .errors import SettingsError
from .settings import BrokerSettings

SLAVE = "SLAVE"


@dataclass(frozen=True)
class DispatchLimit:
    """Records dispatch only when start + size <= `offset` (None: no limit); `reason` says why."""

    offset: int | None
    reason: str

    def allows(self, start: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Mask of the records (start offsets, totalSizes) dispatch takes."""
        start = np.asarray(start, np.int64)
        if self.offset is None:
            return np.ones(len(start), bool)
        return start + np.asarray(size, np.int64) <= self.offset

    def to_dict(self) -> dict:
        """The report form."""
        return {"confirm_offset": self.offset, "reason": self.reason}


NO_LIMIT = DispatchLimit(None, "the confirm offset is the commit log's max offset (no controller mode, no "
                               "duplicationEnable): every valid record is dispatched")


def stored_confirm_applies(s: BrokerSettings) -> str | None:
    """Why the stored confirm offset (not the max offset) bounds dispatch at start-up, or None."""
    if s.enable_controller_mode:
        if s.broker_role == SLAVE:
            return "enableControllerMode with brokerRole=SLAVE: the confirm offset is the stored one"
        if s.all_ack_in_sync_state_set:
            return ("enableControllerMode with allAckInSyncStateSet=true: a master whose sync-state set is not "
                    "a single member (it is empty at start-up) uses the stored confirm offset")
        return None
    if s.duplication_enable:
        return "duplicationEnable=true: the confirm offset is the stored one"
    return None


def recovery_limit(s: BrokerSettings, cp: Checkpoint) -> DispatchLimit:
    """How far abnormal recovery dispatches: records ending at or below the checkpoint's confirmPhyOffset
    when the stored confirm offset applies (controller mode or duplicationEnable), else everything."""
    why = stored_confirm_applies(s)
    if why is None:
        return NO_LIMIT
    return DispatchLimit(cp.confirm_phy_offset, f"{why}; abnormal recovery dispatches only records ending at or "
                                                f"below the checkpoint's confirmPhyOffset {cp.confirm_phy_offset}")


def reput_limit(s: BrokerSettings, cp: Checkpoint | None) -> DispatchLimit:
    """How far the broker's dispatch (ReputMessageService) goes, for rebuild and verify."""
    why = stored_confirm_applies(s)
    if why is None:
        return NO_LIMIT
    if s.read_uncommitted:
        return DispatchLimit(None, f"{why}, but readUnCommitted=true: dispatch goes to the max offset")
    if cp is None:
        raise SettingsError(f"{why.split(':')[0]}: dispatch stops at the checkpoint's confirmPhyOffset, and the "
                            f"store has no checkpoint file to read it from")
    return DispatchLimit(cp.confirm_phy_offset, f"{why}; dispatch takes only records ending at or below the "
                                                f"checkpoint's confirmPhyOffset {cp.confirm_phy_offset}")


@dataclass(frozen=True)
class RecoveredConfirm:
    """The confirm offset recovery leaves in the checkpoint, with why."""

    offset: int
    why: str


def confirm_after_abnormal(s: BrokerSettings, cp: Checkpoint, min_offset: int, start_offset: int,
                           last_valid_start: int | None, last_dispatched_end: int | None) -> RecoveredConfirm:
    """CommitLog.recoverAbnormally's confirm offset. `last_dispatched_end` is the end of the last record
    the recovery dispatched under the confirm limit (None: none); `start_offset` the start segment."""
    if s.enable_controller_mode:
        stored = cp.confirm_phy_offset if stored_confirm_applies(s) else None
        confirmed_end = start_offset if last_dispatched_end is None else last_dispatched_end
        if stored is not None and stored < min_offset:
            return RecoveredConfirm(min_offset, f"controller mode: confirmPhyOffset {stored} is below the commit "
                                                f"log's min offset, raised to it")
        if stored is None or stored > confirmed_end:
            return RecoveredConfirm(confirmed_end, "controller mode: lowered to the end of the last record "
                                                   "recovery dispatched (lastConfirmValidMsgPhyOffset)")
        return RecoveredConfirm(stored, "controller mode: kept (no record past it was dispatched)")
    offset = start_offset if last_valid_start is None else last_valid_start
    return RecoveredConfirm(offset, "start offset of the last valid record the recovery scan found "
                                    "(CommitLog.setConfirmOffset(lastValidMsgPhyOffset))")


def confirm_after_normal(s: BrokerSettings, cp: Checkpoint, min_offset: int, log_end: int,
                         last_valid_start: int | None) -> RecoveredConfirm:
    """CommitLog.recoverNormally's confirm offset (clean shutdown: no abort file)."""
    if s.enable_controller_mode:
        stored = cp.confirm_phy_offset if stored_confirm_applies(s) else log_end
        if stored < min_offset:
            return RecoveredConfirm(min_offset, "controller mode: raised to the commit log's min offset")
        if stored > log_end:
            return RecoveredConfirm(log_end, "controller mode: lowered to the end of the valid commit log")
        return RecoveredConfirm(stored, "controller mode: the stored confirm offset is kept")
    offset = log_end if last_valid_start is None else last_valid_start
    return RecoveredConfirm(offset, "start offset of the last valid record the recovery scan found "
                                    "(CommitLog.setConfirmOffset(lastValidMsgPhyOffset))")
