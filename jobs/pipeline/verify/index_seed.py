"""Verify, index files from a commit-log offset on (the log's min offset once its head expired, or the start of the
segment `verify --since` decodes from): the store's index file holding that offset is cut back to the entries before
it (storage_format.index_prefix) and continued by the keys from there, as `rebuild --since` continues OUT1's last
file (outputs.index_continuation.continue_files); the files after it are compared as a full verify compares them.
The entries before the offset and the older files are counted apart: as expired (their records are gone, so nothing
can check them; the clean service deletes such files when it runs) or as checked by the earlier verify. A local
store's file is checked without a copy first (equal_in_memory: its header and slots cut in memory, the new entries
compared where they lie); only a difference, or a remote store, pays for the cut copy that names what differs. When
the seed file is the last file expected, it and the store's files after it may also hold the broker's restart
re-index (verify.restart), counted apart."""
from __future__ import annotations

import datetime as dt
import mmap
from dataclasses import dataclass

import numpy as np

from storage_format import recovery
from storage_format.index_file import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, IndexHeader, IndexLayout
from storage_format.index_build import append_to_index_file
from storage_format.index_prefix import cut_head, cut_index_file, entries_below, header_after_cut
from storage_format.settings import BrokerSettings

from ..io.copy import copy_file
from ..io.fs import Location
from ..io.paths import is_local
from ..outputs.continued import IndexAppend, append_index, key_batches
from ..outputs.index_continuation import ContinuedIndex, IndexWork, continue_files
from ..runtime.engine import TaskRunner
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from .findings import Findings
from .cq import HOLE_ALIGN
from .index_files import (check_index, check_restart_tail, compare_index_file, disk_index_files, expected_headers,
                    plan_index_checks)
from .pointer import PointerCheck
from .restart import RestartRecord, RestartTail

CHUNK = 8 << 20
DiskIndex = list[tuple[str, IndexHeader | None]]  # the store's index files in name order (verify.index_files.disk_index_files)


@dataclass(frozen=True, kw_only=True)
class SeedTask:
    """The store's index file to cut back to its entries below `bound`, and where the cut copy goes."""

    disk: Location
    copy: Location
    bound: int
    log_min: int  # of the entries kept, those below it point into the log's expired head
    file_size: int
    slots: int
    max_entries: int


def seed_bound(pointers: PointerCheck) -> int:
    """Where the expected index takes over from the store's: the log's min offset, or where verify --since starts."""
    return max(pointers.log_min, pointers.checked_from)


def seed_position(disk: DiskIndex, bound: int) -> int | None:
    """The newest file (name order) with an entry below `bound` (None: no file has one, nothing to continue)."""
    if bound <= 0:
        return None
    held = [i for i, (_, h) in enumerate(disk)
            if h is not None and h.as_loaded().index_count > 1 and h.begin_phy_offset < bound]
    return held[-1] if held else None


def cut_copy(task: SeedTask) -> tuple[int, int, IndexHeader]:
    """Copy the store's file and cut the copy back to its entries below the bound: (entries kept, those of them
    below the log's min offset, the copy's header)."""
    layout = IndexLayout(task.slots, task.max_entries)
    if is_local(task.disk) and is_local(task.copy):
        copy_file(task.disk, task.copy)
        with open(task.copy.path, "r+b") as f:
            f.truncate(task.file_size)  # a short file reads as zeros after its end, as the broker maps it
            with mmap.mmap(f.fileno(), task.file_size) as data:
                return _cut(data, layout, task)
    data = bytearray(task.disk.read_bytes()[:task.file_size].ljust(task.file_size, b"\0"))
    kept = _cut(data, layout, task)
    task.copy.write_bytes(bytes(data))
    return kept


def _cut(data: bytearray | mmap.mmap, layout: IndexLayout, task: SeedTask) -> tuple[int, int, IndexHeader]:
    expired = entries_below(data, layout, task.log_min)
    kept = entries_below(data, layout, task.bound)
    if kept:
        cut_index_file(data, layout, kept)
    return kept, min(expired, kept), IndexHeader.from_bytes(bytes(data[:HEADER_SIZE]))


@dataclass(frozen=True, kw_only=True)
class SeedCheck:
    """The seed continued by the new keys (None: it gets none, the cut copy is what is expected) against the file."""

    append: IndexAppend | None
    expected: Location
    disk: Location
    rel: str
    slots: int
    max_entries: int
    kept: int  # the entries the expected file took from the store's own file (equal by construction)
    pointers: PointerCheck
    restart: RestartTail | None = None  # the seed is the last file expected: check it for the restart re-index


def check_seed(task: SeedCheck) -> Findings:
    """Write the expected file (the seed continued) and compare the store's file with it: header and slots, and the
    entries after those it took from the store's file; both files whole only when they differ (or, the seed being the
    last file expected, files follow it: the restart re-index check, index.check_restart_tail, comes first)."""
    out = Findings()
    if task.append is not None:
        append_index(task.append)
    out.files_checked += 1
    layout = IndexLayout(task.slots, task.max_entries)
    tail = layout.entry_at(min(IndexHeader.from_bytes(bytes(task.expected.read_range(0, HEADER_SIZE))).as_loaded()
                               .index_count, layout.max_entries))
    if not _equal_past_the_kept(task, layout, tail) or (task.restart is not None and task.restart.trailing):
        expected = bytearray(task.expected.read_bytes())
        expected[tail:] = bytes(len(expected) - tail)  # the copy may carry the store's bytes past its count
        if task.restart is not None and check_restart_tail(expected, task.disk, task.restart, task.disk.parent,
                                                           layout, out):
            return out
        compare_index_file(bytes(expected), task.disk.read_bytes(), task.rel, 0, layout, task.pointers, out)
    return out


def _equal_past_the_kept(task: SeedCheck, layout: IndexLayout, tail: int) -> bool:
    """The store's file holds the expected bytes, reading header and slots, the entries after the kept ones (those
    it gave the expected file itself), and past the expected file's last entry (`tail`) zeros, read only where the
    store's file holds data (not its hole)."""
    size = task.expected.size()
    if task.disk.size() != size:
        return False
    zeros_to = _data_end(task.disk, tail, size)
    with task.expected.open_input() as e, task.disk.open_input() as d:
        for a, b in ((0, layout.entries_at), (layout.entry_at(task.kept + 1), tail), (tail, zeros_to)):
            for at in range(a, b, CHUNK):
                n = min(CHUNK, b - at)
                want = bytes(n) if a == tail else bytes(e.read_at(n, at))
                if bytes(d.read_at(n, at)) != want:
                    return False
    return True


@dataclass(frozen=True, kw_only=True)
class SeedInMemory:
    """The store's seed file (local, of the configured size) checked without a copy: its header and slot table cut
    back to the first `kept` entries in memory, the new keys (work-file rows) put into them, and the result compared
    with the file, whose kept entries are the expected file's by construction."""

    disk: Location
    kept: int
    log_min: int
    work: Location
    slices: tuple[tuple[int, int, int], ...]
    slots: int
    max_entries: int


def plan_header(disk: Location, bound: int, layout: IndexLayout) -> tuple[int, IndexHeader]:
    """(entries below `bound`, the header the continuation plan reads) of a local seed file, read in a few places
    (a binary search): the cut's count and end fields; its hashSlotCount, which no plan reads, left as the file's."""
    with open(disk.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        kept = entries_below(data, layout, bound)
        header = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
        if kept < 1 or kept >= layout.used_positions(header) or len(data) < layout.entry_at(kept + 1):
            return kept, header
        last = np.frombuffer(data[layout.entry_at(kept):layout.entry_at(kept + 1)], ENTRY_DTYPE)[0]
    return kept, header_after_cut(header, last, kept, header.hash_slot_count)


def equal_in_memory(task: SeedInMemory) -> tuple[bool, int]:
    """(whether the store's file equals the seed continued, its kept entries below the log's min offset); False
    sends the driver to the cut copy (seeded_index_check), which names the differences."""
    layout = IndexLayout(task.slots, task.max_entries)
    with open(task.disk.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if len(data) != layout.size:
            return False, 0
        return _equal_mapped(task, layout, data)  # every view of the mapping is gone when it returns


def _equal_mapped(task: SeedInMemory, layout: IndexLayout, data: mmap.mmap) -> tuple[bool, int]:
    header = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
    used, keep = layout.used_positions(header), task.kept
    expired = min(entries_below(data, layout, task.log_min), keep)
    if not 1 <= keep < used:
        return False, expired
    entries = layout.entries(data)
    head = bytearray(data[:layout.entries_at])  # header and slots: the expected file's, once cut and put into
    head[:HEADER_SIZE] = cut_head(head, layout, header, entries[keep], entries["prev"][keep + 1:used],
                                  keep).to_bytes()
    differs: list[int] = []

    def compare(at: int, new: memoryview) -> None:  # the new entries, as append_to_index_file writes them
        if not _same(data, at, new):
            differs.append(at)

    end = layout.entry_at(keep + 1)
    for keys in key_batches(task.work, task.slices):
        put = append_to_index_file(head, keys.key_hash, keys.phy, keys.store_ts, task.slots, task.max_entries,
                                   compare)
        if put != len(keys):
            return False, expired
        end += put * ENTRY_SIZE
    return not differs and _same(data, 0, memoryview(head)) and _zeros_after(task.disk, data, end), expired


def _same(data: mmap.mmap, at: int, new: memoryview) -> bool:
    """The mapped file holds `new` at byte `at`."""
    return at + len(new) <= len(data) and bool(np.array_equal(np.frombuffer(data, np.uint8, len(new), at),
                                                              np.frombuffer(new, np.uint8)))


def _data_end(disk: Location, end: int, size: int) -> int:
    """How far a check for zeros from `end` on must read the file: to the block edge after `end` when the rest is a
    hole, else to its size."""
    hole = -(-end // HOLE_ALIGN) * HOLE_ALIGN
    return size if hole >= size or not disk.is_hole(hole, size) else hole


def _zeros_after(disk: Location, data: mmap.mmap, end: int) -> bool:
    """The mapped file holds zeros from `end` on, read only where it holds data (not its hole)."""
    stop = _data_end(disk, end, len(data))
    return all(not np.frombuffer(data, np.uint8, min(CHUNK, stop - at), at).any() for at in range(end, stop, CHUNK))


@dataclass(frozen=True, kw_only=True)
class IndexPlan:
    """verify's index check as far as it is planned before the consume-queue stage: the store's index files in name
    order and the findings of listing them (merged when the index check runs, so the report keeps its order), the
    store's generation, the seed file's position (None: a full index check) and, for a local seed file, its
    in-memory check (run beside the queue checks: verify.stage) with the continuation it checks. `out_built_to`
    (verify --files OUT): where OUT was built to (index_files.built_by)."""

    disk: DiskIndex
    listing: Findings
    generation: int
    at: int | None = None
    task: SeedInMemory | None = None
    continued: IndexWork | None = None
    out_built_to: int | None = None


def plan_index_check(index_dir: Location, scan: ScanResult, work: Location, settings: BrokerSettings,
                     pointers: PointerCheck, generation: int, out_built_to: int | None = None) -> IndexPlan:
    """The store's index files listed, the seed found and, when local, its in-memory check planned."""
    listing = Findings()
    disk = disk_index_files(index_dir, listing, settings.index_layout)
    bound = seed_bound(pointers)
    at = seed_position(disk, bound)
    if at is None or not is_local(index_dir):
        return IndexPlan(disk=disk, listing=listing, generation=generation, at=at, out_built_to=out_built_to)
    name = disk[at][0]
    disk_file = index_dir.child(name)
    kept, header = plan_header(disk_file, bound, IndexLayout(settings.max_hash_slot_num, settings.max_index_num))
    continued = _continue(name, header, disk_file.uri, bound, scan, work, settings, generation)
    appends = [t for t in continued.tasks if isinstance(t, IndexAppend)]
    task = SeedInMemory(disk=disk_file, kept=kept, log_min=pointers.log_min, work=work,
                        slices=appends[0].slices if appends else (), slots=settings.max_hash_slot_num,
                        max_entries=settings.max_index_num)
    return IndexPlan(disk=disk, listing=listing, generation=generation, at=at, task=task, continued=continued,
                     out_built_to=out_built_to)


@dataclass(frozen=True)
class SeedOutcome:
    """How seeded_index_check went: the index files it expected, and how the seed file was checked (the report's
    `index_seed`): in memory, or by a cut copy, the slower path, and why it was taken."""

    files_expected: int
    file: str
    checked_by: str  # IN_MEMORY or CUT_COPY
    why: str | None = None

    def to_dict(self) -> dict:
        return {"file": self.file, "checked_by": self.checked_by, "why": self.why}


IN_MEMORY, CUT_COPY = "in memory", "cut copy"
REMOTE = "the store is not on a local filesystem (the file is not mapped where it lies)"
DIFFERS = "the in-memory check found a difference: the cut copy names it"
RESTARTED = "the in-memory check found a difference: the broker's restart re-index, which the cut copy counts apart"
FOLLOWED = ("files follow the seed, the last file expected: the cut copy checks them for the broker's restart "
            "re-index (verify.restart)")


def seeded_index_check(sc: TaskRunner, plan: IndexPlan, seed_result: tuple[bool, int] | None, scan: ScanResult,
                       work: Location, settings: BrokerSettings, index_dir: Location, pointers: PointerCheck,
                       found: Findings, quiet: bool, restart: RestartRecord | None = None) -> SeedOutcome:
    """Compare the store's index from the seed file on with the seed's continuation. A local seed file is first
    checked in memory (`seed_result`: its check run beside the queue checks; None: run now); where that finds a
    difference, or the file is remote, a cut copy of it is continued and compared (naming the differences).
    `restart` (verify.restart): the last file expected, the seed or a later one, is also checked for the broker's
    restart re-index, with the store's files after its pair."""
    at, builds, why = plan.at, None, REMOTE
    later = plan.disk[at + 1:]
    if plan.task is not None and plan.continued is not None:
        if seed_result is None:
            seed_result = run_tasks(sc, [plan.task], equal_in_memory, "index seed", quiet=quiet)[0]
        equal, expired = seed_result
        rest = [t for t in plan.continued.tasks if not isinstance(t, IndexAppend)]
        if equal and (restart is None or rest or not later):
            _count_seed(plan.disk, at, plan.task.kept, expired, pointers, found)
            found.files_checked += 1
            builds, why = rest, None
        else:
            why = DIFFERS if not equal else FOLLOWED
    if builds is None:
        restarts = sum(found.restarts.values())
        builds = _seed_by_copy(sc, plan.disk, at, scan, work, settings, index_dir, pointers, found, plan.generation,
                               quiet, restart)
        if sum(found.restarts.values()) > restarts and why == DIFFERS:
            why = RESTARTED
    headers = [h for part in run_tasks(sc, builds, expected_headers, "index headers", quiet=quiet) for h in part]
    # without files after the seed, the seed's check took the store's later files when it checks for the restart
    checks = plan_index_checks(builds, headers, index_dir, later if builds or restart is None else [], pointers, found,
                               restart, plan.out_built_to)
    for f in run_tasks(sc, checks, check_index, "index files", quiet=quiet):
        found.merge(f)
    return SeedOutcome(1 + len(headers), f"index/{plan.disk[at][0]}", CUT_COPY if why else IN_MEMORY, why)


def _continue(name: str, header: IndexHeader, uri: str, bound: int, scan: ScanResult, work: Location,
              settings: BrokerSettings, generation: int) -> IndexWork:
    """The continuation plan of the seed file (its cut's header) by the scan's keys from `bound` on."""
    continued = ContinuedIndex([recovery.IndexFileInfo(name, header)], {name: uri}, bound)
    return continue_files(continued, scan, work, settings, work.child("index-expected"), generation, 0,
                          dt.timezone.utc)


def _count_seed(disk: DiskIndex, at: int, kept: int, expired: int, pointers: PointerCheck, found: Findings) -> None:
    """The files before the seed and its kept entries, counted as expired or as checked earlier."""
    gone = sum(1 for _, h in disk[:at] if h is None or h.end_phy_offset < pointers.log_min)
    found.add_expired("index", "files", gone)
    found.add_earlier("index", "files", at - gone)
    found.add_expired("index", "entries", expired)
    found.add_earlier("index", "entries", kept - expired)


def _seed_by_copy(sc: TaskRunner, disk: DiskIndex, at: int, scan: ScanResult, work: Location,
                  settings: BrokerSettings, index_dir: Location, pointers: PointerCheck, found: Findings,
                  generation: int, quiet: bool, restart: RestartRecord | None = None) -> list:
    """The seed file cut as a copy, continued and compared (its findings into `found`; with `restart`, when no file
    follows it, with the store's later files for the restart re-index); returns the plan's tasks building the files
    after it."""
    bound = seed_bound(pointers)
    name = disk[at][0]
    task = SeedTask(disk=index_dir.child(name), copy=work.child("index-seed", name), bound=bound,
                    log_min=pointers.log_min, file_size=settings.index_file_size, slots=settings.max_hash_slot_num,
                    max_entries=settings.max_index_num)
    kept, expired, header = run_tasks(sc, [task], cut_copy, "index seed", quiet=quiet)[0]
    _count_seed(disk, at, kept, expired, pointers, found)
    plan = _continue(name, header, task.copy.uri, bound, scan, work, settings, generation)
    appends = [t for t in plan.tasks if isinstance(t, IndexAppend)]
    builds = [t for t in plan.tasks if not isinstance(t, IndexAppend)]
    first = SeedCheck(append=appends[0] if appends else None,
                      expected=appends[0].dst if appends else task.copy, disk=task.disk, rel=f"index/{name}",
                      slots=settings.max_hash_slot_num, max_entries=settings.max_index_num, kept=kept,
                      pointers=pointers,
                      restart=RestartTail(restart, 0, tuple(disk[at + 1:])) if restart and not builds else None)
    for f in run_tasks(sc, [first], check_seed, "index seed", quiet=quiet):
        found.merge(f)
    return builds
