"""What `jobs.dump` shows of a RocksDB consume-queue store (storeType=defaultRocksDB), read through the read-only
reader (jobs.pipeline.io.rocksdb_db): one queue's units with the records they point at, the `offset` column family
("max"/"min" per queue and the dispatch checkpoint), and the checkpoints (the database's and the `checkpoint`
file). Rows are JSON-ready dicts like jobs.pipeline.dump.readers' (dump.text prints them)."""
from __future__ import annotations

from collections.abc import Iterator

from storage_format.errors import StoreFormatError
from storage_format.record_text import iso_utc
from storage_format.rocksdb_cq import (CHECKPOINT_TOPIC, DEFAULT_CF, MAX_KIND, MIN_KIND, OFFSET_CF, RocksCqFormatError,
                                       is_checkpoint_key, offset_key, parse_checkpoint_value, parse_offset_key,
                                       parse_offset_value, parse_unit_key, parse_unit_value, queue_key_range,
                                       unit_key)
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..io.rocksdb_db import CqDatabase, open_store_database
from ..runtime.failure import JobError
from ..store.markers import StoreMarkers
from .messages import RecordReader
from .readers import segment_at, with_record


def _bad(db: CqDatabase, cf: str, key: bytes, exc: RocksCqFormatError) -> StoreFormatError:
    return StoreFormatError(str(db.path), None, f"column family {cf}, key {key.hex()}: {exc}")


def _recorded_offset(db: CqDatabase, topic: bytes, queue_id: int, kind: bytes = MAX_KIND) -> int | None:
    """The queue offset of the queue's "max" record (its last unit the broker reads) or "min" record (its first),
    None without one."""
    value = db.offset_value(offset_key(topic, kind, queue_id))
    if value is None:
        return None
    try:
        return parse_offset_value(value).queue_offset
    except RocksCqFormatError as exc:
        raise _bad(db, OFFSET_CF, offset_key(topic, kind, queue_id), exc) from None


def dump_rocksdb_queue(store: Location, settings: BrokerSettings, db_dir: str, topic: str, queue_id: int,
                       first: int | None, count: int) -> Iterator[dict]:
    """Up to `count` units of a queue in key order from queue offset `first` (default: its "min" record, else 0),
    each with the record it points at; a run of missing queue offsets is a `gap` row, units past the queue's "max"
    record are marked (a crash's dirty tail, never read by the broker); then why the listing stopped."""
    name = topic.encode("utf-8")
    lower, upper = queue_key_range(name, queue_id)
    with open_store_database(store, db_dir) as db:
        if next(db.unit_items(lower, upper), None) is None:
            raise JobError(f"{db.path}: no units of {topic}/{queue_id} (column family {DEFAULT_CF})")
        last = _recorded_offset(db, name, queue_id)
        reader = RecordReader(store, settings)
        # by default from where a consumer starts: the queue's "min" record, else 0 (a deleted database's hole shows)
        expected = first if first is not None else (_recorded_offset(db, name, queue_id, MIN_KIND) or 0)
        for key, value in db.unit_items(unit_key(name, queue_id, first) if first is not None else lower, upper):
            if count <= 0:
                return
            try:
                n, unit = parse_unit_key(key).queue_offset, parse_unit_value(value)
            except RocksCqFormatError as exc:
                raise _bad(db, DEFAULT_CF, key, exc) from None
            if expected is not None and n != expected:
                yield {"kind": "gap", "queue_offset": expected, "database": f"{db_dir}/",
                       "reason": f"no units for queue offsets {expected}..{n - 1}"}
            row = {"kind": "entry", "queue_offset": n, "database": f"{db_dir}/", "key": key.hex(),
                   "phy_offset": unit.phy_offset, "size": unit.size, "tags_code": unit.tags_code,
                   "store_timestamp": unit.store_timestamp}
            tail = [] if last is None or n <= last else [
                f"past the queue's \"max\" record (queue offset {last}): a dirty tail the broker never reads"]
            yield with_record(row, reader, topic, queue_id, tail)
            expected, count = n + 1, count - 1
        yield {"kind": "end", "queue_offset": expected, "database": f"{db_dir}/",
               "reason": f"no unit of {topic}/{queue_id} past queue offset {expected - 1} in {db_dir}/" if expected
               is not None else f"no unit of {topic}/{queue_id} at or past queue offset {first} in {db_dir}/",
               "max_record": last}


def offset_row(key: bytes, value: bytes) -> dict:
    """One `offset` record: a queue's "max"/"min" (its unit's commit-log and queue offset) or the checkpoint."""
    if is_checkpoint_key(key):
        return {"kind": "rocksdb_checkpoint", "topic": CHECKPOINT_TOPIC.decode(), "key": key.hex(),
                "phy_offset": parse_checkpoint_value(value)}
    k, v = parse_offset_key(key), parse_offset_value(value)
    return {"kind": "queue_offset", "topic": k.topic.decode("utf-8", "replace"), "queue_id": k.queue_id,
            "record": k.kind.decode(), "key": key.hex(), "phy_offset": v.phy_offset, "queue_offset": v.queue_offset}


def dump_rocksdb_offsets(store: Location, db_dir: str, count: int | None) -> Iterator[dict]:
    """The `offset` column family in key order (all of it, or `count` records)."""
    with open_store_database(store, db_dir) as db:
        for i, (key, value) in enumerate(db.offset_items()):
            if count is not None and i >= count:
                return
            try:
                yield offset_row(key, value)
            except RocksCqFormatError as exc:
                raise _bad(db, OFFSET_CF, key, exc) from None


def dump_checkpoints(store: Location, settings: BrokerSettings, db_dir: str | None) -> Iterator[dict]:
    """The `checkpoint` file's fields, and with a database its CHECKPOINT_TOPIC: the commit-log offset dispatch had
    reached (the end of the last dispatched record) and the segment holding it."""
    cp = StoreMarkers.read(store).found_checkpoint
    if cp is None:
        yield {"kind": "end", "file": "checkpoint", "reason": "no checkpoint file (the broker reads it as all zeros)"}
    else:
        fields = cp.to_dict()
        yield {"kind": "checkpoint_file", "file": "checkpoint", **fields,
               "times": {k: iso_utc(v) for k, v in fields.items() if k.endswith("_timestamp")}}
    if db_dir is None:
        return
    with open_store_database(store, db_dir) as db:
        phy = db.checkpoint()
    row = {"kind": "rocksdb_checkpoint", "database": f"{db_dir}/", "topic": CHECKPOINT_TOPIC.decode(),
           "phy_offset": phy}
    seg = None if phy is None else segment_at(RecordReader(store, settings).segments, phy)
    if seg is not None:
        row.update(segment=seg.path.rsplit("/", 1)[-1], byte=phy - seg.start)
    yield row
