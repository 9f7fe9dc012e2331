"""Which RocketMQ generation wrote a store, for the jobs whose rules differ between 4.x and 5.x."""
from __future__ import annotations

from storage_format.checkpoint import parse_checkpoint
from storage_format.errors import StoreFormatError
from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT, GenerationGuess, detect_generation

from ..io.fs import Location


def store_generation(store: Location, given: int | None) -> GenerationGuess:
    """The generation given on the command line (--rocketmq-version), else detected from the store root's
    marker files (storage_format.markers.detect_generation); an unreadable checkpoint is no evidence."""
    if given is not None:
        return GenerationGuess(given, [f"given on the command line ({given}.x)"])
    abort = store.child(ABORT)
    checkpoint = None
    if store.child(CHECKPOINT).exists():
        try:
            checkpoint = parse_checkpoint(store.child(CHECKPOINT).read_bytes(), store.child(CHECKPOINT).uri)
        except StoreFormatError:
            checkpoint = None
    return detect_generation(abort.read_bytes() if abort.exists() else None, store.child(ABORT_BAK).exists(),
                             checkpoint)
