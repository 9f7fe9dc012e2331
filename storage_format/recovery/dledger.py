"""The broker's recovery of a DLedger-mode store (RocketMQ 4.9.8 DLedgerCommitLog + DLedger 0.3.1.2) as pure
planning over facts (no Spark), checked against the golden `dledger-unclean-11-recovered`.

What the broker does, in order (DefaultMessageStore.load/recover/start, DLedgerCommitLog.recover,
DLedgerMmapFileStore.recover), the same after a clean and an unclean shutdown:

1. `walk_entries`: DLedger recovery. A backward pre-check from the third-last data file finds the file to walk
   from (first entry sane and equal to its index unit); the walk checks every entry (no CRC: magic, pos, size,
   bodySize, index + 1, term), compares it with its index unit until the first mismatch, and from there rewrites
   the index units. The write end (processOffset) is where the walk stops; data files past it are deleted, the
   index is cut after the last entry. Nothing is re-dispatched during load.
2. Consume queues are cut (truncateDirtyLogicFiles) only when one reaches at or past the DLedger write end.
3. start(): dispatch resumes at the highest consume-queue physical offset and runs to the committed position.
   Index files newer than the checkpoint's indexMsgTimestamp were deleted at load (abort present), so records
   between the last kept index file and the resume point are never indexed again (unless --full-index).
4. The checkpoint: logicsMsgTimestamp and, in DLedger mode, physicMsgTimestamp = the last consume-queue put;
   the DLedger checkpoint holds the committed and end index; a one-member group's election rewrites `currterm`.

`plan_dledger(DLedgerFacts) -> DLedgerPlan` reuses the plain pieces (plan_queues, resume_index,
checkpoint_after); the Spark stage (jobs.pipeline.recover.dledger) gathers the facts and writes the plan.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import Callable

from ..checkpoint import Checkpoint
from ..confirm_offset import RecoveredConfirm
from ..dledger import (BLANK_MAGIC, ENTRY_HEADER_SIZE, ENTRY_MAGIC, INDEX_FILE_SIZE, INDEX_UNIT_SIZE,
                       READING_SURVIVING, RECOVERY_MIN_SIZE_EXCLUSIVE, EntryHeader, index_unit, read_entry_header)
from ..errors import RecoveryError
from ..log_sources import first_gap
from ..segment_names import segment_name as file_offset
from ..settings import BrokerSettings
from .checkpoint_after import checkpoint_after
from .index import IndexResume
from .sequence import IndexFacts, IndexResumeFacts, QueueFacts, QueuePlan, RecoveryFacts, plan_index, plan_queues
from .queues import QueueState
from .post_start import post_start_reput_from

ReadRange = Callable[[int, int, int], bytes]  # (file start, position in the file, length) -> bytes (short at the end)
WINDOW = 8 << 20  # bytes read at a time while walking a data file

STOP_SIZE0 = "size0"  # an entry size of 0: the end of the written data (the usual end)
STOP_BLANK_LAST = "blank_ends_last_file"  # a DLedger blank ends the last data file
STOP_FILE_END = "file_end"  # the last data file is full to its last byte (no blank, no zero)
STOP_BAD_ENTRY = "bad_entry"  # an entry fails one of DLedger's checks: the broker stops (and cuts) there


@dataclass(frozen=True, kw_only=True)
class EntryStop:
    """Where and why DLedger's recovery walk stopped (absolute offset, the data file holding it)."""

    offset: int
    file_start: int
    reason: str
    detail: str

    def to_dict(self) -> dict:
        """The plan form."""
        return {"offset": self.offset, "data_file": file_offset(self.file_start), "position_in_file":
                self.offset - self.file_start, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True, kw_only=True)
class IndexRewrite:
    """DLedger rewrites its index from entry `from_index` on (the first entry whose unit disagreed).
    `rebuilt`: the index held no unit there (rebuildWithPos): every index file goes and one file is created,
    zeros below the unit. `units` are the rewritten units in order (entry index from_index, from_index + 1, ...)."""

    from_index: int
    reason: str
    rebuilt: bool
    units: bytes
    fresh_files: tuple[int, ...] = ()  # index files (re)created by the rewrite: zeros under the units

    def render(self, start: int, old: bytes | None) -> bytes:
        """One index file after the rewrite: its old bytes (zeros for a fresh file) with the units on top."""
        data = bytearray(INDEX_FILE_SIZE) if start in self.fresh_files or old is None else bytearray(old)
        data.extend(bytes(INDEX_FILE_SIZE - len(data)))
        at = self.from_index * INDEX_UNIT_SIZE
        lo, hi = max(at, start), min(at + len(self.units), start + INDEX_FILE_SIZE)
        if lo < hi:
            data[lo - start:hi - start] = self.units[lo - at:hi - at]
        return bytes(data)

    def files(self) -> list[int]:
        """Start offsets of the index files the rewritten units fall in."""
        at = self.from_index * INDEX_UNIT_SIZE
        end = at + max(len(self.units), 1)
        first = at - at % INDEX_FILE_SIZE
        return list(range(first, end, INDEX_FILE_SIZE))


@dataclass(frozen=True, kw_only=True)
class EntryRecovery:
    """DLedgerMmapFileStore.recover over the data files: where the walk began, its end, the index it leaves."""

    walk_from: int  # start of the data file the walk began in
    precheck: tuple[dict, ...]  # files the backward pre-check looked at, newest first
    write_end: int  # processOffset: the DLedger write end (dataFileList.getMaxWrotePosition after recovery)
    entries_walked: int
    first_walked_index: int  # -1 when the walk found no entry
    last_index: int  # ledgerEndIndex (-1: none)
    last_term: int
    last_entry_pos: int | None
    last_entry_size: int
    begin_index: int  # ledgerBeginIndex: the first data file's first entry (-1 without entries)
    stop: EntryStop
    index_rewrite: IndexRewrite | None
    data_files_deleted: tuple[int, ...]
    index_files_deleted: tuple[int, ...]
    index_file_created: int | None  # rebuildWithPos creates one index file (start offset)

    @property
    def index_end(self) -> int:
        """Where the index is cut: (last entry index + 1) x 32."""
        return (self.last_index + 1) * INDEX_UNIT_SIZE

    @property
    def last_entry_end(self) -> int | None:
        """End of the last entry (pos + size); None without entries."""
        return None if self.last_entry_pos is None else self.last_entry_pos + self.last_entry_size

    def to_dict(self) -> dict:
        """The plan's "dledger" recovery part."""
        rw = self.index_rewrite
        return {"walk_from_data_file": file_offset(self.walk_from), "precheck": list(self.precheck),
                "entries_walked": self.entries_walked, "first_walked_index": self.first_walked_index,
                "last_index": self.last_index, "last_term": self.last_term, "begin_index": self.begin_index,
                "write_end": self.write_end, "stop": self.stop.to_dict(),
                "data_files_to_delete": [file_offset(s) for s in self.data_files_deleted],
                "index": {"cut_at": self.index_end,
                          "files_to_delete": [file_offset(s) for s in self.index_files_deleted],
                          "file_to_create": None if self.index_file_created is None
                          else file_offset(self.index_file_created),
                          "rewritten_from_index": None if rw is None else rw.from_index,
                          "rewritten_units": 0 if rw is None else len(rw.units) // INDEX_UNIT_SIZE,
                          "rewrite_reason": None if rw is None else rw.reason}}


class _File:
    """Windowed reads of one data file (the walk is sequential; entries are at most a few MiB)."""

    def __init__(self, read: ReadRange, start: int, size: int) -> None:
        self.read, self.start, self.size = read, start, size
        self.lo, self.buf = 0, b""

    def get(self, pos: int, n: int) -> bytes:
        """n bytes at pos (fewer at the end of the file)."""
        if pos < self.lo or pos + n > self.lo + len(self.buf):
            want = max(n, WINDOW)
            self.lo, self.buf = pos, bytes(self.read(self.start, pos, min(want, self.size - pos)))
        return self.buf[pos - self.lo:pos - self.lo + n]


class _Index:
    """The DLedger index files as the walk sees them: the unit at an entry index, or None beyond the files
    (read a window at a time: the walk asks for consecutive units)."""

    def __init__(self, starts: tuple[int, ...], read: ReadRange) -> None:
        self.files = {s: _File(read, s, INDEX_FILE_SIZE) for s in starts}

    def unit(self, entry_index: int) -> tuple | None:
        at = entry_index * INDEX_UNIT_SIZE
        f = next((s for s in self.files if s <= at < s + INDEX_FILE_SIZE), None)
        if f is None or entry_index < 0:
            return None
        return struct.unpack(">iqiqq", self.files[f].get(at - f, INDEX_UNIT_SIZE).ljust(INDEX_UNIT_SIZE, b"\0"))


def dledger_checkpoint_after(checkpoint: Checkpoint, generation: int, last_cq_ts: int | None,
                             rolled: list[int], confirm: RecoveredConfirm) -> tuple[Checkpoint, dict[str, str]]:
    """checkpoint_after in DLedger mode: physicMsgTimestamp is the store time of the last dispatched NOT/COMMIT
    record, which every consume-queue put sets there (ConsumeQueue.putMessagePositionInfoWrapper; no commit-log flush
    thread does)."""
    return checkpoint_after(checkpoint, generation, last_cq_ts, rolled, confirm, physic_from_queue="DLedger")


def _unit_problem(h: EntryHeader, unit: tuple | None, pos: int) -> str | None:
    """How an entry disagrees with its index unit (DLedger's compare), None when it agrees."""
    if unit is None:
        return f"the DLedger index holds no unit for entry {h.index} (byte {h.index * INDEX_UNIT_SIZE})"
    magic, upos, usize, uindex, uterm = unit
    for name, mine, theirs in (("magic", h.magic, magic), ("size", h.size, usize), ("index", h.index, uindex),
                               ("term", h.term, uterm), ("pos", pos, upos)):
        if mine != theirs:
            return f"entry {h.index}'s {name} {mine} != {theirs} in its index unit"
    return None


def _precheck(f: _File, idx: _Index) -> str | None:
    """The pre-check of a data file's first entry (None: it passes): sane, and equal to its index unit."""
    raw = f.get(0, ENTRY_HEADER_SIZE)
    if len(raw) < ENTRY_HEADER_SIZE:
        return "the file is shorter than an entry header"
    h = read_entry_header(raw, 0)
    if h.magic == BLANK_MAGIC or h.magic < ENTRY_MAGIC:
        return f"unknown magic {h.magic}"
    if h.size <= RECOVERY_MIN_SIZE_EXCLUSIVE:
        return f"size {h.size} should be > {RECOVERY_MIN_SIZE_EXCLUSIVE}"
    if h.pos != f.start:
        return f"pos {h.pos} != {f.start}"
    if h.body_size + ENTRY_HEADER_SIZE != h.size:
        return f"size {h.size} != {h.body_size} + {ENTRY_HEADER_SIZE}"
    return _unit_problem(h, idx.unit(h.index), f.start)


def _entry_problem(h: EntryHeader, absolute: int, rel: int, file_size: int, last_index: int,
                   last_term: int) -> str | None:
    """DLedger's checks of one entry in the recovery walk, in its order (None: the entry passes)."""
    if h.pos != absolute:
        return f"pos {h.pos} != {absolute}"
    if h.body_size + ENTRY_HEADER_SIZE != h.size:
        return f"size {h.size} != {h.body_size} + {ENTRY_HEADER_SIZE}"
    if rel + h.size > file_size or h.size < 0:
        return f"size {h.size} runs past the end of the data file ({file_size - rel} bytes left)"
    if h.magic != ENTRY_MAGIC:
        return f"magic {h.magic} is not {ENTRY_MAGIC}"
    if last_index != -1 and h.index != last_index + 1:
        return f"index {h.index} does not follow {last_index}"
    if h.term < last_term:
        return f"term {h.term} < the previous entry's term {last_term}"
    if h.size <= RECOVERY_MIN_SIZE_EXCLUSIVE:
        return f"size {h.size} should be > {RECOVERY_MIN_SIZE_EXCLUSIVE}"
    return None


def check_contiguous(starts: list[int], size: int, what: str) -> None:
    """MmapFileList.checkSelf: adjacent files must be `size` apart, or DLedger refuses to recover."""
    gap = first_gap(starts, size)
    if gap is not None:
        a, b = gap
        raise RecoveryError(f"{what} {file_offset(a)} and {file_offset(b)} are not adjacent ({size}-byte files): "
                            f"DLedger refuses to start ('check data file order failed before recovery')")


def walk_entries(data_starts: list[int], file_size: int, read: ReadRange, index_starts: list[int],
                 read_index: ReadRange) -> EntryRecovery:
    """DLedgerMmapFileStore.recover over data files of `file_size` bytes and index files (`read` / `read_index`:
    (file start, position, length) -> bytes): the walk, the write end, the index rewrite and cut."""
    data_starts, index_starts = sorted(data_starts), sorted(index_starts)
    check_contiguous(data_starts, file_size, "DLedger data files")
    check_contiguous(index_starts, INDEX_FILE_SIZE, "DLedger index files")
    idx = _Index(tuple(index_starts), read_index)
    if not data_starts:
        return EntryRecovery(walk_from=0, precheck=(), write_end=0, entries_walked=0, first_walked_index=-1,
                             last_index=-1, last_term=-1, last_entry_pos=None, last_entry_size=0, begin_index=-1,
                             stop=EntryStop(offset=0, file_start=0, reason=STOP_SIZE0, detail="no data files"),
                             index_rewrite=None, data_files_deleted=(), index_files_deleted=tuple(index_starts),
                             index_file_created=None)
    files = [_File(read, s, file_size) for s in data_starts]
    i, looked = _walk_start(files, idx)
    w = _Walk(files=files, file_size=file_size, idx=idx, index_starts=index_starts, i=i, process=files[i].start)
    while w.stop is None:
        w.step()
    _check_write_end(w, data_starts, file_size)
    begin = _begin_index(files[0], w.last_index)
    rewrite, created, index_after = _index_rewrite(w, index_starts)
    cut = (w.last_index + 1) * INDEX_UNIT_SIZE
    index_after = [s for s in index_after if not s > cut]  # truncateOffset(cut)
    if begin > 0:  # reviseLedgerBeginIndex: resetOffset(begin x 32) drops files that end at or before it
        index_after = [s for s in index_after if s + INDEX_FILE_SIZE > begin * INDEX_UNIT_SIZE]
    return EntryRecovery(walk_from=files[i].start, precheck=tuple(looked), write_end=w.process,
                         entries_walked=w.walked, first_walked_index=w.first_walked, last_index=w.last_index,
                         last_term=w.last_term, last_entry_pos=w.last_pos, last_entry_size=w.last_size,
                         begin_index=begin, stop=w.stop, index_rewrite=rewrite,
                         data_files_deleted=tuple(s for s in data_starts if s > w.process),
                         index_files_deleted=tuple(s for s in index_starts if s not in index_after),
                         index_file_created=created)


def _walk_start(files: list[_File], idx: _Index) -> tuple[int, list[dict]]:
    """The data file the walk starts from: the third from last, or earlier while the pre-check fails there (the
    first entry sane and equal to its index unit); and each file looked at, for the plan."""
    i = max(0, len(files) - 3)
    looked = []
    for j in range(i, -1, -1):
        i = j
        why = _precheck(files[j], idx)
        looked.append({"data_file": file_offset(files[j].start), "passes": why is None,
                       "why": why or "first entry sane and equal to its index unit"})
        if why is None:
            break
    return i, looked


@dataclass(kw_only=True)
class _Walk:
    """The walk's state, entry by entry as DLedger's recover loop keeps it; `stop` says where and why it ended."""

    files: list[_File]
    file_size: int
    idx: _Index
    index_starts: list[int]
    i: int  # the data file being walked
    process: int  # the write end so far
    rel: int = 0
    last_index: int = -1
    last_term: int = -1
    walked: int = 0
    first_walked: int = -1
    last_pos: int | None = None
    last_size: int = 0
    rewrite_from: int | None = None  # the first entry whose index unit disagrees: the index is rewritten from it
    rewrite_why: str = ""
    rebuilt: bool = False
    units: bytearray = field(default_factory=bytearray)
    stop: EntryStop | None = None

    def step(self) -> None:
        """One entry, or a blank that moves the walk to the next file; sets `stop` where the walk ends."""
        f = self.files[self.i]
        absolute = f.start + self.rel
        head = f.get(self.rel, ENTRY_HEADER_SIZE)
        if len(head) >= 4 and struct.unpack_from(">i", head, 0)[0] == BLANK_MAGIC:
            return self._blank(f)
        self.stop = self._end_before_entry(f, head, absolute)
        if self.stop is not None:
            return
        h = read_entry_header(head, 0)
        why = _entry_problem(h, absolute, self.rel, self.file_size, self.last_index, self.last_term)
        if why is not None:
            self.stop = EntryStop(offset=absolute, file_start=f.start, reason=STOP_BAD_ENTRY,
                                  detail=f"entry at {absolute}: {why}")
            return
        self._index_unit(h, f, absolute)
        if self.first_walked == -1:
            self.first_walked = h.index
        self.last_index, self.last_term, self.last_pos, self.last_size = h.index, h.term, absolute, h.size
        self.walked += 1
        self.process += h.size
        self.rel += h.size

    def _blank(self, f: _File) -> None:
        """A DLedger blank: the file is done; the walk ends when it was the last one."""
        self.process = f.start + self.file_size
        if self.i + 1 >= len(self.files):
            self.stop = EntryStop(offset=self.process, file_start=f.start, reason=STOP_BLANK_LAST,
                                  detail=f"a DLedger blank at byte {self.rel} ends the last data file")
            return
        self.i += 1
        self.rel, self.process = 0, self.files[self.i].start

    def _end_before_entry(self, f: _File, head: bytes, absolute: int) -> EntryStop | None:
        """Where the written data ends before an entry header can be read: the file's last byte, a size of 0, a
        header cut by the end of the file."""
        if len(head) < 4:
            return EntryStop(offset=absolute, file_start=f.start, reason=STOP_FILE_END,
                             detail="the last data file is written to its last byte")
        if len(head) >= 8 and struct.unpack_from(">i", head, 4)[0] == 0:
            return EntryStop(offset=absolute, file_start=f.start, reason=STOP_SIZE0,
                             detail="an entry size of 0: the end of the written data")
        if len(head) < ENTRY_HEADER_SIZE:
            return EntryStop(offset=absolute, file_start=f.start, reason=STOP_BAD_ENTRY,
                             detail=f"an entry header cut by the end of the data file ({len(head)} bytes left)")
        return None

    def _index_unit(self, h: EntryHeader, f: _File, absolute: int) -> None:
        """The entry against its index unit: the first disagreement starts the rewrite (truncateOffset, or
        rebuildWithPos when the truncation cannot reach the unit's position), and every unit from there is kept."""
        if self.rewrite_from is None:
            mismatch = _unit_problem(h, self.idx.unit(h.index), absolute)
            if mismatch is not None:
                if h.index < 0:
                    raise RecoveryError(f"DLedger data file {file_offset(f.start)} byte {self.rel}: entry index "
                                        f"{h.index} is negative; DLedger's index rewrite from there is undefined")
                self.rewrite_from, self.rewrite_why = h.index, mismatch
                at = h.index * INDEX_UNIT_SIZE
                kept = [s for s in self.index_starts if s <= at]  # truncateOffset(at) keeps these
                max_wrote = (at if at < kept[-1] + INDEX_FILE_SIZE else kept[-1] + INDEX_FILE_SIZE) if kept else 0
                self.rebuilt = max_wrote != at  # then rebuildWithPos(at)
        if self.rewrite_from is not None:
            self.units += index_unit(replace(h, pos=absolute))


def _check_write_end(w: _Walk, data_starts: list[int], file_size: int) -> None:
    """The broker exits when the walk ends more than a data file before the last one."""
    last_file = data_starts[-1]
    if last_file - w.process > file_size:
        holder = max((s for s in data_starts if s <= w.process), default=data_starts[0])
        why = f" ({w.stop.detail})" if w.stop is not None and w.stop.detail else ""
        raise RecoveryError(f"DLedger data file {file_offset(holder)} byte {w.process - holder}: DLedger's recovery "
                            f"ends there{why}, more than a data file before the last data file "
                            f"{file_offset(last_file)}: the broker exits there ('The processOffset is too small, you "
                            f"should check it manually'); nothing is changed")


def _begin_index(first_file: _File, last_index: int) -> int:
    """The ledger's begin index, from the first data file's first entry (-1: no entry walked)."""
    if last_index == -1:
        return -1
    first = read_entry_header(first_file.get(0, ENTRY_HEADER_SIZE), 0)
    if first.magic != ENTRY_MAGIC or not 0 <= first.index <= last_index:
        raise RecoveryError(f"DLedger data file {file_offset(first_file.start)} byte 0: the first entry (magic "
                            f"{first.magic}, index {first.index}) cannot begin a ledger ending at index "
                            f"{last_index}; DLedger's index reset from it is undefined")
    return first.index


def _index_rewrite(w: _Walk, index_starts: list[int]) -> tuple[IndexRewrite | None, int | None, list[int]]:
    """(the index rewrite, the file rebuildWithPos creates, the index files after it) from the walk's units."""
    if w.rewrite_from is None:
        return None, None, list(index_starts)
    at, created = w.rewrite_from * INDEX_UNIT_SIZE, None
    fresh: list[int] = []
    if w.rebuilt:  # rebuildWithPos: every file goes, one is created at the unit's file, zeros below it
        created = at - at % INDEX_FILE_SIZE
        index_after = [created]
        fresh.append(created)
    else:
        index_after = [s for s in index_starts if s <= at]
    end = at + len(w.units)
    if not index_after and w.units:  # an empty index: the first append creates the file at 0
        index_after.append(0)
        fresh.append(0)
    while index_after and index_after[-1] + INDEX_FILE_SIZE < end:  # appends open the next files
        index_after.append(index_after[-1] + INDEX_FILE_SIZE)
        fresh.append(index_after[-1])
    rewrite = IndexRewrite(from_index=w.rewrite_from, reason=w.rewrite_why, rebuilt=w.rebuilt, units=bytes(w.units),
                           fresh_files=tuple(fresh))
    return rewrite, created, index_after


# ---------------------------------------------------------------------------------------------
# the DLedger checkpoint and currterm after the broker's restart


def properties_text(pairs: list[tuple[str, int | str]]) -> bytes:
    """IOUtils.properties2String: `key=value` lines in the Properties (Hashtable) iteration order given."""
    return "".join(f"{k}={v}\n" for k, v in pairs).encode()


def dledger_checkpoint_text(committed_index: int, end_index: int) -> bytes:
    """persistCheckPoint: committedIndex then endIndex (the Hashtable order of these two keys)."""
    return properties_text([("committedIndex", committed_index), ("endIndex", end_index)])


def currterm_text(vote_leader: str, term: int) -> bytes:
    """MemberState.persistTerm: voteLeader then currTerm (the Hashtable order of these two keys)."""
    return properties_text([("voteLeader", vote_leader), ("currTerm", term)])


# ---------------------------------------------------------------------------------------------
# the committed position the restarted broker dispatches to


def committed_position(entries: EntryRecovery, reading: str, checkpoint_committed: int | None,
                       unit_end: Callable[[int], int]) -> tuple[int, int]:
    """(last committed entry index, committed position) after DLedger's recovery under a reading
    (storage_format.dledger.committed_reading): "surviving" = every entry that survived (a one-member group
    commits them all: the position is the write end); "checkpoint" = up to the checkpoint's committedIndex,
    capped at the last entry, ending where that entry ends (`unit_end(index)` reads its index unit: pos +
    size; a unit DLedger rewrote is taken from the rewrite)."""
    if reading == READING_SURVIVING or checkpoint_committed is None or entries.last_index < 0:
        return entries.last_index, entries.write_end
    c = min(checkpoint_committed, entries.last_index)
    if c == entries.last_index:
        return c, entries.write_end
    if c < max(entries.begin_index, 0):
        return c, 0
    rw = entries.index_rewrite
    if rw is not None and c >= rw.from_index:
        _, pos, size, _, _ = struct.unpack_from(">iqiqq", rw.units, (c - rw.from_index) * INDEX_UNIT_SIZE)
        return c, pos + size
    return c, unit_end(c)


# ---------------------------------------------------------------------------------------------
# the whole sequence


def dledger_reput_from(loads_max_phy: dict, truncated_max_phy: dict, log_min: int, write_end: int) -> int:
    """Where start() resumes dispatch: the largest maxPhysicOffset over the consume queues after the cut at the
    write end (`truncated_max_phy` holds the cut queues' new values), not below the log's first offset
    (DLedgerCommitLog.getMinOffset: the first plain segment of an upgraded store, else the first data file)."""
    maxes = {**loads_max_phy, **truncated_max_phy}
    return post_start_reput_from(4, maxes.values(), log_min, write_end)


def queues_after_cut(queues: QueueFacts, write_end: int) -> dict:
    """maxPhysicOffset of the queues truncateDirtyLogicFiles(write end) changes (only when one reaches it)."""
    max_before = max((ld.max_phy for ld in queues.loads.values()), default=-1)
    out = {}
    if max_before >= write_end:
        for key, ld in queues.loads.items():
            if ld.max_phy > write_end:
                st = QueueState.start(ld, queues.file_size)
                st.truncate(write_end, lambda start, key=key: queues.read_file(key, start))
                out[key] = st.max_phy
    return out


@dataclass(frozen=True, kw_only=True)
class DLedgerFacts:
    """Everything the DLedger-mode recovery decides on. `queues.tails` hold the consume-queue entries past each
    queue's maxPhysicOffset of the records from `tail_from` (at most the resume point) to the committed position;
    `index` is the plain recovery's index mode (off, resume with the keys from `tail_from` on, --full-index);
    `last_cq_record_ts(offset)` the store time of the last consume-queue record at or after an offset."""

    abort_present: bool
    settings: BrokerSettings
    checkpoint: Checkpoint
    log_starts: tuple[int, ...]  # the log's files (plain segments of an upgraded store, then DLedger data files)
    entries: EntryRecovery
    committed_index: int  # the last entry the broker dispatches (the committed-position reading)
    committed_end: int  # its end: the dispatch stops there
    one_member: bool  # a one-member group elects itself and commits everything (currterm rewritten)
    self_id: str
    currterm_raw: bytes | None
    queues: QueueFacts
    tail_from: int
    last_dispatched_record: int | None  # start of the last record before the committed position
    index: IndexFacts
    last_cq_record_ts: Callable[[int], int | None]
    index_deleted: tuple[str, ...] = ()  # index files IndexService.load deleted (newer than the checkpoint)


@dataclass(kw_only=True)
class DLedgerPlan:
    """What the broker's DLedger-mode recovery and restart do to the store, with the reasons."""

    entries: EntryRecovery
    queues: QueuePlan
    index_resume: IndexResume | None  # None with --full-index
    rolled_full_end_ts: list[int]
    checkpoint: Checkpoint
    checkpoint_why: dict[str, str]
    dledger_files: dict[str, bytes]  # dledger-<id>-relative name -> bytes (checkpoint, .bak, currterm, .bak)
    dispatch: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # what the job also names on stderr (modelled broker quirks)


def _recovery_facts(f: DLedgerFacts) -> RecoveryFacts:
    """The plain sequence's facts: recoverNormally semantics (nothing dispatched during load), P = the DLedger
    write end, 4.x start()'s dispatch from the queues' end (the plain rules' post-start re-dispatch)."""
    return RecoveryFacts(generation=4, abnormal=False, settings=f.settings, checkpoint=f.checkpoint,
                         segment_starts=f.log_starts or (0,), start_offset=f.tail_from,
                         truncate_at=f.entries.write_end, last_valid_record=f.entries.last_entry_pos,
                         last_dispatched_record=f.last_dispatched_record, dispatched_end=f.committed_end,
                         queues=f.queues, index=f.index, last_cq_record_ts=f.last_cq_record_ts)


def member_files_after(committed_index: int, last_index: int, one_member: bool, self_id: str,
                       currterm_raw: bytes | None) -> tuple[dict[str, bytes], list[str]]:
    """The DLedger checkpoint (and .bak) and, for a one-member group, currterm (and .bak) after the restart (the
    same in 4.9.8 and 5.3.3: one DLedger library)."""
    out: dict[str, bytes] = {}
    notes = []
    cp = dledger_checkpoint_text(committed_index, last_index)
    out["checkpoint"] = cp
    out["checkpoint.bak"] = cp
    notes.append("DLedger checkpoint: committedIndex and endIndex as the broker persists them after the restart "
                 "(every 3 s and at shutdown, so checkpoint.bak holds the same text)")
    if one_member:
        term = 0
        if currterm_raw is not None:
            for line in currterm_raw.decode("latin-1").splitlines():
                k, sep, v = line.partition("=")
                if sep and k.strip() == "currTerm" and v.strip().lstrip("-").isdigit():
                    term = int(v.strip())
        out["currterm"] = currterm_text(self_id, term)
        if currterm_raw is not None:
            out["currterm.bak"] = currterm_raw
        notes.append("currterm: the one-member group's election votes for itself in the same term (persistTerm "
                     "keeps the previous text in currterm.bak)")
    else:
        notes.append("currterm: left as it is (a group of several elects at runtime; reput does not model it)")
        notes.append(f"DLedger checkpoint: committedIndex {committed_index} is the reading's committed entry; "
                     f"after a real restart of a group of several it is whatever the quorum holds then")
    return out, notes


def plan_dledger(f: DLedgerFacts) -> DLedgerPlan:
    """The broker's DLedger-mode recovery and restart over the facts."""
    facts = _recovery_facts(f)
    queues = plan_queues(facts)
    reput_from, end = queues.reput_from, f.committed_end
    resume, rolled = plan_index(facts, queues)
    last_cq_ts = f.last_cq_record_ts(reput_from) if reput_from < end else None
    confirm = RecoveredConfirm(end, "DLedger mode: getConfirmOffset is the committed position; 4.x stores none")
    cp, why = dledger_checkpoint_after(f.checkpoint, 4, last_cq_ts, rolled, confirm)
    files, notes = member_files_after(f.committed_index, f.entries.last_index, f.one_member, f.self_id,
                                      f.currterm_raw)
    dispatch = {"from_offset": reput_from, "to_offset": end, "committed_index": f.committed_index,
                "rule": "start(): ReputMessageService from the consume queues' max physical offset to the DLedger "
                        "committed position; nothing is dispatched during load"}
    if isinstance(f.index, IndexResumeFacts) and f.index_deleted:
        kept_end = f.index.last_kept.header.end_phy_offset if f.index.last_kept is not None else 0
        if kept_end < reput_from:
            notes.append(f"records after offset {kept_end} (the last one the kept index files hold) and before "
                         f"{reput_from} are not indexed again: {len(f.index_deleted)} index file(s) newer than the "
                         f"checkpoint were deleted at load and the broker resumes dispatch at {reput_from} (as the "
                         f"broker does; --full-index re-indexes them)")
    return DLedgerPlan(entries=f.entries, queues=queues, index_resume=resume, rolled_full_end_ts=rolled,
                       checkpoint=cp, checkpoint_why=why, dledger_files=files, dispatch=dispatch, notes=notes)
