"""What `jobs.dump` shows, read with random access through jobs.pipeline.io.fs (no Spark): the entries of one
consume queue with the records they point at, commit-log records from an offset, and one index file's
header, slot use and chains. Every reader yields JSON-ready dicts (one per line with --json); the bytes
are decoded by storage_format's codecs, the broker's rules come from there too."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from storage_format import dledger
from storage_format.commitlog import END_BLANK, END_FILE, END_STOP, NeedMoreBytes, decode_buffer
from storage_format.consume_queue import (CQ_UNIT_SIZE, PRE_BLANK_SIZE, file_name, parse_file_name, unpack_entries,
                                          unsafe_topic_reason)
from storage_format.index_file import HEADER_SIZE, BrokenChain, IndexHeader, IndexLayout, chain_walk
from storage_format.multi_dispatch import names_entry
from storage_format.properties import KEYS, TAGS, UNIQ_KEY, parse_properties
from storage_format.record_reader import records_from_columns
from storage_format.record_text import iso_utc
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..runtime.cli import JobError
from ..io.fs import Location
from .messages import Message, RecordReader, message_dict

WINDOW = 64 << 10  # commit-log bytes first read when walking records (grown only for a record that does not fit)
CHAIN_DETAILS = 10  # broken-chain reasons listed for an index file


# ----------------------------------------------------------------------------------- consume queue


def queue_dir(store: Location, topic: str, queue_id: int) -> Location:
    """consumequeue/<topic>/<queueId>, refusing a topic that is no safe directory name."""
    why = unsafe_topic_reason(topic)
    if why:
        raise JobError(f"--topic {topic!r}: {why}")
    qdir = store.child("consumequeue", topic, str(queue_id))
    if not qdir.is_dir():
        raise JobError(f"{qdir.uri}: no such consume queue")
    return qdir


def _queue_files(qdir: Location) -> dict[int, str]:
    """Consume-queue files by their start (byte offset of their first unit in the queue)."""
    return {int(i.base_name): i.base_name for i in qdir.list()
            if i.type.name == "File" and parse_file_name(i.base_name) is not None}


def _message_brief(msg: Message, size: int) -> dict:
    """What a consume-queue listing shows of the record an entry points at (like printMsgByQueue)."""
    props = parse_properties(msg.properties)
    return {"topic": msg.topic, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "total_size": size,
            "tags": props.get(TAGS), "keys": props.get(KEYS), "uniq_key": props.get(UNIQ_KEY),
            "store_timestamp": msg.store_timestamp, "store_time": iso_utc(msg.store_timestamp),
            "offset_msg_id": message_dict(msg, False)["offset_msg_id"]}


def _entry_row(n: int, rel: str, byte: int, unit: np.void, reader: RecordReader, topic: str, queue_id: int) -> dict:
    """One consume-queue unit and the record it points at, with what does not match."""
    row = {"kind": "entry", "queue_offset": n, "file": rel, "byte": byte, "phy_offset": int(unit["phy"]),
           "size": int(unit["size"]), "tags_code": int(unit["tags"])}
    return with_record(row, reader, topic, queue_id)


def with_record(row: dict, reader: RecordReader, topic: str, queue_id: int, notes: list[str] | None = None) -> dict:
    """A unit's row (queue_offset, phy_offset, size) with the record it points at and what does not match (`notes`
    first: what the caller found already)."""
    notes = list(notes or [])
    phy, size, n = row["phy_offset"], row["size"], row["queue_offset"]
    got = reader.read_record(phy)
    msg = got.message
    if msg is None:
        row["message"], row["problem"] = None, "; ".join(notes + [f"no record at phyOffset {phy}: {got.reason}"])
        return row
    row["message"] = _message_brief(msg, got.total_size)
    if got.total_size != size:
        notes.append(f"entry size {size} but the record's totalSize is {got.total_size}")
    if (msg.topic, msg.queue_id, msg.queue_offset) != (topic, queue_id, n):
        if names_entry(parse_properties(msg.properties), msg.queue_id, topic, queue_id, n):
            row["multi_dispatch"] = True  # the record's INNER_MULTI_DISPATCH names this queue at this offset
        else:
            notes.append(f"the record is {msg.topic}/{msg.queue_id} at queueOffset {msg.queue_offset} "
                         f"(another queue's record, or a multi-dispatch/LMQ entry its properties do not name)")
    if row.get("store_timestamp", msg.store_timestamp) != msg.store_timestamp:
        notes.append(f"unit storeTimestamp {row['store_timestamp']} but the record's is {msg.store_timestamp}")
    row["problem"] = "; ".join(notes) or None
    return row


def dump_queue(store: Location, settings: BrokerSettings, topic: str, queue_id: int, first: int | None,
               count: int) -> Iterator[dict]:
    """Up to `count` units of a queue from logical offset `first` (default: its first entry after the
    filler units), then why the listing stopped when it ended early."""
    qdir = queue_dir(store, topic, queue_id)
    files, fsize = _queue_files(qdir), settings.consume_queue_file_size
    if not files:
        raise JobError(f"{qdir.uri}: no consume-queue files")
    reader, cache = RecordReader(store, settings), {}
    n = _first_entry(qdir, files) if first is None else first
    while count > 0:
        start = n * CQ_UNIT_SIZE // fsize * fsize
        if start not in files:
            yield {"kind": "end", "queue_offset": n, "reason": f"no file {file_name(start)} holds queue offset {n}"}
            return
        rel = f"consumequeue/{topic}/{queue_id}/{files[start]}"
        if start not in cache:
            cache.clear()
            data = qdir.child(files[start]).read_bytes()
            cache[start] = unpack_entries(data)
            if len(data) != fsize:
                yield {"kind": "wrong_size", "file": rel, "size": len(data), "expected": fsize}
        units, byte = cache[start], n * CQ_UNIT_SIZE - start
        if byte // CQ_UNIT_SIZE >= len(units):
            yield {"kind": "end", "queue_offset": n, "file": rel, "byte": byte,
                   "reason": f"{rel} holds {len(units)} whole units, none at byte {byte}"}
            return
        unit = units[byte // CQ_UNIT_SIZE]
        phy, size = int(unit["phy"]), int(unit["size"])
        if phy < 0 or size <= 0:
            yield {"kind": "end", "queue_offset": n, "file": rel, "byte": byte, "phy_offset": phy, "size": size,
                   "reason": "end of the queue (the broker stops at the first unit without phyOffset >= 0 and size > 0)"}
            return
        if size == PRE_BLANK_SIZE and phy == 0:
            yield {"kind": "filler", "queue_offset": n, "file": rel, "byte": byte}
        else:
            yield _entry_row(n, rel, byte, unit, reader, topic, queue_id)
        count -= 1
        n += 1


def _first_entry(qdir: Location, files: dict[int, str]) -> int:
    """Logical offset of the queue's first unit that is not a pre-blank filler (the broker's min offset)."""
    start = min(files)
    units = unpack_entries(qdir.child(files[start]).read_bytes())
    filler = (units["size"] == PRE_BLANK_SIZE) & (units["phy"] == 0)
    real = np.flatnonzero(~filler)
    return start // CQ_UNIT_SIZE + (int(real[0]) if len(real) else len(units))


# -------------------------------------------------------------------------------------- commit log


def segment_at(segments: list[Segment], offset: int) -> Segment | None:
    """The segment holding a commit-log offset."""
    return next((s for s in segments if s.start <= offset < s.start + s.size), None)


def record_row(msg: Message, size: int, seg: Segment) -> dict:
    """One record with every header field and its properties (the JSON form of a dumped record)."""
    return {"kind": "record", "segment": seg.path.rsplit("/", 1)[-1], "byte": msg.physical_offset - seg.start,
            "total_size": size, **message_dict(msg, False)}


def entry_fields(buf, record_pos: int) -> dict:
    """The DLedger entry header in front of the record at buf[record_pos] (dumped beside the record)."""
    h = dledger.read_entry_header(buf, record_pos - dledger.ENTRY_HEADER_SIZE)
    return {"magic": h.magic, "size": h.size, "index": h.index, "term": h.term, "pos": h.pos, "channel": h.channel,
            "chainCrc": h.chain_crc, "bodyCrc": h.body_crc, "bodySize": h.body_size}


def _entry_start(seg: Segment, offset: int) -> int | None:
    """Where the walk starts in a DLedger data file: the entry whose record is at `offset` (a PHYSICALOFFSET,
    entry pos + 48), or the entry at `offset` itself; None when neither is there."""
    for at in (offset - dledger.ENTRY_HEADER_SIZE, offset):
        if seg.start <= at and at + dledger.ENTRY_HEADER_SIZE <= seg.start + seg.size:
            head = bytes(Location(seg.path).read_range(at - seg.start, dledger.ENTRY_HEADER_SIZE))
            h = dledger.read_entry_header(head, 0)
            if h.magic == dledger.ENTRY_MAGIC and h.pos == at:
                return at
    return None


def _decode_window(buf, pos: int, rel: int, seg: Segment):
    """decode_buffer over the records that lie whole in `buf` (read at segment byte `rel`): a record running
    off the window's end stops the walk there (END_STOP) instead of growing the window to the segment's end;
    NeedMoreBytes only when not even the first record fits."""
    args = dict(segment_end=seg.size - rel, path=seg.path, check_crc=True, header=seg.header)
    try:
        return decode_buffer(buf, pos, 0, len(buf), **args)
    except NeedMoreBytes as more:
        if more.position <= 0:
            raise
        return decode_buffer(buf, pos, 0, more.position, **args)


def dump_records(store: Location, settings: BrokerSettings, offset: int, count: int) -> Iterator[dict]:
    """Up to `count` records walked from `offset` as the broker's dispatch walks them, a BLANK record sending
    the walk to the next segment; the walk's end is the last row when it ends early. Reads a bounded window
    from `offset` (about `count` records, never the rest of the segment): each record shown passed the
    dispatch checks (layout, DELAY level, body CRC), nothing past the window is read or checked.
    In a DLedger data file the walk goes entry by entry and each record row carries its entry header."""
    segments = RecordReader(store, settings).segments
    pos, window = offset, min(max(WINDOW, count * 1024), 4 << 20)
    seg = segment_at(segments, pos)
    if seg is not None and seg.header:
        pos = _entry_start(seg, offset)
        if pos is None:
            yield {"kind": "end", "offset": offset, "reason": "no DLedger entry's record starts at this offset (a "
                                                              "record's offset is its entry's pos + 48)"}
            return
    while count > 0:
        seg = segment_at(segments, pos)
        if seg is None:
            yield {"kind": "end", "offset": pos, "reason": "no commit-log segment holds this offset"}
            return
        rel = pos - seg.start
        buf = Location(seg.path).read_range(rel, min(window, seg.size - rel))
        try:
            chunk = _decode_window(buf, pos, rel, seg)
        except NeedMoreBytes as more:
            window = max(window * 2, more.needed_end)
            continue
        cols = chunk.columns.take(min(count, chunk.count))
        for msg, size, at in zip(records_from_columns(cols), cols.total_size.tolist(), cols.pos.tolist()):
            row = record_row(msg, int(size), seg)
            if seg.header:
                row["dledger_entry"] = entry_fields(buf, int(at))
            yield row
        count -= len(cols)
        end = chunk.end
        if count <= 0:
            return
        if end.reason == END_STOP:
            pos = end.offset
        elif end.reason in (END_BLANK, END_FILE):
            if end.reason == END_BLANK:
                at = end.offset - pos
                field = at + 4 if seg.header else at  # DLedger blank: int -1, int bytes-left
                yield {"kind": "dledger_blank" if seg.header else "blank", "offset": end.offset,
                       "segment": seg.path.rsplit("/", 1)[-1], "byte": end.offset - seg.start,
                       "total_size": int.from_bytes(bytes(buf[field:field + 4]), "big", signed=True)}
            pos = seg.start + seg.size
        else:
            yield {"kind": "end", "offset": end.offset, "reason": end.reason, "detail": end.describe()}
            return


# ------------------------------------------------------------------------------------- index file


def _index_bytes(store: Location, settings: BrokerSettings, name: str) -> tuple[str, bytes]:
    """The index file's bytes, refusing a name that is not a file of index/ or a file of the wrong size."""
    if not name or "/" in name or name in (".", ".."):
        raise JobError(f"--index-file {name!r}: give the file name inside index/ (e.g. 20261122050800409)")
    loc = store.child("index", name)
    if loc.is_dir() or not loc.exists():
        raise JobError(f"{loc.uri}: no such index file")
    size, want = loc.size(), settings.index_file_size
    if size != want:
        raise JobError(f"{loc.uri}: {size} bytes, expected {want} (maxHashSlotNum {settings.max_hash_slot_num}, "
                       f"maxIndexNum {settings.max_index_num}, as the store's other index files show): a damaged "
                       f"index file, which the broker misreads")
    return f"index/{name}", loc.read_bytes()


def dump_index(store: Location, settings: BrokerSettings, name: str, first: int | None = None,
               count: int = 0) -> Iterator[dict]:
    """The header, slot use and chain lengths of one index file (a summary row), then `count` entries
    from position `first` (default 1) when asked."""
    rel, data = _index_bytes(store, settings, name)
    h = IndexHeader.from_bytes(data[:HEADER_SIZE])
    layout = settings.index_layout
    slots, entries = layout.slot_table(data), layout.entries(data)
    used = layout.used_positions(h)
    yield index_summary(rel, h, layout, slots, entries, used)
    pos = 1 if first is None else first
    for p in range(pos, min(pos + count, used)):
        e = entries[p]
        yield {"kind": "index_entry", "file": rel, "position": p,
               "byte": layout.entry_at(p),
               "keyHash": int(e["hash"]), "slot": layout.slot_of(int(e["hash"])) if e["hash"] >= 0 else None,
               "phyOffset": int(e["phy"]), "timeDiff": int(e["diff"]), "prevIndex": int(e["prev"]),
               "time": iso_utc(h.begin_timestamp + int(e["diff"]) * 1000)}


def index_summary(rel: str, h: IndexHeader, layout: IndexLayout, slots: np.ndarray, entries: np.ndarray,
                  used: int) -> dict:
    """Header fields, how many slots are used, chain lengths (entries reachable from each used slot)
    and broken chains, walked the way the broker's lookup walks them."""
    reasons: list[str] = []
    breaks = 0

    def broken(b: BrokenChain) -> None:
        nonlocal breaks
        breaks += 1
        if len(reasons) < CHAIN_DETAILS:
            reasons.append(b.reason)
    reach = chain_walk(layout, slots, entries, used, broken)
    lengths = np.bincount(reach[reach >= 0], minlength=len(slots))[slots != 0]
    hist = np.bincount(lengths) if len(lengths) else np.zeros(0, np.int64)
    return {
        "kind": "index_file", "file": rel,
        "header": {"beginTimestamp": h.begin_timestamp, "beginTime": iso_utc(h.begin_timestamp),
                   "endTimestamp": h.end_timestamp, "endTime": iso_utc(h.end_timestamp),
                   "beginPhyOffset": h.begin_phy_offset, "endPhyOffset": h.end_phy_offset,
                   "hashSlotCount": h.hash_slot_count, "indexCount": h.index_count},
        "slots": {"total": len(slots), "used": int(np.count_nonzero(slots))},
        "entries": {"used": used - 1, "capacity": layout.max_entries - 1},
        "chains": {"count": int(len(lengths)), "min": int(lengths.min()) if len(lengths) else 0,
                   "max": int(lengths.max()) if len(lengths) else 0,
                   "mean": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
                   "length_histogram": {str(k): int(v) for k, v in enumerate(hist) if v},
                   "entries_reachable": int(np.count_nonzero(reach >= 0)),
                   "broken": breaks, "broken_details": reasons},
    }
