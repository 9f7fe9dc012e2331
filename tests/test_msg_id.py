"""Offset message ids and producer unique keys: layouts, round trips, month arithmetic, golden keys."""
from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import zoneinfo
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from storage_format.msg_id import (
    OFFSET_MSG_ID_TYPE,
    UNIQ_KEY_TYPE,
    OffsetMsgId,
    UniqKey,
    decode_offset_msg_id,
    decode_offset_msg_ids,
    decode_uniq_key,
    decode_uniq_keys,
    encode_offset_msg_id,
    encode_offset_msg_ids,
    encode_uniq_key,
)
from storage_format.month_time import born_time_ms, month_start_ms
from tests import golden_walk

GOLDEN_UNIQ = "0A141E2A03094E25154F6D3F88CD0064"  # first record of clean-small-11
GOLDEN_UNIQ_V6 = "FD0000AB00CD000000000000000000177A69070DEA4E6D3F891E00C8"

hosts_v4 = st.binary(min_size=4, max_size=4)
hosts_v6 = st.binary(min_size=16, max_size=16)
hosts = st.one_of(hosts_v4, hosts_v6)
java_ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
java_longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_offset_msg_id_layout() -> None:
    """Host + port + offset as upper-case hex, IPv4 (32 chars) and IPv6 (56 chars)."""
    msg_id = encode_offset_msg_id(bytes([192, 168, 0, 10]), 10911, 123456)
    assert msg_id == "C0A8000A" "00002A9F" "000000000001E240"
    assert decode_offset_msg_id(msg_id) == OffsetMsgId("192.168.0.10", b"\xc0\xa8\x00\x0a", 10911, 123456)
    assert decode_offset_msg_id(msg_id.lower()) == decode_offset_msg_id(msg_id)
    v6 = encode_offset_msg_id("fd00::10", 10911, 2234275)
    assert len(v6) == 56
    assert v6 == "FD000000000000000000000000000010" "00002A9F" "00000000002217A3"
    assert decode_offset_msg_id(v6).host == "fd00::10"


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("", "0 characters"),
        ("C0A8000A00002A9F000000000001E24", "31 characters"),
        ("C0A8000A00002A9F000000000001E2400", "33 characters"),
        ("C0A8000A00002A9F000000000001E24G", "not hexadecimal"),
        ("C0A8000A 0002A9F000000000001E240", "not hexadecimal"),
        ("Ｃ0A8000A00002A9F000000000001E240", "not hexadecimal"),
    ],
)
def test_malformed_offset_msg_id(bad: str, words: str) -> None:
    """Wrong length or non-hex characters raise ValueError saying which."""
    with pytest.raises(ValueError, match=words):
        decode_offset_msg_id(bad)


def test_offset_msg_id_encode_rejects() -> None:
    """Hosts of a wrong size and values that overflow their field are refused."""
    with pytest.raises(ValueError, match="4 .IPv4. or 16"):
        encode_offset_msg_id(b"\x01\x02\x03", 1, 1)
    with pytest.raises(ValueError, match="port"):
        encode_offset_msg_id(b"\x01\x02\x03\x04", 2**31, 1)
    with pytest.raises(ValueError, match="physical offset"):
        encode_offset_msg_id(b"\x01\x02\x03\x04", 1, 2**63)
    with pytest.raises(ValueError, match="not an IP address"):
        encode_offset_msg_id("not-an-ip", 1, 1)


@given(hosts, java_ints, java_longs)
def test_offset_msg_id_round_trip(host: bytes, port: int, offset: int) -> None:
    """encode -> decode gives the parts back for any host, int port and long offset."""
    msg_id = encode_offset_msg_id(host, port, offset)
    assert len(msg_id) == (32 if len(host) == 4 else 56)
    assert msg_id == msg_id.upper()
    decoded = decode_offset_msg_id(msg_id)
    assert (decoded.host_bytes, decoded.port, decoded.physical_offset) == (host, port, offset)
    assert decoded.host == str(ipaddress.ip_address(host))


@given(st.lists(st.one_of(st.none(), st.tuples(hosts, java_ints, java_longs)), max_size=25))
@settings(deadline=None)
def test_offset_msg_ids_vectorised_equal_scalar(rows: list[tuple[bytes, int, int] | None]) -> None:
    """Vectorised encode/decode (with nulls) == the scalar forms."""
    host_col = pa.array([None if r is None else r[0] for r in rows], pa.binary())
    port_col = pa.array([None if r is None else r[1] for r in rows], pa.int64())
    offset_col = np.array([0 if r is None else r[2] for r in rows], dtype=np.int64)
    ids = encode_offset_msg_ids(host_col, port_col, offset_col)
    expected = [None if r is None else encode_offset_msg_id(*r) for r in rows]
    assert ids.to_pylist() == expected
    decoded = decode_offset_msg_ids(ids)
    assert decoded.type == OFFSET_MSG_ID_TYPE
    assert decoded.to_pylist() == [None if e is None else dataclasses.asdict(decode_offset_msg_id(e)) for e in expected]


def test_offset_msg_ids_inputs() -> None:
    """Host matrices, textual hosts, slices, chunks and dictionaries; bad hosts raise."""
    matrix = np.array([[10, 0, 0, 1], [10, 0, 0, 2]], dtype=np.uint8)
    ids = encode_offset_msg_ids(matrix, np.array([1, 2]), np.array([3, 4]))
    assert ids.to_pylist() == [encode_offset_msg_id(bytes(r), p, o) for r, p, o in zip(matrix, [1, 2], [3, 4])]
    text = encode_offset_msg_ids(["10.0.0.1", "fd00::10", None], np.array([1, 2, 3]), np.array([3, 4, 5]))
    assert text.to_pylist() == [encode_offset_msg_id("10.0.0.1", 1, 3), encode_offset_msg_id("fd00::10", 2, 4), None]
    with pytest.raises(ValueError, match="row 1 has 3"):
        encode_offset_msg_ids([b"\x01\x02\x03\x04", b"\x01\x02\x03"], np.array([1, 2]), np.array([3, 4]))
    with pytest.raises(ValueError, match="Java int"):
        encode_offset_msg_ids([b"\x01\x02\x03\x04"], np.array([2**31]), np.array([3]))
    # Sliced, chunked and dictionary inputs decode the same.
    ids = encode_offset_msg_ids(pa.array([b"\x01\x02\x03\x04"] * 6), np.arange(6), np.arange(6) * 1000)
    whole = decode_offset_msg_ids(ids).to_pylist()
    assert decode_offset_msg_ids(ids.slice(2, 3)).to_pylist() == whole[2:5]
    assert decode_offset_msg_ids(pa.chunked_array([ids.slice(0, 2), ids.slice(2)])).to_pylist() == whole
    assert decode_offset_msg_ids(ids.dictionary_encode()).to_pylist() == whole
    assert decode_offset_msg_ids(pa.array([], pa.string())).to_pylist() == []


def test_offset_msg_ids_malformed() -> None:
    """Malformed ids raise naming the first row, or become null on request."""
    good = encode_offset_msg_id(b"\x01\x02\x03\x04", 5, 6)
    values = [good, "nothex" * 6, None, good[:-1], good.lower()]
    with pytest.raises(ValueError, match="2 malformed offset message id.*row 1"):
        decode_offset_msg_ids(pa.array(values))
    nulls = decode_offset_msg_ids(pa.array(values), on_error="null").to_pylist()
    assert nulls == [dataclasses.asdict(decode_offset_msg_id(good)), None, None, None,
                     dataclasses.asdict(decode_offset_msg_id(good))]
    with pytest.raises(ValueError, match="on_error"):
        decode_offset_msg_ids(pa.array(values), on_error="ignore")


def test_uniq_key_layout() -> None:
    """A real key from the golden store split into IP, pid, loader hash, offset, counter."""
    key = decode_uniq_key(GOLDEN_UNIQ)
    assert key == UniqKey("10.20.30.42", 0x0309, 0x4E25154F, 0x6D3F88CD, 0x64, None)
    # Its record in clean-small-11 was born at 1795324080333 and stored at 1795324080402.
    assert decode_uniq_key(GOLDEN_UNIQ, reference_ms=1795324080402).born_time == 1795324080333
    v6 = decode_uniq_key(GOLDEN_UNIQ_V6)
    assert (v6.client_ip, v6.pid, v6.counter) == ("fd00:ab:cd::17", 0x7A69, 0xC8)
    assert encode_uniq_key("10.20.30.42", 0x0309, 0x4E25154F, 0x6D3F88CD, 0x64) == GOLDEN_UNIQ
    # Day 25+ of a month: the producer's (int) cast wrote a negative number; read back unsigned.
    late = encode_uniq_key("10.0.0.1", 1, -1, -(2**31) + 5, 1)
    assert decode_uniq_key(late).born_time_offset_ms == 2**31 + 5
    with pytest.raises(ValueError, match="unique key .* 30 characters"):
        decode_uniq_key(GOLDEN_UNIQ[:-2])
    with pytest.raises(ValueError, match="not hexadecimal"):
        decode_uniq_key(GOLDEN_UNIQ[:-1] + "x")


@given(st.one_of(hosts_v4, hosts_v6), st.integers(0, 0xFFFF), java_ints, st.integers(0, 2**32 - 1),
       st.integers(0, 0xFFFF))
def test_uniq_key_round_trip(ip: bytes, pid: int, loader: int, offset: int, counter: int) -> None:
    """encode_uniq_key -> decode_uniq_key gives the parts back."""
    key = encode_uniq_key(ip, pid, loader, offset, counter)
    assert len(key) == (32 if len(ip) == 4 else 56)
    assert decode_uniq_key(key) == UniqKey(str(ipaddress.ip_address(ip)), pid, loader, offset, counter, None)


def java_month_start(ms: int, tz: str, back: int = 0) -> int:
    """Reference for java.util.Calendar's lenient start of the month `back` months before the one
    holding `ms`: a DST gap resolves to its end, an overlap to its later instant - i.e. the later of
    zoneinfo's fold=0 and fold=1 readings of local midnight on the 1st."""
    zone = zoneinfo.ZoneInfo(tz)
    local = dt.datetime.fromtimestamp(ms / 1000, zone)
    year, month = divmod(local.year * 12 + local.month - 1 - back, 12)
    first = dt.datetime(year, month + 1, 1, tzinfo=zone)
    return max(int(first.replace(fold=f).timestamp() * 1000) for f in (0, 1))


ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "America/Asuncion", "America/Havana", "Europe/London"]
instants = st.integers(min_value=946_684_800_000, max_value=4_102_444_800_000)  # 2000 .. 2100


# (zone, instant, month start) printed by OpenJDK 17's Calendar; the first two are a DST gap and a
# DST overlap at local midnight on the 1st.
JDK_MONTH_STARTS = [
    ("America/Asuncion", 1697382000000, 1696132800000),
    ("America/Havana", 1447131600000, 1446354000000),
    ("America/Havana", 1333382400000, 1333256400000),
    ("Asia/Shanghai", 1714838400000, 1714492800000),
    ("UTC", 1795324080333, 1793491200000),
    ("Europe/London", 1730246400000, 1727737200000),
]


@pytest.mark.parametrize(("tz", "instant", "start"), JDK_MONTH_STARTS)
def test_month_start_like_java(tz: str, instant: int, start: int) -> None:
    """Month starts the JDK computed, including a DST gap and overlap at midnight."""
    assert month_start_ms(np.array([instant]), tz).tolist() == [start]
    assert java_month_start(instant, tz) == start


@given(st.lists(instants, min_size=1, max_size=10), st.sampled_from(ZONES))
@settings(deadline=None)
def test_month_start_matches_reference(values: list[int], tz: str) -> None:
    """Vectorised month starts (and the month before) == the zoneinfo reference."""
    assert month_start_ms(np.array(values), tz).tolist() == [java_month_start(v, tz) for v in values]
    previous = [java_month_start(v, tz, back=1) for v in values]
    assert month_start_ms(np.array(values), tz, months_back=1).tolist() == previous


def test_month_start_before_1970() -> None:
    """Negative epoch milliseconds floor to the right month."""
    assert month_start_ms(np.array([-1, 0]), "UTC").tolist() == [-31 * 86_400_000, 0]


@given(instants, st.integers(min_value=0, max_value=27 * 86_400_000), st.sampled_from(ZONES))
@settings(deadline=None)
def test_born_time_from_later_reference(born: int, delay: int, tz: str) -> None:
    """A key made at `born` decodes back to `born` from any reference up to 27 days later."""
    offset = born - java_month_start(born, tz)
    assume(offset >= 0)  # an overlap at midnight can put the month start after the first instants
    key = encode_uniq_key("10.0.0.1", 1, 2, offset, 3)
    assert decode_uniq_key(key, reference_ms=born + delay, tz=tz).born_time == born
    got = decode_uniq_keys(pa.array([key]), np.array([born + delay]), tz=tz)
    assert got.field("born_time").to_pylist() == [born]


def test_born_time_slack() -> None:
    """future_slack_ms keeps a born time slightly after the reference in its month."""
    # Reference 1 s before the id's time in the same month: previous month without slack.
    key = encode_uniq_key("10.0.0.1", 1, 2, 10_000, 3)
    ref = 1793491200000 + 9_000  # 2026-11-01T00:00:09Z
    assert decode_uniq_key(key, ref).born_time == 1790812800000 + 10_000  # 2026-10-01T00:00:10Z
    assert decode_uniq_key(key, ref, future_slack_ms=2_000).born_time == 1793491200000 + 10_000
    assert born_time_ms(np.array([10_000]), np.array([ref]), "UTC", 2_000).tolist() == [1793491210000]


@given(st.lists(st.one_of(st.none(), st.tuples(st.one_of(hosts_v4, hosts_v6), st.integers(0, 0xFFFF), java_ints,
                                               st.integers(0, 2**32 - 1), st.integers(0, 0xFFFF))), max_size=20),
       st.sampled_from(["UTC", "Asia/Shanghai"]))
@settings(deadline=None)
def test_uniq_keys_vectorised_equal_scalar(rows: list[tuple | None], tz: str) -> None:
    """Vectorised key decoding (with nulls, references, zones) == scalar."""
    keys = [None if r is None else encode_uniq_key(*r) for r in rows]
    refs = np.full(len(rows), 1_795_324_080_402, dtype=np.int64)
    got = decode_uniq_keys(pa.array(keys, pa.string()), refs, tz=tz)
    assert got.type == UNIQ_KEY_TYPE
    expected = [None if k is None else dataclasses.asdict(decode_uniq_key(k, 1_795_324_080_402, tz)) for k in keys]
    assert got.to_pylist() == expected
    no_ref = decode_uniq_keys(pa.array(keys, pa.string()))
    assert no_ref.to_pylist() == [None if k is None else dataclasses.asdict(decode_uniq_key(k)) for k in keys]


def test_uniq_keys_malformed_and_null_references() -> None:
    """Malformed keys raise or become null; null references give null born times."""
    values = [GOLDEN_UNIQ, "x" * 32, GOLDEN_UNIQ_V6, GOLDEN_UNIQ]
    with pytest.raises(ValueError, match="1 malformed unique key.*row 1"):
        decode_uniq_keys(pa.array(values))
    refs = pa.array([1795324080402, 1795324080402, None, 1795324080402], pa.int64())
    got = decode_uniq_keys(pa.array(values), refs, on_error="null").to_pylist()
    assert got[1] is None
    assert got[0]["born_time"] == 1795324080333
    assert got[2]["born_time"] is None and got[2]["client_ip"] == "fd00:ab:cd::17"
    with pytest.raises(ValueError, match="reference_ms has 1 values"):
        decode_uniq_keys(pa.array(values), np.array([1]), on_error="null")


@pytest.mark.parametrize("case", ["clean-small-11", "v5-clean-small-11"])
def test_golden_uniq_key_born_times(golden: Path, case: str) -> None:
    """UNIQ_KEYs the producers wrote decode to a born time just before the record's storeTimestamp,
    and (with the record's bornTimestamp as reference) to that bornTimestamp."""
    records = [r for r in golden_walk.records(case) if "UNIQ_KEY" in r.properties]
    keys = pa.array([r.properties["UNIQ_KEY"] for r in records])
    store = np.array([r.store_timestamp for r in records], dtype=np.int64)
    born = np.array([r.born_timestamp for r in records], dtype=np.int64)
    assert len(records) > 2500
    assert {len(k) for k in keys.to_pylist()} == {32, 56}  # IPv4 and IPv6 producers
    # Fresh records (stored within 5 s of being sent): born time in the 5 s before the store time.
    fresh = store - born < 5_000
    from_store = decode_uniq_keys(keys, store).field("born_time").to_numpy()
    gap = store[fresh] - from_store[fresh]
    assert fresh.sum() > 2500
    assert gap.min() >= 0 and gap.max() < 5_000
    # All records, including retries and delayed messages delivered 40 days later (which keep the
    # original key): with bornTimestamp as reference the key's time is that bornTimestamp, except
    # batch members, whose key is made a few ms before the batch's bornTimestamp is set.
    from_born = decode_uniq_keys(keys, born).field("born_time").to_numpy()
    lag = born - from_born
    assert lag.min() >= 0 and lag.max() < 5_000
    assert np.mean(lag == 0) > 0.95
    batch = np.array([r.topic == b"BatchTopic" for r in records])
    assert np.all(lag[~batch] == 0)


@pytest.mark.parametrize("case", ["clean-small-11"])
def test_golden_store_hosts_round_trip(golden: Path, case: str) -> None:
    """Offset ids of every golden record (IPv4 and IPv6 store hosts) encode and decode back."""
    records = golden_walk.records(case)
    hosts_col = pa.array([r.store_host for r in records], pa.binary())
    ports = np.array([r.store_port for r in records])
    offsets = np.array([r.physical_offset for r in records])
    ids = encode_offset_msg_ids(hosts_col, ports, offsets)
    assert {len(i) for i in ids.to_pylist()} == {32, 56}
    assert ids[0].as_py() == encode_offset_msg_id(records[0].store_host, records[0].store_port, 0)
    decoded = decode_offset_msg_ids(ids)
    assert decoded.field("host_bytes").to_pylist() == [r.store_host for r in records]
    assert decoded.field("physical_offset").to_numpy().tolist() == offsets.tolist()
    assert set(decoded.field("host").to_pylist()) == {"192.168.0.10", "fd00::10"}
