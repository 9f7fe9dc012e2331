"""Consume-queue files: 20-byte entries (phyOffset, size, tagsCode) at queueOffset x 20.

Which records get an entry (transaction type NOT or COMMIT), the tagsCode rule (Java hash of TAGS,
or the delivery time for SCHEDULE_TOPIC_XXXX), the pre-blank filler of a queue's first file and the
file layout live here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .commitlog import parse_segment_name, segment_name
from .java_hash import java_hash_arrow
from .record import SCHEDULE_TOPIC, TRAN_COMMIT, TRAN_MASK, TRAN_NOT

CQ_UNIT_SIZE = 20
CQ_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tags", ">i8")])
PRE_BLANK_SIZE = 0x7FFFFFFF  # size of the filler units before a queue's first entry



@dataclass(frozen=True)
class CqColumns:
    """Consume-queue entries as parallel columns (queue offset, commit-log offset, size, tags code); the one
    shape both the decode (split_decode.CqRows) and recovery (recovery.queues.QueueEntries) hand on.
    `store_ts`: the records' storeTimestamp where the decode was asked for it (RocksDB units hold it), else None."""

    queue_offset: np.ndarray
    phy: np.ndarray
    size: np.ndarray
    tags: np.ndarray
    store_ts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.phy)

    def rows(self, selected) -> "CqColumns":
        """The selected rows (a slice, a mask or positions) of every column, store timestamps included."""
        return CqColumns(self.queue_offset[selected], self.phy[selected], self.size[selected], self.tags[selected],
                         None if self.store_ts is None else self.store_ts[selected])

    @staticmethod
    def joined(parts: list["CqColumns"], order: np.ndarray | None = None) -> "CqColumns":
        """The parts' rows one after another (then in `order`); store timestamps only when every part has them."""
        names = ("queue_offset", "phy", "size", "tags") + (("store_ts",) if all(p.store_ts is not None for p in parts)
                                                           else ())
        columns = [np.concatenate([getattr(p, name) for p in parts]) for name in names]
        return CqColumns(*(c if order is None else c[order] for c in columns))

def file_name(start: int) -> str:
    """Consume-queue file name: its first logical byte offset as 20 digits (UtilAll.offset2FileName,
    which names commit-log segments too)."""
    return segment_name(start)


def parse_file_name(name: str) -> int | None:
    """The start offset a consume-queue file name stands for, or None when it is not such a name."""
    return parse_segment_name(name)


def has_cq_entry(sys_flag: np.ndarray) -> np.ndarray:
    """Records dispatched to a consume queue: transaction type NOT or COMMIT."""
    tran = np.asarray(sys_flag) & TRAN_MASK
    return (tran == TRAN_NOT) | (tran == TRAN_COMMIT)


def tags_codes(tags: pa.Array, topics: pa.Array, delay_level: np.ndarray, store_timestamp: np.ndarray,
               delay_levels_ms: tuple[int, ...]) -> np.ndarray:
    """tagsCode per record: Java hash of TAGS (0 when absent), or for SCHEDULE_TOPIC_XXXX with a
    DELAY level > 0 the delivery time storeTimestamp + delay of min(level, max level).

    `delay_level` is -1 where the record has no DELAY property.
    """
    codes = java_hash_arrow(tags).astype(np.int64)
    delay_level = np.asarray(delay_level, dtype=np.int64)
    cand = delay_level > 0
    if cand.any() and len(delay_levels_ms):
        is_schedule = np.asarray(pc.fill_null(pc.equal(topics, SCHEDULE_TOPIC), False))
        cand &= is_schedule
        if cand.any():
            table = np.asarray(delay_levels_ms, dtype=np.int64)
            level = np.minimum(delay_level[cand], len(table))
            codes[cand] = np.asarray(store_timestamp, dtype=np.int64)[cand] + table[level - 1]
    return codes


def unpack_entries(data: bytes | memoryview, file_size: int | None = None) -> np.ndarray:
    """Consume-queue bytes as a read-only structured array of (phy, size, tags) units: the whole
    units of `data`, or with `file_size` exactly file_size / 20 units (a short file padded with zeros)."""
    if file_size is not None:
        data = bytes(data[:file_size]).ljust(file_size, b"\0")
    usable = len(data) - len(data) % CQ_UNIT_SIZE
    return np.frombuffer(data, dtype=CQ_DTYPE, count=usable // CQ_UNIT_SIZE)


def keep_first_of_each_offset(queue_offset: np.ndarray) -> np.ndarray:
    """Mask of entries the broker writes for one queue in dispatch order: an entry whose logical
    offset is below the queue's current end is skipped ("repeated" in ConsumeQueue)."""
    if not len(queue_offset):
        return np.zeros(0, bool)
    running = np.maximum.accumulate(queue_offset)
    keep = np.ones(len(queue_offset), bool)
    keep[1:] = queue_offset[1:] > running[:-1]
    return keep


def place_units(queue_offset: np.ndarray, phy: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """place_units_reference's answer, a run of consecutive offsets at a time (a damaged queue of millions of
    entries has a few breaks: each run is kept whole, or its head below the write position skipped); entries whose
    ends do not grow strictly (one record dispatched twice into the queue) take the reference."""
    qo = np.asarray(queue_offset, np.int64)
    n = len(qo)
    ends = np.asarray(phy, np.int64) + np.asarray(size, np.int64)
    if n < 2 or not (np.diff(ends) > 0).all():
        return place_units_reference(qo, phy, size)
    keep = np.zeros(n, bool)
    at = np.zeros(n, np.int64)
    runs = np.flatnonzero(np.diff(qo) != 1) + 1
    write = int(qo[0])  # the first entry lands at its own offset
    for a, b in zip(np.concatenate(([0], runs)).tolist(), np.concatenate((runs, [n])).tolist()):
        first = int(qo[a])
        if first == 0 and a > 0:  # offset 0 is appended wherever the write position is; the run goes on from 1
            keep[a], at[a] = True, write
            a, first, write = a + 1, 1, write + 1
        skip = 0 if first >= write else min(b - a, write - first)  # offsets below the write position: skipped
        keep[a + skip:b] = True
        at[a + skip:b] = write + np.arange(b - a - skip)
        write += b - a - skip
    return keep, at[keep]


@dataclass
class QueuePlacer:
    """place_units over a queue's entries given in chunks (dispatch order), carrying the write position and the end
    of the last entry kept from one chunk to the next: a queue of any length is placed in memory of one chunk."""

    write: int | None = None  # the next unit's position (None: nothing kept yet)
    max_end: int = -1  # the end of the last entry kept (maxPhysicOffset)
    repeat_after_last: bool = False  # an entry after the last one kept was skipped as a repeat (empty_next_file)

    def place(self, queue_offset: np.ndarray, phy: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(kept mask, position of each kept entry) of this chunk, as place_units gives them over all chunks."""
        qo, phy, size = (np.asarray(a, np.int64) for a in (queue_offset, phy, size))
        if self.write is None:
            keep, at = place_units(qo, phy, size)
        else:  # the state carried in as a unit already written just before the write position
            keep, at = place_units(_after(self.write - 1, qo), _after(self.max_end - 1, phy), _after(1, size))
            keep, at = keep[1:], at[1:]
        ends = phy + size
        if len(at):
            last = int(np.flatnonzero(keep)[-1])
            self.write = int(at[-1]) + 1
            self.max_end = max(self.max_end, int(ends[keep].max()))
            self.repeat_after_last = False
            ends = ends[last + 1:]
        if self.write is not None:  # a skipped entry ending past maxPhysicOffset was skipped as a repeat
            self.repeat_after_last |= bool((ends > self.max_end).any())
        return keep, at

    def empty_next_file(self, file_size: int) -> int | None:
        """The start of the file the broker leaves created and empty after this queue's last unit, or None.

        ConsumeQueue.putMessagePositionInfo asks getLastMappedFile for the entry's file before its repeat check:
        an entry skipped as a repeat while the last file is full still creates the next file, which stays zeros
        when no later entry is kept (and survives expiry, being the queue's last file)."""
        if not self.repeat_after_last or self.write is None or (self.write * CQ_UNIT_SIZE) % file_size:
            return None
        return self.write * CQ_UNIT_SIZE


def _after(first: int, rest: np.ndarray) -> np.ndarray:
    """[first, *rest] as int64 (np.r_'s answer without its per-call parsing: a queue's chunk at a time)."""
    out = np.empty(len(rest) + 1, np.int64)
    out[0] = first
    out[1:] = rest
    return out


def place_units_reference(queue_offset: np.ndarray, phy: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """place_units one entry at a time (the reference): (kept mask, queue position of each kept entry) for entries
    dispatched in order into a new queue,
    by ConsumeQueue.putMessagePositionInfo: an entry ending at or below the queue's maxPhysicOffset is
    skipped; the first lands at its offset (pre-blank units before it); a later one with a non-zero
    offset below the write position is skipped ("repeatedly"), any other is appended AT THE WRITE
    POSITION, whatever its offset (where offsets were used up without an entry, e.g. 5.x LMQ queues)."""
    keep = np.zeros(len(queue_offset), bool)
    at = np.zeros(len(queue_offset), np.int64)
    write, max_phy = None, -1
    for i, (qo, end) in enumerate(zip(queue_offset.tolist(), (phy.astype(np.int64) + size).tolist())):
        if end <= max_phy or (write is not None and qo != 0 and qo < write):
            continue
        at[i] = qo if write is None else write
        write, max_phy, keep[i] = at[i] + 1, end, True
    return keep, at[keep]


def build_queue_files(queue_offset: np.ndarray, phy: np.ndarray, size: np.ndarray, tags: np.ndarray,
                      file_size: int, queue_first_offset: int | None = None, trim: bool = False) -> dict[int, bytes]:
    """Files of one queue (or of a range of its files): {file start offset: full-size file bytes}
    (with `trim`, only up to the last unit written: the rest of the file is zeros).

    Entries go to byte queueOffset x 20 of the queue's logical space. The file holding the queue's
    first entry (`queue_first_offset`, default the smallest given; None-equivalent when the queue
    already had files, pass -1) is filled from its start up to that entry with pre-blank units
    (0, 0x7FFFFFFF, 0) when that entry is not at offset 0, as the broker does for a queue's first file.
    """
    if not len(queue_offset):
        return {}
    units_per_file = file_size // CQ_UNIT_SIZE
    out: dict[int, bytes] = {}
    first_unit = int(queue_offset.min()) if queue_first_offset is None else queue_first_offset
    first_file = first_unit // units_per_file if first_unit > 0 else None
    for file_no, sel, slot in _entries_by_file(queue_offset.astype(np.int64, copy=False), units_per_file):
        buf = np.zeros(int(slot[-1] if isinstance(sel, slice) else slot.max()) + 1 if trim else units_per_file,
                       dtype=CQ_DTYPE)
        if file_no == first_file:
            buf["size"][:first_unit - file_no * units_per_file] = PRE_BLANK_SIZE
        at = slice(int(slot[0]), int(slot[0]) + len(slot)) if isinstance(sel, slice) else slot
        buf["phy"][at], buf["size"][at], buf["tags"][at] = phy[sel], size[sel], tags[sel]
        out[file_no * file_size] = buf.tobytes()
    return out


def _entries_by_file(queue_offset: np.ndarray, units_per_file: int):
    """(file number, selector of its entries, their unit slots in the file) for each file holding
    entries, in file order. Increasing offsets (what a queue's dispatch keeps) are cut by binary search
    into slices; a slice whose slots are consecutive is then written as one block."""
    if bool(np.all(queue_offset[1:] > queue_offset[:-1])):
        first, last = int(queue_offset[0]) // units_per_file, int(queue_offset[-1]) // units_per_file
        edges = np.searchsorted(queue_offset, np.arange(first, last + 2, dtype=np.int64) * units_per_file).tolist()
        for file_no, a, b in zip(range(first, last + 1), edges[:-1], edges[1:]):
            if a < b:
                slot = queue_offset[a:b] - file_no * units_per_file
                yield file_no, (slice(a, b) if slot[-1] - slot[0] == b - a - 1 else np.arange(a, b)), slot
        return
    file_no_of = queue_offset // units_per_file
    for file_no in np.unique(file_no_of).tolist():
        sel = file_no_of == file_no
        yield file_no, sel, queue_offset[sel] - file_no * units_per_file


def unsafe_topic_reason(topic: str) -> str | None:
    """Why a topic (untrusted bytes) cannot be a directory name under consumequeue/, or None."""
    if topic in ("", ".", ".."):
        return f"topic {topic!r} cannot be a consume-queue directory name"
    for bad, what in (("/", "a '/'"), ("\\", "a backslash"), ("\x00", "a NUL byte")):
        if bad in topic:
            return f"topic {topic!r} contains {what} and would escape the consumequeue directory"
    if len(topic.encode("utf-8")) > 255:
        return f"topic of {len(topic.encode('utf-8'))} bytes is longer than a file name may be"
    return None
