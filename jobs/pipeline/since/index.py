"""The index side of `rebuild --since`: the new keys counted per split (the driver reads a key column only for the
split holding OUT1's end), the files they fill (since.plan.index_spans), their names and the clean service's
deletions (since.plan.continue_index), and the Spark tasks that write them: OUT1's last file copied and appended to
(outputs.continued.IndexAppend), new files built as a rebuild builds them (outputs.stage.IndexTask). The driver
holds per file and per split figures, never the keys."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage_format import recovery
from storage_format.index_file import HEADER_FIELD_OFFSETS, empty_file_index_count
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.workdir import key_columns
from ..outputs.continued import IndexAppend
from ..outputs.stage import IndexFilePlan, IndexTask, KeySlice, pending_name
from ..recover.inputs import at_or_after, list_index_files
from ..runtime.cli import JobError
from ..scan.result import ScanResult
from .plan import IndexContinuation, IndexSpan, continue_index, index_spans
from .previous import PreviousOutput


@dataclass(frozen=True)
class NewKeys:
    """The keys of the records from OUT1's end on, per accepted split: (split index, first row, rows)."""

    rows: tuple[tuple[int, int, int], ...]

    @property
    def total(self) -> int:
        return sum(n for *_, n in self.rows)

    def slices(self, lo: int, hi: int) -> tuple[KeySlice, ...]:
        """The work-file rows of new keys [lo, hi) (numbered from 0 in dispatch order)."""
        out, at = [], 0
        for split, first, n in self.rows:
            a, b = max(lo, at), min(hi, at + n)
            if a < b:
                out.append(KeySlice(split, first + a - at, first + b - at))
            at += n
        return tuple(out)

    def key(self, work: Location, k: int) -> tuple[int, int]:
        """(store time, commit-log offset) of new key k, read alone."""
        sl = self.slices(k, k + 1)[0]
        cols = key_columns(work, sl.split_index)
        return int(cols["store_ts"].take(slice(sl.lo, sl.hi))[0]), int(cols["phy"].take(slice(sl.lo, sl.hi))[0])


def new_keys(scan: ScanResult, work: Location, start: int) -> NewKeys:
    """Per accepted split, its keys of records at or after `start` (a split's keys lie in commit-log order)."""
    rows = []
    for s in scan.accepted:
        if not s.keys or s.last_key is None or s.last_key[1] < start:
            continue
        if s.first_offset is not None and s.first_offset >= start:
            rows.append((s.index, 0, s.keys))
            continue
        cut = at_or_after(key_columns(work, s.index)["phy"], start)
        first = cut.start if isinstance(cut, slice) else int(cut.argmax())
        rows.append((s.index, first, s.keys - first))
    return NewKeys(tuple(rows))


@dataclass(frozen=True)
class IndexWork:
    """The index of OUT2: its files (names, what each continues), the tasks writing the changed ones, the copies of
    the rest (path in OUT2, source URI, size), and the pending names the tasks write new files under."""

    plan: IndexContinuation
    tasks: list
    copies: list[tuple[str, str, int]]
    pending: dict[int, str]  # file number -> its name
    keys_added: int


def plan_index_work(prev: PreviousOutput, scan: ScanResult, work: Location, settings: BrokerSettings,
                    index_dir: Location, generation: int, min_offset: int, tz: dt.tzinfo,
                    warnings: list[str], precopied: dict[str, Location] | None = None) -> IndexWork:
    """OUT1's index continued: which files the new keys fill and their names (driver: counts and a few keys read).
    `precopied`: OUT1's files copied already (by name), which a task appending to them moves into place."""
    listed = list_index_files(prev.out, settings, warnings)
    _check_index_end(prev, listed)
    return continue_files(EarlierIndex([i for i, _ in listed], {info.name: uri for info, uri in listed},
                                       prev.built.offset), scan, work, settings, index_dir, generation, min_offset, tz,
                          precopied)


def _check_index_end(prev: PreviousOutput, listed: list[tuple[recovery.IndexFileInfo, str]]) -> None:
    """OUT1's last index file must hold entries of records before OUT1's end only (a broker started on a recover
    or convert OUT since indexes past it)."""
    last = max(listed, key=lambda f: f[0].name, default=None)
    if last is None or last[0].header.index_count <= 1 or last[0].header.end_phy_offset < prev.built.offset:
        return
    raise JobError(f"--since {prev.out.uri}: {last[1]} at byte offset {HEADER_FIELD_OFFSETS['endPhyOffset']}: its "
                   f"endPhyOffset {last[0].header.end_phy_offset} lies at or past OUT1's end by its report "
                   f"({prev.built.offset}): indexed on since (a broker started on OUT1?); run a full rebuild")


@dataclass(frozen=True)
class EarlierIndex:
    """The index files an index is continued from (name, header), where each is read, and the commit-log offset
    the keys after them start at: OUT1's for rebuild --since, a cut copy of the store's for verify (verify.index_seed)."""

    files: list[recovery.IndexFileInfo]
    uris: dict[str, str]
    start: int


def continue_files(earlier: EarlierIndex, scan: ScanResult, work: Location, settings: BrokerSettings,
                   index_dir: Location, generation: int, min_offset: int, tz: dt.tzinfo,
                   precopied: dict[str, Location] | None = None) -> IndexWork:
    """The earlier files continued by the scan's keys from `earlier.start` on: the files they fill, names, tasks."""
    uris = earlier.uris
    old = sorted(earlier.files, key=lambda f: f.name)
    start = earlier.start
    keys = new_keys(scan, work, start)
    last = max((s.last_record_offset for s in scan.accepted if s.last_record_offset is not None), default=None)
    any_record = last is not None and last >= start
    after_last_key = keys.total == 0 or (any_record and last > keys.key(work, keys.total - 1)[1])
    spans = index_spans(old[-1] if old else None, keys.total, any_record, after_last_key, settings.max_index_num)
    firsts = [keys.key(work, sp.lo)[0] if sp.hi > sp.lo else None for sp in spans]
    lasts = [keys.key(work, sp.hi - 1)[1] if sp.hi > sp.lo else None for sp in spans]
    last_ts = scan.accepted[-1].last_store_ts if any_record else None
    plan = continue_index(old, spans, firsts, lasts, start, last_ts, min_offset, tz)
    index_dir.makedirs()
    tasks, copies, pending = _tasks(plan, old, keys, uris, work, settings, index_dir, generation, precopied or {})
    return IndexWork(plan, tasks, copies, pending, keys.total)


def _tasks(plan: IndexContinuation, old: list[recovery.IndexFileInfo], keys: NewKeys, uris: dict[str, str],
           work: Location, settings: BrokerSettings, index_dir: Location, generation: int,
           precopied: dict[str, Location]):
    """(Spark tasks, copies, pending names) for the files of the plan."""
    tasks, copies, pending = [], [], {}
    ends = {o.name: o.header.as_loaded() for o in old}
    for no, f in enumerate(plan.files):
        sp: IndexSpan | None = f.span
        dst = index_dir.child(f.name)
        if f.old_name is not None and (sp is None or sp.hi == sp.lo):
            copies.append((f"index/{f.name}", uris[f.old_name], settings.index_file_size))
        elif f.old_name is not None:
            tasks.append(IndexAppend(file_no=no, src=Location(uris[f.old_name]), dst=dst, work=work,
                                     slices=tuple((s.split_index, s.lo, s.hi) for s in keys.slices(sp.lo, sp.hi)),
                                     file_size=settings.index_file_size, slots=settings.max_hash_slot_num,
                                     max_entries=settings.max_index_num, precopied=precopied.get(f.old_name)))
        else:
            before = keys.slices(sp.lo - 1, sp.lo)[0] if sp.lo > 0 else None
            inherited = None
            if before is None and old:  # the earlier OUT's last file without new keys: its end, as loaded
                h = ends[old[-1].name]
                inherited = (h.end_timestamp, h.end_phy_offset)
            plan_one = IndexFilePlan(no, keys.slices(sp.lo, sp.hi), before, inherited)
            tasks.append(IndexTask(files=(plan_one,), work=work, out=index_dir, slots=settings.max_hash_slot_num,
                                   max_entries=settings.max_index_num,
                                   empty_count=empty_file_index_count(generation)))
            pending[no] = f.name
    return tasks, copies, pending


def name_written(index_dir: Location, pending: dict[int, str]) -> None:
    """The new files written under pending names, renamed to theirs."""
    for no, name in sorted(pending.items()):
        index_dir.child(pending_name(no)).move_to(index_dir.child(name))
