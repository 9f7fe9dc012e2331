"""What verify knows of a 5.x DLedger-mode store (RocketMQ 5.3.3, issue 56), applied once the files are compared:

* the records the broker indexes twice (verify.double_index): set apart, counted and named, never findings;
* a crashed store's dispatch lag (abort present): when the findings are exactly the consume-queue units and index
  entries of the log's last records, verify names them as what 5.3.3's next start dispatches (during load from the
  data file its checkpoint bound picks, and after start() from the DLedger checkpoint's committedPos); they stay
  findings (the files on disk do lack them), named with the way out (`reput recover`)."""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import numpy as np

from storage_format import dledger as fmt
from storage_format.errors import SettingsError, StoreFormatError
from storage_format.recovery import SEGMENT_HEAD_BYTES
from storage_format.recovery.dledger_v5 import choose_dispatch_file, dispatch_file_head
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.workdir import cq_columns, key_columns
from ..scan.result import ScanResult
from ..store.dispatch import dledger_reading
from ..store.markers import StoreMarkers, store_generation
from .double_index import double_indexed
from .findings import Findings

LAG_KINDS = {"consumequeue.missing_entry", "consumequeue.missing_file", "index.missing_entry", "index.missing_file",
             "index.header_differs", "index.slot_differs", "index.key_not_found"}
DLEDGER_INDEX_MISSING = "dledger_index.missing_entry"  # a lag's too when the units are the data's last (below)


def explain(store: Location, files: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
            found: Findings, given: int | None, with_index: bool) -> dict:
    """The report's `double_indexed` and `recovery_lag` parts for a 5.x DLedger store (`given`: --rocketmq-version,
    else the marker files decide), each named on stderr."""
    if not settings.enable_dleger_commit_log or store_generation(store, given).generation < 5:
        return {}
    out: dict = {}
    if with_index and any(k.startswith("index.") and n for k, n in found.counts.items()):
        twice = double_indexed(found, files.child("index"), scan, work, settings.index_layout)
        if twice is not None:
            out["double_indexed"] = twice.to_dict()
            print(f"reput verify: note: {twice.describe()}", file=sys.stderr, flush=True)
    markers = StoreMarkers.read(store)
    if markers.abort is not None and found.total():
        lag = dispatch_lag(found, store, settings, scan, work, markers)
        if lag is not None:
            out["recovery_lag"] = lag.to_dict(found.total())
            print(f"reput verify: note: {out['recovery_lag']['message']}", file=sys.stderr, flush=True)
    return out


@dataclass(frozen=True, kw_only=True)
class DispatchLag:
    """A crashed store's undispatched tail: its units and entries, where it starts and ends, what the next start
    does with it."""

    pid: str
    consume_queue_units: int
    index_entries: int
    from_offset: int
    log_end: int
    load_dispatch_from: int
    reput_from: int | None
    dledger_index_units: int = 0  # the DLedger index's last units, missing: its recovery writes them from the data

    def describe(self, findings: int) -> str:
        reput = (f"the DLedger checkpoint's committedPos {self.reput_from}" if self.reput_from is not None
                 else "the log's min offset (no DLedger checkpoint committedIndex)")
        units = f"{self.consume_queue_units} consume-queue unit{'' if self.consume_queue_units == 1 else 's'}"
        entries = f"{self.index_entries} index entr{'y' if self.index_entries == 1 else 'ies'}"
        dledger = (f" (and the DLedger index lacks its last {self.dledger_index_units} unit"
                   f"{'' if self.dledger_index_units == 1 else 's'}: DLedger's recovery writes them from the data)"
                   if self.dledger_index_units else "")
        return (f"these {findings} findings are the dispatch lag of a store that crashed (abort holds "
                f"{self.pid!r}): the {units} and {entries} of the records from commit-log offset "
                f"{self.from_offset} to the log's end {self.log_end} "
                f"are not in its files yet{dledger}; RocketMQ 5.3.3's next start dispatches them, during load from "
                f"data file {self.load_dispatch_from:020d} and after start() again from {reput}; `reput recover` does "
                f"the same offline (--dry-run shows its plan)")

    def to_dict(self, findings: int) -> dict:
        return {**asdict(self), "message": self.describe(findings)}


def _missing(found: Findings, artifact: str) -> tuple[int, list[int]]:
    """(units or entries the store lacks, the offsets its detailed findings name) for one artifact."""
    n = found.counts.get(f"{artifact}.missing_entry", 0)
    offsets = []
    for d in found.details:
        if d["artifact"] != artifact:
            continue
        if d["kind"] == "missing_file":
            n += int(d.get("entries", 0))
        elif d["kind"] == "missing_entry":
            offsets.append(int(d["expected"]["phyOffset"]))
    return n, offsets


def _nth_last(scan: ScanResult, work: Location, n: int, keys: bool) -> int | None:
    """The offset of the n-th last consume-queue row (or index key, `keys`) the log implies, newest splits first."""
    if n <= 0:
        return None
    parts: list[np.ndarray] = []
    got = 0
    for s in reversed(scan.accepted):
        if not (s.keys if keys else s.cq_rows):
            continue
        phy = (key_columns if keys else cq_columns)(work, s.index)["phy"].take()
        if len(phy):
            parts.append(np.asarray(phy, np.int64))
            got += len(phy)
        if got >= n:
            break
    if got < n:
        return None
    return int(np.sort(np.concatenate(parts))[-n])


def dispatch_lag(found: Findings, store: Location, settings: BrokerSettings, scan: ScanResult, work: Location,
                 markers: StoreMarkers) -> DispatchLag | None:
    """The findings as a crashed store's undispatched tail: only missing units / entries (and the index headers and
    slots they change), exactly as many as the log's last consume-queue rows and keys from an offset on, every
    detailed one at or past it; else None."""
    if not set(k for k, n in found.counts.items() if n) <= LAG_KINDS | {DLEDGER_INDEX_MISSING}:
        return None
    n_dledger = _dledger_index_tail(found, scan)
    if n_dledger is None:
        return None
    n_cq, cq_named = _missing(found, "consumequeue")
    n_idx, idx_named = _missing(found, "index")
    if found.counts.get("index.key_not_found", 0) > n_idx:
        return None
    starts = []
    for n, named, keys in ((n_cq, cq_named, False), (n_idx, idx_named, True)):
        if n:
            at = _nth_last(scan, work, n, keys)
            if at is None or any(x < at for x in named):
                return None
            starts.append(at)
    if not starts:
        return None
    return DispatchLag(pid=(markers.abort or b"").strip().decode("latin-1"), consume_queue_units=n_cq,
                       index_entries=n_idx, from_offset=min(starts), log_end=scan.max_physical_offset or 0,
                       load_dispatch_from=_load_dispatch_from(scan, settings, markers),
                       reput_from=_committed_pos(store, settings), dledger_index_units=n_dledger)


def _dledger_index_tail(found: Findings, scan: ScanResult) -> int | None:
    """How many DLedger index units the store lacks when they are the data's last entries (a crash between the data
    write and its index unit: DLedgerMmapFileStore.recover truncates the index at the first unit that does not match
    its data entry and writes every later one again), 0 when none lack; None when one lacks before that tail."""
    n = found.counts.get(DLEDGER_INDEX_MISSING, 0)
    if not n:
        return 0
    entries = scan.entry_range()
    named = [int(d["entry"]) for d in found.details
             if d["artifact"] == "dledger_index" and d["kind"] == "missing_entry"]
    if entries is None or any(e <= entries[1] - n for e in named):
        return None
    return n


def _load_dispatch_from(scan: ScanResult, settings: BrokerSettings, markers: StoreMarkers) -> int:
    """The data file 5.3.3's recovery dispatches from during load (storage_format.recovery.dledger_v5)."""
    data = [s for s in scan.segments if s.header]
    heads = (dispatch_file_head(bytes(Location(s.path).read_range(0, fmt.ENTRY_HEADER_SIZE + SEGMENT_HEAD_BYTES)),
                                s.start) for s in reversed(data))
    return choose_dispatch_file([s.start for s in data], heads, markers.checkpoint, settings).offset


def _committed_pos(store: Location, settings: BrokerSettings) -> int | None:
    """The DLedger checkpoint's committedPos (start()'s dispatch starts there), None without one."""
    try:
        return dledger_reading(store, settings, fmt.READING_CHECKPOINT).limit.offset
    except (SettingsError, StoreFormatError):
        return None
