"""How far the broker's dispatch goes on a store (controller mode / duplicationEnable), for rebuild and verify."""
from __future__ import annotations

import sys

from storage_format.confirm_offset import NO_LIMIT, DispatchLimit, reput_limit, stored_confirm_applies
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..scan.result import ScanResult
from .markers import StoreMarkers


def store_dispatch_limit(store: Location, settings: BrokerSettings) -> DispatchLimit:
    """The confirm offset the broker's ReputMessageService stops at on this store (None: no limit).
    The checkpoint is read only when its confirm offset applies: a rebuild needs nothing else from it."""
    if stored_confirm_applies(settings) is None:
        return NO_LIMIT
    return reput_limit(settings, StoreMarkers.read(store).checkpoint)


def dispatch_report(job: str, limit: DispatchLimit, scan: ScanResult) -> dict:
    """The report's `dispatch` section: the limit, why, and where dispatch stopped; a note on stderr
    when records were held back."""
    stop = scan.dispatch_stop()
    out = {**limit.to_dict(), **stop.to_dict()}
    if limit.offset is not None:
        print(f"reput {job}: note: dispatch stopped at the confirm offset {limit.offset}: "
              f"{stop.held_back} valid records from commit-log offset {stop.first_held_back} on are not "
              f"dispatched ({limit.reason})", file=sys.stderr)
    return out
