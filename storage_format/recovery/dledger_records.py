"""The records inside a run of DLedger entries as the restarted broker dispatches them: consume-queue entries per
queue, index keys, the last consume-queue record (pure, over one data file's bytes).

A minimal reader for recovery's dispatch range (ReputMessageService over DLedgerCommitLog.getData): entries are
walked from an entry boundary to a stop offset, a DLedger blank ends the file, each entry's record is checked
with RocketMQ's own record checks as reput applies them (no CRC), and decoded with the plain decoder's columns
(RecordColumns, tags_codes, index_keys), so the dispatch rules keep their one home. Until the DLedger read path
feeds the split scan, recovery uses this for the (small) range it re-dispatches.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ..commitlog import RecordColumns, first_invalid_record
from ..consume_queue import has_cq_entry, tags_codes
from ..dledger import BLANK_MAGIC, ENTRY_HEADER_SIZE, ENTRY_MAGIC, read_entry_header
from ..errors import StoreFormatError
from ..index_keys import index_keys
from ..properties import TAGS
from ..record import MAGIC_V1
from ..settings import BrokerSettings
from .index import KeyBatch
from .queues import QueueEntries


@dataclass
class EntryRecords:
    """What dispatching the entries of one range yields, in dispatch order."""

    queues: dict[tuple[str, int], QueueEntries] = field(default_factory=dict)
    keys: KeyBatch = field(default_factory=lambda: KeyBatch.concat([]))
    records: int = 0
    first_record: int | None = None  # offset (PHYSICALOFFSET) of the first record
    last_record: int | None = None  # offset of the last record
    last_cq_record: int | None = None  # offset of the last NOT/COMMIT record
    last_cq_store_ts: int | None = None

    @staticmethod
    def merge(parts: list["EntryRecords"]) -> "EntryRecords":
        """Ranges in offset order joined."""
        out = EntryRecords()
        lists: dict[tuple[str, int], list[QueueEntries]] = {}
        for p in parts:
            for k, e in p.queues.items():
                lists.setdefault(k, []).append(e)
            out.records += p.records
            if p.first_record is not None and out.first_record is None:
                out.first_record = p.first_record
            if p.last_record is not None:
                out.last_record = p.last_record
            if p.last_cq_record is not None:
                out.last_cq_record, out.last_cq_store_ts = p.last_cq_record, p.last_cq_store_ts
        out.queues = {k: QueueEntries(*(np.concatenate([getattr(e, c) for e in v])
                                        for c in ("queue_offset", "phy", "size", "tags"))) for k, v in lists.items()}
        out.keys = KeyBatch.concat([p.keys for p in parts])
        return out


def entry_positions(buf: bytes | memoryview, file_start: int, start: int, stop: int, path: str) -> np.ndarray:
    """Buffer positions of the entries from `start` (an entry boundary) up to `stop` (exclusive) or the end of
    the data (a blank, a zero size); an entry that is not one DLedger wrote there is an error naming it."""
    out = []
    at = start
    n = len(buf)
    while at < stop and at + 8 <= n:
        magic, size = struct.unpack_from(">ii", buf, at)
        if magic == BLANK_MAGIC or size == 0:
            break
        if at + ENTRY_HEADER_SIZE > n:
            raise StoreFormatError(path, at, "a DLedger entry header runs past the end of the data file")
        h = read_entry_header(buf, at)
        if (h.magic != ENTRY_MAGIC or h.pos != file_start + at or h.body_size != h.size - ENTRY_HEADER_SIZE
                or h.size <= ENTRY_HEADER_SIZE or at + h.size > n):
            raise StoreFormatError(path, at, f"not a DLedger entry where the dispatch reads one (magic {h.magic}, "
                                             f"size {h.size}, pos {h.pos}, bodySize {h.body_size})")
        out.append(at)
        at += h.size
    return np.asarray(out, dtype=np.int64)


def dispatch_entries(buf: bytes | memoryview, base: int, settings: BrokerSettings, path: str, file_start: int,
                     with_cq: bool = True) -> EntryRecords:
    """Consume-queue entries and index keys of the records in the entries of `buf` (the bytes at offsets
    [base, base + len(buf)) of the data file `path` that starts at `file_start`; base is an entry boundary).
    A record RocketMQ's reput would reject is an error naming it (the broker logs '[BUG]' and skips it by a
    size it cannot trust; reput does not guess)."""
    try:
        return _dispatch(buf, base, settings, path, with_cq)
    except StoreFormatError as err:
        if err.offset is None or base == file_start:
            raise
        raise StoreFormatError(path, err.offset + base - file_start, err.reason) from None


def _dispatch(buf: bytes | memoryview, file_start: int, settings: BrokerSettings, path: str,
              with_cq: bool) -> EntryRecords:
    entries = entry_positions(buf, file_start, 0, len(buf), path)
    out = EntryRecords()
    if not len(entries):
        return out
    cols = RecordColumns(buf, file_start, entries + ENTRY_HEADER_SIZE, path)
    magic = np.flatnonzero(cols.magic != MAGIC_V1)
    if len(magic):  # the broker's reput then skips the rest of the data it mapped: reput refuses instead
        at = int(entries[magic[0]])
        raise StoreFormatError(path, at + ENTRY_HEADER_SIZE,
                               f"the record in the DLedger entry at {file_start + at} has magic "
                               f"0x{int(cols.magic[magic[0]]):08X}, not a 4.x message: the broker's dispatch would "
                               f"skip the rest of the data file from there")
    bad = first_invalid_record(cols, check_crc=False)
    if bad is not None:
        i, reason, why = bad
        at = int(entries[i])
        raise StoreFormatError(path, at + ENTRY_HEADER_SIZE, f"the record in the DLedger entry at {file_start + at} "
                                                             f"fails RocketMQ's dispatch checks ({reason}: {why})")
    body = np.asarray([read_entry_header(buf, int(a)).body_size for a in entries], dtype=np.int64)
    wrong = np.flatnonzero((cols.total_size.astype(np.int64) != body)
                           | (cols.physical_offset != file_start + entries + ENTRY_HEADER_SIZE))
    if len(wrong):
        at = int(entries[wrong[0]])
        raise StoreFormatError(path, at + ENTRY_HEADER_SIZE,
                               f"the record in the DLedger entry at {file_start + at} has totalSize "
                               f"{int(cols.total_size[wrong[0]])} / PHYSICALOFFSET {int(cols.physical_offset[wrong[0]])}"
                               f": not bodySize {int(body[wrong[0]])} / entry pos + {ENTRY_HEADER_SIZE}")
    phy = cols.physical_offset.astype(np.int64)
    ts = cols.store_timestamp.astype(np.int64)
    out.records = len(entries)
    out.first_record, out.last_record = int(phy[0]), int(phy[-1])
    cq = np.flatnonzero(has_cq_entry(cols.sys_flag))
    if len(cq):
        out.last_cq_record, out.last_cq_store_ts = int(phy[cq[-1]]), int(ts[cq[-1]])
    if with_cq and len(cq):
        topics = cols.topic
        tags = tags_codes(cols.property_binary(TAGS), topics, cols.delay_level, ts, settings.delay_levels_ms)
        names = topics.to_pylist()
        qid = cols.queue_id.astype(np.int64)
        groups: dict[tuple[str, int], list[int]] = {}
        for r in cq.tolist():
            groups.setdefault((names[r], int(qid[r])), []).append(r)
        qo = cols.queue_offset.astype(np.int64)
        size = cols.total_size.astype(np.int32)
        for key, rows in groups.items():
            sel = np.asarray(rows, dtype=np.int64)
            out.queues[key] = QueueEntries(qo[sel], phy[sel], size[sel], tags[sel].astype(np.int64))
    if settings.message_index_enable:
        k = index_keys(cols)
        out.keys = KeyBatch(k.key_hash.astype(np.int32), k.phy.astype(np.int64), k.store_ts.astype(np.int64))
    return out
