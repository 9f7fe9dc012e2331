"""Files that continue a file of the same name: OUT1's for `rebuild --since`, the store's own for verify.

A consume-queue file of OUT2: OUT1's file's bytes before the first unit the new scan gives, the scan's units from
there. Where both hold units they must be the same bytes: that checks OUT1 against the commit log and that the scan
placed the queue's units where the broker placed them (a unit that differs refuses, naming the file and byte
offset). A queue continued goes on from the placement state its files leave (queue_placer). The last index file
continued: copied, and the new keys put into it as the broker grows it (IndexAppend)."""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from storage_format import recovery
from storage_format.consume_queue import CQ_DTYPE, CQ_UNIT_SIZE, PRE_BLANK_SIZE, QueuePlacer, file_name, unpack_entries
from storage_format.errors import StoreFormatError
from storage_format.index_build import append_to_index_file
from storage_format.index_keys import KeyBatch
from storage_format.segment_names import parse_segment_name

from ..io.copy import copy_file
from ..io.fs import Location, pwrite_all
from ..io.paths import is_local
from ..io.workdir import key_columns
from .cq_tail import STEP, Tail, kept_head, read_back, read_tail, used_end

RERUN = "run a full rebuild"
UNIT_TAGS_AT = CQ_DTYPE.fields["tags"][1]  # a unit's tagsCode follows its commit-log offset and size


def queue_files(qdir: Location) -> list[int] | None:
    """The start offsets of a queue directory's files (None: no such directory); os.scandir for a local one."""
    if is_local(qdir):
        try:
            with os.scandir(qdir.path) as it:
                names = [e.name for e in it]
        except (FileNotFoundError, NotADirectoryError):
            return None
    else:
        if not qdir.is_dir():
            return None
        names = [i.base_name for i in qdir.list()]
    return sorted(s for s in (parse_segment_name(n) for n in names) if s is not None)


def first_difference(a: memoryview, b: memoryview) -> int | None:
    """Index of the first byte where two equally long buffers differ (None: equal)."""
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if len(diff) else None


def first_unit_difference(a: memoryview, b: memoryview) -> int | None:
    """Byte index of the first unit where two equally long runs of whole units differ in commit-log offset or size
    (their tagsCode aside; None: none does)."""
    x = np.frombuffer(a, np.uint8).reshape(-1, CQ_UNIT_SIZE)[:, :UNIT_TAGS_AT]
    y = np.frombuffer(b, np.uint8).reshape(-1, CQ_UNIT_SIZE)[:, :UNIT_TAGS_AT]
    diff = np.flatnonzero((x != y).any(axis=1))
    return int(diff[0]) * CQ_UNIT_SIZE if len(diff) else None


@dataclass(frozen=True)
class Joined:
    """A consume-queue file of OUT2: OUT1's file's first `prefix` bytes (copied by the kernel where both are local),
    then `rest` (the scan's units from there), then zeros."""

    out1_file: Location | None
    prefix: int
    rest: memoryview | bytes
    head: memoryview | None = None  # OUT1's first `prefix` bytes where they were read already (none copied then)


def joined(out1_file: Location, data: memoryview, first_pos: int, queue_known: Callable[[], bool],
           keep_tags: bool = False) -> Joined:
    """The file's bytes in OUT2 (up to its last unit): `data` is the scan's file (its units from `first_pos` on, the
    bytes before them blank); `out1_file` the same file in OUT1, which may not exist; `queue_known()` whether OUT1
    holds the queue at all (asked only then). `keep_tags`: OUT1's units are kept as they are where both hold units,
    compared by offset and size only (a recover OUT: the broker's recovery may give them another tagsCode than a
    dispatch does). OUT1's file is read from `first_pos` on only."""
    try:
        tail = read_tail(out1_file, first_pos)
    except FileNotFoundError:
        if first_pos > 0 and queue_known():
            raise StoreFormatError(out1_file.uri, 0, f"missing from OUT1, which holds the queue: the commit log gives "
                                                   f"units from byte offset {first_pos} of it; {RERUN}") from None
        return Joined(None, 0, data)
    out1_used = used_end(out1_file, tail)
    if out1_used < first_pos:
        raise StoreFormatError(out1_file.uri, out1_used, f"OUT1's units end here, the commit log's next unit for the "
                                                      f"queue lands at byte offset {first_pos} (the broker writes it "
                                                      f"at its write position: out of step); {RERUN}")
    out1_units = tail.data[:out1_used - first_pos]  # OUT1's units from first_pos on
    if len(data) < out1_used:
        cut = max(len(data), first_pos)
        at = cut + (first_difference(out1_units[cut - first_pos:], memoryview(bytes(out1_used - cut))) or 0)
        raise StoreFormatError(out1_file.uri, at, f"OUT1 holds units the commit log no longer gives; {RERUN}")
    compare = first_unit_difference if keep_tags else first_difference
    at = compare(out1_units, data[first_pos:out1_used])
    if at is not None:
        at += first_pos
        raise StoreFormatError(out1_file.uri, at - at % CQ_UNIT_SIZE,
                               f"the unit OUT1 holds differs from the one the commit log gives (OUT1 changed or "
                               f"damaged since, or the queue's units were placed out of step); {RERUN}")
    keep = out1_used if keep_tags else first_pos
    return Joined(out1_file, keep, data[keep:], kept_head(out1_file, keep))


def queue_placer(qdir: Location, file_size: int, first_phy: int, since: bool = False) -> QueuePlacer:
    """The broker's placement state for the queue just before the scan's first unit for it (commit-log offset
    `first_phy`), from the queue's files continued (`qdir`: OUT1's, or the store's own for verify): where they hold
    that unit and the end of the unit before it, so that the scan's units are placed over theirs by the broker's
    rules (and checked against them by `joined`); where they do not hold it, their write position and
    maxPhysicOffset as ConsumeQueue.recover loads them. A queue whose units were written out of step (5.x LMQ
    offsets used up without a unit) so continues where it is. A queue without files there starts fresh (its first
    unit at its own offset, pre-blank units before it). With `since` (OUT1's files), files that do not hold the
    unit but hold one past it (a unit OUT1 holds changed since) go on from before that one, where `joined` then
    compares OUT1's units with the scan's."""
    files = queue_files(qdir)
    if not files:
        return QueuePlacer()
    found = _unit_before(qdir, files, file_size, first_phy)
    if found is None and since:
        found = _first_unit_from(qdir, files, file_size, first_phy)
    if found is not None:
        position, end_before = found
        return QueuePlacer() if end_before is None else QueuePlacer(write=position, max_end=end_before)
    ld = recovery.load_queue("", 0, files, lambda s: qdir.child(file_name(s)).read_bytes(), file_size,
                             read_range=lambda s, at, n: qdir.child(file_name(s)).read_range(at, n))
    return QueuePlacer() if ld.max_phy < 0 else QueuePlacer(write=ld.write_offset // CQ_UNIT_SIZE,
                                                            max_end=ld.max_phy)


def _real(units: np.ndarray) -> np.ndarray:
    """Which units are written units (not zeros, not pre-blank)."""
    return (units["size"] > 0) & (units["size"] != PRE_BLANK_SIZE) & (units["phy"] >= 0)


def _unit_before(qdir: Location, files: list[int], file_size: int, phy: int) -> tuple[int, int | None] | None:
    """(queue position of the files' unit for commit-log offset `phy`, the end of the unit before it: None when it is
    the queue's first), None when they hold no unit there. Read from the newest file back, each from its end back (the
    unit lies near the end)."""
    for i in range(len(files) - 1, -1, -1):
        tail, units, real = _tail_reaching(qdir.child(file_name(files[i])), phy)
        if not len(real):
            continue
        k = int(np.searchsorted(units["phy"][real], phy))
        if k == len(real) or int(units["phy"][real[k]]) != phy:
            if k == 0 and i > 0:
                continue  # before this file's first unit: an older file
            return None
        return _state_at(qdir, files, file_size, i, tail, units, int(real[k]))
    return None


def _first_unit_from(qdir: Location, files: list[int], file_size: int, phy: int) -> tuple[int, int | None] | None:
    """As _unit_before for the files' first unit (in queue order) at commit-log offset `phy` or past it."""
    found = None
    for i in range(len(files) - 1, -1, -1):
        tail, units, real = _tail_reaching(qdir.child(file_name(files[i])), phy)
        past = real[units["phy"][real] >= phy]
        if len(past):
            found = (i, tail, units, int(past[0]))
        if not len(past) or past[0] != real[0]:  # a unit before it here: no older file holds the first
            break
    return None if found is None else _state_at(qdir, files, file_size, *found)


def _state_at(qdir: Location, files: list[int], file_size: int, i: int, tail: Tail, units: np.ndarray,
              slot: int) -> tuple[int, int | None]:
    """(queue position of unit `slot` of file `i`'s `tail`, the end of the unit before it: None when there is none)."""
    position = (files[i] + tail.start + slot * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
    if slot > 0:
        before = units[slot - 1]
        return position, (int(before["phy"]) + int(before["size"]) if _real(units[slot - 1:slot])[0] else None)
    if i == 0:
        return position, None
    last = unpack_entries(qdir.child(file_name(files[i - 1])).read_range(file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE))
    return position, int(last["phy"][0]) + int(last["size"][0]) if len(last) and _real(last)[0] else None


def _tail_reaching(loc: Location, phy: int) -> tuple[Tail, np.ndarray, np.ndarray]:
    """(the file's tail, its units, which of them are written units) read from the end back, four times as far each
    time, until its first written unit lies before commit-log offset `phy` or the tail is the whole file."""
    back = STEP
    while True:
        tail = read_back(loc, back)
        units = unpack_entries(tail.data)
        real = np.flatnonzero(_real(units))
        if tail.start == 0 or (len(real) and int(units["phy"][real[0]]) < phy):
            return tail, units, real
        back *= 4


@dataclass(frozen=True, kw_only=True)
class IndexAppend:
    """The last index file continued (OUT1's; the store's cut copy for verify), the new keys put into it: one Spark
    task."""

    file_no: int
    src: Location  # the file continued
    dst: Location  # where it goes in OUT2 (its name after the task: the job renames it when it got its first key)
    work: Location
    slices: tuple[tuple[int, int, int], ...]  # (split, first row, end row) of the keys, in dispatch order
    file_size: int
    slots: int
    max_entries: int
    precopied: Location | None = None  # src copied already (during the decode), moved into place as dst


APPEND_BATCH = 1 << 20  # keys put into a file per call: a task's memory is bounded whatever the keys it appends


def append_index(task: IndexAppend) -> list[tuple[int, int | None]]:
    """Write the file; returns [(its number, the store time of its first new key: None without one)]."""
    first: list[int] = []

    def batches() -> Iterator[KeyBatch]:
        for keys in key_batches(task.work, task.slices):
            if not first and len(keys):
                first.append(int(keys.store_ts[0]))
            yield keys

    append_to_copy(task.src, task.dst, batches(), task.file_size, task.slots, task.max_entries, task.precopied)
    return [(task.file_no, first[0] if first else None)]


def key_batches(work: Location, slices: tuple[tuple[int, int, int], ...]) -> Iterator[KeyBatch]:
    """The keys of the work files' rows (split, first row, end row), in dispatch order, APPEND_BATCH at a time."""
    for split, lo, hi in slices:
        cols = key_columns(work, split)
        for a in range(lo, hi, APPEND_BATCH):
            b = min(hi, a + APPEND_BATCH)
            yield KeyBatch(*(cols[n].take(slice(a, b)) for n in ("key_hash", "phy", "store_ts")))


def append_to_copy(src: Location, dst: Location, batches: Iterable[KeyBatch], file_size: int, slots: int,
                   max_entries: int, precopied: Location | None = None) -> None:
    """`src` with the keys of `batches` appended, as `dst`: on a local filesystem copied (a reflink where the
    filesystem shares extents; its zeros left as holes; or moved from `precopied`, a copy made already) and the keys
    put through a shared mapping of the copy (only the pages of the slots and entries written are touched, as the
    broker's own mapped file); elsewhere read, put and written whole."""
    if is_local(src) and is_local(dst):
        if precopied is not None:
            precopied.move_to(dst)
        else:
            copy_file(src, dst)  # data extents only: the holes stay holes
        with open(dst.path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < file_size:
                f.truncate(file_size)  # a 0-byte file maps as zeros
            with mmap.mmap(f.fileno(), file_size) as data:  # the entries by pwrite: a hole's pages not faulted in
                _put(data, batches, slots, max_entries, src, lambda at, b: pwrite_all(f.fileno(), b, at))
        return
    data = bytearray(src.read_bytes())
    data.extend(bytes(file_size - len(data)))
    _put(data, batches, slots, max_entries, src)
    dst.write_bytes(bytes(data))


def _put(data, batches: Iterable[KeyBatch], slots: int, max_entries: int, src: Location, write_entries=None) -> None:
    """Each batch put in turn (one call after another equals one call with them all: tests/test_index_file)."""
    for keys in batches:
        put = append_to_index_file(data, keys.key_hash, keys.phy, keys.store_ts, slots, max_entries, write_entries)
        if put != len(keys):
            raise StoreFormatError(src.uri, 0, f"{len(keys) - put} new keys did not fit the index file (its "
                                               f"header's indexCount); run a full rebuild")
