"""The index through recovery (IndexService.load / buildIndex).

Files with endTimestamp > checkpoint.indexMsgTimestamp are deleted; indexing resumes in the last kept
file, skipping records whose offset < its endPhyOffset, so the record at that offset is indexed a
second time; a full last file makes the next dispatched record open a new file inheriting its end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checkpoint import Checkpoint
from ..index_file import IndexHeader, IndexState, is_write_full, rolls
from ..index_keys import KeyBatch


@dataclass(frozen=True)
class IndexFileInfo:
    """An index file on disk: its name and header."""

    name: str
    header: IndexHeader
    empty_on_disk: bool = False  # a 0-byte file (crash leftover): the broker maps it at full size, zero-filled


def index_files_after_load(files: list[IndexFileInfo], cp: Checkpoint, abnormal: bool) -> tuple[list[IndexFileInfo], list[IndexFileInfo]]:
    """IndexService.load: in name order; after an unclean shutdown files whose endTimestamp >
    checkpoint.indexMsgTimestamp are deleted. Returns (kept, deleted)."""
    ordered = sorted(files, key=lambda f: f.name)
    if not abnormal:
        return ordered, []
    kept = [f for f in ordered if f.header.end_timestamp <= cp.index_msg_timestamp]
    deleted = [f for f in ordered if f.header.end_timestamp > cp.index_msg_timestamp]
    return kept, deleted


@dataclass(frozen=True)
class DispatchPass:
    """One run of dispatched records: recovery's [start, P) or 4.x start()'s re-dispatch [R, P).

    `keys` must hold every key of the pass's records at or after the index end offset known when the
    pass begins (earlier keys are skipped anyway); `last_record_offset` is None for an empty pass.
    """

    name: str
    first_offset: int
    last_record_offset: int | None
    keys: KeyBatch


@dataclass
class IndexTarget:
    """One index file recovery writes: the kept file it appends to, or a new file with what it inherits."""

    appends_to: str | None
    inherited: IndexState
    keys: list[KeyBatch] = field(default_factory=list)
    count: int = 1  # indexCount after the puts so far (starts at 1)
    end_ts: int = 0
    end_phy: int = 0

    def all_keys(self) -> KeyBatch:
        """Every key put into this file by recovery, in order."""
        return KeyBatch.concat(self.keys)


@dataclass
class IndexResume:
    """What recovery does to the index: files appended to / created, rolls, re-indexed boundary."""

    targets: list[IndexTarget]
    rolled_full_end_ts: list[int]
    boundary_reindexed: list[dict]

    @property
    def new_files(self) -> list[IndexTarget]:
        """Files recovery creates."""
        return [t for t in self.targets if t.appends_to is None]

    @property
    def appended(self) -> IndexTarget | None:
        """The kept file recovery appends keys to, if any."""
        return next((t for t in self.targets if t.appends_to is not None and t.keys and len(t.all_keys())), None)


def resume_index(last_kept: IndexFileInfo | None, passes: list[DispatchPass], max_entries: int) -> IndexResume:
    """IndexService.buildIndex over the dispatched passes, starting from the last kept file."""
    cur = None
    if last_kept is not None:
        h = last_kept.header.as_loaded()
        cur = IndexTarget(last_kept.name, IndexState(h.end_timestamp, h.end_phy_offset), [], h.index_count,
                          h.end_timestamp, h.end_phy_offset)
    targets: list[IndexTarget] = [cur] if cur is not None else []
    rolled: list[int] = []
    boundary: list[dict] = []

    def roll() -> IndexTarget:
        """getAndCreateLastIndexFile: a new file inheriting the current end (flushing a full one)."""
        nonlocal cur
        if cur is not None and is_write_full(cur.count, max_entries):
            rolled.append(cur.end_ts)
        inherit = IndexState(cur.end_ts, cur.end_phy) if cur is not None else IndexState()
        new = IndexTarget(None, inherit, [], 1, max(inherit.end_timestamp, 0), max(inherit.end_phy_offset, 0))
        targets.append(new)
        cur = new
        return new

    for p in passes:
        if p.last_record_offset is None:
            continue
        if cur is None or is_write_full(cur.count, max_entries):
            roll()
        skip_below = cur.end_phy
        keys = p.keys.from_offset(max(skip_below, p.first_offset)) if len(p.keys) else p.keys
        if len(keys) and int(keys.phy[0]) == skip_below and skip_below > 0:
            boundary.append({"pass": p.name, "record_offset": skip_below,
                             "keys": int((keys.phy == skip_below).sum())})
        done = 0
        while done < len(keys):
            if is_write_full(cur.count, max_entries):
                roll()
            n = min(max_entries - cur.count, len(keys) - done)
            part = keys.take(slice(done, done + n))
            cur.keys.append(part)
            cur.count += n
            cur.end_ts, cur.end_phy = int(part.store_ts[-1]), int(part.phy[-1])
            done += n
        last_key_phy = int(keys.phy[-1]) if len(keys) else None
        if rolls(cur.count, max_entries, last_key_phy is None or p.last_record_offset > last_key_phy):
            roll()  # the next dispatched record finds the file full and opens a new one
    return IndexResume(targets, rolled, boundary)
