"""The sections of a job's report that put the store's own facts beside what the scan found: `dispatch` (the
limit, why, and where dispatch stopped) and, on a DLedger store, `dledger` (the entries, where DLedger data begins
(dividedCommitlogOffset), the checkpoint's committedIndex, how many entries lie past it, and the committed-position
reading in effect, with a note on stderr when entries are left out by it); the --dledger-reading flag."""
from __future__ import annotations

import sys

from storage_format.confirm_offset import DispatchLimit
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.store_gate import dledger_data_dir
from ..store.dispatch import dledger_reading, read_dledger_checkpoint
from .result import ScanResult


def add_dledger_flag(p) -> None:
    """--dledger-reading: which entries count as dispatched on a DLedger store (storage_format.dledger)."""
    from storage_format.dledger import READING_CHECKPOINT, READING_SURVIVING, READINGS

    p.add_argument("--dledger-reading", choices=READINGS,
                   help=f"DLedger stores: {READING_SURVIVING} = every valid entry is dispatched (what a one-member "
                        f"group commits; the default when dLegerPeers names one member), {READING_CHECKPOINT} = only "
                        f"entries up to committedIndex in dledger-<id>/checkpoint (what a quorum surely held; the "
                        f"default for a group of several)")


def entries_summary(scan: ScanResult) -> dict:
    """The report's view of the DLedger log: entries, their index range, where DLedger data begins."""
    rng = scan.entry_range()
    data = [s for s in scan.segments if s.header]
    plain = [s for s in scan.segments if not s.header]
    return {"data_files": len(data), "plain_segments": len(plain),
            "divided_commitlog_offset": data[0].start if data and plain else None,
            "entries": scan.dledger_entries, "first_entry_index": None if rng is None else rng[0],
            "last_entry_index": None if rng is None else rng[1], "last_entry_term": scan.last_entry_term()}


def entries_past(committed_index: int | None, scan: ScanResult) -> int | None:
    """Valid entries past the checkpoint's committedIndex (None without a checkpoint or entries)."""
    rng = scan.entry_range()
    if committed_index is None or rng is None:
        return None
    return max(0, rng[1] - max(committed_index, rng[0] - 1))



def member_choice(section: dict) -> list[str]:
    """For a group of several members (issue 37 item 2): which member's store to convert and what the reading in
    effect leaves out, said before anything else in convert's plan; empty for a one-member group."""
    reading = section["committed_reading"]
    if reading["peers"] <= 1:
        return []
    past, committed = section["entries_past_committed_index"], section["checkpoint"] or {}
    return [f"a group of {reading['peers']} members (dLegerPeers): convert ONE member's store, the one a new "
            f"leader would be, the longest log (highest last entry term, then index): run `reput inspect` on each "
            f"member and compare 'DLedger last entry'; this member's is index {section['last_entry_index']}, term "
            f"{section['last_entry_term']}, its saved committedIndex {committed.get('committedIndex')}",
            _reading_consequence(reading["reading"], past)]


def _reading_consequence(reading: str, past: int | None) -> str:
    """What the reading in effect keeps of the entries past the saved committedIndex."""
    if not past:
        return "no entry lies past the saved committedIndex: both --dledger-reading choices convert the same log"
    if reading != "surviving":
        return (f"reading '{reading}': the {past} entries past the saved committedIndex are left out; DLedger saves "
                f"committedIndex every few seconds, so some were committed (acknowledged to producers): on the "
                f"longest log, pass --dledger-reading surviving to keep them, as that member's leadership would")
    return (f"reading 'surviving': the {past} entries past the saved committedIndex are kept: right on the longest "
            f"log; on a shorter one, entries the group never committed could be kept while committed ones are missing")


def dledger_section(job: str, store: Location, settings: BrokerSettings, flag: str | None,
                    scan: ScanResult) -> dict | None:
    """The report section (None for a plain store); a note on stderr names the reading and, when entries
    lie past committedIndex, how many."""
    if not settings.enable_dleger_commit_log:
        return None
    cp = read_dledger_checkpoint(store, settings)
    reading = dledger_reading(store, settings, flag)
    committed = None if cp is None else cp.get("committedIndex")
    past = entries_past(committed, scan)
    out = {"data_dir": dledger_data_dir(store, settings).uri, **entries_summary(scan),
           "checkpoint": cp, "entries_past_committed_index": past, "committed_reading": reading.reading.to_dict(),
           "dispatch_limit": reading.limit.offset}
    note = f"DLedger store, reading '{reading.reading.reading}' ({reading.reading.reason})"
    if past:
        note += (f"; {past} entries lie past committedIndex {committed} in the DLedger checkpoint"
                 + (" and are dispatched" if reading.limit.offset is None else " and are not dispatched"))
    print(f"reput {job}: note: {note}", file=sys.stderr)
    return out


def dispatch_report(job: str, limit: DispatchLimit, scan: ScanResult) -> dict:
    """The report's `dispatch` section: the limit, why, and where dispatch stopped; a note on stderr
    when records were held back."""
    stop = scan.dispatch_stop()
    out = {**limit.to_dict(), **stop.to_dict()}
    if limit.offset is not None:
        what = "the DLedger committed position" if limit.reason.startswith("DLedger") else "the confirm offset"
        print(f"reput {job}: note: dispatch stopped at {what} {limit.offset}: "
              f"{stop.held_back} valid records from commit-log offset {stop.first_held_back} on are not "
              f"dispatched ({limit.reason})", file=sys.stderr)
    return out
