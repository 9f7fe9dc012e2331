"""What an OUT was built to: the commit-log position after the last record it dispatched, and the identity of the
bytes before it (the commit-log file holding them: its name and size, and sha256 digests of its last TAIL_BYTES up
to that position, a digest per BLOCK_BYTES). Every rebuild report carries it, so that a later run can check the
store still holds those bytes before building on the OUT (issue 33: `rebuild --since`), and name the file and byte
offset where it does not (the store was recovered or replaced since)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from storage_format.markers import CHECKPOINT
from storage_format.scan_plan import Segment

from ..io.fs import Location

# the run report's contract version: 1 is the first report a later run builds on (rebuild --since reads it;
# a report without the key is version 1)
REPORT_VERSION = 1
# the run report each job publishes its OUT with, in the order rebuild --since looks for them in OUT1
REPORT_NAMES = {"rebuild": "reput-report.json", "recover": "reput-recover-report.json",
                "convert": "reput-convert-report.json"}
TAIL_BYTES = 4096
BLOCK_BYTES = 256


@dataclass(frozen=True)
class BuiltTo:
    """The position an OUT was built to and the identity of the bytes before it."""

    offset: int  # the commit-log offset after the last record dispatched (where the next one starts)
    file: str  # the commit-log file holding the bytes before it (its name)
    file_size: int
    tail_from: int  # the commit-log offset the digests start at (the file's start at most TAIL_BYTES back)
    block_sha256: tuple[str, ...]  # sha256 of each BLOCK_BYTES of [tail_from, offset), the last one shorter

    def to_dict(self) -> dict:
        return {"offset": self.offset, "file": self.file, "file_size": self.file_size, "tail_from": self.tail_from,
                "block_bytes": BLOCK_BYTES, "block_sha256": list(self.block_sha256)}

    @classmethod
    def from_dict(cls, d: dict) -> BuiltTo:
        """A report's `built_to` (ValueError naming what is missing or malformed)."""
        try:
            built = cls(int(d["offset"]), str(d["file"]), int(d["file_size"]), int(d["tail_from"]),
                        tuple(str(h) for h in d["block_sha256"]))
            block = int(d["block_bytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"built_to: {exc.__class__.__name__} {exc}") from None
        if block != BLOCK_BYTES or not 0 <= built.offset - built.tail_from <= TAIL_BYTES \
                or len(built.block_sha256) != -(-(built.offset - built.tail_from) // BLOCK_BYTES):
            raise ValueError(f"built_to: the digests do not cover [{built.tail_from}, {built.offset}) in blocks of "
                             f"{BLOCK_BYTES} bytes")
        return built


def _digests(data: bytes) -> tuple[str, ...]:
    return tuple(hashlib.sha256(data[i:i + BLOCK_BYTES]).hexdigest() for i in range(0, len(data), BLOCK_BYTES))


def _holding(segments: list[Segment], offset: int) -> Segment | None:
    """The segment holding the byte before `offset` (the first segment when nothing precedes it)."""
    for s in segments:
        if s.start < offset <= s.start + s.size:
            return s
    return None


def built_to(segments: list[Segment], offset: int) -> BuiltTo | None:
    """What a build dispatching records up to `offset` was built to (None: no record, nothing to identify)."""
    seg = _holding(segments, offset)
    if seg is None:
        return None
    tail_from = max(seg.start, offset - TAIL_BYTES)
    data = Location(seg.path).read_range(tail_from - seg.start, offset - tail_from)
    return BuiltTo(offset, Location(seg.path).name, seg.size, tail_from, _digests(data))


def built_to_in(log_dir: Location, offset: int) -> BuiltTo | None:
    """`built_to` over a plain commit-log directory as written (its files by name, not as a broker config leads)."""
    segments = [Segment(int(i.base_name), i.size or 0, log_dir.child(i.base_name).uri) for i in log_dir.list()]
    return built_to(sorted(segments, key=lambda s: s.start), offset)


def tail_difference(segments: list[Segment], built: BuiltTo) -> str | None:
    """Where the store's commit log no longer holds the bytes `built` names (one line naming the file and byte
    offset), None when it does."""
    seg = _holding(segments, built.offset)
    if seg is None or Location(seg.path).name != built.file:
        where = f"file {Location(seg.path).uri}" if seg is not None else "no commit-log file"
        return (f"the commit log holds {where} before offset {built.offset}, where the output was built from "
                f"{built.file}")
    if seg.size != built.file_size:
        return f"{Location(seg.path).uri} is {seg.size} bytes, {built.file_size} when the output was built"
    uri = Location(seg.path).uri
    data = Location(seg.path).read_range(built.tail_from - seg.start, built.offset - built.tail_from)
    if len(data) < built.offset - built.tail_from:
        return f"{uri} ends at byte offset {built.tail_from - seg.start + len(data)}, before the output's end"
    for i, (got, want) in enumerate(zip(_digests(data), built.block_sha256)):
        if got != want:
            at = built.tail_from - seg.start + i * BLOCK_BYTES
            size = min(BLOCK_BYTES, len(data) - i * BLOCK_BYTES)
            return f"{uri} at byte offset {at}: the {size} bytes there differ from those the output was built from"
    return None


def continuable(built: BuiltTo | None, why_not: str | None, out_dir: Location, index_name_tz: str) -> dict:
    """What a recover or convert report carries so that `rebuild --since` can continue its OUT, a store the broker
    may be started on: where its queues and index were built to (or why they cannot be continued), the time zone its
    index files are named in, and its checkpoint's digest (a broker that wrote to OUT since changes it)."""
    section: dict = {"report_version": REPORT_VERSION, "built_to": None if built is None else built.to_dict(),
                     "index_name_time_zone": index_name_tz, "checkpoint_sha256": checkpoint_digest(out_dir)}
    if why_not is not None:
        section["built_to_not_continuable"] = why_not
    return section


def checkpoint_digest(store_dir: Location) -> str | None:
    """sha256 of a store directory's checkpoint file (None: it has none): what a recover or convert report records
    and rebuild --since compares (a broker running on the store rewrites it)."""
    cp = store_dir.child(CHECKPOINT)
    return hashlib.sha256(cp.read_bytes()).hexdigest() if cp.exists() else None
