"""Index files: a 40-byte header, a hash-slot table and 20-byte entries chained per slot.

The file layout (IndexLayout: size, slot and entry offsets, the slot rule), the header, when a file is full and
the index rolls, the file names, the broker's lookup (IndexService.queryOffset and IndexFile.selectPhyOffset, used
by jobs.query) and the walk of every slot chain (`chain_walk`: verify and dump) live here and nowhere else; the key
hash itself is java_hash.index_key_hash. Writing files (fresh, in shares, appended to) is index_build's.
"""
from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
INT_MAX = 2**31 - 1
# Slot tables in memory: positions are below maxIndexNum (an int), and 4-byte slots keep a 5 M-slot table
# (20 MB) in the last-level cache, where the puts' random accesses go.
SLOT_DTYPE = np.int32
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
HEADER_DTYPE = np.dtype([("begin_ts", ">i8"), ("end_ts", ">i8"), ("begin_phy", ">i8"), ("end_phy", ">i8"),
                         ("slot_count", ">i4"), ("index_count", ">i4")])
# The header's fields by the broker's names (IndexHeader), with their byte offsets.
HEADER_FIELD_OFFSETS = {broker: HEADER_DTYPE.fields[key][1] for broker, key in zip(
    ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount"),
    HEADER_DTYPE.names)}
NAME_FORMAT = "%Y%m%d%H%M%S"
NAME_DIGITS = 17  # yyyyMMddHHmmssSSS


@dataclass(frozen=True)
class IndexHeader:
    """The 40-byte header of an index file."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def to_bytes(self) -> bytes:
        arr = np.array([(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
                         self.hash_slot_count, self.index_count)], dtype=HEADER_DTYPE)
        return arr.tobytes()

    def broker_fields(self) -> dict[str, int]:
        """The fields by the broker's names, in file order."""
        values = (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
                  self.hash_slot_count, self.index_count)
        return dict(zip(HEADER_FIELD_OFFSETS, values))

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> "IndexHeader":
        h = np.frombuffer(data, dtype=HEADER_DTYPE, count=1)[0]
        return cls(*(int(v) for v in h))

    def as_loaded(self) -> "IndexHeader":
        """The header as IndexHeader.load sees it: an indexCount <= 0 (a never-written, zero-filled
        file) counts as 1, so the next put goes to entry 1."""
        return self if self.index_count > 0 else replace(self, index_count=1)


def key_slots(key_hash: np.ndarray, slots: int | np.ndarray) -> np.ndarray:
    """Hash slot of each (non-negative) keyHash in an index file of `slots` slots: keyHash % slots."""
    return np.asarray(key_hash, dtype=np.int64) % np.asarray(slots, dtype=np.int64)


@dataclass(frozen=True)
class IndexLayout:
    """Where the parts of an index file lie: the header, then `slots` 4-byte slots, then
    `max_entries` 20-byte entries (maxHashSlotNum, maxIndexNum). Every offset in an index file is
    computed here."""

    slots: int
    max_entries: int

    @property
    def size(self) -> int:
        """The file's size in bytes (the broker creates every index file at this size)."""
        return self.entries_at + self.max_entries * ENTRY_SIZE

    @property
    def entries_at(self) -> int:
        """Byte offset of entry position 0 (never used: the first entry is at position 1)."""
        return HEADER_SIZE + self.slots * SLOT_SIZE

    def slot_of(self, key_hash: int) -> int:
        """The slot of one non-negative keyHash (see key_slots)."""
        return int(key_slots(key_hash, self.slots))

    def slot_at(self, slot: int) -> int:
        """Byte offset of a slot."""
        return HEADER_SIZE + slot * SLOT_SIZE

    def entry_at(self, position: int) -> int:
        """Byte offset of the entry at a position."""
        return self.entries_at + position * ENTRY_SIZE

    def used_positions(self, header: "IndexHeader") -> int:
        """Entry positions in use by the header's indexCount (position 0 included, never used), as the
        broker reads it (IndexHeader.load: a count <= 0 is 1) and capped at the file's maxIndexNum: the
        positions a chain walk or an entry listing may visit."""
        return min(max(header.index_count, 1), self.max_entries)

    def size_problem(self, size: int) -> str | None:
        """What is wrong with an index file of `size` bytes (None: nothing): the broker creates every index file at
        this layout's size and maps it at that size, so any other size is a damaged or foreign file."""
        if size == self.size:
            return None
        return f"index file is {size} bytes, expected {self.size} (maxHashSlotNum, maxIndexNum)"

    def whole_entries(self, nbytes: int) -> int:
        """How many entry positions the first `nbytes` of a file hold whole."""
        return max(0, (nbytes - self.entries_at) // ENTRY_SIZE)

    def slot_table(self, data: bytes) -> np.ndarray:
        """The slot values of a full-size file, as a big-endian int32 view."""
        return np.frombuffer(data, ">i4", self.slots, HEADER_SIZE)

    def entries(self, data: bytes) -> np.ndarray:
        """Every entry position of a full-size file, as an ENTRY_DTYPE view."""
        return np.frombuffer(data, ENTRY_DTYPE, self.max_entries, self.entries_at)


@dataclass
class IndexState:
    """What a new file inherits from its predecessor: the last entry's store time and offset."""

    end_timestamp: int = 0
    end_phy_offset: int = 0


def keys_per_file(max_index_num: int) -> int:
    """Keys one index file holds: maxIndexNum entry positions, position 0 never used."""
    return max_index_num - 1


def is_write_full(index_count: int, max_index_num: int) -> bool:
    """IndexFile.isWriteFull: the file's indexCount (1 + its keys) has reached maxIndexNum."""
    return index_count >= max_index_num


def rolls(index_count: int, max_index_num: int, record_after_last_key: bool) -> bool:
    """The index roll, the one rule: when the last file is full and a record is dispatched after its last
    key, the broker opens the next, empty, file (IndexService.getAndCreateLastIndexFile finds it full)."""
    return is_write_full(index_count, max_index_num) and record_after_last_key


def index_file_count(total_keys: int, max_index_num: int, record_after_last_key: bool) -> int:
    """How many files a fresh index fills with `total_keys` keys in dispatch order: files of
    keys_per_file keys, plus the empty file of a roll after the last one (no key at all: that one file)."""
    per = keys_per_file(max_index_num)
    full, rest = divmod(total_keys, per)
    if rest:
        return full + 1
    return full + (1 if record_after_last_key else 0)  # the last file (if any) is full: a roll opens one more


def last_key_of_file(file_no: int, max_index_num: int) -> int:
    """The global number (from 0, in dispatch order) of the last key of a full file of a fresh index."""
    return (file_no + 1) * keys_per_file(max_index_num) - 1


def empty_file_index_count(generation: int) -> int:
    """indexCount on disk of an index file that got no key: 4.9.x never writes it (the count lives in memory
    until a put, and IndexService.shutdown() is empty), so it stays 0; 5.x flushes every file's header at
    shutdown, writing the in-memory 1."""
    return 0 if generation < 5 else 1


LAYOUT_SEARCH_BYTES = 8 << 20  # an index file up to this size is searched whole when the quick candidates fail
_PROBE = ENTRY_SIZE + SLOT_SIZE  # one read of an entry and the word after it


def layouts_fitting(size: int, header: IndexHeader, read: Callable[[int, int], bytes],
                    default: IndexLayout, search: bool = True) -> list[IndexLayout]:
    """The layouts (maxHashSlotNum, maxIndexNum) an index file of `size` bytes could have been written with, as its
    header and entries show: 40 + 4 x slots + 20 x entries = size, at least indexCount entries and hashSlotCount
    slots, and the last entry put (position indexCount - 1) a real one, at the head of its key's slot, with a
    previous position before it and nothing after it. `read(offset, length)` reads the file. Tried first as a full
    file (indexCount = maxIndexNum: the broker opens the next file then) and as `default`, a few small reads; with
    `search`, a file up to LAYOUT_SEARCH_BYTES that fits neither is read whole and tried at every slot count. A file
    without entries fits nothing shown."""
    count = header.index_count
    top = (size - HEADER_SIZE - ENTRY_SIZE * count) // SLOT_SIZE
    low = max(1, header.hash_slot_count)
    if count < 2 or top < low:
        return []
    cache: dict[int, int] = {}

    def probe(words: np.ndarray) -> np.ndarray:
        """The big-endian words at these word positions, read a probe at a time (cached)."""
        for w in np.atleast_1d(words).tolist():
            if w not in cache:
                raw = bytes(read(w * SLOT_SIZE, _PROBE))
                for k in range(_PROBE // SLOT_SIZE):
                    piece = raw[k * SLOT_SIZE:(k + 1) * SLOT_SIZE]
                    cache.setdefault(w + k, int.from_bytes(piece, "big", signed=True) if len(piece) == SLOT_SIZE
                                     else 0)
        return np.array([cache[w] for w in np.atleast_1d(words).tolist()], np.int64).reshape(np.shape(words))

    quick = np.array(sorted(v for v in {top, default.slots} if low <= v <= top), dtype=np.int64)
    found = _fitting(size, count, quick, probe)
    if found or not search or size > LAYOUT_SEARCH_BYTES:
        return found
    words = np.frombuffer(bytes(read(0, size)), ">i4", size // SLOT_SIZE).astype(np.int64)
    return _fitting(size, count, np.arange(low, top + 1, dtype=np.int64), words.__getitem__)


def _fitting(size: int, count: int, slots: np.ndarray,
             at: Callable[[np.ndarray], np.ndarray]) -> list[IndexLayout]:
    """The slot counts among `slots` whose layout the file's last entry fits (layouts_fitting), as layouts; `at`
    gives the file's big-endian words at word positions."""
    slots = slots[(size - HEADER_SIZE - SLOT_SIZE * slots) % ENTRY_SIZE == 0]
    if not len(slots):
        return []
    last = (HEADER_SIZE + SLOT_SIZE * slots + ENTRY_SIZE * (count - 1)) // SLOT_SIZE  # its first word
    entry = [np.asarray(at(last + k), dtype=np.int64) for k in range(5)]  # keyHash, phyOffset (2), timeDiff, prev
    key_hash, prev = entry[0], entry[4]
    real = np.any(np.stack(entry) != 0, axis=0) & (key_hash >= 0) & (entry[3] >= 0) & (entry[1] >= 0) \
        & (prev >= 0) & (prev < count - 1)
    head = np.asarray(at(HEADER_SIZE // SLOT_SIZE + np.where(real, key_hash, 0) % slots), dtype=np.int64)
    words = size // SLOT_SIZE
    after = last + 5  # the next position's first word: never written
    nothing_after = np.where(after < words, np.asarray(at(np.minimum(after, words - 1)), dtype=np.int64) == 0, True)
    ok = real & (head == count - 1) & nothing_after
    return [IndexLayout(int(s), (size - HEADER_SIZE - SLOT_SIZE * int(s)) // ENTRY_SIZE) for s in slots[ok]]


def is_time_matched(h: IndexHeader, begin: int, end: int) -> bool:
    """IndexFile.isTimeMatched: the window covers the file, or one of its ends falls inside it."""
    return ((begin < h.begin_timestamp and end > h.end_timestamp)
            or h.begin_timestamp <= begin <= h.end_timestamp
            or h.begin_timestamp <= end <= h.end_timestamp)


class RandomAccessFile(Protocol):
    """What the lookup needs of an open index file (pyarrow's NativeFile has it): random reads."""

    def size(self) -> int: ...

    def read_at(self, nbytes: int, offset: int) -> bytes: ...


@dataclass
class IndexSearch:
    """What a queryOffset over a store's index files found."""

    offsets: list[int] = field(default_factory=list)  # in the broker's order (newest file/entry first)
    searched: list[str] = field(default_factory=list)  # files whose chain was walked
    skipped: list[dict] = field(default_factory=list)  # files that could not be used, and why
    files: int = 0


_ENTRY = struct.Struct(">iqii")  # one entry read alone: keyHash, phyOffset, timeDiff, prevIndex


def query_offsets(names: list[str], open_file: Callable[[str], AbstractContextManager[RandomAccessFile]],
                  layout: IndexLayout, key_hash: int, max_num: int, begin: int, end: int) -> IndexSearch:
    """IndexService.queryOffset for one index key hash over the files `names` (in name order, the
    broker's load order): newest file first, a file searched when its time range overlaps [begin,
    end], the walk stopping after a file that begins before `begin` or when max_num offsets are found.
    Reads only headers, one slot and the chain's entries of each file (like the broker's memory map);
    a file of the wrong size is skipped and listed."""
    res = IndexSearch(files=len(names))
    for name in reversed(names):
        with open_file(name) as f:
            problem = layout.size_problem(f.size())
            if problem is not None:
                res.skipped.append({"file": name, "reason": problem})
                continue
            h = IndexHeader.from_bytes(bytes(f.read_at(HEADER_SIZE, 0)))
            if is_time_matched(h, begin, end):
                raw = bytes(f.read_at(SLOT_SIZE, layout.slot_at(layout.slot_of(key_hash))))
                select_phy_offsets(h, int.from_bytes(raw, "big", signed=True), _entry_reader(f, layout), key_hash,
                                   max_num, begin, end, res.offsets)
                res.searched.append(name)
        if h.begin_timestamp < begin or len(res.offsets) >= max_num:
            break
    return res


def _entry_reader(f: RandomAccessFile, layout: IndexLayout) -> Callable[[int], tuple[int, int, int, int]]:
    """Reads the entry at a position of an open file: (keyHash, phyOffset, timeDiff, prevIndex)."""
    return lambda pos: _ENTRY.unpack_from(bytes(f.read_at(ENTRY_SIZE, layout.entry_at(pos))))


def select_phy_offsets(h: IndexHeader, slot_value: int, entry: Callable[[int], tuple[int, int, int, int]],
                       key_hash: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
    """IndexFile.selectPhyOffset: walk one slot chain newest to oldest, appending matching offsets.

    `entry(pos)` gives (keyHash, phyOffset, timeDiff, prevIndex). The walk ends at a negative
    timeDiff, a prevIndex outside 1..indexCount or equal to the current position, or an entry older
    than `begin`; a chain that loops without ending (the broker would spin) is cut after indexCount steps.
    """
    count = h.index_count
    if slot_value <= 0 or slot_value > count or count <= 1:
        return
    pos = slot_value
    for _ in range(count):
        if len(out) >= max_num:
            return
        kh, phy, diff, prev = entry(pos)
        if diff < 0:
            return
        t = h.begin_timestamp + diff * 1000
        if kh == key_hash and begin <= t <= end:
            out.append(phy)
        if prev <= 0 or prev > count or prev == pos or t < begin:
            return
        pos = prev


@dataclass(frozen=True)
class BrokenChain:
    """One break of a slot chain: a slot pointing outside the used entries (`byte_offset`: the slot's), two chains
    reaching one position, an entry in another slot's chain, a prevIndex not pointing back, or an entry no chain
    reaches (`slot` None)."""

    position: int
    reason: str
    slot: int | None = None
    byte_offset: int | None = None


def chain_walk(layout: IndexLayout, slots: np.ndarray, entries: np.ndarray, count: int,
               broken: Callable[[BrokenChain], None]) -> np.ndarray:
    """Walk every slot chain of a file at once (newest to oldest, like the broker). Returns, per position, the slot
    whose chain reaches it (-1: unreachable); hands every break to `broken`, in walk order."""
    reach = np.full(count, -1, np.int64)
    s_val = slots.astype(np.int64)
    bad = np.flatnonzero((s_val < 0) | (s_val >= count))
    for s in bad.tolist():
        broken(BrokenChain(int(s_val[s]), f"slot points at position {int(s_val[s])}, outside the used entries "
                                          f"1..{count - 1}", s, layout.slot_at(s)))
    owner = np.flatnonzero((s_val > 0) & (s_val < count))
    cur = s_val[owner]
    for _ in range(count):
        if not len(cur):
            break
        _, first = np.unique(cur, return_index=True)
        again = reach[cur] != -1
        again[np.setdiff1d(np.arange(len(cur)), first)] = True  # two chains reach one position at once
        for p, s in zip(cur[again].tolist(), owner[again].tolist()):
            broken(BrokenChain(p, f"chain of slot {s} reaches position {p} again (chains merge or loop)", s))
        cur, owner = cur[~again], owner[~again]
        reach[cur] = owner
        h = entries["hash"][cur].astype(np.int64)
        wrong = (h < 0) | (key_slots(h, layout.slots) != owner)
        for p, s, hv in zip(cur[wrong].tolist(), owner[wrong].tolist(), h[wrong].tolist()):
            broken(BrokenChain(p, f"entry with keyHash {hv} sits in the chain of slot {s}, not of slot "
                                  f"{layout.slot_of(hv) if hv >= 0 else 'none (negative hash)'}", s))
        prev = entries["prev"][cur].astype(np.int64)
        forward = (prev < 0) | ((prev > 0) & (prev >= cur))
        for p, s, pv in zip(cur[forward].tolist(), owner[forward].tolist(), prev[forward].tolist()):
            broken(BrokenChain(p, f"prevIndex {pv} does not point to an earlier entry", s))
        go = (prev > 0) & ~forward
        cur, owner = prev[go], owner[go]
    orphan = np.flatnonzero(reach[1:] == -1) + 1
    for p in orphan.tolist():
        broken(BrokenChain(p, f"entry at position {p} is not reachable from any slot"))
    return reach


def format_name(epoch_ms: int, tz: dt.tzinfo = dt.timezone.utc) -> str:
    """Index file name for a time: yyyyMMddHHmmssSSS in the given zone."""
    t = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=tz)
    return t.strftime(NAME_FORMAT) + f"{epoch_ms % 1000:03d}"


def is_name(name: str) -> bool:
    """Whether a file name has the index-name form: 17 digits (yyyyMMddHHmmssSSS)."""
    return len(name) == NAME_DIGITS and name.isdigit()


def parse_name(name: str, tz: dt.tzinfo = dt.timezone.utc) -> int:
    """Epoch ms of an index file name (yyyyMMddHHmmssSSS in the given zone)."""
    t = dt.datetime.strptime(name[:14], NAME_FORMAT).replace(tzinfo=tz)
    return int(t.timestamp()) * 1000 + int(name[14:17])


def first_ms_named_after(name: str, tz: dt.tzinfo = dt.timezone.utc) -> int:
    """The earliest time whose index-file name sorts after `name`. The broker only sorts index file names
    (IndexService.load), so a name that is no valid date (e.g. month 13) is legal on disk: then the first
    millisecond of the year after its 4-digit prefix, which sorts after any name with that prefix."""
    try:
        return parse_name(name, tz) + 1
    except ValueError:
        year = int(name[:4])
        if year >= 9999:
            raise ValueError(f"index file name {name} sorts after every date") from None
        return int(dt.datetime(year + 1, 1, 1, tzinfo=tz).timestamp() * 1000)


def names_for(first_ts: list[int], tz: dt.tzinfo = dt.timezone.utc, after_ms: int | None = None) -> list[str]:
    """Deterministic names: each file's opening store timestamp, bumped to be strictly increasing."""
    names, last = [], after_ms
    for ts in first_ts:
        ms = ts if last is None or ts > last else last + 1
        names.append(format_name(ms, tz))
        last = ms
    return names
