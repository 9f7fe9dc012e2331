"""udfs/: the SQL functions against the golden stores, and against storage_format on 100,000 rows.

Golden comparisons read records with the `rocketmq-commitlog` DataFrame reader and compare with bytes
the broker wrote (consume-queue tagsCode, index keyHash and hash-slot chains), read independently by
tests/golden_walk.py and the small index walker below.
"""
from __future__ import annotations

import struct
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st
from pyspark.sql import functions as F
from pyspark.util import PythonEvalType

import udfs
from jobs.pipeline.scan.source import read_commitlog
from storage_format.consume_queue import tags_codes
from storage_format.index_file import key_slots
from storage_format.index_keys import index_key_hashes
from storage_format.java_hash import java_hash_arrow
from storage_format.msg_id import (
    decode_offset_msg_ids,
    decode_uniq_key as decode_uniq_key_scalar,
    decode_uniq_keys,
    encode_offset_msg_id as encode_offset_msg_id_scalar,
    encode_offset_msg_ids,
    encode_uniq_key,
)
from storage_format.properties import parse_properties_arrow, split_keys, split_keys_arrow
from storage_format.properties import parse_properties as parse_properties_scalar
from storage_format.settings import BrokerSettings, load_settings
from tests import golden_walk
from tests.conftest import GOLDEN, manifest

pytestmark = pytest.mark.floors  # Spark's Arrow UDFs: make test-floors runs it at the dependency floors

CASES = ("clean-small-11", "v5-clean-small-11")
ROLLBACK = 0xC


@pytest.fixture(scope="module")
def commitlogs(spark, golden):
    """Each golden case's records via the DataFrame reader, in two partitions, cached for this module."""
    frames = {}
    for case in CASES:
        store = GOLDEN / case
        frames[case] = read_commitlog(spark, str(store), str(store / "broker.conf")).coalesce(2).cache()
    yield frames
    for df in frames.values():
        df.unpersist()


def test_every_function_is_arrow_vectorised_and_registered(spark):
    """All functions are scalar Arrow UDFs (one Python call per Arrow batch, no per-row Python), and
    register() makes each one callable from SQL by its name."""
    names = udfs.register(spark)
    assert names == ["java_hash", "tags_code", "index_key_hash", "index_slot", "decode_offset_msg_id",
                     "encode_offset_msg_id", "decode_uniq_key", "parse_properties", "keys_of"]
    for name, fn in udfs.functions().items():
        assert fn.evalType == PythonEvalType.SQL_SCALAR_ARROW_UDF, name
        assert fn.__doc__ and ">>>" in fn.__doc__, f"{name} needs a docstring with an example"
    row = spark.sql(
        "SELECT java_hash('TagA') h, tags_code(NULL, 'SCHEDULE_TOPIC_XXXX', 3, 1000) t, "
        "index_slot('TopicTest', 'ORDER-1', 64) s, encode_offset_msg_id('192.168.0.10', 10911, 123456) m, "
        "decode_uniq_key('0A141E2A03094E25154F6D3F88CD0064', 1795324080402L).born_time b, "
        "parse_properties('A\\u0001x\\u0002A\\u0001y\\u0002\\u0001z\\u0002') p, keys_of(' a  b a ') k"
    ).first()
    assert (row.h, row.t, row.s, row.m) == (2598919, 11_000, 48, "C0A8000A00002A9F000000000001E240")
    assert (row.b, row.p, row.k) == (1795324080333, {"A": "y"}, ["a", "b", "a"])


def test_register_uses_store_delay_levels(spark):
    """register(spark, settings) binds tags_code to the store's messageDelayLevel (level clamped)."""
    udfs.register(spark, BrokerSettings(message_delay_level="2s 7m"))
    try:
        row = spark.sql("SELECT tags_code('x', 'SCHEDULE_TOPIC_XXXX', 1, 1000) a, "
                        "tags_code('x', 'SCHEDULE_TOPIC_XXXX', 5, 1000) b, tags_code('x', 'T', 5, 1000) c").first()
        assert (row.a, row.b, row.c) == (3_000, 1000 + 7 * 60_000, ord("x"))  # not a schedule topic: hash("x")
    finally:
        udfs.register(spark)


@pytest.mark.parametrize("case", CASES)
def test_tags_code_equals_golden_consume_queue(spark, commitlogs, case):
    """tags_code over every record with a consume-queue entry == the tagsCode the broker stored there
    (Java hash of TAGS, 0 without TAGS, delivery time for SCHEDULE_TOPIC_XXXX)."""
    tags_code = udfs.tags_code_function(load_settings(GOLDEN / case / "broker.conf").delay_levels_ms)
    entries = golden_walk.consume_queue_entries(case)
    cq = spark.createDataFrame(
        [(t, q, phy, size, tags) for t, q, phy, size, tags in entries],
        "cq_topic string, cq_queue int, phy bigint, cq_size int, cq_tags bigint",
    )
    rows = (
        cq.join(commitlogs[case], cq.phy == F.col("physical_offset"), "left")
        .select("cq_topic", "cq_queue", "cq_size", "cq_tags", "topic", "queue_id", "total_size",
                tags_code("tags", "topic", "delay_level", "store_timestamp").alias("code"))
        .collect()
    )
    assert len(rows) == len(entries) > 3000
    assert all(r.topic == r.cq_topic and r.queue_id == r.cq_queue and r.total_size == r.cq_size for r in rows)
    wrong = [r for r in rows if r.code != r.cq_tags]
    assert not wrong, wrong[:3]
    schedule = [r for r in rows if r.topic == "SCHEDULE_TOPIC_XXXX"]
    assert len(schedule) > 100 and all(r.code > 10**12 for r in schedule)  # delivery times, not hashes
    assert sum(r.code != 0 for r in rows if r.topic != "SCHEDULE_TOPIC_XXXX") > 1000


def _golden_index(case: str) -> dict[int, list[tuple[int, int]]]:
    """phyOffset -> [(keyHash, slot)] of every index entry in file order; the slot is found by walking
    each slot's chain of previous-entry positions in the index file bytes."""
    slots = int(golden_walk.broker_conf(case)["maxHashSlotNum"])
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for file in sorted((golden_walk.case_dir(case) / "index").iterdir()):
        buf = file.read_bytes()
        (count,) = struct.unpack_from(">i", buf, 36)
        heads = struct.unpack_from(f">{slots}i", buf, 40)
        entries = [struct.unpack_from(">iqii", buf, 40 + slots * 4 + p * 20) for p in range(count)]
        slot_of: dict[int, int] = {}
        for slot, position in enumerate(heads):
            while 0 < position < count and position not in slot_of:
                slot_of[position] = slot
                position = entries[position][3]
        for position in range(1, count):
            key_hash, phy, _, _ = entries[position]
            out[phy].append((key_hash, slot_of.get(position, -1)))
    return out


@pytest.mark.parametrize("case", CASES)
def test_index_key_hash_and_slot_equal_golden_index(commitlogs, case):
    """For every record, [index_key_hash, index_slot] of `topic#UNIQ_KEY` then `topic#token` for each
    keys_of(KEYS) token == the keyHash and slot of its entries in the broker's index files, in order."""
    slots = int(golden_walk.broker_conf(case)["maxHashSlotNum"])
    keys = F.concat(F.when(F.col("uniq_key").isNotNull(), F.array("uniq_key")).otherwise(F.array()),
                    F.coalesce(udfs.keys_of("keys"), F.array()))
    rows = (
        commitlogs[case].filter(F.col("transaction_type") != ROLLBACK)
        .select("physical_offset", "topic", F.posexplode(keys).alias("n", "key"))
        .select("physical_offset", "n", udfs.index_key_hash("topic", "key").alias("h"),
                udfs.index_slot("topic", "key", F.lit(slots)).alias("s"))
        .collect()
    )
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.physical_offset, r.n)):
        got[r.physical_offset].append((r.h, r.s))
    expected = _golden_index(case)
    assert sum(map(len, expected.values())) == len(rows) > 8000
    assert got == expected
    assert any(h == 0 for entries in expected.values() for h, _ in entries)  # the Integer.MIN_VALUE key


@pytest.mark.parametrize("case", CASES)
def test_offset_msg_ids_round_trip_on_golden_records(commitlogs, case):
    """encode_offset_msg_id(store host, port, physical offset) of every record decodes back to the same
    parts and equals the scalar encoder; IPv6 store hosts give 56-character ids."""
    parts = commitlogs[case].select(
        F.regexp_extract("store_host", r"^\[?([^\]]*)\]?:(\d+)$", 1).alias("host"),
        F.regexp_extract("store_host", r":(\d+)$", 1).cast("int").alias("port"), "physical_offset")
    ids = parts.withColumn("id", udfs.encode_offset_msg_id("host", "port", "physical_offset"))
    rows = ids.select("*", udfs.decode_offset_msg_id("id").alias("d")).collect()
    assert len(rows) == manifest(case)["commitlog_scan"]["message_records"]
    for r in rows:
        assert (r.d.store_host, r.d.store_port, r.d.physical_offset) == (r.host, r.port, r.physical_offset)
        assert r.id == encode_offset_msg_id_scalar(r.host, r.port, r.physical_offset)
    assert {len(r.id) for r in rows} == {32, 56}  # both cases have an IPv6 store host in session 2


@pytest.mark.parametrize("case", CASES)
def test_decode_uniq_key_born_times_in_store_time_range(commitlogs, case):
    """Golden UNIQ_KEY values: with store_timestamp as the reference every born time lies in the store's
    time range and not after the record's store time; with born_timestamp it is within 1 s of it; the
    other fields equal the scalar decoder; without a reference born_time is NULL."""
    scan = manifest(case)["commitlog_scan"]
    rows = (
        commitlogs[case].filter("uniq_key IS NOT NULL")
        .select("uniq_key", "store_timestamp", "born_timestamp",
                udfs.decode_uniq_key("uniq_key", "store_timestamp").alias("by_store"),
                udfs.decode_uniq_key("uniq_key", "born_timestamp").alias("by_born"),
                udfs.decode_uniq_key("uniq_key").alias("plain"))
        .collect()
    )
    assert len(rows) > 2500
    for r in rows:
        assert scan["first_store_timestamp"] - 1000 <= r.by_store.born_time <= r.store_timestamp
        assert r.store_timestamp <= scan["last_store_timestamp"]
        assert abs(r.by_born.born_time - r.born_timestamp) <= 1000
        assert r.plain.born_time is None
        ref = decode_uniq_key_scalar(r.uniq_key, r.store_timestamp)
        assert r.by_store.asDict() == {"client_ip": ref.client_ip, "pid": ref.pid,
                                       "classloader_hash": ref.classloader_hash, "born_time": ref.born_time,
                                       "counter": ref.counter, "born_time_offset_ms": ref.born_time_offset_ms}


@pytest.mark.parametrize("case", CASES)
def test_parse_properties_and_keys_of_equal_golden_records(commitlogs, case):
    """parse_properties(properties) of every record == the golden walker's property map, and
    keys_of(KEYS) == the KEYS split the index uses."""
    by_offset = {r.physical_offset: r.properties for r in golden_walk.records(case)}
    rows = commitlogs[case].select(
        "physical_offset", udfs.parse_properties("properties").alias("p"),
        udfs.keys_of(udfs.parse_properties("properties")["KEYS"]).alias("k")).collect()
    assert len(rows) == len(by_offset)
    for r in rows:
        assert r.p == by_offset[r.physical_offset]
        assert r.k == (None if "KEYS" not in r.p else split_keys(r.p["KEYS"]))


# ------------------------------------------------------------------ 100,000 rows vs storage_format

N = 100_000


def _pool_column(rng: np.random.Generator, pool: list, n: int, kind: pa.DataType) -> pa.Array:
    """n values drawn (vectorised) from a pool of Python values."""
    return pa.array(pool, type=kind).take(pa.array(rng.integers(0, len(pool), n)))


def _synthetic_table(n: int) -> pa.Table:
    """Rows that exercise every function: non-ASCII and non-BMP text, NULLs, empty values, duplicate
    property names, KEYS with runs of spaces, IPv4/IPv6 ids, malformed ids, schedule topics."""
    rng = np.random.default_rng(8)
    alphabet = ["a", "Z", "9", " ", "|", "é", "订", "😀", "\x01", "\x02", "TAGS", "KEYS", "DELAY"]
    words = ["".join(rng.choice(alphabet, rng.integers(0, 8))) for _ in range(3000)]
    pool_text = [None, ""] + words
    topics = ["TopicTest", "SCHEDULE_TOPIC_XXXX", "订单-topic", "%RETRY%g|x", "t" * 150, None]
    uniq = [encode_uniq_key(bytes(rng.integers(0, 256, 4 if i % 3 else 16, dtype=np.uint8)),
                            int(rng.integers(0, 2**16)), int(rng.integers(-(2**31), 2**31)),
                            int(rng.integers(0, 2**32)), int(rng.integers(0, 2**16)))
            for i in range(2000)]
    uniq += [None, "", "XYZ", uniq[0].lower(), uniq[1][:-1] + "G", "01" + "AB" * 16]
    hosts = ["10.0.0.1", "192.168.0.10", "fd00::10", "::1", "255.255.255.255", None]
    offsets = rng.integers(-(2**62), 2**62, n)
    delay = rng.integers(-3, 25, n)
    slots = rng.integers(-1, 5_000_001, n)
    store_ts = rng.integers(1_600_000_000_000, 1_900_000_000_000, n)
    return pa.table({
        "id": pa.array(np.arange(n)),
        "tags": _pool_column(rng, pool_text, n, pa.string()),
        "topic": _pool_column(rng, topics, n, pa.string()),
        "delay_level": pa.array(delay, pa.int32(), mask=delay < 0),
        "store_timestamp": pa.array(store_ts, pa.int64(), mask=rng.random(n) < 0.01),
        "slots": pa.array(slots, pa.int32(), mask=slots < 0),
        "uniq_key": _pool_column(rng, uniq, n, pa.string()),
        "host": _pool_column(rng, hosts, n, pa.string()),
        "port": pa.array(rng.integers(-(2**31), 2**31, n), pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "properties": _pool_column(rng, pool_text, n, pa.string()),
    })


def test_100k_rows_equal_storage_format(spark):
    """Over 100,000 rows every Spark function gives exactly what storage_format's functions (and, for
    properties and KEYS, the broker's scalar reference rules) give on the same Arrow columns."""
    table = _synthetic_table(N)
    df = spark.createDataFrame(table)
    out = df.select(
        "id",
        udfs.java_hash("tags").alias("java_hash"),
        udfs.tags_code("tags", "topic", "delay_level", "store_timestamp").alias("tags_code"),
        udfs.index_key_hash("topic", "tags").alias("key_hash"),
        udfs.index_slot("topic", "tags", "slots").alias("slot"),
        udfs.encode_offset_msg_id("host", "port", "offset").alias("msg_id"),
        udfs.decode_offset_msg_id(udfs.encode_offset_msg_id("host", "port", "offset")).alias("decoded"),
        udfs.decode_uniq_key("uniq_key", "store_timestamp").alias("uniq"),
        udfs.parse_properties("properties").alias("props"),
        udfs.keys_of("tags").alias("keys"),
    ).toArrow().sort_by("id")
    assert out.num_rows == N
    col = {name: out.column(name).combine_chunks() for name in out.column_names}

    def masked(values: np.ndarray, valid: np.ndarray) -> list:
        return pa.array(values, mask=~valid).to_pylist()

    tags, topic, key_valid = table["tags"], table["topic"], ~np.asarray(pc.is_null(table["tags"]))
    topic_valid = ~np.asarray(pc.is_null(topic))
    assert col["java_hash"].to_pylist() == masked(java_hash_arrow(tags), key_valid)
    delay = table["delay_level"].fill_null(-1).to_numpy()
    ts_valid = ~np.asarray(pc.is_null(table["store_timestamp"]))
    codes = tags_codes(tags, topic, delay, table["store_timestamp"].fill_null(0).to_numpy(),
                       BrokerSettings().delay_levels_ms)
    assert col["tags_code"].to_pylist() == masked(codes, topic_valid & ts_valid)
    assert sum(c is not None and c > 10**12 for c in col["tags_code"].to_pylist()) > 1000
    hashes = index_key_hashes(topic, tags)
    assert col["key_hash"].to_pylist() == masked(hashes, key_valid & topic_valid)
    slots = table["slots"].fill_null(0).to_numpy()
    slot_ok = key_valid & topic_valid & (slots > 0)
    assert col["slot"].to_pylist() == masked(key_slots(hashes, np.maximum(slots, 1)), slot_ok)

    ids = encode_offset_msg_ids(table["host"], table["port"], table["offset"])
    assert col["msg_id"].to_pylist() == ids.to_pylist()
    back = decode_offset_msg_ids(ids, on_error="null")
    assert col["decoded"].to_pylist() == [
        None if d is None else {"store_host": d["host"], "store_port": d["port"],
                                "physical_offset": d["physical_offset"]}
        for d in back.to_pylist()]

    uniq = decode_uniq_keys(table["uniq_key"], table["store_timestamp"], on_error="null")
    fields = [f.name for f in col["uniq"].type]
    assert col["uniq"].to_pylist() == [None if u is None else {f: u[f] for f in fields} for u in uniq.to_pylist()]
    assert 0 < col["uniq"].null_count < N // 50  # malformed and NULL keys only

    assert col["props"].to_pylist() == parse_properties_arrow(table["properties"]).to_pylist()
    reference = [None if raw is None else parse_properties_scalar(raw) for raw in table["properties"].to_pylist()]
    assert [None if m is None else dict(m) for m in col["props"].to_pylist()] == reference
    assert col["keys"].to_pylist() == split_keys_arrow(tags).to_pylist()
    assert col["keys"].to_pylist() == [None if t is None else split_keys(t) for t in tags.to_pylist()]


# ------------------------------------------------------------------ the whole-column parsers (no Spark)

# "Aa" and "BB" have the same length and Java hash: duplicate detection must still compare bytes.
PIECES = st.sampled_from(["\x01", "\x02", "A", "B", "x", " ", "  ", "é", "🔑", "", "Aa", "BB"])
TEXT = st.one_of(st.none(), st.lists(PIECES, max_size=12).map("".join))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(TEXT, max_size=8), start=st.integers(0, 3))
def test_column_parsers_equal_scalar_rules(rows, start):
    """parse_properties_arrow / split_keys_arrow == the scalar reference rules row by row, on sliced
    arrays too (an Arrow slice starts mid-buffer) and for binary input."""
    arr = pa.array(["\x02A\x01z"] * start + rows, pa.string()).slice(start)
    maps = parse_properties_arrow(arr).to_pylist()
    expected = [None if r is None else parse_properties_scalar(r) for r in rows]
    assert [None if m is None else dict(m) for m in maps] == expected
    assert all(m is None or len({k for k, _ in m}) == len(m) for m in maps)  # one entry per name
    assert split_keys_arrow(arr).to_pylist() == [None if r is None else split_keys(r) for r in rows]
    binary = split_keys_arrow(arr.cast(pa.binary())).to_pylist()
    assert binary == [None if r is None else [k.encode() for k in split_keys(r)] for r in rows]


def test_parse_properties_arrow_with_equal_name_hashes():
    """Names with equal length and Java hash ("Aa", "BB") are still told apart; duplicates still collapse."""
    raw = pa.array(["Aa\x01x\x02BB\x01y\x02Aa\x01z\x02", "Aa\x01x\x02Aa\x01w", None])
    assert [None if m is None else dict(m) for m in parse_properties_arrow(raw).to_pylist()] == [
        {"Aa": "z", "BB": "y"}, {"Aa": "w"}, None]
