"""recover --dry-run of a DLedger store: the damage the broker's DLedger-mode recovery does not look at, found by one
scan of the whole log and named by file and byte offset with what each broker does with it."""
from __future__ import annotations

from storage_format.commitlog import END_CRC_MISMATCH
from storage_format.recovery import dledger as drules
from storage_format.segment_names import segment_name
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..scan.decode import scan_store


def audit(sc, store: Location, settings: BrokerSettings, work: Location, split_size: int, quiet: bool,
          entries: drules.EntryRecovery, generation: int) -> list[str]:
    """--dry-run: damage the broker's DLedger-mode recovery does not look at, in the whole log: an entry or record
    before the walk's first data file (DLedger never reads it again), or a record DLedger keeps (it checks no CRC
    and no record) that RocketMQ's own checks reject; and a record whose storeTimestamp is no date."""
    scanned = scan_store(sc, store, settings, split_size=split_size, work=work.child("audit"), with_cq=False,
                       with_keys=False, label="audit", quiet=quiet, generation=generation,
                       check_crc=settings.check_crc_on_recover)
    found = []
    end = scanned.end
    if end is not None and end.is_invalid and end.offset < entries.write_end:
        if end.offset < entries.walk_from:
            found.append(f"the DLedger log is damaged before the data file the broker's recovery walks from "
                         f"({segment_name(entries.walk_from)}): {end.describe()}; DLedger's recovery does not read it "
                         f"again, but a dispatch or rebuild from the start of the log would stop there")
        elif end.reason == END_CRC_MISMATCH:
            found.append(f"DLedger's recovery keeps an entry whose record's body CRC fails: {end.describe()}; the "
                         f"DLedger broker serves it as it is (it checks no CRC), a plain broker's recovery "
                         f"(checkCRCOnRecover) would cut its log there, and convert refuses it unless --accept-bad-crc")
        else:
            found.append(f"DLedger's recovery keeps an entry whose record RocketMQ's checks reject: {end.describe()}; "
                         f"it lies below the write end, so only a dispatch or rebuild that reaches it would stop there")
    return found + scanned.record_problems()
