"""verify of a store whose commit log's head expired: what the broker keeps of it (the units of a queue's first
remaining file, whole files the clean service keeps or has not deleted yet, the index file holding the log's first
kept offset) is counted as expired, not reported; what follows the first kept offset is still checked."""
from __future__ import annotations

import struct

from tests.since_helpers import expired_copy, expired_index, expired_units
from tests.helpers import run_verify

CQ_UNIT = 20


def test_a_store_whose_head_expired_and_was_cleaned_is_consistent(spark, tmp_path):
    """clean-medium-11, 10 of 152 segments gone and the clean service run: CONSISTENT; the counts of expired units
    and index entries equal an independent reading of the store's files."""
    store = tmp_path / "store"
    min_offset = expired_copy("clean-medium-11", store, 10)
    code, report = run_verify(store, tmp_path)
    assert code == 0, report["findings"][:3]
    files, entries = expired_index(store, min_offset)
    assert report["commitlog"]["min_offset"] == min_offset
    assert report["expired"] == {"consumequeue.units": expired_units(store, min_offset), "index.entries": entries,
                                 **({"index.files": files} if files else {})}


def test_placed_queues_and_files_the_clean_service_has_not_deleted(spark, tmp_path):
    """v5-lmq-clean-small-11 (5.x LMQ queues written out of step), 3 segments gone, the clean service not run yet:
    the out-of-step queues go on from where the store holds their first remaining unit, the old files are expired."""
    store = tmp_path / "store"
    min_offset = expired_copy("v5-lmq-clean-small-11", store, 3, clean=False)
    code, report = run_verify(store, tmp_path)
    assert code == 0, report["findings"][:3]
    files, entries = expired_index(store, min_offset)
    assert files > 0 and report["expired"]["index.files"] == files and report["expired"]["index.entries"] == entries
    assert report["expired"]["consumequeue.files"] > 0
    assert report["expired"]["consumequeue.units"] == expired_units(store, min_offset)


def test_damage_past_the_expired_head_is_still_found(spark, tmp_path):
    """A kept queue file's unit past the min offset, and the kept index file's entry past it, flipped: each is a
    finding at its byte offset; the expired units before them are not."""
    store = tmp_path / "store"
    min_offset = expired_copy("clean-medium-11", store, 10)
    cq = next(p for p in sorted(store.glob("consumequeue/*/*/*"))
              if any(struct.unpack_from(">q", p.read_bytes(), at)[0] < min_offset
                     for at in range(0, p.stat().st_size, CQ_UNIT)))
    data = bytearray(cq.read_bytes())
    at = next(a for a in range(0, len(data), CQ_UNIT) if struct.unpack_from(">q", data, a)[0] >= min_offset)
    data[at + 11] ^= 0x01  # the unit's size
    cq.write_bytes(bytes(data))
    files, entries = expired_index(store, min_offset)
    seed = sorted((store / "index").iterdir())[files]
    raw = bytearray(seed.read_bytes())
    pos = entries + 1  # the first entry at or past the min offset
    raw[40 + 64 * 4 + pos * 20 + 1] ^= 0x01  # its keyHash
    seed.write_bytes(bytes(raw))
    code, report = run_verify(store, tmp_path)
    assert code == 1
    rel = cq.relative_to(store).as_posix()
    cq_found = [d for d in report["findings"] if d["artifact"] == "consumequeue"]
    assert [(d["path"], d["kind"], d["byte_offset"], d["fields"]) for d in cq_found] == [
        (rel, "entry_differs", at, ["size"])]
    idx = [d for d in report["findings"] if d["artifact"] == "index" and d["kind"] == "entry_differs"]
    assert [(d["path"], d["position"], d["fields"]) for d in idx] == [(f"index/{seed.name}", pos, ["keyHash"])]
