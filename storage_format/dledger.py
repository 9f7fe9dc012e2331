"""The DLedger commit log's bytes (`enableDLegerCommitLog`, OpenMessaging DLedger 0.3.1.2 under RocketMQ 4.9.8).

Entries sit in `dledger-<selfId>/data/<20-digit offset>` files of `mappedFileSizeCommitLog` bytes: a 48-byte
header, then exactly one commit-log record whose PHYSICALOFFSET is the entry's pos + 48. An entry that does not
fit with 8 bytes to spare leaves a DLedger blank (int -1, int bytes-left) and starts the next file. The DLedger
index (`dledger-<selfId>/index/`) holds one 32-byte unit per entry index. The one home of these constants.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

ENTRY_HEADER_SIZE = 48  # magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize
RECOVERY_MIN_SIZE_EXCLUSIVE = 44  # DLedgerEntry.HEADER_SIZE (without bodySize): recovery checks size > 44
ENTRY_MAGIC = 1  # DLedgerEntry.MAGIC in 0.3.1.2
BLANK_MAGIC = -1  # a DLedger blank: int -1, int bytes-left (these 8 counted), zeros
BLANK_HEADER_SIZE = 8  # an entry goes in a file only if its size + 8 <= the bytes left
INDEX_UNIT_SIZE = 32  # magic int, pos long, size int, index long, term long
INDEX_FILE_SIZE = 160 * 1024 * 1024  # DLedgerConfig.indexFileSize (32 x 5 Mi), not settable from the broker
DIR_PREFIX = "dledger-"  # the store directory is dledger-<dLegerSelfId>
CHECKPOINT = "checkpoint"  # text: committedIndex=<n>, endIndex=<n>

_HEADER = struct.Struct(">iiqqqiiii")
_UNIT = struct.Struct(">iqiqq")  # 32 bytes (FORMAT.md's "4 zero bytes" are not there: the golden index wins)


@dataclass(frozen=True, kw_only=True)
class EntryHeader:
    """One DLedger entry's header; `pos` is the absolute offset of the entry (its header's first byte)."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int

    @property
    def record_offset(self) -> int:
        """Where the commit-log record inside starts: the record's PHYSICALOFFSET."""
        return self.pos + ENTRY_HEADER_SIZE


def read_entry_header(buf: bytes | memoryview, at: int) -> EntryHeader:
    """The 48-byte header at byte `at` of `buf` (no checks: see the callers' rules)."""
    magic, size, index, term, pos, channel, chain_crc, body_crc, body_size = _HEADER.unpack_from(buf, at)
    return EntryHeader(magic=magic, size=size, index=index, term=term, pos=pos, channel=channel,
                       chain_crc=chain_crc, body_crc=body_crc, body_size=body_size)


def index_unit(header: EntryHeader) -> bytes:
    """The entry's 32-byte unit in the DLedger index (at byte index x 32 of the index's space)."""
    return _UNIT.pack(ENTRY_MAGIC, header.pos, header.size, header.index, header.term)


COMMITTED_INDEX = "committedIndex"  # the one key DLedger reads back from its checkpoint (loadCheckPoint)


def parse_checkpoint(text: str) -> dict[str, int]:
    """`dledger-<id>/checkpoint` as DLedger reads it (java.util.Properties lines `key=value` or `key:value`; DLedger
    0.3.1.2 reads committedIndex alone, Long.valueOf of its trimmed value). Other keys are kept when their value is
    a number (endIndex, which DLedger writes) and otherwise ignored, as DLedger ignores them; a committedIndex that
    is not a number is a ValueError naming it (DLedger's Long.valueOf throws there)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        cut = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if cut < 0:
            continue
        name, value = stripped[:cut].strip(), stripped[cut + 1:].strip()
        try:
            out[name] = int(value)
        except ValueError:
            if name == COMMITTED_INDEX:
                raise ValueError(f"{COMMITTED_INDEX}={value!r} is not a number (DLedger's Long.valueOf fails on it)") \
                    from None
    return out


# Where the files are (DLedgerConfig: storeBaseDir = storePathRootDir, the member's home dledger-<selfId>,
# dataStorePath = storePathDLedgerCommitLog or <home>/data, index in <home>/index).
DATA_DIR = "data"
INDEX_DIR = "index"
PEER_SPLITTER = ";"  # dLegerPeers: n0-host:port;n1-host:port;...

# Offsets of the header fields (EntryHeader order), for the walks that read them in place.
AT_MAGIC, AT_SIZE, AT_INDEX, AT_TERM, AT_POS, AT_BODY_SIZE = 0, 4, 8, 16, 24, 44


def home_dir(self_id: str) -> str:
    """The member's directory under the store root: dledger-<dLegerSelfId>."""
    return f"{DIR_PREFIX}{self_id}"


def find_first_entry(buf: bytes | memoryview, base_offset: int, start: int, stop: int,
                     find_record) -> int | None:
    """First position p in [start, stop) where an entry starts by the pos rule: entry magic 1, its pos field
    == base_offset + p, and a record at p + 48 whose PHYSICALOFFSET is base_offset + p + 48 (found with
    `find_record`, commitlog.find_first_record, so the record rule has one home). For a split that begins
    mid-file."""
    at = start + ENTRY_HEADER_SIZE
    while at < stop + ENTRY_HEADER_SIZE:
        rec = find_record(buf, base_offset, at, stop + ENTRY_HEADER_SIZE)
        if rec is None:
            return None
        p = rec - ENTRY_HEADER_SIZE
        magic, _, _, _, pos = struct.unpack_from(">iiqqq", buf, p)
        if magic == ENTRY_MAGIC and pos == base_offset + p:
            return p
        at = rec + 1
    return None


def entry_problem(buf: bytes | memoryview, at: int, base_offset: int, bytes_left: int,
                  record_size: int | None) -> str | None:
    """Why the entry at buf[at] is not one DLedger wrote there (None: it is): its size against the bytes left,
    its pos field against where it lies, its bodySize against its size, the record's totalSize against the
    bodySize (`record_size`, None when not read). The checks DLedger's own recovery makes on every start."""
    h = read_entry_header(buf, at)
    if h.size < ENTRY_HEADER_SIZE or h.size > bytes_left:
        return f"entry size {h.size} does not fit ({bytes_left} bytes left in the data file)"
    if h.pos != base_offset + at:
        return f"entry pos field {h.pos} is not where the entry lies ({base_offset + at})"
    if h.body_size != h.size - ENTRY_HEADER_SIZE:
        return f"entry bodySize {h.body_size} is not its size {h.size} - {ENTRY_HEADER_SIZE}"
    if record_size is not None and record_size != h.body_size:
        return f"the record's totalSize {record_size} is not the entry's bodySize {h.body_size}"
    return None


def entry_index_at(buf: bytes | memoryview, record_pos: int) -> int:
    """The entry index of the entry whose record starts at buf[record_pos]."""
    return struct.unpack_from(">q", buf, record_pos - ENTRY_HEADER_SIZE + AT_INDEX)[0]


def entry_term_at(buf: bytes | memoryview, record_pos: int) -> int:
    """The term of the entry whose record starts at buf[record_pos]."""
    return struct.unpack_from(">q", buf, record_pos - ENTRY_HEADER_SIZE + AT_TERM)[0]


def sequence_problem(index: int, term: int, prev_index: int | None, prev_term: int | None) -> str | None:
    """Why an entry cannot follow the one before it in DLedger's log (None: it can): its index must be the next
    one, and its term must not go down. DLedger's recovery walk checks both on every start and ends the log at
    the first entry that fails (DLedgerMmapFileStore.recover), so nothing from there on is ever dispatched."""
    if prev_index is not None and index != prev_index + 1:
        return f"entry index {index} follows entry index {prev_index} (a gap)"
    if prev_term is not None and term < prev_term:
        return (f"entry term {term} is below the previous entry's term {prev_term} (DLedger's recovery ends the log "
                f"there)")
    return None


def peers_problem(peers: str | None, self_id: str | None) -> str | None:
    """Why DLedger's DLedgerConfig.init refuses dLegerPeers, so that the broker does not start (an item that is not
    <id>-<address>: StringIndexOutOfBounds; no item whose id is dLegerSelfId: "fail to init self address"), or None.
    Unset: None (a store read without its broker config)."""
    if peers is None:
        return None
    items = peers.split(PEER_SPLITTER)
    while len(items) > 1 and items[-1] == "":  # Java's String.split drops trailing empty strings
        items.pop()
    for item in items:
        if len(item) < len(item.split("-")[0]) + 1:  # DLedgerConfig: peerInfo.substring(id.length() + 1)
            return (f"dLegerPeers={peers!r}: {item!r} is not <id>-<host>:<port> (DLedger's DLedgerConfig fails on it: "
                    f"the broker does not start)")
    if self_id not in [item.split("-")[0] for item in items]:
        return (f"dLegerPeers={peers!r} names no member with dLegerSelfId={self_id} (DLedger: \"fail to init self "
                f"address\": the broker does not start)")
    return None


def peer_count(peers: str | None) -> int:
    """Members of the group named by dLegerPeers (n0-host:port;n1-host:port); 0 when unset."""
    return len([p for p in (peers or "").split(PEER_SPLITTER) if p.strip()])


# The committed position (issue 20 item 4): which entries the broker dispatches.
READING_SURVIVING = "surviving"  # every valid entry: what a one-member group commits (it holds the quorum alone)
READING_CHECKPOINT = "checkpoint"  # entries up to committedIndex in dledger-<id>/checkpoint: a quorum surely had them
READINGS = (READING_SURVIVING, READING_CHECKPOINT)


@dataclass(frozen=True, kw_only=True)
class CommittedReading:
    """Which entries a job takes as dispatched, and why: `reading` (READINGS), `explicit` when a flag chose
    it, `peers` in dLegerPeers, the checkpoint's committedIndex (None: no checkpoint)."""

    reading: str
    explicit: bool
    peers: int
    committed_index: int | None

    @property
    def reason(self) -> str:
        if self.explicit:
            return f"--dledger-reading {self.reading}"
        if self.reading == READING_SURVIVING and self.peers == 0:
            return ("dLegerPeers not set (no broker config?): read as a one-member group, every entry that survives "
                    f"is dispatched; for a group of several pass --dledger-reading {READING_CHECKPOINT}")
        if self.reading == READING_SURVIVING and self.peers > 1:
            return (f"{self.peers}-member group, but the DLedger checkpoint has no committedIndex to stop at: every "
                    f"entry that survives is dispatched")
        if self.reading == READING_SURVIVING:
            return ("one-member group (dLegerPeers names 1 member): the leader commits every entry it holds, so "
                    "every entry that survives is dispatched")
        return (f"{self.peers}-member group: only entries a quorum holds are committed; the last one known is "
                f"committedIndex in the DLedger checkpoint (a lower bound, saved every 3 s)")

    def to_dict(self) -> dict:
        return {"reading": self.reading, "chosen_by": "flag" if self.explicit else "dLegerPeers",
                "peers": self.peers, "checkpoint_committed_index": self.committed_index, "reason": self.reason}


def committed_reading(peers: str | None, committed_index: int | None, flag: str | None = None) -> CommittedReading:
    """The committed-position rule as a pure function: a flag wins; otherwise a one-member group (or no
    dLegerPeers) reads every surviving entry, a group of several reads up to the checkpoint's committedIndex
    (everything, with nothing to stop at, when there is no checkpoint)."""
    n = peer_count(peers)
    if flag is not None:
        if flag not in READINGS:
            raise ValueError(f"unknown DLedger reading {flag!r} (one of {', '.join(READINGS)})")
        return CommittedReading(reading=flag, explicit=True, peers=n, committed_index=committed_index)
    reading = READING_SURVIVING if n <= 1 or committed_index is None else READING_CHECKPOINT
    return CommittedReading(reading=reading, explicit=False, peers=n, committed_index=committed_index)


def unit_fields(unit: bytes) -> dict[str, int]:
    """A 32-byte DLedger index unit's fields by name (UNIT_FIELDS)."""
    return dict(zip(UNIT_FIELDS, _UNIT.unpack(unit.ljust(INDEX_UNIT_SIZE, b"\0")[:INDEX_UNIT_SIZE])))


def committed_end(index_unit_bytes: bytes) -> int:
    """The byte offset where the entry described by a 32-byte DLedger index unit ends (pos + size): the
    committed position when the unit is committedIndex's."""
    magic, pos, size, _, _ = _UNIT.unpack(index_unit_bytes)
    if magic != ENTRY_MAGIC:
        raise ValueError(f"index unit magic {magic} is not {ENTRY_MAGIC}")
    return pos + size


_UNIT_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
UNIT_FIELDS = _UNIT_DTYPE.names


def expected_units(buf: bytes | memoryview, record_positions: np.ndarray) -> np.ndarray:
    """The DLedger index units (a structured array in index-file byte order) of the entries whose records sit
    at `record_positions` in `buf`: what DLedger writes at entry index x 32 for each."""
    raw = np.frombuffer(buf, np.uint8)
    at = np.asarray(record_positions, np.int64) - ENTRY_HEADER_SIZE

    def field(off: int, width: int) -> np.ndarray:
        cols = raw[(at + off)[:, None] + np.arange(width)]
        return np.frombuffer(np.ascontiguousarray(cols).tobytes(), f">i{width}")

    units = np.zeros(len(at), _UNIT_DTYPE)
    units["magic"] = ENTRY_MAGIC
    units["pos"], units["size"] = field(AT_POS, 8), field(AT_SIZE, 4)
    units["index"], units["term"] = field(AT_INDEX, 8), field(AT_TERM, 8)
    return units


@dataclass(frozen=True)
class UnitDifference:
    """One DLedger index unit that disagrees with its entry: row in the compared range, whether the unit is
    all zeros (missing) and the first field that differs, expected vs found."""

    row: int
    missing: bool
    field: str
    expected: int
    found: int


def compare_units(expected: np.ndarray, found: bytes | memoryview) -> list[UnitDifference]:
    """Units read from the DLedger index (`found`, len(expected) x 32 bytes; a short read counts as zeros)
    against the entries' units."""
    got = np.zeros(len(expected), _UNIT_DTYPE)
    raw = bytes(found)[:len(expected) * INDEX_UNIT_SIZE]
    n = len(raw) // INDEX_UNIT_SIZE
    got[:n] = np.frombuffer(raw[:n * INDEX_UNIT_SIZE], _UNIT_DTYPE)
    out = []
    bad = np.zeros(len(expected), bool)
    for name in UNIT_FIELDS:
        bad |= got[name] != expected[name]
    for row in np.flatnonzero(bad).tolist():
        name = next(f for f in UNIT_FIELDS if got[f][row] != expected[f][row])
        missing = not any(int(got[f][row]) for f in UNIT_FIELDS)
        out.append(UnitDifference(row, missing, name, int(expected[name][row]), int(got[name][row])))
    return out


def index_file_of(entry_index: int) -> tuple[int, int]:
    """(start offset of the DLedger index file holding the entry's unit, byte offset of the unit in it)."""
    at = entry_index * INDEX_UNIT_SIZE
    return at - at % INDEX_FILE_SIZE, at % INDEX_FILE_SIZE
