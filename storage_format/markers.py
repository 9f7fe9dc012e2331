"""Marker files of a store root (`abort`, `abort.bak`, `lock`) and telling 4.x stores from 5.x stores.

The broker creates `abort` at start and deletes it after a clean shutdown, so an `abort` found at
start-up means the last run died (DefaultMessageStore.isTempFileExist). 4.9.x creates it empty; 5.x
writes its PID into it with MixAll.string2File, which first copies the previous content to `abort.bak`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoint import Checkpoint

ABORT = "abort"
ABORT_BAK = "abort.bak"
LOCK = "lock"
CHECKPOINT = "checkpoint"
LOCK_BYTES = b"lock"
GENERATIONS = (4, 5)


@dataclass(frozen=True)
class GenerationGuess:
    """Which RocketMQ generation wrote the store (4 = 4.x, 5 = 5.x) and the evidence for it."""

    generation: int
    evidence: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """"4.x" or "5.x"."""
        return f"{self.generation}.x"


def detect_generation(abort: bytes | None, abort_bak_exists: bool, checkpoint: Checkpoint | None,
                      v2_magic_seen: bool = False) -> GenerationGuess:
    """The rule, first match wins:

    1. `abort` holds text (a PID): only 5.x writes content into it (4.x creates it empty).
    2. `abort.bak` exists: only 5.x's string2File leaves it (a clean 5.x store keeps one too).
    3. the checkpoint's masterFlushedOffset or confirmPhyOffset (bytes 24-40) is non-zero: 5.x-only fields.
    4. a record with the V2 message magic: 5.x writes it for topics longer than 127 characters.
    Otherwise 4.x. A 5.x store that never had abort content, never restarted and has no long
    topic looks like 4.x: pass the generation explicitly in that case.
    """
    evidence: list[str] = []
    if abort is not None and abort.strip():
        evidence.append(f"abort holds {abort.strip()[:20].decode('latin-1')!r} (5.x writes its PID there; 4.x leaves it empty)")
    if abort_bak_exists:
        evidence.append("abort.bak exists (5.x backs up the previous abort content)")
    if checkpoint is not None and checkpoint.has_v5_fields:
        evidence.append(f"checkpoint has 5.x fields (masterFlushedOffset {checkpoint.master_flushed_offset}, "
                        f"confirmPhyOffset {checkpoint.confirm_phy_offset})")
    if v2_magic_seen:
        evidence.append("a record uses the V2 message magic (5.x only)")
    if evidence:
        return GenerationGuess(5, evidence)
    return GenerationGuess(4, ["abort is empty or absent, no abort.bak, no 5.x checkpoint fields"])


def markers_after_clean_start(generation: int, crashed_abort: bytes | None) -> dict[str, bytes]:
    """Marker files a broker leaves after starting on the store and shutting down cleanly: `lock`
    always; for 5.x also `abort.bak` holding the old abort content (createTempFile backs it up before
    writing its own PID; shutdown then deletes `abort`). `abort` itself is gone."""
    out = {LOCK: LOCK_BYTES}
    if generation >= 5 and crashed_abort is not None:
        out[ABORT_BAK] = crashed_abort
    return out
