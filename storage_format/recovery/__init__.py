"""The broker's start-up recovery as pure planning over decoded facts (no I/O, no Spark).

Rules as in DefaultMessageStore.load/recover/start of 4.9.8 and 5.3.3, checked against the golden
`*-recovered` stores, one concern per module:

- `start`: the start segment, the truncation point P, segments deleted, the dispatch's settings
- `queues`: consume-queue load state, re-dispatch into a queue, truncateDirtyLogicFiles, file bytes
- `index`: index files kept at load, resuming the index (the boundary record indexed twice), rolls
- `post_start`: where 4.x start() re-dispatches from (5.x: nothing)
- `checkpoint_after`: the checkpoint left after recovery, a start and a clean shutdown
- `sequence`: the whole sequence as one pure function, `plan_sequence(RecoveryFacts) -> SequencePlan`
- `dledger`: DLedger mode (4.9.8 + DLedger 0.3.1.2): DLedger's recovery walk, then the plain pieces above with
  nothing dispatched during load, `plan_dledger(DLedgerFacts) -> DLedgerPlan` (imported as a module)
- `dledger_v5`: DLedger mode as 5.3.3 recovers it (the same walk; the dispatch during load, its end computed without
  the entry headers, start() from the DLedger committedPos), `plan_dledger_v5(DLedgerV5Facts) -> DLedgerPlan`

The names below are the package's interface (`from storage_format import recovery`).
"""
from __future__ import annotations

from ..errors import RecoveryError
from ..index_keys import KeyBatch
from .checkpoint_after import checkpoint_after
from .index import (DispatchPass, IndexFileInfo, IndexResume, IndexTarget, index_files_after_load,
                    resume_index)
from .queues import (QueueEntries, QueueLoad, QueueState, dropped_at_load, load_queue, render_queue_file,
                     render_span, render_units)
from .sequence import (FullIndexRebuild, IndexFacts, IndexOff, IndexResumeFacts, QueueFacts, QueuePlan, RecoveryFacts,
                   SequencePlan, index_passes, plan_index, plan_queues, plan_sequence)
from .post_start import post_start_reput_from
from .start import (END_OF_LOG, SEGMENT_HEAD_BYTES, SegmentHead, StartChoice, Truncation, choose_start_segment,
                    dispatch_settings, head_matches, read_segment_head, segments_to_delete, start_bound,
                    truncation_point)

__all__ = [
    "RecoveryError", "checkpoint_after", "DispatchPass", "IndexFileInfo", "IndexResume", "IndexTarget", "KeyBatch",
    "index_files_after_load", "resume_index", "QueueEntries", "QueueLoad", "QueueState", "dropped_at_load",
    "load_queue", "render_queue_file", "render_span", "render_units", "post_start_reput_from", "END_OF_LOG", "SEGMENT_HEAD_BYTES",
    "SegmentHead", "StartChoice", "Truncation", "choose_start_segment", "dispatch_settings", "head_matches",
    "read_segment_head", "segments_to_delete", "start_bound", "truncation_point", "FullIndexRebuild", "IndexFacts",
    "IndexOff", "IndexResumeFacts", "QueueFacts", "QueuePlan", "RecoveryFacts", "SequencePlan", "index_passes",
    "plan_index", "plan_queues", "plan_sequence",
]
