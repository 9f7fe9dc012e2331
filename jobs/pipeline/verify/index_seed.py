"""Verify, index files from a commit-log offset on (the log's min offset once its head expired, or the start of the
segment `verify --since` decodes from): the store's index file holding that offset is cut back to the entries before
it (storage_format.index_prefix) and continued by the keys from there, as `rebuild --since` continues OUT1's last
file (since.index.continue_files); the files after it are compared as a full verify compares them. The entries
before the offset and the older files are counted apart: as expired (their records are gone, so nothing can check
them; the clean service deletes such files when it runs) or as checked by the earlier verify."""
from __future__ import annotations

import datetime as dt
import mmap
from dataclasses import dataclass

from storage_format import recovery
from storage_format.index_file import HEADER_SIZE, IndexHeader, IndexLayout
from storage_format.index_prefix import cut_index_file, entries_below
from storage_format.settings import BrokerSettings

from ..io.copy import copy_file
from ..io.fs import Location
from ..io.paths import is_local
from ..outputs.continued import IndexAppend, append_index
from ..runtime.engine import TaskRunner
from ..runtime.tasks import run_tasks
from ..scan.result import ScanResult
from ..since.index import EarlierIndex, continue_files
from .findings import Findings
from .cq import HOLE_ALIGN
from .index import check_index, compare_index_file, expected_headers, plan_index_checks
from .pointer import PointerCheck

CHUNK = 8 << 20
DiskIndex = list[tuple[str, IndexHeader | None]]  # the store's index files in name order (verify.index.disk_index_files)


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


def check_seed(task: SeedCheck) -> Findings:
    """Write the expected file (the seed continued) and compare the store's file with it: header and slots, and the
    entries after those it took from the store's file; both files whole only when they differ."""
    out = Findings()
    if task.append is not None:
        append_index(task.append)
    out.files_checked += 1
    layout = IndexLayout(task.slots, task.max_entries)
    tail = layout.entry_at(min(IndexHeader.from_bytes(bytes(task.expected.read_range(0, HEADER_SIZE))).as_loaded()
                               .index_count, layout.max_entries))
    if not _equal_past_the_kept(task, layout, tail):
        expected = bytearray(task.expected.read_bytes())
        expected[tail:] = bytes(len(expected) - tail)  # the copy may carry the store's bytes past its count
        compare_index_file(bytes(expected), task.disk.read_bytes(), task.rel, 0, layout, task.pointers, out)
    return out


def _equal_past_the_kept(task: SeedCheck, layout: IndexLayout, tail: int) -> bool:
    """The store's file holds the expected bytes, reading header and slots, the entries after the kept ones (those
    it gave the expected file itself), and past the expected file's last entry (`tail`) zeros, read only where the
    store's file holds data (not its hole)."""
    size = task.expected.size()
    if task.disk.size() != size:
        return False
    hole = -(-tail // HOLE_ALIGN) * HOLE_ALIGN
    zeros_to = size if hole >= size or not task.disk.is_hole(hole, size) else hole
    with task.expected.open_input() as e, task.disk.open_input() as d:
        for a, b in ((0, layout.entries_at), (layout.entry_at(task.kept + 1), tail), (tail, zeros_to)):
            for at in range(a, b, CHUNK):
                n = min(CHUNK, b - at)
                want = bytes(n) if a == tail else bytes(e.read_at(n, at))
                if bytes(d.read_at(n, at)) != want:
                    return False
    return True


def seeded_index_check(sc: TaskRunner, disk: DiskIndex, at: int, scan: ScanResult, work: Location,
                       settings: BrokerSettings, index_dir: Location, pointers: PointerCheck, found: Findings,
                       generation: int, quiet: bool) -> int:
    """Compare the store's index from its file `at` on with the seed's continuation; returns the files expected."""
    bound = seed_bound(pointers)
    name = disk[at][0]
    task = SeedTask(disk=index_dir.child(name), copy=work.child("index-seed", name), bound=bound,
                    log_min=pointers.log_min, file_size=settings.index_file_size, slots=settings.max_hash_slot_num,
                    max_entries=settings.max_index_num)
    kept, expired, header = run_tasks(sc, [task], cut_copy, "index seed", quiet=quiet)[0]
    gone = sum(1 for _, h in disk[:at] if h is None or h.end_phy_offset < pointers.log_min)
    found.add_expired("index", "files", gone)
    found.add_earlier("index", "files", at - gone)
    found.add_expired("index", "entries", expired)
    found.add_earlier("index", "entries", kept - expired)
    plan = continue_files(EarlierIndex([recovery.IndexFileInfo(name, header)], {name: task.copy.uri}, bound), scan,
                          work, settings, work.child("index-expected"), generation, 0, dt.timezone.utc)
    appends = [t for t in plan.tasks if isinstance(t, IndexAppend)]
    builds = [t for t in plan.tasks if not isinstance(t, IndexAppend)]
    first = SeedCheck(append=appends[0] if appends else None,
                      expected=appends[0].dst if appends else task.copy, disk=task.disk, rel=f"index/{name}",
                      slots=settings.max_hash_slot_num, max_entries=settings.max_index_num, kept=kept,
                      pointers=pointers)
    for f in run_tasks(sc, [first], check_seed, "index seed", quiet=quiet):
        found.merge(f)
    headers = [h for part in run_tasks(sc, builds, expected_headers, "index headers", quiet=quiet) for h in part]
    checks = plan_index_checks(builds, headers, index_dir, disk[at + 1:], pointers, found)
    for f in run_tasks(sc, checks, check_index, "index files", quiet=quiet):
        found.merge(f)
    return 1 + len(headers)
