"""What `rebuild --since` does to an earlier OUT's index, decided without Spark or I/O: the files the new keys fill
(IndexService.buildIndex from the earlier OUT's last file, by counts), their names by rebuild's rule
(`outputs.stage.name_index_files`: the store time that opened each file, strictly increasing), and the clean
service's deletions once the commit log's head is gone (`storage_format.clean_service`). The consume queues are
continued in Spark tasks (`outputs.continued`)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage_format import clean_service, recovery
from storage_format.index_file import first_ms_named_after, is_write_full, names_for, rolls


@dataclass(frozen=True)
class IndexSpan:
    """An index file the new records reach: the earlier OUT's file it continues (None: created) and its new keys
    [lo, hi), numbered from 0 in dispatch order from the earlier OUT's end."""

    appends_to: str | None
    lo: int
    hi: int


def index_spans(last: recovery.IndexFileInfo | None, new_keys: int, any_record: bool, record_after_last_key: bool,
                max_entries: int) -> list[IndexSpan]:
    """IndexService.buildIndex over the new records, from the earlier OUT's last file (`last`), by counts alone (the
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
    """One index file of OUT2: its name, the earlier OUT's file it starts from (None: created) and the span of new
    keys it gets (None: copied as it is)."""

    name: str
    old_name: str | None
    span: IndexSpan | None


@dataclass(frozen=True)
class IndexContinuation:
    """The index files of OUT2 in name order, and the earlier OUT's files the clean service deleted."""

    files: list[IndexFileOut]
    expired: list[str]


def continue_index(old: list[recovery.IndexFileInfo], spans: list[IndexSpan], first_ts: list[int | None],
                   last_phy: list[int | None], first_offset: int, last_record_ts: int | None, min_offset: int,
                   tz: dt.tzinfo) -> IndexContinuation:
    """OUT2's index files: the earlier OUT's (name order) with the spans of new keys (index_spans; per span the store
    time and commit-log offset of its first and last key, None without keys), then the head the clean service
    deletes at `min_offset`.

    Names follow rebuild's rule so OUT2 equals a full rebuild: a file keeps the earlier name once it holds a key; the
    earlier OUT's trailing empty file (a roll after a full file) and every new file are named by the store time of
    their first key, or of the last record when they get none, bumped after the name before."""
    old = sorted(old, key=lambda f: f.name)
    by_old = {sp.appends_to: (sp, ts, ph) for sp, ts, ph in zip(spans, first_ts, last_phy) if sp.appends_to}
    files = [IndexFileOut(f.name, f.name, by_old[f.name][0] if f.name in by_old else None) for f in old]
    opening: list[int] = []
    renamed = len(old) > 1 and old[-1].header.as_loaded().index_count <= 1 and bool(spans)
    if renamed:
        files.pop()
        opening.append(_opening(by_old[old[-1].name][1], last_record_ts))
    new = [(sp, ts) for sp, ts in zip(spans, first_ts) if sp.appends_to is None]
    opening += [_opening(ts, last_record_ts) for _, ts in new]
    after = first_ms_named_after(files[-1].name, tz) - 1 if files else None
    names = names_for(opening, tz, after) if opening else []
    if renamed:
        files.append(IndexFileOut(names.pop(0), old[-1].name, by_old[old[-1].name][0]))
    files += [IndexFileOut(n, None, sp) for n, (sp, _) in zip(names, new)]
    header_end = {o.name: o.header.end_phy_offset for o in old}
    ends = []
    for f in files:
        got = by_old.get(f.old_name) if f.old_name else None
        ends.append(first_offset if f.old_name is None else got[2] if got and got[2] is not None
                    else header_end[f.old_name])
    gone = clean_service.expired_index_files(ends, min_offset)
    return IndexContinuation(files[gone:], [f.old_name for f in files[:gone] if f.old_name])


def _opening(first_key_ts: int | None, last_record_ts: int | None) -> int:
    """The store time that names a file: its first key's, else the last record's."""
    return int(first_key_ts if first_key_ts is not None else (last_record_ts or 0))
