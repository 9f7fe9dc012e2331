"""Consume queues through recovery (ConsumeQueue.recover / putMessagePositionInfo / truncateDirtyLogicFiles).

Loaded state = the run of valid units from the third-last file; every record of [start, P) is
re-dispatched with the skip rule offset + size <= the queue's maxPhysicOffset and the "repeatedly"
rule; when the largest maxPhysicOffset over all queues is >= P, trailing files whose first unit is at
or past P are deleted and the write position is cut before the first unit >= P (the bytes after it stay).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..consume_queue import (CQ_DTYPE, CQ_UNIT_SIZE, PRE_BLANK_SIZE, CqColumns, keep_first_of_each_offset,
                             unpack_entries)


def _first_invalid_unit(units: np.ndarray) -> int:
    """Index of the first unit that is not (phy >= 0 and size > 0), or len(units)."""
    bad = np.flatnonzero((units["phy"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)


@dataclass(frozen=True)
class QueueLoad:
    """A consume queue as ConsumeQueue.recover leaves it at load: its files, where the next unit
    goes (logical byte offset) and maxPhysicOffset (-1 when no valid unit was seen)."""

    topic: str
    queue_id: int
    files: tuple[int, ...]
    write_offset: int
    max_phy: int
    removed_at_load: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        """(topic, queueId)."""
        return self.topic, self.queue_id


def dropped_at_load(files: list[tuple[int, int]], generation: int) -> tuple[int, ...]:
    """Files of one queue (start, size) that MappedFileQueue.doLoad deletes instead of mapping: 5.x deletes a
    0-byte LAST file (a crash right after creating it) and the queue writes it again; 4.x refuses it."""
    ordered = sorted(files)
    if generation >= 5 and ordered and ordered[-1][1] == 0:
        return (ordered[-1][0],)
    return ()


LOAD_CHUNK_UNITS = 1 << 16  # units of a consume-queue file read at once while looking for its first invalid one


def _valid_run(read: Callable[[int, int], bytes], units_in_file: int) -> tuple[int, int]:
    """(valid units from a file's start, maxPhysicOffset after them or -1), reading the file in growing chunks
    (`read(byte offset, length)`) and no further than the chunk holding its first invalid unit."""
    done, step, max_phy = 0, LOAD_CHUNK_UNITS, -1
    while done < units_in_file:
        units = unpack_entries(read(done * CQ_UNIT_SIZE, min(step, units_in_file - done) * CQ_UNIT_SIZE))
        k = _first_invalid_unit(units)
        if k:
            max_phy = int(units["phy"][k - 1]) + int(units["size"][k - 1])
        done += k
        if k < len(units) or not len(units):
            break
        step *= 2
    return done, max_phy


def load_queue(topic: str, queue_id: int, files: list[int], read_file: Callable[[int], bytes],
               file_size: int, read_range: Callable[[int, int, int], bytes | memoryview] | None = None) -> QueueLoad:
    """ConsumeQueue.recover: walk valid units from the third-last file; files wholly past the end
    of that run are deleted (MappedFileQueue.truncateDirtyFiles). With `read_range(file start, byte offset,
    length)` a file is read only up to its first invalid unit (in growing chunks), not whole."""
    files = sorted(files)
    if not files:
        return QueueLoad(topic, queue_id, (), 0, -1)
    idx = max(0, len(files) - 3)
    max_phy = -1
    process = files[idx]
    while True:
        if read_range is None:
            units = unpack_entries(read_file(files[idx]))
            k = _first_invalid_unit(units)
            last = int(units["phy"][k - 1]) + int(units["size"][k - 1]) if k else -1
        else:
            k, last = _valid_run(lambda at, n, f=files[idx]: read_range(f, at, n), file_size // CQ_UNIT_SIZE)
        if k:
            max_phy = last
        process = files[idx] + k * CQ_UNIT_SIZE
        if k * CQ_UNIT_SIZE < file_size or idx + 1 >= len(files):
            break
        idx += 1
    kept = tuple(f for f in files if f <= process)
    removed = tuple(f for f in files if f > process)
    return QueueLoad(topic, queue_id, kept, process, max_phy, removed)


@dataclass(frozen=True)
class QueueEntries(CqColumns):
    """Consume-queue entries of one queue in dispatch order (commit-log order)."""

    def take(self, mask: np.ndarray) -> "QueueEntries":
        """The rows selected by a mask or slice (all of them: these entries, not a copy)."""
        if isinstance(mask, np.ndarray) and mask.dtype == bool and len(mask) == len(self.phy) and mask.all():
            return self
        return QueueEntries(self.queue_offset[mask], self.phy[mask], self.size[mask], self.tags[mask])

    @staticmethod
    def empty() -> "QueueEntries":
        """No entries."""
        z = np.zeros(0, np.int64)
        return QueueEntries(z, z, z.astype(np.int32), z)


@dataclass(kw_only=True)
class QueueState:
    """A queue while recovery dispatches into it: files, write offset, maxPhysicOffset, and the
    units written so far (logical offset -> unit) plus a pre-blank run of a first-created file."""

    load: QueueLoad
    files: list[int]
    write_offset: int
    max_phy: int
    file_size: int
    created: list[int] = field(default_factory=list)
    first_created: int | None = None  # start of the file created as the queue's first one
    pre_blank_until: int = 0  # logical end of the pre-blank units in that file
    written_at: list[np.ndarray] = field(default_factory=list)
    written: list[QueueEntries] = field(default_factory=list)
    truncated_files: list[int] = field(default_factory=list)
    cut: dict | None = None  # where truncation cut the last file, when units past P stay behind
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, load: QueueLoad, file_size: int) -> "QueueState":
        """The state right after load, before any dispatch."""
        return cls(load=load, files=list(load.files), write_offset=load.write_offset, max_phy=load.max_phy,
                   file_size=file_size)

    @property
    def name(self) -> str:
        """`topic/queueId`, for messages."""
        return f"{self.load.topic}/{self.load.queue_id}"

    def _file_of(self, logical: int) -> int:
        """Start of the file holding a logical offset."""
        return logical - logical % self.file_size

    def _ensure_file(self, logical_expected: int) -> None:
        """MappedFileQueue.getLastMappedFile(startOffset): create the file the next unit needs."""
        if not self.files:
            start = self._file_of(logical_expected)
            self.files.append(start)
            self.created.append(start)
            self.first_created = start
            self.write_offset = start
        elif self.write_offset >= self.files[-1] + self.file_size:
            start = self.files[-1] + self.file_size
            self.files.append(start)
            self.created.append(start)
            self.write_offset = start

    def dispatch(self, e: QueueEntries) -> int:
        """putMessagePositionInfo for each entry in order; returns how many units were written."""
        if not len(e):
            return 0
        e = e.take(e.phy.astype(np.int64) + e.size.astype(np.int64) > self.max_phy)
        if not len(e):
            return 0
        qo = e.queue_offset.astype(np.int64)
        consecutive = bool(keep_first_of_each_offset(qo).all()) and bool((np.diff(qo) == 1).all())
        if self.files:
            fast = consecutive and int(qo[0]) * CQ_UNIT_SIZE == self.write_offset and int(qo[0]) != 0
        else:
            fast = consecutive  # an empty queue: the first unit creates its file (with pre-blank)
        if fast:
            return self._write_run(e)
        return self._write_one_by_one(e)

    def _write_run(self, e: QueueEntries) -> int:
        """Vectorised path: units at consecutive queue offsets that continue the queue."""
        first = int(e.queue_offset[0]) * CQ_UNIT_SIZE
        self._ensure_file(first)
        if self.first_created is not None and self.write_offset == self.first_created and first != self.first_created:
            self.pre_blank_until = first  # fillPreBlank up to the first unit's slot
            self.write_offset = first
        logical = first + np.arange(len(e), dtype=np.int64) * CQ_UNIT_SIZE
        last_file = self._file_of(int(logical[-1]))
        while self.files[-1] < last_file:
            self.write_offset = self.files[-1] + self.file_size
            self._ensure_file(self.write_offset)
        self.written_at.append(logical)
        self.written.append(e)
        self.write_offset = int(logical[-1]) + CQ_UNIT_SIZE
        self.max_phy = int(e.phy[-1]) + int(e.size[-1])
        return len(e)

    def _write_one_by_one(self, e: QueueEntries) -> int:
        """The broker's per-unit rules where units repeat, jump or restart at queue offset 0."""
        at: list[int] = []
        take: list[int] = []
        for i in range(len(e)):
            qo = int(e.queue_offset[i])
            end = int(e.phy[i]) + int(e.size[i])
            if end <= self.max_phy:
                continue
            expected = qo * CQ_UNIT_SIZE
            self._ensure_file(expected)
            if self.first_created is not None and qo != 0 and self.write_offset == self.first_created:
                self.pre_blank_until = expected
                self.write_offset = expected
            if qo != 0:
                if expected < self.write_offset:
                    continue  # "Build consume queue repeatedly"
                if expected != self.write_offset:
                    self.warnings.append(f"{self.name}: unit for queue offset {qo} written at logical offset "
                                         f"{self.write_offset} (the broker's 'logic queue order maybe wrong' case)")
            at.append(self.write_offset)
            take.append(i)
            self.write_offset += CQ_UNIT_SIZE
            self.max_phy = end
        if take:
            idx = np.asarray(take, dtype=np.int64)
            self.written_at.append(np.asarray(at, dtype=np.int64))
            self.written.append(QueueEntries(e.queue_offset[idx], e.phy[idx], e.size[idx], e.tags[idx]))
        return len(take)

    def unit_view(self, file_start: int, read_file: Callable[[int], bytes]) -> np.ndarray:
        """The file's units as they are now: crash-time bytes (or zeros) with written units on top."""
        return render_units(self, file_start, read_file)

    def truncate(self, phy_offset: int, read_file: Callable[[int], bytes]) -> None:
        """ConsumeQueue.truncateDirtyLogicFiles(P): drop trailing files whose first unit is at or past
        P (with every unit written into them: a later dispatch that needs the file creates it afresh), then cut
        the write position before the first unit >= P (or invalid) of the last file."""
        self.max_phy = phy_offset
        while self.files:
            last = self.files[-1]
            units = self.unit_view(last, read_file)
            if int(units["phy"][0]) >= phy_offset:
                self.files.pop()
                self._forget_file(last)
                continue
            rest = units[1:]
            bad = np.flatnonzero((rest["phy"] < 0) | (rest["size"] <= 0) | (rest["phy"] >= phy_offset))
            k = 1 + (int(bad[0]) if len(bad) else len(rest))
            self.max_phy = int(units["phy"][k - 1]) + int(units["size"][k - 1])
            self.write_offset = last + k * CQ_UNIT_SIZE
            if k < len(units) and int(units["phy"][k]) >= phy_offset and int(units["size"][k]) > 0:
                self.cut = {"file": last, "units_kept": k, "first_unit_left_behind": int(units["phy"][k])}
            return
        self.write_offset = 0
        self.first_created = None

    def _forget_file(self, start: int) -> None:
        """A file truncation deletes: the units written into it go with it (5.3.3's DLedger recovery dispatches
        past the point it cuts at, so a file it created may go again)."""
        if start in self.created:
            self.created.remove(start)
            if self.first_created == start:
                self.first_created, self.pre_blank_until = None, 0
        else:
            self.truncated_files.append(start)
        runs = [(at, e) for at, e in zip(self.written_at, self.written)]
        self.written_at, self.written = [], []
        for at, e in runs:
            keep = (at < start) | (at >= start + self.file_size)
            if keep.any():
                self.written_at.append(at[keep])
                self.written.append(e.take(keep))

    def written_entries(self) -> tuple[np.ndarray, QueueEntries]:
        """(logical offsets, entries) of every unit written, in write order."""
        if not self.written:
            return np.zeros(0, np.int64), QueueEntries.empty()
        return (np.concatenate(self.written_at),
                QueueEntries(*(np.concatenate([getattr(w, f) for w in self.written])
                               for f in ("queue_offset", "phy", "size", "tags"))))

    def changed_files(self) -> list[int]:
        """Files whose bytes differ from the crash-time store (units written or newly created)."""
        touched = set(self.created)
        for at in self.written_at:  # each run's offsets ascend: its files are where the file changes
            starts = at - at % self.file_size
            if len(starts) > 1 and bool((starts[1:] >= starts[:-1]).all()):
                touched.update(starts[np.flatnonzero(starts[1:] != starts[:-1]) + 1].tolist())
                touched.add(int(starts[0]))
            else:
                touched.update(np.unique(starts).tolist())
        return sorted(f for f in touched if f in self.files)

    def deleted_files(self) -> list[int]:
        """Files gone after recovery: removed at load or by truncation (and not created again)."""
        return sorted((set(self.load.removed_at_load) | set(self.truncated_files)) - set(self.files))


def render_units(state: QueueState, file_start: int, read_file: Callable[[int], bytes]) -> np.ndarray:
    """Units of one file after recovery: crash-time bytes (zeros for a new file), the pre-blank run of
    a first-created file, then every written unit at its logical offset."""
    n = state.file_size // CQ_UNIT_SIZE
    if file_start in state.created:
        units = np.zeros(n, dtype=CQ_DTYPE)
    else:
        units = unpack_entries(read_file(file_start)).copy()
    if state.first_created == file_start and state.pre_blank_until > file_start:
        units["size"][:(state.pre_blank_until - file_start) // CQ_UNIT_SIZE] = PRE_BLANK_SIZE
    at, e = state.written_entries()
    sel = (at >= file_start) & (at < file_start + state.file_size)
    if sel.any():
        slot = (at[sel] - file_start) // CQ_UNIT_SIZE
        units["phy"][slot], units["size"][slot], units["tags"][slot] = e.phy[sel], e.size[sel], e.tags[sel]
    return units


def render_span(state: QueueState, file_start: int,
                read_range: Callable[[int, int], bytes | memoryview]) -> tuple[int, np.ndarray]:
    """A file recovery keeps from the crash (not created) after recovery, as (byte offset, units): the span
    from its first written unit through its last, rendered as render_units renders it; every byte outside
    the span is the crash-time file's (so a writer copies the file and writes this span over it).
    `read_range(byte offset, length)` reads the crash-time file."""
    if file_start in state.created:
        raise ValueError(f"{state.name}: file {file_start} is created by recovery; render it whole")
    at, e = state.written_entries()
    sel = (at >= file_start) & (at < file_start + state.file_size)
    if not sel.any():
        return 0, np.zeros(0, dtype=CQ_DTYPE)
    slot = (at[sel] - file_start) // CQ_UNIT_SIZE
    lo, hi = int(slot.min()), int(slot.max()) + 1
    slot -= lo
    if len(slot) >= hi - lo and _covers(slot, hi - lo):  # every unit of the span is written: nothing to read
        units = np.zeros(hi - lo, dtype=CQ_DTYPE)
    else:
        units = unpack_entries(read_range(lo * CQ_UNIT_SIZE, (hi - lo) * CQ_UNIT_SIZE),
                               (hi - lo) * CQ_UNIT_SIZE).copy()
    units["phy"][slot], units["size"][slot], units["tags"][slot] = e.phy[sel], e.size[sel], e.tags[sel]
    return lo * CQ_UNIT_SIZE, units


def _covers(slots: np.ndarray, n: int) -> bool:
    """Every one of 0..n-1 is among `slots` (values in that range)."""
    if len(slots) == n and (n < 2 or bool((slots[1:] > slots[:-1]).all())):
        return True  # ascending without repeats over n values: each exactly once
    seen = np.zeros(n, bool)
    seen[slots] = True
    return bool(seen.all())


def render_queue_file(state: QueueState, file_start: int, read_file: Callable[[int], bytes]) -> bytes:
    """Full bytes of one changed consume-queue file."""
    return render_units(state, file_start, read_file).tobytes()
