"""Index files: a 40-byte header, a hash-slot table and 20-byte entries chained per slot.

Building is vectorised: a file's entries are numbered 1..n in dispatch order; a stable sort by slot
gives every entry its previous-in-slot position and the slot table its newest position. The broker's
quirks (timeDiff of a rolled file's first entry, header begin fields set after the first entry,
hashSlotCount, index count starting at 1), the file layout (IndexLayout: size, slot and entry offsets,
the slot rule) and the broker's lookup (IndexService.queryOffset and IndexFile.selectPhyOffset, used
by jobs.query) live here and nowhere else; the key hash itself is java_hash.index_key_hash.
"""
from __future__ import annotations

import datetime as dt
import mmap
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from .kernels.index_chain import append_chain, entry_bytes, newest_by_hash


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


KeyChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]
ZERO_BLOCK = 8 << 20


def build_index_file(key_hash: np.ndarray, phy: np.ndarray, store_ts: np.ndarray, slots: int, max_entries: int,
                     inherited: IndexState, empty_count: int = 1) -> bytes:
    """Full bytes of one fresh index file holding these entries (at most max_entries - 1).

    `key_hash` is already non-negative (index_key_hash); `inherited` is the previous file's end
    (zeros for the first file of a store), which becomes the header's begin/end before any put.
    """
    return b"".join(index_file_chunks(lambda: [(key_hash, phy, store_ts)], slots, max_entries, inherited,
                                      empty_count=empty_count))


def _by_slot(slot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stable grouping of entries by slot: (order, sorted slots, same-as-previous, last-of-slot) masks."""
    k = len(slot)
    shift = max(1, int(k).bit_length())
    combined = np.sort((slot << shift) | np.arange(k, dtype=np.int64))  # unique keys: sort order is stable
    order, s_sorted = combined & ((1 << shift) - 1), combined >> shift
    same = np.zeros(k, bool)
    same[1:] = s_sorted[1:] == s_sorted[:-1]
    last = np.ones(k, bool)
    last[:-1] = ~same[1:]
    return order, s_sorted, same, last


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


def read_only(a: np.ndarray) -> np.ndarray:
    """`a` as a read-only array (a view when it is writable): the index kernels are compiled and warmed for
    the read-only columns the work files give; a writable array (recovery's selected tail keys) would make
    numba compile a second signature in every worker."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def _header_and_slots(chunks: KeyChunks, slots: int, max_entries: int, inherited: IndexState,
                      empty_count: int) -> tuple[IndexHeader, np.ndarray, int]:
    """First pass over a fresh file's entries: its header, its slot table (the newest position per
    slot) and how many entries it holds. A file without entries keeps the inherited begin/end."""
    newest = np.zeros(slots, SLOT_DTYPE)
    n = 0
    first = last_entry = (0, 0)
    for key_hash, phy, store_ts in chunks():
        k = len(key_hash)
        if not k:
            continue
        newest_by_hash(read_only(key_hash), slots, newest, n + 1)
        if n == 0:
            first = (int(store_ts[0]), int(phy[0]))
        last_entry = (int(store_ts[-1]), int(phy[-1]))
        n += k
    if n > keys_per_file(max_entries):
        raise ValueError(f"{n} entries do not fit an index file of {max_entries} entries")
    if not n:
        ts, phy_end = max(inherited.end_timestamp, 0), max(inherited.end_phy_offset, 0)
        return IndexHeader(ts, ts, phy_end, phy_end, 0, empty_count), newest, 0
    header = IndexHeader(first[0], last_entry[0], first[1], last_entry[1], int(np.count_nonzero(newest)), n + 1)
    return header, newest, n


def newest_positions_numpy(slot: np.ndarray, newest: np.ndarray, first_position: int) -> None:
    """Reference for index_chain.newest_by_hash (given the slots): the stable sort by slot, vectorised."""
    if len(slot):
        order, s_sorted, _, last = _by_slot(slot)
        newest[s_sorted[last]] = first_position + order[last]


def chain_prev_numpy(slot: np.ndarray, current: np.ndarray, first_position: int) -> np.ndarray:
    """Each entry's previous-in-slot position (entry_bytes_numpy's part): the stable sort by slot, vectorised."""
    k = len(slot)
    prev = np.empty(k, np.int64)
    if not k:
        return prev
    order, s_sorted, same, last = _by_slot(slot)
    position = np.arange(first_position, first_position + k, dtype=np.int64)
    prev[order[same]] = position[order[np.flatnonzero(same) - 1]]
    prev[order[~same]] = current[s_sorted[~same]]
    current[s_sorted[last]] = position[order[last]]
    return prev


def index_file_chunks(chunks: KeyChunks, slots: int, max_entries: int, inherited: IndexState,
                      zero_tail: bool = True, empty_count: int = 1) -> Iterator[bytes]:
    """The bytes of one fresh index file, in order, from its entries given as chunks in dispatch order
    (without the zeros after the last entry when `zero_tail` is False: a writer can leave them sparse).

    `chunks()` must give the same (key_hash, phy, store_ts) chunks each time it is called: a first pass
    finds the header and the slot table (the newest position per slot), which precede the entries in
    the file; a second pass derives each entry's previous-in-slot position, carrying the newest position
    per slot across chunks. Memory is bounded by one chunk and two slot tables, whatever the file holds.
    """
    header, newest, n = _header_and_slots(chunks, slots, max_entries, inherited, empty_count)
    begin_ts = max(inherited.end_timestamp, 0)
    yield header.to_bytes()
    yield newest.astype(">i4").tobytes()
    del newest
    yield bytes(ENTRY_SIZE)  # position 0 is never used
    current = np.zeros(slots, SLOT_DTYPE)  # newest position per slot so far
    done = 0
    for key_hash, phy, store_ts in chunks():
        if len(key_hash):
            # the first put sees the inherited begin timestamp, later ones the file's first entry's
            yield entry_bytes(read_only(key_hash), read_only(phy), read_only(store_ts), slots, current, done + 1,
                              header.begin_timestamp, begin_ts, INT_MAX).data
            done += len(key_hash)
    tail = (keys_per_file(max_entries) - n) * ENTRY_SIZE if zero_tail else 0
    block = bytes(min(ZERO_BLOCK, tail))
    while tail > 0:
        yield block if tail >= len(block) else block[:tail]
        tail -= len(block)


def index_file_ranges(chunks: KeyChunks, hashes_before: Callable[[], Iterable[np.ndarray]], keys_before: int,
                      first_key: tuple[int, int] | None, slots: int, max_entries: int, inherited: IndexState,
                      last_part: bool, empty_count: int = 1) -> Iterator[tuple[int, np.ndarray | bytes]]:
    """One share of a fresh index file's bytes as (byte offset, bytes): the entries at positions keys_before + 1,
    ... from `chunks` (this share's keys, in dispatch order), and for the `last_part` the header and the slot
    table after them. Shares cut the file's keys at any positions; together they write what
    index_file_chunks streams (position 0 and the zero tail stay unwritten: a fresh file reads zeros there).

    One pass over the share's keys: a slot's previous position comes from the keys before the share, known
    from their hashes alone (`hashes_before`, keys_before of them), and the last share's newest positions
    per slot, once its entries are done, are the slot table. `first_key` is the file's first key's (store
    time, offset): the begin fields of the header, and the begin timestamp every put but the first sees.
    """
    current = np.zeros(slots, SLOT_DTYPE)  # newest position per slot so far
    seen = 0
    for key_hash in hashes_before():
        newest_by_hash(read_only(key_hash), slots, current, seen + 1)
        seen += len(key_hash)
    if seen != keys_before:
        raise ValueError(f"{seen} keys before the share, expected {keys_before}")
    layout = IndexLayout(slots, max_entries)
    inherited_ts = max(inherited.end_timestamp, 0)
    done, last_entry = keys_before, None
    for key_hash, phy, store_ts in chunks():
        if len(key_hash):
            if first_key is None:
                raise ValueError("an index file's share has keys but the file no first key")
            if done + len(key_hash) > keys_per_file(max_entries):
                raise ValueError(f"{done + len(key_hash)} entries do not fit an index file of {max_entries} entries")
            yield layout.entry_at(done + 1), entry_bytes(read_only(key_hash), read_only(phy), read_only(store_ts),
                                                         slots, current, done + 1, first_key[0], inherited_ts, INT_MAX)
            done += len(key_hash)
            last_entry = (int(store_ts[-1]), int(phy[-1]))
    if not last_part:
        return
    if not done:
        ts, phy_end = inherited_ts, max(inherited.end_phy_offset, 0)
        yield 0, IndexHeader(ts, ts, phy_end, phy_end, 0, empty_count).to_bytes()
        return
    if last_entry is None:
        raise ValueError("the last share of an index file holds no key")
    yield 0, IndexHeader(first_key[0], last_entry[0], first_key[1], last_entry[1], int(np.count_nonzero(current)),
                         done + 1).to_bytes()
    yield HEADER_SIZE, current.astype(">i4").view(np.uint8)


def entry_bytes_numpy(key_hash: np.ndarray, phy: np.ndarray, store_ts: np.ndarray, slots: int, current: np.ndarray,
                      first_position: int, begin_ts: int, first_begin_ts: int, int_max: int = INT_MAX) -> np.ndarray:
    """Reference for index_chain.entry_bytes: the same entries, vectorised (ENTRY_DTYPE records)."""
    k = len(key_hash)
    base = np.full(k, begin_ts, np.int64)
    if k and first_position == 1:
        base[0] = first_begin_ts
    entries = np.empty(k, dtype=ENTRY_DTYPE)
    entries["hash"] = key_hash
    entries["phy"] = phy
    entries["diff"] = _time_diff(np.asarray(store_ts, np.int64), base, int_max)
    entries["prev"] = chain_prev_numpy(key_slots(key_hash, slots), current, first_position)
    return entries.view(np.uint8)


def _time_diff(store_ts: np.ndarray, base: np.ndarray, int_max: int = INT_MAX) -> np.ndarray:
    """timeDiff in seconds of each entry against the header begin timestamp its put saw (0 when that
    is <= 0, clamped to 0..Integer.MAX_VALUE, Java's truncating division)."""
    delta = store_ts - base
    if len(delta) and int(delta.min()) >= 0:  # the usual case: truncation is floor division
        diff = np.minimum(delta // 1000, int_max)
    else:
        diff = np.clip(np.sign(delta) * (np.abs(delta) // 1000), 0, int_max)  # Java's long division truncates
    if len(base) and int(base.min()) <= 0:
        diff[base <= 0] = 0
    return diff.astype(np.int32)


def append_to_index_file(data: bytearray | mmap.mmap, key_hash: np.ndarray, phy: np.ndarray, store_ts: np.ndarray,
                         slots: int, max_entries: int,
                         write_entries: Callable[[int, memoryview], None] | None = None) -> int:
    """Put entries into an existing file in place, with the result of IndexFile.putKey one by one;
    returns how many fitted. Used by recovery, which resumes indexing in the last kept file, and rebuild --since.
    `data` is the whole file, writable (a bytearray, or a file mapped shared: only the pages of the slots and
    entries written are touched).

    The chain (index_chain.append_chain, compiled; append_chain_numpy its reference): a new entry's
    previous-in-slot position is the newest new entry of its slot before it, or for the first of its slot the
    slot's value on disk when that is valid at its put (0 < value <= indexCount); each first put into a slot
    without a valid value counts in hashSlotCount. The entries' other fields are vectorised. `write_entries(byte
    offset, bytes)`: how the new entries reach the file when not through `data` (a pwrite into a file mapped as
    `data`: one call instead of a page fault per page of a hole).
    """
    header = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
    count = header.index_count
    n = min(max(0, max_entries - count), len(key_hash))
    if n == 0:
        return 0
    kh = np.asarray(key_hash[:n]).astype(np.int64)
    ts = np.asarray(store_ts[:n], np.int64)
    ph = np.asarray(phy[:n], np.int64)
    layout = IndexLayout(slots, max_entries)
    prev = np.empty(n, np.int64)
    invalid = append_chain(kh, slots, np.frombuffer(data, np.uint8, slots * SLOT_SIZE, HEADER_SIZE), count, prev)
    fresh = count <= 1  # the file's first put sets the header's begin fields
    base = np.full(n, ts[0] if fresh else header.begin_timestamp, np.int64)
    base[0] = header.begin_timestamp
    entries = np.empty(n, dtype=ENTRY_DTYPE)
    entries["hash"], entries["phy"], entries["diff"], entries["prev"] = kh, ph, _time_diff(ts, base), prev
    at = layout.entry_at(count)
    if write_entries is None:
        data[at:at + n * ENTRY_SIZE] = entries.tobytes()
    else:
        write_entries(at, memoryview(entries.view(np.uint8)))
    begin_ts, begin_phy = (int(ts[0]), int(ph[0])) if fresh else (header.begin_timestamp, header.begin_phy_offset)
    data[:HEADER_SIZE] = IndexHeader(begin_ts, int(ts[-1]), begin_phy, int(ph[-1]),
                                     header.hash_slot_count + invalid, count + n).to_bytes()
    return n


def append_chain_numpy(key_hash: np.ndarray, slots: int, table: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """Reference for index_chain.append_chain, vectorised (a stable sort by slot): each entry's previous position
    and the count of puts finding no valid slot value; `table` (the file's slot table, big-endian int32) updated."""
    n = len(key_hash)
    position = count + np.arange(n, dtype=np.int64)
    order, s_sorted, same, last = _by_slot(key_slots(np.asarray(key_hash, np.int64), slots))
    prev = np.empty(n, np.int64)
    prev[order[same]] = position[order[np.flatnonzero(same) - 1]]
    first_put = order[~same]
    on_disk = table[s_sorted[~same]].astype(np.int64)
    valid = (on_disk > 0) & (on_disk <= position[first_put])
    prev[first_put] = np.where(valid, on_disk, 0)
    table[s_sorted[last]] = position[order[last]]
    return prev, int(np.count_nonzero(~valid))


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
            if f.size() != layout.size:
                res.skipped.append({"file": name, "reason": f"{f.size()} bytes, expected {layout.size}"})
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
