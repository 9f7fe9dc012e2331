"""Where a store's records sit: plain commit-log segments, DLedger data files, or both (the upgraded mixed
layout), planned as one list of `scan_plan.Segment`s in offset order that the split planner and decoders read.

A broker switched to DLedger mode keeps its old `commitlog/` segments below `dividedCommitlogOffset` (the
first DLedger data file's start: DLedger data starts at the segment boundary after the last plain record),
and reads everything from there on from `dledger-<selfId>/data/`. Pure functions over file listings.
"""
from __future__ import annotations

from dataclasses import dataclass

from .dledger import ENTRY_HEADER_SIZE
from .errors import StoreFormatError
from .scan_plan import Segment
from .segment_names import java_parse_long, parse_segment_name, segment_name


@dataclass(frozen=True)
class LogFile:
    """A file in a commit-log directory: its base name, size and full path."""

    name: str
    size: int
    path: str
    kind: str = ""  # what it is when not a regular file ("a directory", "a symbolic link to a missing file", ...)

    @property
    def regular(self) -> bool:
        """A regular file (not a directory, FIFO, socket, device, dangling symbolic link)."""
        return not self.kind


LOADERS = {"segment": "MappedFileQueue.load", "DLedger data file": "DLedger's MmapFileList.load",
           "DLedger index file": "DLedger's MmapFileList.load (its index list)",
           "consume-queue file": "ConsumeQueue's MappedFileQueue.load"}
JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1


def broker_consequence(f: LogFile, file_size: int | None, starts: set[int], what: str) -> str:
    """What the broker makes of a file in a directory its MappedFileQueue loads (commit log, DLedger data, one
    consume queue) whose name is not a 20-digit start offset: the loader takes every entry there, refuses one
    whose length is not the file size, then parses the name with Long.parseLong (RocketMQ 4.9.8
    MappedFileQueue.doLoad and MappedFile.init; DLedger's twins). `file_size` None: not known here."""
    loader = LOADERS[what]
    if not f.regular or (file_size is not None and f.size != file_size):
        return (f"the broker does not start: {loader} takes every entry of the directory and refuses one whose "
                f"length is not the file size" + (f" {file_size}" if file_size is not None else ""))
    start = java_parse_long(f.name)
    if start is None:
        return (f"the broker does not start: {loader} parses every file name there as a long (Long.parseLong) "
                f"and this one throws NumberFormatException")
    if start in starts:
        return (f"the broker loads it as a second file for offset {start} beside {segment_name(start)} "
                f"(Long.parseLong of the name): its file list no longer has one file per offset, and it reads or "
                f"recovers the wrong file's bytes for that offset (data misplaced)")
    return (f"the broker loads it as the file for offset {start} (Long.parseLong of the name), placed by name, not "
            f"by offset, among the others" + ("" if file_size is not None else
                                              " (if its length is the file size; otherwise it does not start)"))


def parse_queue_dir(name: str) -> int | None:
    """Integer.parseInt of a consume-queue directory name, as DefaultMessageStore.loadConsumeQueue calls it (an
    optional sign, decimal digits of any script, within an int); None where it throws NumberFormatException."""
    value = java_parse_long(name)
    return value if value is not None and JAVA_INT_MIN <= value <= JAVA_INT_MAX else None


QUEUE_DIR_SKIPPED = "skipped"  # the broker's loadConsumeQueue skips the entry: nothing there is ever read
QUEUE_DIR_MISREAD = "misread"  # the broker takes the entry for a queue, but not as it lies on disk


def queue_dir_verdict(topic: str, name: str, is_dir: bool) -> tuple[str, str] | None:
    """What the broker makes of an entry of consumequeue/<topic>/ (RocketMQ 4.9.8 loadConsumeQueue: queueId =
    Integer.parseInt(name), then a ConsumeQueue whose directory is consumequeue/<topic>/<queueId printed>):
    None for a directory it reads back under its own name (negative ids included: the broker writes `-1/` for a
    record with queueId -1); otherwise (QUEUE_DIR_SKIPPED or QUEUE_DIR_MISREAD, the consequence)."""
    qid = parse_queue_dir(name)
    if qid is None:
        return QUEUE_DIR_SKIPPED, ("the broker skips it (Integer.parseInt throws): nothing in it is ever "
                                   "read")
    if str(qid) != name:
        return QUEUE_DIR_MISREAD, (f"Integer.parseInt makes it queue {qid}: the broker reads queue {qid} from "
                                   f"consumequeue/{topic}/{qid}/ instead (the path it builds from the parsed "
                                   f"queueId): what lies here is never read, and if {qid}/ is absent the broker "
                                   f"starts queue {qid} empty")
    if not is_dir:
        return QUEUE_DIR_MISREAD, (f"not a directory where queue {qid}'s directory belongs: the broker loads no "
                                   f"file of queue {qid} and cannot create one there (its dispatch to queue {qid} "
                                   f"fails)")
    return None


def _segments(files: list[LogFile], file_size: int, header: int, what: str) -> list[Segment]:
    """The directory's segments; any other name in it is refused with what the broker would make of it (it
    never ignores a file there)."""
    starts = {parse_segment_name(f.name) for f in files} - {None}
    strays = [f for f in files if parse_segment_name(f.name) is None]
    if strays:
        f = strays[0]
        others = f" (and {len(strays) - 1} more such names)" if len(strays) > 1 else ""
        raise StoreFormatError(f.path, 0, f"not a {what} name (the 20-digit start offset){others}: "
                                          f"{broker_consequence(f, file_size, starts, what)}; move it out of the "
                                          f"directory")
    out = []
    for f in files:
        start = parse_segment_name(f.name)
        if not f.regular:  # every job refuses it, as the broker's loader does (issue 35 item 4, issue 36 item 2)
            raise StoreFormatError(f.path, 0, f"{f.kind} named like a {what}: "
                                              f"{broker_consequence(f, file_size, starts, what)}; move it out of the "
                                              f"directory")
        if f.size != file_size:
            raise StoreFormatError(f.path, min(f.size, file_size),
                                   f"{what} is {f.size} bytes, expected {file_size} (mappedFileSizeCommitLog in "
                                   f"effect; the store's files are not all of one size): the broker refuses to load "
                                   f"it")
        out.append(Segment(start, f.size, f.path, header))
    return sorted(out, key=lambda s: s.start)


def first_gap(starts: list[int], file_size: int) -> tuple[int, int] | None:
    """The first two neighbouring files (start offsets, sorted) that are not `file_size` apart, or None: DLedger's
    MmapFileList.checkSelf refuses to start on one (data and index files alike)."""
    return next(((a, b) for a, b in zip(starts, starts[1:]) if b - a != file_size), None)


def plan_log(plain: list[LogFile], dledger: list[LogFile] | None, file_size: int) -> list[Segment]:
    """The store's segments in offset order. `dledger` None: a plain store. Otherwise plain segments must lie
    wholly below the first DLedger data file (dividedCommitlogOffset): the broker never reads a plain segment
    at or above it, so one there is refused, named, rather than silently left out."""
    plain_segs = _segments(plain, file_size, 0, "segment")
    if dledger is None:
        return plain_segs
    data = _segments(dledger, file_size, ENTRY_HEADER_SIZE, "DLedger data file")
    gap = first_gap([s.start for s in data], file_size)
    if gap is not None:  # MmapFileList.checkSelf: DLedger does not start on a gap between data files
        a, b = gap
        raise StoreFormatError(next(s.path for s in data if s.start == b), 0,
                               f"DLedger data file {segment_name(b)} does not follow {segment_name(a)} ({file_size}-byte "
                               f"files, so the next starts at {a + file_size}): DLedger refuses to start ('check data "
                               f"file order failed before recovery')")
    if data and plain_segs:
        divided = data[0].start
        above = [s for s in plain_segs if s.start + s.size > divided]
        if above:
            raise StoreFormatError(above[0].path, 0,
                                   f"plain commit-log segment reaches {above[0].start + above[0].size}, past the "
                                   f"first DLedger data file {data[0].path} (dividedCommitlogOffset {divided}): the "
                                   f"broker reads DLedger data from there on; reput does not guess which is right")
    return plain_segs + data


def divided_offset(segments: list[Segment]) -> int | None:
    """dividedCommitlogOffset: where DLedger data begins after plain segments (None: not a mixed layout)."""
    if not any(s.header == 0 for s in segments):
        return None
    return next((s.start for s in segments if s.header), None)
