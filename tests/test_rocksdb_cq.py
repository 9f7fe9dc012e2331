"""The RocksDB consume-queue codec against every key and value of the golden RocksDB databases (their logical dumps,
written by an independent reader), and round trips of every field range."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_format import rocksdb_cq as rc

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden" / "rocksdb"
DUMPS = sorted(GOLDEN.glob("*/expected-cq.jsonl"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.parent.name)
def test_every_golden_key_and_value_decodes_to_the_dumps_fields_and_encodes_back(dump):
    lines = _lines(dump)
    kinds = {"unit": 0, "max": 0, "min": 0, "checkpoint": 0}
    for rec in lines:
        key, value = bytes.fromhex(rec["key"]), bytes.fromhex(rec["value"])
        topic = rec.get("topic", "").encode()
        if rec["cf"] == rc.DEFAULT_CF:
            k, v = rc.parse_unit_key(key), rc.parse_unit_value(value)
            assert (k.topic, k.queue_id, k.queue_offset) == (topic, rec["queueId"], rec["queueOffset"])
            assert (v.phy_offset, v.size, v.tags_code, v.store_timestamp) == (
                rec["commitLogOffset"], rec["size"], rec["tagsCode"], rec["storeTimestamp"])
            assert rc.unit_key(k.topic, k.queue_id, k.queue_offset) == key and rc.unit_value(v) == value
            lower, upper = rc.queue_key_range(k.topic, k.queue_id)
            assert lower < key < upper
            kinds["unit"] += 1
        elif rc.is_checkpoint_key(key):
            assert rc.parse_checkpoint_value(value) == rec["checkpointPhyOffset"]
            assert rc.checkpoint_value(rec["checkpointPhyOffset"]) == value
            kinds["checkpoint"] += 1
        else:
            k, v = rc.parse_offset_key(key), rc.parse_offset_value(value)
            assert (k.topic, k.kind.decode(), k.queue_id) == (topic, rec["kind"], rec["queueId"])
            assert (v.phy_offset, v.queue_offset) == (rec["commitLogOffset"], rec["queueOffset"])
            assert rc.offset_key(k.topic, k.kind, k.queue_id) == key and rc.offset_value(v) == value
            kinds[rec["kind"]] += 1
    assert kinds["unit"] > 3000 and kinds["max"] > 10
    assert kinds["checkpoint"] == 1  # every case was flushed after dispatch (cq-deleted-11: after its rebuild)


@pytest.mark.parametrize("dump", DUMPS[:1], ids=lambda p: p.parent.name)
def test_unit_values_decode_in_bulk_as_one_by_one(dump):
    units = [r for r in _lines(dump) if r["cf"] == rc.DEFAULT_CF]
    bulk = rc.unit_values(b"".join(bytes.fromhex(r["value"]) for r in units))
    assert bulk["phy_offset"].tolist() == [r["commitLogOffset"] for r in units]
    assert bulk["size"].tolist() == [r["size"] for r in units]
    assert bulk["tags_code"].tolist() == [r["tagsCode"] for r in units]
    assert bulk["store_timestamp"].tolist() == [r["storeTimestamp"] for r in units]


def test_the_golden_set_is_there():
    assert len(DUMPS) == 6, f"expected the six golden RocksDB cases under {GOLDEN}"


I32 = st.integers(-2**31, 2**31 - 1)
I64 = st.integers(-2**63, 2**63 - 1)


@given(st.binary(max_size=300), I32, I64)
def test_unit_keys_round_trip(topic, queue_id, queue_offset):
    key = rc.unit_key(topic, queue_id, queue_offset)
    assert len(key) == rc.UNIT_KEY_FIXED + len(topic)
    assert rc.parse_unit_key(key) == rc.UnitKey(topic, queue_id, queue_offset)


@given(I64, I32, I64, I64)
def test_unit_values_round_trip(phy, size, tags, ts):
    unit = rc.Unit(phy, size, tags, ts)
    assert rc.parse_unit_value(rc.unit_value(unit)) == unit
    assert rc.unit_values(rc.unit_value(unit) * 2)["tags_code"].tolist() == [tags, tags]


@given(st.binary(max_size=300), st.sampled_from([rc.MAX_KIND, rc.MIN_KIND]), I32, I64, I64)
def test_offset_records_round_trip(topic, kind, queue_id, phy, queue_offset):
    assert rc.parse_offset_key(rc.offset_key(topic, kind, queue_id)) == rc.OffsetKey(topic, kind, queue_id)
    value = rc.OffsetValue(phy, queue_offset)
    assert rc.parse_offset_value(rc.offset_value(value)) == value


@given(I64)
def test_checkpoint_round_trips(phy):
    assert rc.parse_checkpoint_value(rc.checkpoint_value(phy)) == phy


@pytest.mark.parametrize("key", [b"", b"\x00\x00\x00\x09\x01TopicTest\x01", rc.unit_key(b"T", 0, 0)[:-1],
                                 rc.unit_key(b"T", 0, 0).replace(b"\x01T\x01", b"\x02T\x01"),
                                 b"\x7f\xff\xff\xff" + rc.unit_key(b"T", 0, 0)[4:]])
def test_malformed_unit_keys_are_refused(key):
    with pytest.raises(rc.RocksCqFormatError):
        rc.parse_unit_key(key)


def test_a_unit_key_is_not_an_offset_key_and_values_of_other_sizes_are_refused():
    with pytest.raises(rc.RocksCqFormatError):
        rc.parse_offset_key(rc.unit_key(b"TopicTest", 0, 0))
    for parse, size in ((rc.parse_unit_value, 27), (rc.parse_offset_value, 8), (rc.parse_checkpoint_value, 16)):
        with pytest.raises(rc.RocksCqFormatError):
            parse(bytes(size))
