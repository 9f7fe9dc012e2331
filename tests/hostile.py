"""Hostile input corpus: broken stores made from a small golden case (or the encoder), one per kind of damage.

Each builder copies a clean store into a fresh directory, damages it in one precise way and returns a
`Damage` saying which file and byte offset a job's message must name and what each job should do
with it. Offsets are found by decoding the clean bytes, so the corpus follows the golden data.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from storage_format.commitlog import RecordColumns, decode_buffer, segment_name
from storegen.encoder import write_store
from storage_format.properties import TAGS, locate_properties
from storage_format.record import TRAN_MASK, Message, properties_string
from storage_format.settings import load_settings
from jobs.pipeline.io.fs import Location
from jobs.pipeline.io.out_files import FILES_NAME, recorded

JOBS = ("rebuild", "inspect", "verify", "recover")  # recover runs with --dry-run

# What a job must do with a damaged store.
ERROR = "error"  # exit 2 with one line naming the file and byte offset
REPORTED = "reported"  # inspect/recover exit 0, verify exit 1; the report names the file and byte offset
ACCEPTED = "accepted"  # exit 0: the broker takes these bytes as they are, and so does reput
IGNORED = "ignored"  # the job does not read the damaged file: exit 0, as on the clean store

SOURCE_CASE = "clean-small-11"
VICTIM_SEGMENT = 3  # a segment with whole segments before and after it
VICTIM_RECORD = 10  # a record in the middle of that segment


@dataclass(frozen=True)
class Damage:
    """A damaged store, where the damage is, and the expected outcome per job."""

    name: str
    store: Path
    broker_config: Path
    file: Path  # the damaged (or missing) file
    offset: int | None  # byte offset inside `file` that a message must name (None: a name, the path alone)
    expect: dict[str, str]  # job name -> ERROR / REPORTED / ACCEPTED / IGNORED
    why: str
    victim: dict = field(default_factory=dict)  # facts about the damaged record (for ACCEPTED checks)
    # per job, when not (file, offset): another (file, offset), or the text its message must hold
    where: dict[str, tuple[Path, int | None] | str] = field(default_factory=dict)
    warns: tuple[str, ...] = ()  # jobs that go on but must say it: a `warning:` line / the plan's warnings name it

    def location(self, job: str) -> tuple[Path, int | None]:
        """The file and byte offset `job` must name (the damaged file's, where the job names a text instead)."""
        loc = self.where.get(job, (self.file, self.offset))
        return (self.file, self.offset) if isinstance(loc, str) else loc

    def named(self, job: str) -> str:
        """What `job`'s message must contain: `<file> at byte offset <n>`, or the path alone for a name."""
        if isinstance(self.where.get(job), str):
            return self.where[job]
        path, offset = self.location(job)
        return str(path) if offset is None else f"{path} at byte offset {offset}"


def copy_store(src: Path, dst: Path) -> Path:
    """A writable copy of a store directory (without the golden manifest)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile, ignore=shutil.ignore_patterns("manifest.json"))
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    return dst


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file below `root` by relative path (directories listed with an empty digest)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel_dir, d)) + "/"] = ""
        for f in files:
            path = Path(dirpath, f)
            if path.is_symlink() or not path.is_file():  # a FIFO is never opened (it would wait for a writer)
                kind = f"-> {os.readlink(path)}" if path.is_symlink() else oct(path.lstat().st_mode)
                out[os.path.normpath(os.path.join(rel_dir, f))] = kind
                continue
            out[os.path.normpath(os.path.join(rel_dir, f))] = file_digest(path)
    return out


def file_digest(path: Path) -> str:
    """sha256 of a file; of an OUT's record of its files (io.out_files) without the modification times, which two
    runs writing the same bytes do not share."""
    if path.name != FILES_NAME:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    files = recorded(Location(str(path.parent)))
    return hashlib.sha256(repr(sorted((f.path, f.size) for f in files.files.values())).encode()
                          + repr(sorted(files.dirs)).encode()).hexdigest()


def segment_paths(store: Path) -> list[Path]:
    """The commit-log segment files of a store, in name (offset) order."""
    return sorted((store / "commitlog").iterdir())


def segment_columns(path: Path) -> RecordColumns:
    """The valid records of one clean segment file."""
    return decode_buffer(path.read_bytes(), int(path.name)).columns


def _patch(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of a file in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _shift(path: Path, offset: int, fmt: str, delta: int) -> None:
    """Add `delta` to the big-endian field `fmt` (">i", ">q") at `offset` of a file."""
    with open(path, "rb") as f:
        f.seek(offset)
        value = struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
    _patch(path, offset, struct.pack(fmt, value + delta))


def _flip_bit(path: Path, offset: int, bit: int) -> None:
    """Flip one bit of one byte of a file."""
    raw = bytearray(path.read_bytes()[offset:offset + 1])
    raw[0] ^= 1 << bit
    _patch(path, offset, bytes(raw))


class GoldenVictim:
    """A clean copy of the source case and the record chosen for damage (segment-relative fields)."""

    def __init__(self, golden: Path, dst: Path) -> None:
        self.store = copy_store(golden / SOURCE_CASE, dst)
        self.settings = load_settings(self.store / "broker.conf")
        self.segment = segment_paths(self.store)[VICTIM_SEGMENT]
        self.cols = segment_columns(self.segment)
        self.i = VICTIM_RECORD
        self.pos = int(self.cols.pos[self.i])

    def field(self, name: str) -> int:
        """One decoded field of the victim record."""
        return int(getattr(self.cols, name)[self.i])

    def damage(self, name: str, offset: int, expect: dict[str, str], why: str, file: Path | None = None,
               where: dict | None = None, warns: tuple[str, ...] = (), **victim) -> Damage:
        """The Damage for this store."""
        file = file or self.segment
        return Damage(name, self.store, self.store / "broker.conf", file, offset, expect, why, victim, where or {},
                      warns)

    def cq_location(self, i: int) -> tuple[Path, int]:
        """Consume-queue file and byte offset of record i's entry in the store."""
        size = self.settings.consume_queue_file_size
        qo = int(self.cols.queue_offset[i])
        start = qo * 20 // size * size
        return (self.store / "consumequeue" / self.cols.topic[i].as_py() / str(int(self.cols.queue_id[i]))
                / f"{start:020d}", qo * 20 - start)


# --- expected outcomes ------------------------------------------------------------------------------

def outcome(rebuild: str, inspect: str, verify: str, recover: str) -> dict[str, str]:
    """Expected outcome per job."""
    return {"rebuild": rebuild, "inspect": inspect, "verify": verify, "recover": recover}


# Bytes that break the record chain in the middle of the commit log (records follow the damage).
CHAIN = outcome(ERROR, REPORTED, REPORTED, REPORTED)
# Bytes no job can read.
UNREADABLE = outcome(ERROR, ERROR, ERROR, ERROR)


def truncated_segment(golden: Path, dst: Path) -> Damage:
    """A middle segment cut to 100000 bytes (the broker refuses to load it)."""
    v = GoldenVictim(golden, dst)
    os.truncate(v.segment, 100_000)
    return v.damage("truncated-segment", 100_000, UNREADABLE, "segment shorter than mappedFileSizeCommitLog")


def oversized_segment(golden: Path, dst: Path) -> Damage:
    """A middle segment 4 KiB longer than mappedFileSizeCommitLog."""
    v = GoldenVictim(golden, dst)
    size = v.segment.stat().st_size
    with open(v.segment, "ab") as f:
        f.write(b"\0" * 4096)
    return v.damage("oversized-segment", size, UNREADABLE, "segment longer than mappedFileSizeCommitLog")


def missing_segment(golden: Path, dst: Path) -> Damage:
    """A middle segment deleted: a gap in the segment names."""
    v = GoldenVictim(golden, dst)
    v.segment.unlink()
    return v.damage("gap-in-segment-names", 0, CHAIN,
                    "a segment is missing between two others: the chain cannot continue")


def bad_magic(golden: Path, dst: Path) -> Damage:
    """The victim record's magic replaced by 0x12345678."""
    v = GoldenVictim(golden, dst)
    _patch(v.segment, v.pos + 4, struct.pack(">I", 0x12345678))
    return v.damage("bad-magic", v.pos, CHAIN, "magic is neither a message nor a blank")


def bitflip_magic(golden: Path, dst: Path) -> Damage:
    """One bit of the victim record's magic flipped."""
    v = GoldenVictim(golden, dst)
    _flip_bit(v.segment, v.pos + 6, 3)
    return v.damage("bitflip-magic", v.pos, CHAIN, "one bit of the magic flipped")


def bitflip_total_size_high(golden: Path, dst: Path) -> Damage:
    """Bit 30 of the victim's totalSize flipped: it runs far past the segment."""
    v = GoldenVictim(golden, dst)
    _flip_bit(v.segment, v.pos, 6)  # + 2^30
    return v.damage("bitflip-totalsize-high", v.pos, CHAIN, "totalSize runs far past the segment")


def bitflip_total_size_low(golden: Path, dst: Path) -> Damage:
    """Bit 2 of the victim's totalSize flipped: its fields no longer add up."""
    v = GoldenVictim(golden, dst)
    _flip_bit(v.segment, v.pos + 3, 2)  # +-4 bytes
    return v.damage("bitflip-totalsize-low", v.pos, CHAIN, "totalSize off by 4: fields no longer add up")


def total_size(value: int, label: str) -> Callable[[Path, Path], Damage]:
    """A builder setting the victim's totalSize to `value` (None: 100 bytes past the segment end)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        size = value if value is not None else v.settings.mapped_file_size_commitlog - v.pos + 100
        _patch(v.segment, v.pos, struct.pack(">i", size))
        return v.damage(f"totalsize-{label}", v.pos, CHAIN, f"totalSize {size}")
    build.__name__ = f"total_size_{label}"
    return build


def queue_offset_step(delta: int, label: str, why: str) -> Callable[[Path, Path], Damage]:
    """A builder adding `delta` to the victim's queueOffset: the chain is intact, the record is not its queue's
    next. ConsumeQueue.putMessagePositionInfo appends an entry above the write position AT the write position
    ("[BUG]logic queue order maybe wrong") and skips one below it ("Build consume queue repeatedly"): rebuild
    writes the same with a warning naming the record, verify a finding, recover's audit a warning, inspect names
    the queue (issues 35 item 5, 36 item 1)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        facts = _victim_facts(v, v.i)
        _shift(v.segment, v.pos + 20, ">q", delta)
        return v.damage(label, v.pos, outcome(ACCEPTED, REPORTED, REPORTED, REPORTED), why, warns=("rebuild", "recover"),
                        where={"inspect": f"({facts['topic']}/{facts['queue_id']})"}, **facts, step=delta)
    build.__name__ = label.replace("-", "_")
    return build


# a flipped high bit (+ 2^40): the broker appends the entry at its queue's next offset, the queue is unchanged
bitflip_queue_offset = queue_offset_step(2**40, "bitflip-queue-offset", "queueOffset jumps by 2^40")
# the victim repeats the offset before it (207 then 207 - 1): its entry is skipped, the queue's later ones move up
queue_offset_backwards = queue_offset_step(-1, "queue-offset-backwards", "queueOffset one below its queue's next")


def negative_queue_offset(golden: Path, dst: Path) -> Damage:
    """The victim's queueOffset set to -8: every job refuses the record by file and byte offset, writing no
    consume-queue file named by a negative offset (the broker would drop its entry as already written)."""
    v = GoldenVictim(golden, dst)
    _patch(v.segment, v.pos + 20, struct.pack(">q", -8))
    return v.damage("negative-queue-offset", v.pos, UNREADABLE, "a negative queueOffset")


def bitflip_store_timestamp(golden: Path, dst: Path) -> Damage:
    """storeTimestamp of the store's first record + 2^62 ms: far past any date a file name can hold."""
    v = GoldenVictim(golden, dst)
    first = segment_paths(v.store)[0]
    cols = segment_columns(first)
    at = int(cols.pos[0]) + 48 + int(cols.born_host_len[0]) + 4
    _flip_bit(first, at, 6)
    first_index = sorted((v.store / "index").iterdir())[0]
    return v.damage("bitflip-store-timestamp", int(cols.pos[0]), outcome(ERROR, ACCEPTED, REPORTED, REPORTED),
                    "storeTimestamp in the year 146 million: no index file name can hold it", file=first,
                    where={"verify": (first_index, 0)})  # verify: the header's beginTimestamp differs


def bitflip_physical_offset(golden: Path, dst: Path) -> Damage:
    """The stored physicalOffset no longer equals the record's position: its entries would point elsewhere."""
    v = GoldenVictim(golden, dst)
    _flip_bit(v.segment, v.pos + 28 + 4, 0)  # + 2^24
    return v.damage("bitflip-physical-offset", v.pos, outcome(ERROR, ERROR, ERROR, ERROR),
                    "physicalOffset differs from the record's own offset")


def zeroed_header_last_segment(golden: Path, dst: Path) -> Damage:
    """Eight zero bytes over a record header in the last segment look like the end of the data, but
    records follow in the same segment."""
    v = GoldenVictim(golden, dst)
    last = segment_paths(v.store)[-1]
    cols = segment_columns(last)
    pos = int(cols.pos[len(cols) // 2])
    _patch(last, pos, b"\0" * 8)
    return v.damage("zeroed-header-last-segment", pos, CHAIN, "a zeroed header in the middle of the last segment",
                    file=last)


def misnamed_segment(golden: Path, dst: Path) -> Damage:
    """A segment renamed to start 1 byte early: it overlaps the previous one."""
    v = GoldenVictim(golden, dst)
    renamed = v.segment.with_name(segment_name(int(v.segment.name) - 1))
    v.segment.rename(renamed)
    return v.damage("misnamed-segment", 0, CHAIN, "segment name not where the previous segment ends", file=renamed)


def stray_commitlog_name(suffix_or_name: str, label: str, why: str) -> Callable[[Path, Path], Damage]:
    """A copy of the victim segment beside it under a name the broker does not take as a segment (`{}` in
    `suffix_or_name` stands for the victim's name): every job refuses the store, naming that file."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        stray = v.segment.with_name(suffix_or_name.format(v.segment.name))
        shutil.copyfile(v.segment, stray)
        return v.damage(f"stray-commitlog-{label}", 0, UNREADABLE, why, file=stray)
    build.__name__ = f"stray_commitlog_{label}"
    return build


stray_bak = stray_commitlog_name("{}.bak", "bak", "a .bak copy: the broker's Long.parseLong of it throws, it does not start")
stray_hex = stray_commitlog_name("0000000000000000000a", "hex", "a hex letter: NumberFormatException")
stray_21_digits = stray_commitlog_name("0{}", "21-digits", "a second name for the victim's offset: data misplaced")


def _last_of_its_queue(v: GoldenVictim) -> int:
    """Make the victim's segment the first one holding a NOT/COMMIT record of an ordinary topic that is the last of
    its queue in the whole store (moving it to another queue leaves no gap in its old queue's offsets), and return
    that record's index there."""
    segments = [(seg, segment_columns(seg)) for seg in segment_paths(v.store)]
    last: dict[tuple[str, int], int] = {}
    for _, cols in segments:
        for topic, qid, qo in zip(cols.topic.to_pylist(), cols.queue_id.tolist(), cols.queue_offset.tolist()):
            last[(topic, qid)] = max(last.get((topic, qid), -1), qo)
    for seg, cols in segments:
        tran = cols.sys_flag & TRAN_MASK
        for i, (topic, qid, qo) in enumerate(zip(cols.topic.to_pylist(), cols.queue_id.tolist(),
                                                 cols.queue_offset.tolist())):
            if tran[i] in (0, 8) and last[(topic, qid)] == qo and not topic.startswith(("%", "SCHEDULE", "RMQ_SYS")):
                v.segment, v.cols = seg, cols
                return i
    raise AssertionError("no record ends its queue")


def moved_queue_id(queue_id: int, label: str) -> Callable[[Path, Path], Damage]:
    """A builder moving a record that ends its queue to queue `queue_id` (queueOffset 0 there). The store's
    dispatch takes any int (DefaultMessageStore.findConsumeQueue): the broker writes consumequeue/<topic>/
    <queue_id>/ for it (checked with RocketMQ 4.9.8 itself: `-1/`, `-2147483648/`, `2147483647/`), and so must
    rebuild. No broker assigns a negative queueId (its send path replaces one): every job names such a record by
    file and byte offset (rebuild and recover in a warning, verify a finding, inspect a problem)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        i = _last_of_its_queue(v)
        pos = int(v.cols.pos[i])
        _patch(v.segment, pos + 12, struct.pack(">i", queue_id))
        _patch(v.segment, pos + 20, struct.pack(">q", 0))
        facts = {**_victim_facts(v, i), "moved_to": queue_id}
        if queue_id >= 0:  # nothing to name: the store's consume queues simply lack the broker's new queue
            new_cq = v.store / "consumequeue" / facts["topic"] / str(queue_id) / segment_name(0)
            return v.damage(f"queue-id-{label}", pos, outcome(ACCEPTED, ACCEPTED, REPORTED, ACCEPTED),
                            f"queueId {queue_id}: a queue the broker's dispatch creates", where={"verify": (new_cq, None)},
                            **facts)
        return v.damage(f"queue-id-{label}", pos, outcome(ACCEPTED, REPORTED, REPORTED, REPORTED),
                        f"queueId {queue_id}: no broker assigns it, its dispatch files it all the same",
                        warns=("rebuild", "recover"), **facts)
    build.__name__ = f"queue_id_{label}"
    return build


queue_id_minus_one = moved_queue_id(-1, "minus-one")
queue_id_int_min = moved_queue_id(-2**31, "int-min")
queue_id_int_max = moved_queue_id(2**31 - 1, "int-max")


# --- names the broker would mis-handle outside commitlog/ (consumequeue/, index/) ----------------------------
# Each is a copy of a real file or directory under a name the broker does not read back as written: the jobs that
# read the directory refuse it (exit 2, naming it) or name it in a warning / finding, with the broker's consequence
# (RocketMQ 4.9.8 loadConsumeQueue: Integer.parseInt; MappedFileQueue.load, IndexService.load: Long.parseLong).

NAME_REFUSED = outcome(IGNORED, IGNORED, REPORTED, ERROR)  # recover refuses; verify: an unexpected_file finding
NAME_SKIPPED = outcome(IGNORED, IGNORED, REPORTED, REPORTED)  # the broker skips it: recover warns and skips it too


def stray_name(label: str, where: str, source: str | None, expect: dict[str, str],
               why: str) -> Callable[[Path, Path], Damage]:
    """A builder putting a copy of `source` (a path in the store; None: an empty file) at `where` (both relative
    to the store; `{cq}` stands for consumequeue/TopicTest). Errors name the stray at byte offset 0, warnings
    and findings name its path."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        fill = {"cq": "consumequeue/TopicTest", "index": sorted((v.store / "index").iterdir())[0].name}
        stray = v.store / where.format(**fill)
        src = v.store / source.format(**fill) if source is not None else None
        if src is None:
            stray.write_bytes(b"")
        elif src.is_dir():
            shutil.copytree(src, stray, copy_function=shutil.copyfile)
        else:
            shutil.copyfile(src, stray)
        named = {job: (stray, None) for job, e in expect.items() if e == REPORTED}
        return v.damage(f"stray-{label}", 0, expect, why, file=stray, where=named,
                        warns=tuple(job for job in ("recover",) if expect[job] == REPORTED))
    build.__name__ = f"stray_{label}"
    return build


STRAY_NAMES = [
    stray_name("queue-dir-leading-zero", "{cq}/01", "{cq}/1", NAME_REFUSED,
               "Integer.parseInt(\"01\") is 1: the broker reads queue 1 from 1/, never 01/"),
    stray_name("queue-dir-plus", "{cq}/+1", "{cq}/1", NAME_REFUSED, "Integer.parseInt(\"+1\") is 1"),
    stray_name("queue-dir-minus-zero", "{cq}/-0", "{cq}/0", NAME_REFUSED, "Integer.parseInt(\"-0\") is 0"),
    stray_name("queue-dir-arabic-digit", "{cq}/\u0661", "{cq}/1", NAME_REFUSED,
               "Integer.parseInt takes any Unicode digit: queue 1"),
    stray_name("queue-dir-blank", "{cq}/ 1", "{cq}/1", NAME_SKIPPED, "Integer.parseInt(\" 1\") throws: skipped"),
    stray_name("queue-dir-bak", "{cq}/1.bak", "{cq}/1", NAME_SKIPPED, "a .bak copy of a queue: skipped"),
    stray_name("queue-dir-word", "{cq}/one", "{cq}/1", NAME_SKIPPED, "not a number: skipped"),
    stray_name("queue-dir-past-int", "{cq}/2147483648", "{cq}/1", NAME_SKIPPED, "past Integer.MAX_VALUE: skipped"),
    stray_name("queue-file-not-dir", "{cq}/7", None, NAME_REFUSED,
               "a file where queue 7's directory belongs: the broker cannot create its files"),
    stray_name("topic-file", "consumequeue/README", None, NAME_SKIPPED, "a file where a topic directory belongs"),
    stray_name("queue-file-bak", "{cq}/1/00000000000000000000.bak", "{cq}/1/00000000000000000000", NAME_REFUSED,
               "a .bak in a queue directory: the broker does not start"),
    stray_name("queue-file-21-digits", "{cq}/1/000000000000000000000", "{cq}/1/00000000000000000000", NAME_REFUSED,
               "a second name for offset 0 in a queue directory"),
    stray_name("index-word", "index/notes.txt", None, NAME_SKIPPED,
               "no number: IndexService.load skips it, never deletes it"),
    stray_name("index-number", "index/00000000000000000000", "index/{index}", NAME_REFUSED,
               "a number that is no yyyyMMddHHmmssSSS: loaded as an index file"),
]


def field_patch(label: str, at: Callable[[GoldenVictim], int], value: Callable[[GoldenVictim], bytes],
                why: str) -> Callable[[Path, Path], Damage]:
    """A builder writing `value(v)` at `at(v)` (an offset in the victim segment) of the victim record: a field the
    broker reads but whose bytes no longer add up to totalSize. Checked with RocketMQ 4.9.8 on synthetic stores:
    its recovery truncates the log at such a record (the decoder ends the chain there: tests/test_decode_damage)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = GoldenVictim(golden, dst)
        _patch(v.segment, at(v), value(v))
        return v.damage(label, v.pos, CHAIN, why)
    build.__name__ = label.replace("-", "_")
    return build


sysflag_born_v6 = field_patch("sysflag-bornhost-v6", lambda v: v.pos + 36,
                              lambda v: struct.pack(">i", v.field("sys_flag") ^ 0x10),
                              "BORNHOST_V6_FLAG set over a 4-byte address: the fields no longer add up")
sysflag_store_v6 = field_patch("sysflag-storehost-v6", lambda v: v.pos + 36,
                               lambda v: struct.pack(">i", v.field("sys_flag") ^ 0x20),
                               "STOREHOSTADDRESS_V6_FLAG set over a 4-byte address")
properties_length_negative = field_patch("properties-length-negative", lambda v: v.field("properties_start") - 2,
                                         lambda v: struct.pack(">h", -1),
                                         "propertiesLength 0xFFFF: -1 to Java, no properties, fields do not add up")
body_length_negative = field_patch("body-length-negative", lambda v: v.field("body_start") - 4,
                                   lambda v: struct.pack(">i", -4), "bodyLength -4")


def topic_length_past_record(golden: Path, dst: Path) -> Damage:
    """The victim's topicLength set to 127: the topic runs past totalSize."""
    v = GoldenVictim(golden, dst)
    _patch(v.segment, v.field("topic_start") - 1, bytes([127]))
    return v.damage("topic-length-past-record", v.pos, CHAIN, "topicLength 127 runs past totalSize")


def topic_invalid_utf8(golden: Path, dst: Path) -> Damage:
    """A 0xFF byte in the victim's topic."""
    v = GoldenVictim(golden, dst)
    _patch(v.segment, v.field("topic_start") + 1, b"\xff")
    return v.damage("topic-invalid-utf8", v.pos, outcome(ERROR, ERROR, ERROR, ERROR),
                    "a topic must be a directory name: bytes must decode")


def _tagged_victim(v: GoldenVictim) -> tuple[int, int, int]:
    """(record index, TAGS value start, length) of the first NOT/COMMIT record from VICTIM_RECORD on
    that has a TAGS value of 2+ bytes and an ordinary topic."""
    starts, lengths = locate_properties(v.cols.arr, v.cols.properties_start, v.cols.properties_length, (TAGS,))[TAGS]
    topics = v.cols.topic.to_pylist()
    tran = v.cols.sys_flag & TRAN_MASK
    for i in range(VICTIM_RECORD, len(v.cols)):
        if starts[i] >= 0 and lengths[i] >= 2 and tran[i] in (0, 8) and topics[i] != "SCHEDULE_TOPIC_XXXX":
            return i, int(starts[i]), int(lengths[i])
    raise AssertionError("no tagged record in the victim segment")


def _victim_facts(v: GoldenVictim, i: int) -> dict:
    """What a rebuild must write for record i: its queue, queue offset, offset and size."""
    cols = v.cols
    return {"topic": cols.topic[i].as_py(), "queue_id": int(cols.queue_id[i]),
            "queue_offset": int(cols.queue_offset[i]), "phy": int(cols.physical_offset[i]),
            "size": int(cols.total_size[i])}


def properties_invalid_utf8(golden: Path, dst: Path) -> Damage:
    """The broker decodes properties with U+FFFD; tagsCode is the Java hash of that string."""
    v = GoldenVictim(golden, dst)
    i, start, length = _tagged_victim(v)
    raw = bytearray(v.cols.arr[start:start + length].tobytes())
    raw[1] = 0xFF
    _patch(v.segment, start, bytes(raw))
    return v.damage("properties-invalid-utf8", int(v.cols.pos[i]), outcome(ACCEPTED, ACCEPTED, REPORTED, ACCEPTED),
                    "invalid UTF-8 in TAGS: decoded with U+FFFD as Java does", where={"verify": v.cq_location(i)},
                    tags=bytes(raw), index_unchanged=True, **_victim_facts(v, i))


def properties_without_separators(golden: Path, dst: Path) -> Damage:
    """No \\x01/\\x02 left: the broker's parser finds no property at all (tagsCode 0, no keys)."""
    v = GoldenVictim(golden, dst)
    i, _, _ = _tagged_victim(v)
    start, length = int(v.cols.properties_start[i]), int(v.cols.properties_length[i])
    raw = v.cols.arr[start:start + length].tobytes().replace(b"\x01", b"=").replace(b"\x02", b";")
    _patch(v.segment, start, raw)
    return v.damage("properties-without-separators", int(v.cols.pos[i]),
                    outcome(ACCEPTED, ACCEPTED, REPORTED, ACCEPTED), "properties without separators parse to nothing",
                    where={"verify": v.cq_location(i)}, tags=None, index_unchanged=False, **_victim_facts(v, i))


def index_wrong_size(golden: Path, dst: Path) -> Damage:
    """The first index file 1000 bytes short."""
    v = GoldenVictim(golden, dst)
    first = sorted((v.store / "index").iterdir())[0]
    os.truncate(first, v.settings.index_file_size - 1000)
    return v.damage("index-wrong-size", v.settings.index_file_size - 1000, outcome(IGNORED, IGNORED, REPORTED, ERROR),
                    "index file shorter than its configured size", file=first)


def consume_queue_wrong_size(golden: Path, dst: Path) -> Damage:
    """One consume-queue file cut to 1234 bytes."""
    v = GoldenVictim(golden, dst)
    first = sorted(p for p in (v.store / "consumequeue").rglob("*") if p.is_file())[0]
    os.truncate(first, 1234)
    return v.damage("consumequeue-wrong-size", 1234, outcome(IGNORED, IGNORED, REPORTED, ERROR),
                    "consume-queue file shorter than its configured size", file=first)


def checkpoint_wrong_size(golden: Path, dst: Path) -> Damage:
    """10 bytes: not even the timestamps are there (the broker maps 4096 bytes, so a longer but still
    short file would read as zeros past its end)."""
    v = GoldenVictim(golden, dst)
    os.truncate(v.store / "checkpoint", 10)
    return v.damage("checkpoint-wrong-size", 10, outcome(IGNORED, IGNORED, IGNORED, ERROR),
                    "checkpoint shorter than its timestamps", file=v.store / "checkpoint")


# --- synthetic stores from the encoder ----------------------------------------------------------------

SYNTH_SEGMENT = 4096
SYNTH_CONF = ("mappedFileSizeCommitLog=4096\nmappedFileSizeConsumeQueue=200\nmaxHashSlotNum=8\n"
              "maxIndexNum=32\nmessageIndexEnable=true\n")
SYNTH_BAD_AT = 25  # the hostile record's position in the message list


def synthetic_messages(count: int = 60) -> list[Message]:
    """`count` small messages over two topics and queues."""
    msgs = []
    for n in range(count):
        topic = f"Topic{n % 2}"
        msgs.append(Message(topic=topic, body=f"body-{n}".encode() * 3, queue_id=n % 3,
                            store_timestamp=1_700_000_000_000 + 1000 * n, born_timestamp=1_700_000_000_000 + 1000 * n,
                            properties=properties_string({"TAGS": f"tag{n % 4}", "KEYS": f"k{n} k{n + 1}",
                                                          "UNIQ_KEY": f"U{n:08d}"})))
    return msgs


def write_synthetic(dst: Path, msgs: list[Message]) -> Path:
    """A small store of `msgs` (several 4 KiB segments) with its broker.conf."""
    write_store(dst, msgs, SYNTH_SEGMENT)
    (dst / "broker.conf").write_text(SYNTH_CONF)
    return dst


def synthetic_case(label: str, expect: dict[str, str], why: str, **fields) -> Callable[[Path, Path], Damage]:
    """A builder for a synthetic store whose record SYNTH_BAD_AT has `fields` (Message fields, written by the
    independent encoder: bytes a broker may write but not read back, which no golden record can be patched into)."""
    def build(golden: Path, dst: Path) -> Damage:
        msgs = synthetic_messages()
        msgs[SYNTH_BAD_AT] = replace(msgs[SYNTH_BAD_AT], **fields)
        write_synthetic(dst, msgs)
        phy = msgs[SYNTH_BAD_AT].physical_offset
        seg = dst / "commitlog" / segment_name(phy - phy % SYNTH_SEGMENT)
        return Damage(label, dst, dst / "broker.conf", seg, phy % SYNTH_SEGMENT, expect, why)
    build.__name__ = label.replace("-", "_", 1)
    return build


def _bad_topic(topic: str, label: str) -> Callable[[Path, Path], Damage]:
    """A builder for a synthetic store whose record SYNTH_BAD_AT has `topic`."""
    return synthetic_case(f"topic-{label}", UNREADABLE, f"topic {topic!r} would escape consumequeue/", topic=topic)


# A v1 record whose topic has 130 UTF-8 bytes: RocketMQ 4.9.8 and 5.x write `(byte) length` and read it back as a
# signed byte (-126): checkMessageAndReturnSize throws, the record is invalid to the broker (checked with 4.9.8: its
# recovery truncated the log there). The byte is read signed, so the record and all after it are not dispatched.
topic_length_signed_byte = synthetic_case("topic-length-signed-byte", CHAIN, "a v1 topicLength byte of 0x82",
                                          topic="T" * 130, magic_v2=False)


total_size_zero = total_size(0, "zero")
total_size_negative = total_size(-1, "negative")
total_size_past_segment = total_size(None, "past-segment")

BUILDERS: list[Callable[[Path, Path], Damage]] = [
    truncated_segment, oversized_segment, missing_segment, bad_magic, bitflip_magic, bitflip_total_size_high,
    bitflip_total_size_low, bitflip_store_timestamp, bitflip_physical_offset, zeroed_header_last_segment,
    misnamed_segment, total_size_zero, total_size_negative,
    total_size_past_segment, bitflip_queue_offset, queue_offset_backwards, topic_length_past_record, topic_invalid_utf8,
    properties_invalid_utf8, properties_without_separators, topic_length_signed_byte, _bad_topic("../../x", "dotdot"),
    _bad_topic("a/b", "slash"), _bad_topic("a\x00b", "nul"), _bad_topic("", "empty"), index_wrong_size, consume_queue_wrong_size,
    checkpoint_wrong_size, stray_bak, stray_hex, stray_21_digits, negative_queue_offset,
    queue_id_minus_one, queue_id_int_min, queue_id_int_max, *STRAY_NAMES,
    sysflag_born_v6, sysflag_store_v6, properties_length_negative, body_length_negative,
]

# Damage inside one segment that the decoder alone finds (storage_format.commitlog.decode_buffer): the
# end reason it must report there. tests/test_decode_damage.py checks every one without Spark; the jobs
# only carry the decoder's end to the operator, so the Spark matrix keeps one case per end reason
# (bad_magic, total_size_past_segment, topic_length_past_record, topic_invalid_utf8) and not the others.
DECODE_ENDS: dict[Callable[[Path, Path], Damage], str] = {
    bad_magic: "badmagic", bitflip_magic: "badmagic", bitflip_total_size_high: "bad_total_size",
    bitflip_total_size_low: "size_mismatch", total_size_zero: "bad_total_size",
    total_size_negative: "bad_total_size", total_size_past_segment: "bad_total_size",
    topic_length_past_record: "size_mismatch", topic_invalid_utf8: "error",
    sysflag_born_v6: "size_mismatch", sysflag_store_v6: "size_mismatch", properties_length_negative: "size_mismatch",
    body_length_negative: "size_mismatch",
}
DECODE_ONLY = (bitflip_magic, bitflip_total_size_high, bitflip_total_size_low, total_size_zero, total_size_negative,
               sysflag_born_v6, sysflag_store_v6, properties_length_negative, body_length_negative)
JOB_BUILDERS = [b for b in BUILDERS if b not in DECODE_ONLY]  # run through every job (Spark)


# --- DLedger stores -----------------------------------------------------------------------------------
# A copy of dledger-clean-small-11 (its DLedger index restored to the real length) with one entry, blank, data
# file or index unit damaged. The jobs here are the reading ones; recover runs this corpus in
# tests/test_dledger_recovery.py (DLedger's recovery looks at other things than the readers do).

DLEDGER_CASE = "dledger-clean-small-11"
DLEDGER_JOBS = ("rebuild", "inspect", "verify")
DLEDGER_INDEX_SIZE = 160 * 1024 * 1024  # the DLedger index file's real size (stored cut in the golden case)


class DledgerVictim:
    """A clean copy of the DLedger case and entry VICTIM_RECORD of data file VICTIM_SEGMENT (positions are
    entry positions inside the file, read with the test's own struct, from FORMAT.md)."""

    def __init__(self, golden: Path, dst: Path) -> None:
        self.store = copy_store(golden / DLEDGER_CASE, dst)
        for f in (self.store / "dledger-n0" / "index").iterdir():
            os.truncate(f, DLEDGER_INDEX_SIZE)
        self.data = sorted((self.store / "dledger-n0" / "data").iterdir())
        self.file = self.data[VICTIM_SEGMENT]
        buf = self.file.read_bytes()
        self.entries, at = [], 0
        while True:
            magic, size = struct.unpack_from(">ii", buf, at)
            if magic != 1:
                self.blank = at
                break
            self.entries.append(at)
            at += size
        self.pos = self.entries[VICTIM_RECORD]
        self.index = struct.unpack_from(">q", buf, self.pos + 8)[0]

    def damage(self, name: str, offset: int | None, expect: dict[str, str], why: str, file: Path | None = None,
               where: dict | None = None, warns: tuple[str, ...] = (), **victim) -> Damage:
        return Damage(name, self.store, self.store / "broker.conf", file or self.file, offset, expect, why,
                      victim=victim, where=where or {}, warns=warns)


DLEDGER_CHAIN = {"rebuild": ERROR, "inspect": REPORTED, "verify": REPORTED}
DLEDGER_UNREADABLE = {"rebuild": ERROR, "inspect": ERROR, "verify": ERROR}


def dledger_bad_entry_magic(golden: Path, dst: Path) -> Damage:
    """The victim entry's magic set to 7 (DLedger writes 1)."""
    v = DledgerVictim(golden, dst)
    _patch(v.file, v.pos, struct.pack(">i", 7))
    return v.damage("dledger-bad-entry-magic", v.pos, DLEDGER_CHAIN, "entry magic is neither 1 nor a blank's -1")


def dledger_shift(label: str, at: Callable[["DledgerVictim"], int], fmt: str, delta: int, why: str,
                  named: Callable[["DledgerVictim"], int] = lambda v: v.pos) -> Callable[[Path, Path], Damage]:
    """A builder adding `delta` to one big-endian field (`fmt`) at `at(v)` of the victim data file: damage in the
    entry chain, named at `named(v)` (the victim entry's position unless said)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = DledgerVictim(golden, dst)
        _shift(v.file, at(v), fmt, delta)
        return v.damage(label, named(v), DLEDGER_CHAIN, why)
    build.__name__ = label.replace("-", "_")
    return build


dledger_bad_entry_size = dledger_shift("dledger-bad-entry-size", lambda v: v.pos + 4, ">i", 4,
                                       "entry size 4 bytes larger than 48 + its bodySize")
dledger_bad_entry_pos = dledger_shift("dledger-bad-entry-pos", lambda v: v.pos + 24, ">q", 4096,
                                      "entry pos field 4096 bytes off where the entry lies")
dledger_index_gap = dledger_shift("dledger-index-gap", lambda v: v.pos + 8, ">q", 1,
                                  "the victim entry's index one too high: an entry index is skipped")
# the first entry of the victim file one index too high: the gap lies between two data files (the walks of two
# splits meet there)
dledger_index_gap_at_file_start = dledger_shift("dledger-index-gap-at-file-start", lambda v: 8, ">q", 1,
                                                "entry indexes skip one between files", named=lambda v: 0)
dledger_blank_wrong_length = dledger_shift("dledger-blank-wrong-length", lambda v: v.blank + 4, ">i", 8,
                                           "the DLedger blank says 8 bytes more are left than there are",
                                           named=lambda v: v.blank)


def dledger_torn_entry(golden: Path, dst: Path) -> Damage:
    """The last entry of the last data file torn: everything after its first 120 bytes is zeros."""
    v = DledgerVictim(golden, dst)
    last = v.data[-1]
    buf = last.read_bytes()
    at = 0
    while True:
        magic, size = struct.unpack_from(">ii", buf, at)
        if struct.unpack_from(">i", buf, at + size)[0] != 1:
            break
        at += size
    _patch(last, at + 120, bytes(size - 120))
    return v.damage("dledger-torn-entry", at, DLEDGER_CHAIN, "the last entry is torn (its tail is zeros)", last)


def dledger_data_file_wrong_size(golden: Path, dst: Path) -> Damage:
    """A middle data file cut to 100000 bytes (DLedger refuses to load it)."""
    v = DledgerVictim(golden, dst)
    os.truncate(v.file, 100_000)
    return v.damage("dledger-data-file-wrong-size", 100_000, DLEDGER_UNREADABLE, "data file of the wrong size")


def dledger_index_disagrees(golden: Path, dst: Path) -> Damage:
    """The victim entry's DLedger index unit names another pos: only verify reads the DLedger index."""
    v = DledgerVictim(golden, dst)
    index_file = v.store / "dledger-n0" / "index" / segment_name(0)
    _patch(index_file, v.index * 32 + 4, struct.pack(">q", v.pos + 1))
    return v.damage("dledger-index-disagrees", v.index * 32,
                    {"rebuild": IGNORED, "inspect": IGNORED, "verify": REPORTED},
                    "a DLedger index unit disagrees with its entry", index_file)


def dledger_index_stray(golden: Path, dst: Path) -> Damage:
    """A `.bak` file of the DLedger index size in dledger-n0/index/: DLedger's MmapFileList.load takes every entry
    there and parses its name with Long.parseLong, so the broker does not start. verify names it (a finding),
    recover refuses it (tests/test_dledger_recovery.py); rebuild and inspect do not read the DLedger index."""
    v = DledgerVictim(golden, dst)
    stray = v.store / "dledger-n0" / "index" / (segment_name(0) + ".bak")
    with open(stray, "wb") as f:
        f.truncate(DLEDGER_INDEX_SIZE)  # sparse: a name, not 160 MiB of bytes
    return v.damage("dledger-index-stray", 0,
                    {"rebuild": IGNORED, "inspect": IGNORED, "verify": REPORTED, "recover": ERROR},
                    "a .bak in the DLedger index directory: the broker does not start", stray,
                    where={"verify": (stray, None)})


def _entries(buf: bytes) -> list[int]:
    """Positions of a data file's entries (magic 1), read with the test's own struct."""
    out, at = [], 0
    while at + 8 <= len(buf) and struct.unpack_from(">i", buf, at)[0] == 1:
        out.append(at)
        at += struct.unpack_from(">i", buf, at + 4)[0]
    return out


def dledger_term(label: str, file: Callable[["DledgerVictim"], Path], entry: Callable[["DledgerVictim", list], int],
                 term: int, named: Callable[["DledgerVictim"], int], why: str) -> Callable[[Path, Path], Damage]:
    """A builder setting one entry's term (`entry(v, positions of file(v)'s entries)`) to `term`: DLedger's recovery
    ends the log at the first entry whose term is below the one before it (named at `named(v)` in the victim
    file), and so must every job (issue 35 item 2)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = DledgerVictim(golden, dst)
        f = file(v)
        _patch(f, entry(v, _entries(f.read_bytes())) + 16, struct.pack(">q", term))
        return v.damage(label, named(v), DLEDGER_CHAIN, why)
    build.__name__ = label.replace("-", "_")
    return build


dledger_term_down = dledger_term("dledger-term-down", lambda v: v.file, lambda v, e: v.pos, 7,
                                 lambda v: v.entries[VICTIM_RECORD + 1],
                                 "the victim entry's term 7, the next one's 0: the term goes down after it")
dledger_term_negative = dledger_term("dledger-term-negative", lambda v: v.file, lambda v, e: e[VICTIM_RECORD + 1], -5,
                                     lambda v: v.entries[VICTIM_RECORD + 1], "an entry's term -5 after term 0")
# the previous data file's last entry at term 7: the term goes down where two files (and two splits' walks) meet
dledger_term_down_at_file_start = dledger_term("dledger-term-down-at-file-start",
                                               lambda v: v.data[VICTIM_SEGMENT - 1], lambda v, e: e[-1], 7,
                                               lambda v: 0, "the term goes down between two data files")


def dledger_bad_body_crc(golden: Path, dst: Path) -> Damage:
    """One body byte of the victim entry's record flipped: DLedger never checks body CRCs and serves it (rebuild and
    inspect take it as the broker does), verify names it (a plain broker's recovery would cut there), and convert
    refuses it (tests/test_convert.py)."""
    v = DledgerVictim(golden, dst)
    cols = decode_buffer(v.file.read_bytes(), int(v.file.name), header=48).columns
    i = int(np.flatnonzero(cols.pos == v.pos + 48)[0])
    _flip_bit(v.file, int(cols.body_start[i]), 0)
    return v.damage("dledger-bad-body-crc", v.pos, {"rebuild": IGNORED, "inspect": IGNORED, "verify": REPORTED},
                    "a record's body CRC fails")


def dledger_stray_data(label: str, make: Callable[[Path, Path], None], why: str) -> Callable[[Path, Path], Damage]:
    """A builder putting an entry named like the data file after the last one into dledger-n0/data/ (`make(path,
    last data file)`): DLedger's MmapFileList.load takes every entry there and does not start on one that is not a
    file of the data file size, nor on a gap between files; every job refuses it, naming it (issue 35 item 4,
    issue 36 item 2)."""
    def build(golden: Path, dst: Path) -> Damage:
        v = DledgerVictim(golden, dst)
        last = v.data[-1]
        stray = last.parent / segment_name(int(last.name) + last.stat().st_size * (3 if "gap" in label else 1))
        make(stray, last)
        return v.damage(label, 0, {**DLEDGER_UNREADABLE, "recover": ERROR}, why, stray)
    build.__name__ = label.replace("-", "_")
    return build


dledger_data_fifo = dledger_stray_data("dledger-data-fifo", lambda p, last: os.mkfifo(p), "a FIFO named like a data file")
dledger_data_directory = dledger_stray_data("dledger-data-directory", lambda p, last: p.mkdir(),
                                            "a directory named like a data file")
dledger_data_dangling_link = dledger_stray_data("dledger-data-dangling-link",
                                                lambda p, last: p.symlink_to(p.parent / "gone"),
                                                "a symbolic link to a missing file named like a data file")
dledger_data_gap = dledger_stray_data("dledger-data-gap", lambda p, last: shutil.copyfile(last, p),
                                      "a data file two files past the last one: a gap")


def dledger_checkpoint_note(golden: Path, dst: Path) -> Damage:
    """A line added by hand to dledger-n0/checkpoint (`note=x`): DLedger reads committedIndex alone and ignores the
    rest, and so does every job (issue 36 item 3)."""
    v = DledgerVictim(golden, dst)
    cp = v.store / "dledger-n0" / "checkpoint"
    cp.write_bytes(cp.read_bytes() + b"note=x\n")
    return v.damage("dledger-checkpoint-note", None, {"rebuild": IGNORED, "inspect": IGNORED, "verify": IGNORED},
                    "a hand-added line in the DLedger checkpoint", cp)


def dledger_queue_offset_backwards(golden: Path, dst: Path) -> Damage:
    """The first ordinary record from the victim entry on whose queueOffset is at least 1 gets its offset minus 1
    (207 then 206): DLedger's dispatch goes through the same ConsumeQueue as a plain broker's, which skips the
    entry; the queue's later entries sit one offset earlier (issue 36 item 1). Named at the record (entry + 48)."""
    v = DledgerVictim(golden, dst)
    buf = v.file.read_bytes()
    for pos in v.entries[VICTIM_RECORD:]:
        rec = pos + 48
        size = struct.unpack_from(">i", buf, rec)[0]
        cols = decode_buffer(buf[rec:rec + size], struct.unpack_from(">q", buf, rec + 28)[0]).columns
        topic, qo = cols.topic[0].as_py(), int(cols.queue_offset[0])
        if qo >= 1 and int(cols.sys_flag[0]) & TRAN_MASK in (0, 8) and not topic.startswith(("%", "SCHEDULE", "RMQ")):
            break
    else:
        raise AssertionError("no ordinary record after the victim entry")
    _shift(v.file, rec + 20, ">q", -1)
    return v.damage("dledger-queue-offset-backwards", rec, {"rebuild": ACCEPTED, "inspect": REPORTED,
                                                            "verify": REPORTED}, "queueOffset one below its queue's next",
                    where={"inspect": f"({topic}/{int(cols.queue_id[0])})"}, warns=("rebuild",), topic=topic,
                    queue_id=int(cols.queue_id[0]), queue_offset=qo, phy=int(cols.physical_offset[0]), size=size,
                    step=-1)


DLEDGER_BUILDERS = [dledger_bad_entry_magic, dledger_bad_entry_size, dledger_bad_entry_pos, dledger_index_gap,
                    dledger_index_gap_at_file_start, dledger_torn_entry, dledger_blank_wrong_length,
                    dledger_data_file_wrong_size, dledger_index_disagrees, dledger_index_stray, dledger_term_down,
                    dledger_term_negative, dledger_term_down_at_file_start, dledger_bad_body_crc, dledger_data_fifo,
                    dledger_data_directory, dledger_data_dangling_link, dledger_data_gap, dledger_checkpoint_note,
                    dledger_queue_offset_backwards]


def build_all(golden: Path, root: Path) -> list[Damage]:
    """Every corpus case under root/<n>-<builder>/store."""
    out = []
    for n, builder in enumerate(BUILDERS):
        out.append(builder(golden, root / f"{n:02d}-{builder.__name__}" / "store"))
    return out


def cq_entry(out: Path, topic: str, queue_id: int, queue_offset: int, cq_file_size: int) -> tuple[int, int, int]:
    """(phy, size, tagsCode) of one consume-queue entry in a rebuilt OUT."""
    start = queue_offset * 20 // cq_file_size * cq_file_size
    data = (out / "consumequeue" / topic / str(queue_id) / f"{start:020d}").read_bytes()
    at = queue_offset * 20 - start
    return struct.unpack(">qiq", data[at:at + 20])


if __name__ == "__main__":  # python -m tests.hostile DIR: write the corpus for a look by hand
    import sys

    from tests.conftest import GOLDEN

    for d in build_all(GOLDEN, Path(sys.argv[1])):
        print(f"{d.name:32s} {d.file} @ {d.offset}: {d.why}")
