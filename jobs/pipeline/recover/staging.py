"""An in-place run's staging area for the block that stages and switches: fresh, and removed again when the run
stops before its journal is written (recover --in-place, rebuild --since --in-place)."""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from ..runtime import interrupt
from ..runtime.failure import Interrupted
from .inplace import not_begun, prepare_staging
from .journal import JOURNAL, STAGING


@contextlib.contextmanager
def staging_area(store: Path, what: str = "the store") -> Iterator[Path]:
    """`store`'s staging area, fresh, for the block; removed again when the run stops before its journal is written
    (after an interrupt of a job under run_main once Spark has stopped writing into it; after the journal, --resume
    renames the staged files from there). An interrupt in the block before the switch says `what` is as it was."""
    staging = store / STAGING

    def drop() -> None:
        try:
            journaled = (store / JOURNAL).exists()
        except OSError:
            journaled = True
        if not journaled:
            shutil.rmtree(staging, ignore_errors=True)

    with interrupt.removed_unless_kept(staging, drop, keep=True):
        try:
            prepare_staging(store)
            yield staging
        except Interrupted:  # the switch's own line
            raise
        except KeyboardInterrupt:
            raise Interrupted(not_begun(what)) from None
        except BaseException:
            if interrupt.signalled():  # a signal's KeyboardInterrupt replaced on its way up
                raise Interrupted(not_begun(what)) from None
            raise
