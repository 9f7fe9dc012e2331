"""A RocksDB consume-queue database counted, for inspect: units and queues, "max" and "min" records, the units past
a queue's "max" (a crash's dirty tail, which the broker never reads), queues with units but no "max", and the
dispatch checkpoint with how far behind the commit log's end it lies. Keys are read in order, a queue's run of keys
parsed once (its prefix), so the count costs well under a microsecond a unit."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from storage_format.errors import StoreFormatError
from storage_format.rocksdb_cq import (DEFAULT_CF, MAX_KIND, OFFSET_CF, RocksCqFormatError, is_checkpoint_key,
                                       parse_offset_key, parse_offset_value, parse_unit_key, unit_key)

from ..io.rocksdb_db import CqDatabase

QUEUE_OFFSET_BYTES = 8


@dataclass(kw_only=True)
class DatabaseCounts:
    """What a database holds, counted (per_queue: units per topic and queue id)."""
    column_families: list[str]
    units: int = 0
    max_records: int = 0
    min_records: int = 0
    checkpoint: int | None = None
    units_past_max: int = 0
    queues_without_max: list[str] = field(default_factory=list)
    per_queue: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    unreferenced_files: list[str] = field(default_factory=list)

    def to_dict(self, log_end: int | None) -> dict:
        """The report's `rocksdb` section; log_end: the commit log's end (the checkpoint's distance from it)."""
        behind = None if self.checkpoint is None or log_end is None else log_end - self.checkpoint
        return {"column_families": self.column_families, "units": self.units,
                "queues": sum(len(q) for q in self.per_queue.values()), "topics": len(self.per_queue),
                "max_records": self.max_records, "min_records": self.min_records,
                "units_past_max": self.units_past_max, "queues_without_max": self.queues_without_max,
                "checkpoint": self.checkpoint, "checkpoint_behind_log_end": behind,
                "unreferenced_files": self.unreferenced_files,
                "units_per_topic_queue": {t: {str(q): n for q, n in qs.items()} for t, qs in self.per_queue.items()}}


def _name(topic: bytes) -> str:
    return topic.decode("utf-8", "replace")


def _offset_records(db: CqDatabase, counts: DatabaseCounts) -> dict[bytes, int]:
    """The "max" queue offset of each queue by its unit-key prefix; "min" and checkpoint counted."""
    max_of: dict[bytes, int] = {}
    counts.checkpoint = db.checkpoint()
    for key, value in db.offset_items():
        if is_checkpoint_key(key):
            continue
        try:
            k, v = parse_offset_key(key), parse_offset_value(value)
        except RocksCqFormatError as exc:
            raise StoreFormatError(str(db.path), None, f"column family {OFFSET_CF}, key {key.hex()}: {exc}") from None
        if k.kind == MAX_KIND:
            counts.max_records += 1
            max_of[unit_key(k.topic, k.queue_id, 0)[:-QUEUE_OFFSET_BYTES]] = v.queue_offset
        else:
            counts.min_records += 1
    return max_of


def count_database(db: CqDatabase) -> DatabaseCounts:
    """Every key of both column families counted (see the module doc); a key that is not 5.3.3's raises
    StoreFormatError naming the database and the key."""
    counts = DatabaseCounts(column_families=db.column_families(), unreferenced_files=db.unreferenced_files())
    max_of = _offset_records(db, counts)
    prefix, limit, n, topic, queue_id = b"", None, 0, b"", 0

    def close_run() -> None:
        if n:
            counts.per_queue[_name(topic)][queue_id] = n
            if limit is None:
                counts.queues_without_max.append(f"{_name(topic)}/{queue_id}")
    for key, _ in db.unit_items():
        if key[:-QUEUE_OFFSET_BYTES] != prefix:
            close_run()
            try:
                parsed = parse_unit_key(key)
            except RocksCqFormatError as exc:
                raise StoreFormatError(str(db.path), None, f"column family {DEFAULT_CF}, key {key.hex()}: {exc}") \
                    from None
            prefix, topic, queue_id, n = key[:-QUEUE_OFFSET_BYTES], parsed.topic, parsed.queue_id, 0
            limit = max_of.get(prefix)
        n += 1
        if limit is not None and int.from_bytes(key[-QUEUE_OFFSET_BYTES:], "big", signed=True) > limit:
            counts.units_past_max += 1
    close_run()
    counts.units = sum(sum(q.values()) for q in counts.per_queue.values())
    return counts
