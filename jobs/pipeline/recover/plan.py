"""The recovery plan `jobs.recover` executes: the store's facts, the decisions of
`storage_format.recovery.plan_sequence`, and the plan's JSON form (the --dry-run output)."""
from __future__ import annotations

from dataclasses import dataclass, field

from storage_format import recovery
from storage_format.checkpoint import Checkpoint
from storage_format.commitlog import segment_name
from storage_format.consume_queue import file_name
from storage_format.markers import GenerationGuess
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..store.built_to import BuiltTo, built_to
from ..store.markers import StoreMarkers
from ..runtime import env
from .inputs import QueueDir
from ..scan.result import ScanResult

LOOKED_AT_SHOWN = 8  # start-segment candidates listed in the plan (newest first)


@dataclass(kw_only=True)
class IndexPlan:
    """Index files after recovery: kept, deleted, appended to, created (with their keys)."""

    kept: list[recovery.IndexFileInfo]
    deleted: list[recovery.IndexFileInfo]
    uris: dict[str, str]
    resume: recovery.IndexResume | None  # None with --full-index
    new_names: list[str]
    full_rebuild_scan: ScanResult | None = None
    full_rebuild_work: Location | None = None


@dataclass(kw_only=True)
class CommonPlan:
    """What the plain and the DLedger-mode recovery plans both hold, and the views both give: the store and its
    markers, the consume queues' load and re-dispatch, the index plan, the checkpoint after."""

    store: Location
    settings: BrokerSettings
    generation: GenerationGuess
    markers: StoreMarkers
    abnormal: bool  # the abort file is present (index files newer than the checkpoint go)
    queue_dirs: dict[tuple[str, int], QueueDir]
    loads: dict[tuple[str, int], recovery.QueueLoad]
    states: dict[tuple[str, int], recovery.QueueState]
    truncate_queues: bool
    max_phy_before: int
    reput_from: int
    index: IndexPlan
    checkpoint_after: Checkpoint
    checkpoint_why: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def checkpoint_changes(self) -> bool:
        """True when the checkpoint file must be (re)written."""
        return self.markers.checkpoint_raw is None or self.markers.checkpoint != self.checkpoint_after

    def cq_rel(self, key: tuple[str, int], start: int) -> str:
        """Store-relative path of a consume-queue file."""
        return f"consumequeue/{key[0]}/{key[1]}/{file_name(start)}"

    def cq_changes(self) -> tuple[list[str], list[str], list[str]]:
        """(files rewritten, files created, files deleted) as store-relative paths."""
        rewritten, created, deleted = [], [], []
        for key, st in sorted(self.states.items()):
            for f in st.changed_files():
                (created if f in st.created else rewritten).append(self.cq_rel(key, f))
            deleted += [self.cq_rel(key, f) for f in st.deleted_files()]
        for key, ld in sorted(self.loads.items()):
            if key not in self.states:
                deleted += [self.cq_rel(key, f) for f in ld.removed_at_load]
        return rewritten, created, deleted

    def _consumequeue_dict(self) -> dict:
        """The plan's "consumequeue" part: files rewritten, created, deleted and cut, queues re-dispatched."""
        rewritten, created, deleted = self.cq_changes()
        return {
            "queues": len(self.loads),
            "max_phy_offset_before": self.max_phy_before,
            "truncate_dirty_logic_files": self.truncate_queues,
            "to_rewrite": rewritten, "to_create": created, "to_delete": deleted,
            "to_cut": [{"file": self.cq_rel(k, s.cut["file"]), "units_kept": s.cut["units_kept"],
                        "first_unit_left_behind_phy_offset": s.cut["first_unit_left_behind"]}
                       for k, s in sorted(self.states.items()) if s.cut],
            "cut_note": "a cut moves the queue's write position before the first unit at or past the "
                        "truncation point; the bytes after it stay on disk, as the broker leaves them",
            "queues_redispatched": sorted(f"{k[0]}/{k[1]}" for k, s in self.states.items() if s.written),
            "warnings": [w for s in self.states.values() for w in s.warnings],
        }


@dataclass(kw_only=True)
class RecoveryPlan(CommonPlan):
    """Everything `jobs.recover` decided, with the facts behind it; `to_dict` is the dry-run output."""

    segments: list[Segment]
    start: recovery.StartChoice
    scan: ScanResult
    work: Location
    truncation: recovery.Truncation
    segments_deleted: list[int]
    dispatch: dict = field(default_factory=dict)  # how far the recovery's dispatch went, and why
    timer: object = None  # recover.timer.TimerOutcome: the 5.x timer store's check (and --repair-timer)

    # ---- derived views ---------------------------------------------------------------------------
    def continued_to(self) -> tuple[BuiltTo | None, str | None]:
        """What the recovered store's consume queues and index were built to, for a later `rebuild --since` (its
        commit log ends at the truncation point, dispatched whole by the recovery and the start after it), or why
        they cannot be continued: records the broker never dispatches (5.x's start dispatches from the log's end)."""
        held, up_to = self.dispatch.get("records_not_dispatched", 0), self.dispatch.get("dispatched_up_to")
        if held and up_to is not None and self.reput_from > up_to:
            return None, (f"the recovered store holds {held} records from commit-log offset {up_to} on that the "
                          f"broker never dispatches (5.x's start dispatches from the log's end): --since would "
                          f"give them consume-queue units the broker's store does not have")
        cut = sorted(f"{k[0]}/{k[1]}" for k, st in self.states.items() if st.cut)
        if cut:
            return None, (f"the recovery cut {len(cut)} consume queue{'s' if len(cut) > 1 else ''} (e.g. {cut[0]}) "
                          f"before units it left on disk past the truncation point, which the broker overwrites as "
                          f"it writes on: --since does not continue such files")
        return built_to(self.segments, self.truncation.offset), None

    @property
    def index_changes(self) -> bool:
        """True when recovery deletes, appends to or creates index files."""
        if self.index.resume is None:
            return True
        r = self.index.resume
        return bool(self.index.deleted or r.appended or r.new_files)

    @property
    def changes(self) -> bool:
        """True when recovery changes any file of the store."""
        rewritten, created, deleted = self.cq_changes()
        return bool(self.abnormal or self.segments_deleted or rewritten or created or deleted or self.index_changes
                    or self.checkpoint_changes or (self.timer is not None and self.timer.changes))

    def _index_dict(self) -> dict:
        """The plan's "index" part: files deleted, appended to and created, or the full rebuild."""
        idx, cp0 = self.index, self.markers.checkpoint
        out: dict = {"files_before": len(idx.kept) + len(idx.deleted),
                     "checkpoint_index_msg_timestamp": cp0.index_msg_timestamp}
        if idx.resume is None:
            out.update({"mode": "full rebuild (--full-index)", "deleted": [f.name for f in idx.deleted],
                        "to_create": idx.new_names, "keys": sum(s.keys for s in idx.full_rebuild_scan.accepted)})
            return out
        r = idx.resume
        app = r.appended
        out.update({
            "mode": "resume (broker rules)",
            "deleted_newer_than_checkpoint": [f.name for f in idx.deleted] if self.abnormal else [],
            "last_kept": idx.kept[-1].name if idx.kept else None,
            "appended_to": None if app is None else {"file": app.appends_to, "entries": len(app.all_keys())},
            "to_create": [{"file": n, "entries": len(t_.all_keys()),
                           "inherits_end_timestamp": t_.inherited.end_timestamp,
                           "inherits_end_phy_offset": t_.inherited.end_phy_offset}
                          for n, t_ in zip(idx.new_names, r.new_files)],
            "boundary_records_indexed_again": r.boundary_reindexed,
        })
        return out

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (the --dry-run output)."""
        cp0, cp1 = self.markers.checkpoint, self.checkpoint_after
        t = self.truncation
        holding = next((s for s in self.segments if s.start <= t.offset < s.start + s.size), None)
        return {
            "job": "recover",
            "store": self.store.uri,
            "generation": self.generation.label,
            "generation_evidence": self.generation.evidence,
            "state": "unclean (abort file present)" if self.abnormal else "clean (no abort file)",
            "recovery": "abnormal" if self.abnormal else "normal",
            "changes": self.changes,
            "environment": env.in_effect(),
            "checkpoint": {
                "before": cp0.to_dict(), "after": cp1.to_dict(), "why": self.checkpoint_why,
                "min_timestamp": cp0.min_timestamp, "min_timestamp_index": cp0.min_timestamp_index,
            },
            "start_segment": {"offset": self.start.offset, "name": segment_name(self.start.offset),
                              "reason": self.start.reason, "segments_looked_at": len(self.start.looked_at),
                              "looked_at": self.start.looked_at[:LOOKED_AT_SHOWN]},
            "validation": {"from_offset": self.start.offset, "crc": self.settings.check_crc_on_recover,
                           "splits": len(self.scan.splits), "records": self.scan.message_records,
                           "segments": len(self.scan.segments), "decoders": self.scan.decoders()},
            "truncation": {**t.to_dict(), "segment": None if holding is None else segment_name(holding.start),
                           "position_in_segment": None if holding is None else t.offset - holding.start},
            "commitlog": {"segments": len(self.segments), "to_delete": [segment_name(s) for s in self.segments_deleted],
                          "note": "the segment holding the truncation point keeps its bytes (logical truncation)"},
            "consumequeue": self._consumequeue_dict(),
            "index": self._index_dict(),
            "dispatch": self.dispatch,
            "post_start_redispatch": {
                "from_offset": self.reput_from, "to_offset": t.offset,
                "rule": ("4.x start(): ReputMessageService from the consume queues' max physical offset"
                         if self.generation.generation < 5 else
                         "5.x start(): ReputMessageService from the commit log's max offset (nothing re-dispatched)"),
            },
            "markers": {"abort": "removed" if self.abnormal else "absent",
                        "abort.bak": ("crash-time abort content (5.x createTempFile backs it up)"
                                      if self.abnormal and self.generation.generation >= 5 else "unchanged")},
            "timer": None if self.timer is None else self.timer.to_dict(),
            "warnings": self.warnings,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }
