"""The store root's marker files, read in one place and one way: `abort`, `abort.bak` and `checkpoint`; the
generation that wrote the store (the --rocketmq-version override, else detected from these files).

Damage policy, the one for every job: a missing file is None, and a missing checkpoint reads as all zeros
(`checkpoint`, as StoreCheckpoint creates it; `found_checkpoint` is None instead, for a rule that tells the
two apart). A checkpoint that exists but cannot be parsed is an error naming the file and byte offset
(StoreFormatError) wherever its values are used (the dispatch limit, recovery); it is only no evidence for
the generation guess, which the other marker files may still settle."""
from __future__ import annotations

from dataclasses import dataclass

from storage_format.checkpoint import Checkpoint, parse_checkpoint
from storage_format.errors import StoreFormatError
from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT, GenerationGuess, detect_generation

from ..io.fs import Location


def given_generation(given: int) -> GenerationGuess:
    """The generation named on the command line (--rocketmq-version), which overrides detection."""
    return GenerationGuess(given, [f"given on the command line ({given}.x)"])


@dataclass(frozen=True, kw_only=True)
class StoreMarkers:
    """The store root's marker files as found (None: absent), the checkpoint parsed or its damage."""

    abort: bytes | None
    abort_bak: bytes | None
    checkpoint_raw: bytes | None
    parsed: Checkpoint | None
    damage: StoreFormatError | None

    @classmethod
    def read(cls, store: Location) -> "StoreMarkers":
        def opt(name: str) -> bytes | None:
            loc = store.child(name)
            return loc.read_bytes() if loc.exists() else None

        raw, parsed, damage = opt(CHECKPOINT), None, None
        if raw is not None:
            try:
                parsed = parse_checkpoint(raw, store.child(CHECKPOINT).uri)
            except StoreFormatError as exc:
                damage = exc
        return cls(abort=opt(ABORT), abort_bak=opt(ABORT_BAK), checkpoint_raw=raw, parsed=parsed, damage=damage)

    @property
    def found_checkpoint(self) -> Checkpoint | None:
        """The checkpoint (None when the store has none); a damaged one raises its StoreFormatError."""
        if self.damage is not None:
            raise self.damage
        return self.parsed

    @property
    def checkpoint(self) -> Checkpoint:
        """The checkpoint, all zeros when the store has none (the broker's rules); damage raises."""
        cp = self.found_checkpoint
        return cp if cp is not None else Checkpoint()

    def generation(self, given: int | None) -> GenerationGuess:
        """`given` when set, else detected from the marker files (a damaged checkpoint is no evidence)."""
        if given is not None:
            return given_generation(given)
        return detect_generation(self.abort, self.abort_bak is not None, self.parsed)


def store_generation(store: Location, given: int | None) -> GenerationGuess:
    """The generation given on the command line, else detected from the store root's marker files."""
    return given_generation(given) if given is not None else StoreMarkers.read(store).generation(None)
