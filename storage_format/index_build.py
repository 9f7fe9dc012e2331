"""Index files written: a fresh file whole or streamed in order, a fresh file cut into shares that tasks write side
by side, and entries appended to an existing file in place, with the broker's quirks (timeDiff of a rolled file's
first entry, header begin fields set after the first entry, hashSlotCount, indexCount starting at 1).

A file's entries are numbered 1..n in dispatch order; each entry's previous-in-slot position and the slot table's
newest position per slot come from the compiled chains (kernels.index_chain); their vectorised references (a stable
sort by slot) live here, tested equal. The layout and the rules of the file itself are index_file's.
"""
from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .index_file import (ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, INT_MAX, SLOT_DTYPE, SLOT_SIZE, IndexHeader, IndexLayout,
                         IndexState, key_slots, keys_per_file)
from .kernels.index_chain import append_chain, entry_bytes, newest_by_hash


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


def time_diff(store_ts: int, base: int) -> int:
    """One entry's timeDiff (_time_diff)."""
    return int(_time_diff(np.array([store_ts], np.int64), np.array([base], np.int64))[0])


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
