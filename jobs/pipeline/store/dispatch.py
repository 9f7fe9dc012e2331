"""How far the broker's dispatch goes on a store (controller mode / duplicationEnable), for rebuild and verify."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from storage_format import dledger
from storage_format.confirm_offset import NO_LIMIT, DispatchLimit, reput_limit, stored_confirm_applies
from storage_format.dledger import CommittedReading
from storage_format.errors import SettingsError, StoreFormatError
from storage_format.segment_names import segment_name
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.store_gate import dledger_home
from .markers import StoreMarkers
from .segments import list_segments


def store_dispatch_limit(store: Location, settings: BrokerSettings, dledger_flag: str | None = None) -> DispatchLimit:
    """The confirm offset the broker's ReputMessageService stops at on this store (None: no limit).
    The checkpoint is read only when its confirm offset applies: a rebuild needs nothing else from it.
    In DLedger mode: the committed position of the reading in effect (dledger_reading)."""
    if settings.enable_dleger_commit_log:
        return dledger_reading(store, settings, dledger_flag).limit
    if stored_confirm_applies(settings) is None:
        return NO_LIMIT
    return reput_limit(settings, StoreMarkers.read(store).found_checkpoint)


@dataclass(frozen=True)
class DledgerReading:
    """The committed-position reading in effect (storage_format.dledger.committed_reading) and the dispatch
    limit it gives: none when every surviving entry counts, else the end of the committedIndex entry."""

    reading: CommittedReading
    limit: DispatchLimit


def read_dledger_checkpoint(store: Location, settings: BrokerSettings) -> dict[str, int] | None:
    """dledger-<id>/checkpoint as numbers (None: no checkpoint); unreadable text is a one-line error."""
    loc = dledger_home(store, settings).child(dledger.CHECKPOINT)
    if not loc.exists():
        return None
    try:
        return dledger.parse_checkpoint(loc.read_bytes().decode("latin-1"))
    except ValueError as exc:
        raise StoreFormatError(loc.uri, 0, f"not a DLedger checkpoint ({exc})") from None


def dledger_floor(store: Location, settings: BrokerSettings) -> int:
    """Where dispatch stops when no DLedger entry is committed: DLedgerCommitLog.getMaxOffset() gives the DLedger
    data's first file offset then (dividedCommitlogOffset: an upgraded store's plain part is dispatched whole),
    or 0 for a pure DLedger store; with plain segments but no data file yet, the end of the last plain segment
    (where the broker's recovery creates the first data file)."""
    segments = list_segments(store, settings)
    data = [s for s in segments if s.header]
    if data:
        return data[0].start
    return max((s.start + s.size for s in segments), default=0)


def dledger_reading(store: Location, settings: BrokerSettings, flag: str | None) -> DledgerReading:
    """Which entries count as dispatched on a DLedger store, and where that stops dispatch."""
    cp = read_dledger_checkpoint(store, settings)
    committed = None if cp is None else cp.get("committedIndex")
    reading = dledger.committed_reading(settings.d_leger_peers, committed, flag)
    if reading.reading == dledger.READING_SURVIVING:
        return DledgerReading(reading, DispatchLimit(None, f"DLedger: {reading.reason}"))
    if committed is None:
        raise SettingsError(f"--dledger-reading {dledger.READING_CHECKPOINT}: {dledger_home(store, settings).uri} "
                            f"has no checkpoint with a committedIndex to stop at")
    if committed < 0:
        floor = dledger_floor(store, settings)
        whole = f"; the plain part below {floor} is dispatched whole" if floor else ""
        return DledgerReading(reading, DispatchLimit(floor, f"DLedger: {reading.reason}; committedIndex {committed}: "
                                                            f"no DLedger entry is committed{whole}"))
    start, at = dledger.index_file_of(committed)
    index = dledger_home(store, settings).child(dledger.INDEX_DIR).child(segment_name(start))
    unit = bytes(index.read_range(at, dledger.INDEX_UNIT_SIZE)) if index.exists() else b""
    try:
        end = dledger.committed_end(unit)
    except (ValueError, struct.error):
        raise StoreFormatError(index.uri, at, f"no DLedger index unit for committedIndex {committed}: the committed "
                                              f"position is unknown (use --dledger-reading "
                                              f"{dledger.READING_SURVIVING})") from None
    return DledgerReading(reading, DispatchLimit(end, f"DLedger: {reading.reason}; committedIndex {committed} ends "
                                                      f"at {end}"))
