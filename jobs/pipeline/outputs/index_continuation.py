"""An index continued from the files it holds by the keys of the records after them (`rebuild --since`: OUT1's index;
verify: the store's file cut back to where its check starts). Decided without I/O from counts: the files the new
keys fill (IndexService.buildIndex from the last file continued), their names by rebuild's rule
(`outputs.build.name_index_files`: the store time that opened each file, strictly increasing) and the clean service's
deletions once the commit log's head is gone (`storage_format.clean_service`). Then the new keys counted per split
(the driver reads a key column only for the split holding where they start) and the tasks writing the files: the last
file copied and appended to (outputs.continued.IndexAppend), new files built as a rebuild builds them
(outputs.build.IndexTask). The driver holds per file and per split figures, never the keys."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage_format import clean_service, recovery
from storage_format.index_file import empty_file_index_count, first_ms_named_after, is_write_full, names_for, rolls
from storage_format.settings import BrokerSettings

from ..io.background_copy import CopyItem
from ..io.fs import Location
from ..io.workdir import at_or_after, key_columns
from ..scan.result import ScanResult
from .continued import IndexAppend
from .build import IndexFilePlan, IndexTask, KeySlice, pending_name


@dataclass(frozen=True)
class IndexSpan:
    """An index file the new records reach: the file it continues (None: created) and its new keys [lo, hi),
    numbered from 0 in dispatch order from where the continued files end."""

    appends_to: str | None
    lo: int
    hi: int


def index_spans(last: recovery.IndexFileInfo | None, new_keys: int, any_record: bool, record_after_last_key: bool,
                max_entries: int) -> list[IndexSpan]:
    """IndexService.buildIndex over the new records, from the last file continued (`last`), by counts alone (the
    keys stay in the work files; tests check it against `recovery.resume_index` over the keys themselves): the last
    file takes keys until full, then each full file rolls a new one; a roll after the last key when a record
    follows it (`record_after_last_key`: true when there is no new key)."""
    if not any_record:
        return []
    spans: list[IndexSpan] = []
    count = 0
    if last is not None:
        spans.append(IndexSpan(last.name, 0, 0))
        count = last.header.as_loaded().index_count
    if last is None or is_write_full(count, max_entries):
        spans.append(IndexSpan(None, 0, 0))
        count = 1
    done = 0
    while done < new_keys:
        if is_write_full(count, max_entries):
            spans.append(IndexSpan(None, done, done))
            count = 1
        n = min(max_entries - count, new_keys - done)
        spans[-1] = IndexSpan(spans[-1].appends_to, spans[-1].lo, done + n)
        count, done = count + n, done + n
    if rolls(count, max_entries, record_after_last_key):
        spans.append(IndexSpan(None, new_keys, new_keys))
    return spans


@dataclass(frozen=True)
class IndexFileOut:
    """One index file of the continued index: its name, the file it continues (None: created) and the span of new
    keys it gets (None: copied as it is)."""

    name: str
    continues: str | None
    span: IndexSpan | None


@dataclass(frozen=True)
class IndexContinuation:
    """The index files of the continued index in name order, and the continued files the clean service deleted."""

    files: list[IndexFileOut]
    expired: list[str]


def continue_index(continued: list[recovery.IndexFileInfo], spans: list[IndexSpan], first_ts: list[int | None],
                   last_phy: list[int | None], first_offset: int, last_record_ts: int | None, min_offset: int,
                   tz: dt.tzinfo) -> IndexContinuation:
    """The continued index's files: the files continued (name order) with the spans of new keys (index_spans; per
    span the store time and commit-log offset of its first and last key, None without keys), then the head the clean
    service deletes at `min_offset`.

    Names follow rebuild's rule so the result equals a full rebuild: a file keeps its name once it holds a key; a
    trailing empty file continued (a roll after a full file) and every new file are named by the store time of
    their first key, or of the last record when they get none, bumped after the name before."""
    continued = sorted(continued, key=lambda f: f.name)
    by_name = {sp.appends_to: (sp, ts, ph) for sp, ts, ph in zip(spans, first_ts, last_phy) if sp.appends_to}
    files = [IndexFileOut(f.name, f.name, by_name[f.name][0] if f.name in by_name else None) for f in continued]
    opening: list[int] = []
    renamed = len(continued) > 1 and continued[-1].header.as_loaded().index_count <= 1 and bool(spans)
    if renamed:
        files.pop()
        opening.append(_opening(by_name[continued[-1].name][1], last_record_ts))
    new = [(sp, ts) for sp, ts in zip(spans, first_ts) if sp.appends_to is None]
    opening += [_opening(ts, last_record_ts) for _, ts in new]
    after = first_ms_named_after(files[-1].name, tz) - 1 if files else None
    names = names_for(opening, tz, after) if opening else []
    if renamed:
        files.append(IndexFileOut(names.pop(0), continued[-1].name, by_name[continued[-1].name][0]))
    files += [IndexFileOut(n, None, sp) for n, (sp, _) in zip(names, new)]
    header_end = {o.name: o.header.end_phy_offset for o in continued}
    ends = []
    for f in files:
        got = by_name.get(f.continues) if f.continues else None
        ends.append(first_offset if f.continues is None else got[2] if got and got[2] is not None
                    else header_end[f.continues])
    gone = clean_service.expired_index_files(ends, min_offset)
    return IndexContinuation(files[gone:], [f.continues for f in files[:gone] if f.continues])


def _opening(first_key_ts: int | None, last_record_ts: int | None) -> int:
    """The store time that names a file: its first key's, else the last record's."""
    return int(first_key_ts if first_key_ts is not None else (last_record_ts or 0))


@dataclass(frozen=True)
class NewKeys:
    """The keys of the records from where the continued files end on, per accepted split: (split index, first row,
    rows)."""

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
    """The continued index: its files (names, what each continues), the tasks writing the changed ones, the copies
    of the rest, and the pending names the tasks write new files under."""

    plan: IndexContinuation
    tasks: list
    copies: list[CopyItem]
    pending: dict[int, str]  # file number -> its name
    keys_added: int


@dataclass(frozen=True)
class ContinuedIndex:
    """The index files continued (name, header), where each is read, and the commit-log offset the keys after them
    start at: OUT1's for rebuild --since, a cut copy of the store's for verify (verify.index_seed)."""

    files: list[recovery.IndexFileInfo]
    uris: dict[str, str]
    start: int


def continue_files(continued: ContinuedIndex, scan: ScanResult, work: Location, settings: BrokerSettings,
                   index_dir: Location, generation: int, min_offset: int, tz: dt.tzinfo,
                   precopied: dict[str, Location] | None = None) -> IndexWork:
    """The files continued by the scan's keys from `continued.start` on: the files they fill, names, tasks.
    `precopied`: files copied already (by name), which a task appending to them moves into place."""
    files = sorted(continued.files, key=lambda f: f.name)
    start = continued.start
    keys = new_keys(scan, work, start)
    last = max((s.last_record_offset for s in scan.accepted if s.last_record_offset is not None), default=None)
    any_record = last is not None and last >= start
    after_last_key = keys.total == 0 or (any_record and last > keys.key(work, keys.total - 1)[1])
    spans = index_spans(files[-1] if files else None, keys.total, any_record, after_last_key, settings.max_index_num)
    firsts = [keys.key(work, sp.lo)[0] if sp.hi > sp.lo else None for sp in spans]
    lasts = [keys.key(work, sp.hi - 1)[1] if sp.hi > sp.lo else None for sp in spans]
    last_ts = scan.accepted[-1].last_store_ts if any_record else None
    plan = continue_index(files, spans, firsts, lasts, start, last_ts, min_offset, tz)
    index_dir.makedirs()
    tasks, copies, pending = _tasks(plan, files, keys, continued.uris, work, settings, index_dir, generation,
                                    precopied or {})
    return IndexWork(plan, tasks, copies, pending, keys.total)


def _tasks(plan: IndexContinuation, continued: list[recovery.IndexFileInfo], keys: NewKeys, uris: dict[str, str],
           work: Location, settings: BrokerSettings, index_dir: Location, generation: int,
           precopied: dict[str, Location]):
    """(Spark tasks, copies, pending names) for the files of the plan."""
    tasks, copies, pending = [], [], {}
    ends = {o.name: o.header.as_loaded() for o in continued}
    for no, f in enumerate(plan.files):
        sp: IndexSpan | None = f.span
        dst = index_dir.child(f.name)
        if f.continues is not None and (sp is None or sp.hi == sp.lo):
            copies.append(CopyItem(f"index/{f.name}", uris[f.continues], settings.index_file_size))
        elif f.continues is not None:
            tasks.append(IndexAppend(file_no=no, src=Location(uris[f.continues]), dst=dst, work=work,
                                     slices=tuple((s.split_index, s.lo, s.hi) for s in keys.slices(sp.lo, sp.hi)),
                                     file_size=settings.index_file_size, slots=settings.max_hash_slot_num,
                                     max_entries=settings.max_index_num, precopied=precopied.get(f.continues)))
        else:
            before = keys.slices(sp.lo - 1, sp.lo)[0] if sp.lo > 0 else None
            inherited = None
            if before is None and continued:  # the last file continued gets no new key: its end, as loaded
                h = ends[continued[-1].name]
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
