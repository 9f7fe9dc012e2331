"""What `rebuild --since` does to an earlier OUT, decided without Spark or I/O: the new records' units dispatched
into OUT1's queues (the broker's putMessagePositionInfo rules, `recovery.QueueState`), their keys into OUT1's
last index file and the files it rolls (`recovery.resume_index`), the index files named by rebuild's rule
(`outputs.stage.name_index_files`: the store time that opened each file, strictly increasing), and the clean
service's deletions once the commit log's head is gone (`storage_format.clean_service`)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage_format import clean_service, recovery
from storage_format.index_file import first_ms_named_after, names_for
from storage_format.index_keys import KeyBatch

QueueKey = tuple[str, int]


def continue_queues(loads: dict[QueueKey, recovery.QueueLoad], tails: dict[QueueKey, recovery.QueueEntries],
                    file_size: int) -> dict[QueueKey, recovery.QueueState]:
    """Every queue the new records reach, after their units are dispatched in commit-log order (a queue OUT1 does
    not hold is created, as the broker creates it: its first file with the pre-blank units before the first)."""
    states = {}
    for key, entries in sorted(tails.items()):
        load = loads.get(key) or recovery.QueueLoad(key[0], key[1], (), 0, -1)
        st = recovery.QueueState.start(load, file_size)
        st.dispatch(entries)
        if st.written:
            states[key] = st
    return states


@dataclass(frozen=True)
class IndexFileOut:
    """One index file of OUT2: its name, OUT1's file it starts from (None: created) and the keys it gets (None:
    copied as it is)."""

    name: str
    old_name: str | None
    target: recovery.IndexTarget | None


@dataclass(frozen=True)
class IndexContinuation:
    """The index files of OUT2 in name order, and OUT1's files the clean service deleted."""

    files: list[IndexFileOut]
    expired: list[str]
    resume: recovery.IndexResume


def continue_index(old: list[recovery.IndexFileInfo], keys: KeyBatch, first_offset: int, last_record: int | None,
                   last_record_ts: int | None, max_entries: int, min_offset: int,
                   tz: dt.tzinfo) -> IndexContinuation:
    """OUT1's index files (name order) continued with the keys of records from `first_offset` (the first record not
    in OUT1) to `last_record` (the last dispatched, None: none), then the head the clean service deletes.

    Names follow rebuild's rule so OUT2 equals a full rebuild: a file keeps OUT1's name once it holds a key; OUT1's
    trailing empty file (a roll after a full file) and every new file are named by the store time of their first
    key, or of the last record when they get none, bumped after the name before."""
    old = sorted(old, key=lambda f: f.name)
    passes = [recovery.DispatchPass("since", first_offset, last_record, keys)]
    resume = recovery.resume_index(old[-1] if old else None, passes, max_entries)
    by_old = {t.appends_to: t for t in resume.targets if t.appends_to is not None}
    files = [IndexFileOut(f.name, f.name, by_old.get(f.name)) for f in old]
    opening: list[int] = []
    renamed_last = (len(old) > 1 and old[-1].header.as_loaded().index_count <= 1 and last_record is not None)
    if renamed_last:
        files.pop()
        opening.append(_opening(by_old.get(old[-1].name), last_record_ts))
    new = resume.new_files
    opening += [_opening(t, last_record_ts) for t in new]
    after = first_ms_named_after(files[-1].name, tz) - 1 if files else None
    names = names_for(opening, tz, after) if opening else []
    if renamed_last:
        files.append(IndexFileOut(names.pop(0), old[-1].name, by_old.get(old[-1].name)))
    files += [IndexFileOut(n, None, t) for n, t in zip(names, new)]
    ends = [_end_phy(f, old) for f in files]
    gone = clean_service.expired_index_files(ends, min_offset)
    return IndexContinuation(files[gone:], [f.old_name for f in files[:gone] if f.old_name], resume)


def _opening(target: recovery.IndexTarget | None, last_record_ts: int | None) -> int:
    """The store time that names a file: its first key's, else the last record's."""
    if target is not None and target.keys:
        k = target.all_keys()
        if len(k):
            return int(k.store_ts[0])
    return int(last_record_ts or 0)


def _end_phy(f: IndexFileOut, old: list[recovery.IndexFileInfo]) -> int:
    """A file's endPhyOffset in OUT2 (what IndexService.deleteExpiredFile compares)."""
    if f.target is not None and f.target.keys and len(f.target.all_keys()):
        return f.target.end_phy
    if f.old_name is not None:
        return next(o.header.end_phy_offset for o in old if o.name == f.old_name)
    return f.target.end_phy if f.target is not None else 0
