"""Verify, the broker's restart re-index (issue 51): at every start a 4.x broker indexes the keys of the log's last
indexed record once more when that record lies at or after the consume queues' end, e.g. a PREPARED transaction at
the tail (in no consume queue, but indexed) or a damaged record its consume queue skipped. Such a store is healthy.

The rule, from RocketMQ 4.9.8: DefaultMessageStore.start resumes dispatch at reputFromOffset = the largest
maxPhysicOffset of its consume queues (ConsumeQueue.recover: the end of the last unit read back), at least the
log's min offset, and re-dispatches every record from there; IndexService.buildIndex skips a record only when its
offset lies BELOW the last index file's endPhyOffset, which is the last indexed record's own offset. So when no
consume-queue unit points at that record or past it, each start puts all its keys again, one by one as
IndexFile.putKey does, into the last index file, and into a new file (beginning at the full file's end) when that
is full. 5.x resumes at the commit log's confirm offset (recheckReputOffsetFromCq off by default): no re-index.

verify expects the store's last index file (and any after it) to be exactly the rebuilt last file followed by some
number of such passes; entries that are that, and nothing else, are counted apart (`restart_reindex` in the report),
never findings."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.arrow_numpy import to_numpy
from storage_format.consume_queue import parse_file_name, unpack_entries
from storage_format.index_file import HEADER_SIZE, IndexHeader, IndexLayout
from storage_format.index_build import append_to_index_file

from ..io.fs import Location
from ..io.workdir import read_cq, read_keys
from ..outputs.cq_tail import read_data
from ..scan.result import ScanResult

FIRST_GENERATION_WITHOUT = 5  # 5.x starts dispatch at the commit log's confirm offset: it re-indexes nothing
RECOVERED_FILES = 3  # ConsumeQueue.recover reads a queue from its third-last file on
PASS_KEYS = 1 << 20  # keys put at a time when simulating many starts (a damaged indexCount may claim millions)


@dataclass(frozen=True)
class RestartRecord:
    """The record a 4.x broker indexes again at every start: its commit-log offset, store time and index keys' hashes
    in the order buildIndex puts them (the unique key, then the keys); and, when the scan cannot tell on its own whether
    a consume-queue unit points at it or past it, the store's queues whose units decide (None: every queue)."""

    phy: int
    store_ts: int
    key_hash: tuple[int, ...]
    cq_dir: str  # the store's consumequeue/
    cq_file_size: int
    queues: tuple[tuple[str, int], ...] | None = ()

    def to_dict(self) -> dict:
        return {"offset": self.phy, "store_timestamp": self.store_ts, "keys": len(self.key_hash)}

    def dispatch_resumes_before(self) -> bool:
        """Whether a start resumes dispatch at or before the record: no queue named (all of them when None) ends past
        it as ConsumeQueue.recover reads it back. Read only when the index's tail differs (a few queues at most, unless
        the scan decoded no consume-queue rows: verify --only index)."""
        root = Location(self.cq_dir)
        names = ([(topic, str(qid)) for topic, qid in self.queues] if self.queues is not None else
                 [(t.base_name, q.base_name) for t in root.list() for q in root.child(t.base_name).list()])
        return all(recovered_end(root.child(topic, qid), self.cq_file_size) <= self.phy for topic, qid in names)


@dataclass(frozen=True)
class RestartTail:
    """What the restart check of the last expected index file needs: the record, that file's number, and the store's
    index files after its pair (name order) that pair with no expected file (a restart may have opened them)."""

    record: RestartRecord
    file_no: int
    trailing: tuple[tuple[str, IndexHeader | None], ...] = ()


def restart_record(scan: ScanResult, work: Location, cq_dir: Location, cq_file_size: int, generation: int,
                   with_cq: bool, rocksdb_checkpoint: int | None = None) -> RestartRecord | None:
    """The record the broker's starts may index again (None: no start re-indexes anything): on a 4.x store, the log's
    last indexed record, unless the scan's consume-queue rows show a unit at it or past it. Rows of queues in step
    always get their unit; a queue out of step may skip them, and without rows (`with_cq` False) nothing is known: then
    the store's queues decide, as the broker reads them (RestartRecord.dispatch_resumes_before). RocksDB consume
    queues (`rocksdb_checkpoint`: the database's dispatch checkpoint): a 5.x start re-dispatches, index included, the
    records after the checkpoint, so the last indexed record is put again when it lies at or after it."""
    if generation >= FIRST_GENERATION_WITHOUT and rocksdb_checkpoint is None:
        return None
    keyed = [s for s in scan.accepted if s.keys and s.last_key is not None]
    if not keyed:
        return None
    last = max(keyed, key=lambda s: s.last_key[1])
    store_ts, phy = last.last_key
    keys = read_keys(work, last.index)
    hashes = to_numpy(keys.column("key_hash"))[to_numpy(keys.column("phy")) == phy]
    queues: tuple[tuple[str, int], ...] | None = None
    if rocksdb_checkpoint is not None:
        if phy < rocksdb_checkpoint:
            return None
        queues = ()  # no file queue decides: the checkpoint did
    elif with_cq:
        queues = tuple(sorted(tail_queues(scan, work, phy)))
        if queues and scan.out_of_step_queues is None:
            return None
    if not len(hashes):
        return None
    return RestartRecord(int(phy), int(store_ts), tuple(int(h) for h in hashes), cq_dir.uri, cq_file_size, queues)


def tail_queues(scan: ScanResult, work: Location, phy: int) -> set[tuple[str, int]]:
    """The (topic, queueId)s the scan gives a consume-queue row for a record at or after commit-log offset `phy` (read
    from the splits that reach past it only; none for a PREPARED record at the log's tail)."""
    out: set[tuple[str, int]] = set()
    for s in scan.accepted:
        if not s.cq_rows or s.last_record_end is None or s.last_record_end <= phy:
            continue
        at = np.flatnonzero(to_numpy(read_cq(work, s.index).column("phy")) >= phy)
        if not len(at):
            continue
        table = scan.split_queues(s)
        held = np.flatnonzero(table.cq_rows > 0)  # rows are grouped by queue in the table's order
        owner = held[np.searchsorted(table.first_row[held], at, side="right") - 1]
        names = table.topic.to_pylist()
        out |= {(names[i], int(table.queue_id[i])) for i in np.unique(owner).tolist()}
    return out


def recovered_end(queue_dir: Location, file_size: int) -> int:
    """The maxPhysicOffset ConsumeQueue.recover gives a queue directory of the store (-1: no unit): from its third-last
    file on, the end of the last unit of the run of units with phyOffset >= 0 and size > 0. Only the queues the scan
    gives a unit at or after the record are read (the broker's resume point is the largest over all queues, and every
    other queue's units end at or before the record)."""
    names = sorted(i.base_name for i in queue_dir.list() if parse_file_name(i.base_name) is not None)
    end = -1
    for name in names[max(0, len(names) - RECOVERED_FILES):]:
        units = unpack_entries(read_data(queue_dir.child(name)), file_size)
        bad = np.flatnonzero((units["phy"] < 0) | (units["size"] <= 0))
        n = int(bad[0]) if len(bad) else len(units)
        if n:
            end = int(units["phy"][n - 1]) + int(units["size"][n - 1])
        if n < len(units):
            break
    return end


def _opened_after(prev: bytearray, layout: IndexLayout) -> bytearray:
    """The file IndexService.getAndCreateLastIndexFile opens after a full one: zeros, its header's begin and end set to
    the full file's end (the IndexFile constructor), its indexCount not yet written."""
    h = IndexHeader.from_bytes(bytes(prev[:HEADER_SIZE]))
    data = bytearray(layout.size)
    data[:HEADER_SIZE] = IndexHeader(h.end_timestamp, h.end_timestamp, h.end_phy_offset, h.end_phy_offset, 0,
                                     0).to_bytes()
    return data


def restarted(last: bytearray, record: RestartRecord, starts: int, layout: IndexLayout) -> list[bytearray]:
    """The last index file after `starts` starts re-indexed the record (changed in place), then the files they opened:
    each start puts the record's keys one by one (IndexFile.putKey), a full file making the next (so the starts' puts
    are the keys repeated `starts` times, put in runs of at most PASS_KEYS)."""
    n = len(record.key_hash)
    per_run = max(1, PASS_KEYS // n)  # whole passes per run
    files = [last]
    for first in range(0, starts, per_run):
        runs = min(per_run, starts - first)
        key_hash = np.tile(np.array(record.key_hash, np.int64), runs)
        phy, store_ts = np.full(len(key_hash), record.phy, np.int64), np.full(len(key_hash), record.store_ts, np.int64)
        done = 0
        while True:
            done += append_to_index_file(files[-1], key_hash[done:], phy[done:], store_ts[done:], layout.slots,
                                         layout.max_entries)
            if done == len(key_hash):
                break
            files.append(_opened_after(files[-1], layout))
    return files


def _entries(data: bytes, layout: IndexLayout) -> int:
    """Entries an index file's header counts, as the broker loads it (none for a file shorter than its header)."""
    return layout.used_positions(IndexHeader.from_bytes(data[:HEADER_SIZE])) - 1 if len(data) >= HEADER_SIZE else 0


def restart_starts(expected: bytes, disk: list[bytes], record: RestartRecord, layout: IndexLayout) -> int | None:
    """How many starts re-indexed the record when the store's last index file and those after it (`disk`, name order)
    are exactly the expected last file followed by that many passes (restarted), else None."""
    extra = _entries(disk[0], layout) - _entries(expected, layout) + sum(_entries(d, layout) for d in disk[1:])
    n = len(record.key_hash)
    if extra <= 0 or extra % n:
        return None
    starts = extra // n
    files = restarted(bytearray(expected), record, starts, layout)
    if len(files) != len(disk) or any(f != d for f, d in zip(files, disk)):
        return None
    return starts
