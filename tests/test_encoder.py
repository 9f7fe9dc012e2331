"""Commit-log encoder and sample store: golden bytes, broker segment rules, hypothesis round trips.

Everything is checked with a small struct-based parser (tests/record_parser.py), independent of
storage_format.commitlog, so the encoder and the decoder cannot share a mistake.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from storegen.encoder import (
    SegmentWriter,
    encode_record,
    record_size,
    segment_name,
    write_store,
)
from storage_format.record import MAGIC_V1, MAGIC_V2, Message, properties_string
from storegen.sample import (
    MIN_VALUE_KEY,
    MIN_VALUE_KEY_TOPIC,
    NON_ASCII_TOPIC,
    SEGMENT_SIZE,
    WEIRD_TOPIC,
    build_sample_messages,
    main as sample_main,
    write_sample_store,
)
from storage_format.settings import load_settings
from tests.conftest import GOLDEN
from tests.record_parser import as_input, parse_record, walk_segment


# ---------------------------------------------------------------------------------------------
# Java's String.hashCode and the golden stores as segments
# ---------------------------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 units, signed 32-bit."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def golden_store(case: str) -> tuple[Path, dict, list[tuple[str, bytes]]]:
    """A golden case: its directory, manifest and (segment name, bytes) pairs in order."""
    root = GOLDEN / case
    assert root.is_dir(), f"golden case missing: {root}"  # fail, never skip: these are the ground truth
    manifest = json.loads((root / "manifest.json").read_text())
    segs = [(name, (root / "commitlog" / name).read_bytes()) for name in sorted(os.listdir(root / "commitlog"))]
    return root, manifest, segs


def put_units(segs: list[tuple[str, bytes]]) -> list[Message | list[Message]]:
    """Golden records as puts: a run of BatchTopic records with one store/born time and queue is one batch.

    A batch never spans segments, so runs are also cut at segment ends (two batches of one millisecond).
    """
    units: list[Message | list[Message]] = []
    last_key = None
    for name, buf in segs:
        recs, _ = walk_segment(buf, int(name))
        last_key = None
        for _, msg, _ in recs:
            m = as_input(msg)
            key = (m.queue_id, m.born_timestamp, m.store_timestamp) if m.topic == "BatchTopic" else None
            if key is not None and key == last_key:
                units[-1].append(m)
            elif key is not None:
                units.append([m])
            else:
                units.append(m)
            last_key = key
    return units


def write_units(directory: str, units, segment_size: int, **kw) -> SegmentWriter:
    """Append puts (a Message or a batch list) to a new SegmentWriter and return it, unclosed."""
    w = SegmentWriter(directory, segment_size, **kw)
    for u in units:
        if isinstance(u, Message):
            w.append(u)
        else:
            w.append_batch(u)
    return w


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, as the manifests give it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Golden bytes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["clean-small-11", "v5-clean-small-11"])
def test_every_golden_record_reencodes_byte_identically(case: str) -> None:
    """Every record of every segment (IPv6, zlib, v2) re-encodes to the same bytes."""
    _, manifest, segs = golden_store(case)
    count = ipv6 = v2 = compressed = 0
    for name, buf in segs:
        recs, _ = walk_segment(buf, int(name))
        for pos, msg, total in recs:
            assert encode_record(as_input(msg), msg.physical_offset) == buf[pos:pos + total], (name, pos)
            count += 1
            ipv6 += bool(msg.sys_flag & 0x30)
            v2 += msg.magic_v2
            compressed += bool(msg.sys_flag & 0x1)
    assert count == manifest["commitlog_scan"]["message_records"]
    assert ipv6 > 100 and compressed > 10
    if case.startswith("v5-"):
        assert v2 >= 1  # the >127-char topic: v2 magic chosen by the encoder's own rule
    else:
        assert v2 == 0


@pytest.mark.parametrize("case,preallocate", [("clean-small-11", False), ("v5-clean-small-11", False),
                                              ("unclean-11", True)])
def test_segment_writer_reproduces_every_golden_segment(case: str, preallocate: bool, tmp_path: Path) -> None:
    """Whole commit log rewritten from records: BLANKs, zero tails, queue offsets, pre-allocation."""
    _, manifest, segs = golden_store(case)
    units = put_units(segs)
    expected_qoffsets = [walk_segment(buf, int(n))[0] for n, buf in segs]
    expected_qoffsets = [m.queue_offset for recs in expected_qoffsets for _, m, _ in recs]
    for u in units:  # queue offsets must come from the writer's own counters
        for m in [u] if isinstance(u, Message) else u:
            m.queue_offset = -1
    w = write_units(str(tmp_path), units, 262144)
    summary = w.close(preallocate_next=preallocate)
    names = sorted(os.listdir(tmp_path))
    assert names == [n for n, _ in segs]
    for name in names:
        assert sha256_file(tmp_path / name) == manifest["files"][f"commitlog/{name}"]["sha256"], name
    got_q = [m.queue_offset for u in units for m in ([u] if isinstance(u, Message) else u)]
    assert got_q == expected_qoffsets
    scan = manifest["commitlog_scan"]
    assert summary.records == scan["message_records"]
    assert summary.max_physical_offset == scan["max_physical_offset"]
    if preallocate:
        assert summary.preallocated == names[-1] and not any((tmp_path / names[-1]).read_bytes())


def test_single_golden_segment_from_its_start_offset(tmp_path: Path) -> None:
    """One segment alone (start_offset, given queue offsets): its BLANK is forced by the next batch."""
    _, manifest, segs = golden_store("clean-small-11")
    idx = [n for n, _ in segs].index("00000000000000786432")
    (name, buf), (next_name, next_buf) = segs[idx], segs[idx + 1]
    _, blank = walk_segment(buf, int(name))
    first_next = put_units([(next_name, next_buf)])[0]
    assert isinstance(first_next, list) and len(first_next) > 1  # a batch...
    assert record_size(first_next[0]) + 8 <= len(buf) - blank  # ...whose first record alone would fit
    units = put_units([(name, buf)]) + [first_next]
    w = write_units(str(tmp_path), units, 262144, start_offset=int(name), assign_queue_offsets=False)
    w.close()
    assert sha256_file(tmp_path / name) == manifest["files"][f"commitlog/{name}"]["sha256"]
    assert w.summary.segments == [name, next_name] and w.summary.blank_records == 1


# ---------------------------------------------------------------------------------------------
# Hypothesis: random messages
# ---------------------------------------------------------------------------------------------
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16))
topics = st.one_of(
    st.text(min_size=1, max_size=40),
    st.text(alphabet="abcXYZ-_%|0123456789", min_size=100, max_size=300),
    st.text(alphabet="主题Ωé🔑ab", min_size=60, max_size=140),
)
prop_names = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=12)
properties = st.one_of(
    st.dictionaries(prop_names, prop_names, max_size=6).map(properties_string),
    st.text(max_size=200),  # raw strings: empty values, stray separators, anything
)


@st.composite
def messages(draw) -> Message:
    """Random Messages over the whole Java value ranges, any topic, raw or structured properties."""
    topic = draw(topics)
    return Message(
        topic=topic, body=draw(st.binary(max_size=600)), queue_id=draw(INT32), queue_offset=draw(INT64),
        flag=draw(INT32), sys_flag=draw(INT32), born_timestamp=draw(INT64), born_host=draw(hosts),
        born_port=draw(INT32), store_timestamp=draw(INT64), store_host=draw(hosts), store_port=draw(INT32),
        reconsume_times=draw(INT32), prepared_transaction_offset=draw(INT64), properties=draw(properties),
        body_crc=draw(st.one_of(st.none(), st.integers(0, 2**31 - 1))),
        magic_v2=draw(st.sampled_from([None, None, True, False])),
    )


def utf16_len(s: str) -> int:
    """Java String.length(): UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


def expected_v2(msg: Message) -> bool:
    """Which magic the record must get: the message's override, else the 5.x topic-length rule."""
    return utf16_len(msg.topic) > 127 if msg.magic_v2 is None else msg.magic_v2


def fits(msg: Message) -> bool:
    """Whether the topic length fits its length field (1 byte for v1, else the encoder must refuse)."""
    return len(msg.topic.encode()) <= (0x7FFF if expected_v2(msg) else 0xFF)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(messages(), st.integers(0, 2**62))
def test_encode_then_parse_gives_the_same_fields(msg: Message, offset: int) -> None:
    """Encode -> independent parse: same fields; totalSize equals the field sum."""
    assume(fits(msg))
    raw = encode_record(msg, offset)
    got, total, used = parse_record(raw, 0)
    assert total == used == len(raw) == record_size(msg)
    tl = len(msg.topic.encode())
    computed = (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(msg.born_host) + 4 + 8 + len(msg.store_host) + 4 + 4 + 8
                + 4 + len(msg.body) + (2 if expected_v2(msg) else 1) + tl + 2 + len(msg.properties.encode()))
    assert total == computed
    want_flag = (msg.sys_flag & ~0x30) | (0x10 if len(msg.born_host) == 16 else 0) \
        | (0x20 if len(msg.store_host) == 16 else 0)
    want_crc = zlib.crc32(msg.body) & 0x7FFFFFFF if msg.body_crc is None else msg.body_crc
    assert got == replace(msg, physical_offset=offset, sys_flag=want_flag, body_crc=want_crc,
                          magic_v2=expected_v2(msg))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.text(alphabet="主题界世", min_size=86, max_size=127))
def test_v1_topic_longer_than_its_length_byte_is_refused(topic: str) -> None:
    # at most 127 UTF-16 units (so v1), but 3 UTF-8 bytes per char: more than a 1-byte length holds
    """A v1 topic of more than 255 UTF-8 bytes cannot be stored, so it is refused."""
    with pytest.raises(ValueError, match="1-byte length"):
        encode_record(Message(topic=topic), 0)


def test_topic_version_follows_java_string_length() -> None:
    """v2 exactly above 127 UTF-16 units (not code points), unless overridden."""
    assert encode_record(Message(topic="t" * 127), 0)[4:8] == MAGIC_V1.to_bytes(4, "big")
    assert encode_record(Message(topic="t" * 128), 0)[4:8] == MAGIC_V2.to_bytes(4, "big")
    # 64 characters outside the BMP are 128 UTF-16 units: v2 although len() is 64
    raw = encode_record(Message(topic="🔑" * 64), 0)
    assert raw[4:8] == MAGIC_V2.to_bytes(4, "big")
    assert encode_record(Message(topic="t" * 200, magic_v2=False), 0)[4:8] == MAGIC_V1.to_bytes(4, "big")


def test_encoder_refuses_what_the_broker_cannot_store() -> None:
    """Bad hosts, oversize properties, out-of-range ints and oversize records raise ValueError."""
    with pytest.raises(ValueError, match="4 \\(IPv4\\) or 16"):
        encode_record(Message(topic="t", born_host=b"\x01\x02\x03"), 0)
    with pytest.raises(ValueError, match="properties"):
        encode_record(Message(topic="t", properties="x" * 40000), 0)
    with pytest.raises(ValueError, match="Java range"):
        encode_record(Message(topic="t", queue_id=2**31), 0)
    with pytest.raises(ValueError, match="never fit"):
        SegmentWriter(None, 200).append(Message(topic="t", body=b"x" * 300))
    with pytest.raises(ValueError, match="multiple"):
        SegmentWriter(None, 1024, start_offset=100)
    closed = SegmentWriter(None, 1024)
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.append(Message(topic="t"))


# ---------------------------------------------------------------------------------------------
# Hypothesis: segment rules
# ---------------------------------------------------------------------------------------------
small_messages = st.builds(
    Message,
    topic=st.sampled_from(["A", "B", "主题-Ω-topic", "%|w"]),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 2),
    sys_flag=st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC, 0x1, 0x2]),
    born_host=hosts,
    store_host=hosts,
    properties=st.sampled_from(["", "TAGS\x01a", "KEYS\x01k1  k2\x02UNIQ_KEY\x01AB"]),
)
put_lists = st.lists(st.one_of(small_messages, st.lists(small_messages, min_size=1, max_size=4)),
                     min_size=1, max_size=40)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(put_lists, st.integers(700, 3000), st.booleans())
def test_segments_never_split_records_and_blanks_fill_exactly(units, segment_size: int, prealloc: bool) -> None:
    """Random puts and segment sizes: full-size segments, exact BLANKs, broker queue offsets."""
    with tempfile.TemporaryDirectory() as d:
        w = write_units(d, units, segment_size)
        summary = w.close(preallocate_next=prealloc)
        names = sorted(os.listdir(d))
        assert names == [segment_name(i * segment_size) for i in range(len(names))]
        flat = [m for u in units for m in ([u] if isinstance(u, Message) else u)]
        parsed: list[Message] = []
        blanks = 0
        for name in names:
            buf = (Path(d) / name).read_bytes()
            assert len(buf) == segment_size
            recs, blank = walk_segment(buf, int(name))
            parsed += [m for _, m, _ in recs]
            if blank is not None:
                blanks += 1
                assert buf[blank + 8:] == bytes(segment_size - blank - 8)
        assert blanks == summary.blank_records
        assert [m.physical_offset for m in parsed] == [m.physical_offset for m in flat]
        assert [(m.topic, m.body, m.queue_offset) for m in parsed] == [(m.topic, m.body, m.queue_offset) for m in flat]
        assert summary.max_physical_offset == flat[-1].physical_offset + record_size(flat[-1])

    # a BLANK appears exactly when the next put (record or whole batch) lacks size + 8 bytes
    pos = 0
    counters: dict[tuple[str, int], int] = {}
    for u in units:
        group = [u] if isinstance(u, Message) else u
        size = sum(record_size(m) for m in group)
        if size + 8 > segment_size - pos:
            pos = 0
        assert group[0].physical_offset % segment_size == pos
        pos += size
        for m in group:
            if m.sys_flag & 0xC in (0x4, 0xC):
                assert m.queue_offset == 0
            else:
                key = (m.topic, m.queue_id)
                assert m.queue_offset == counters.get(key, 0)
                counters[key] = m.queue_offset + 1


def test_dry_run_assigns_the_same_offsets_as_a_real_write(tmp_path: Path) -> None:
    """A dry writer (directory=None) assigns the offsets a real write assigns."""
    msgs = build_sample_messages(400, seed=5)
    dry = [(m.physical_offset, m.queue_offset) for m in msgs]
    summary = write_store(tmp_path, msgs, SEGMENT_SIZE)
    assert [(m.physical_offset, m.queue_offset) for m in msgs] == dry
    assert (tmp_path / "lock").read_bytes() == b"lock"
    assert summary.records == 400


# ---------------------------------------------------------------------------------------------
# Sample store
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict, list[Message]]:
    """The default sample store, written once, with its records parsed back."""
    out = tmp_path_factory.mktemp("sample") / "store"
    summary = write_sample_store(out)
    msgs = []
    for name in sorted(os.listdir(out / "commitlog")):
        recs, _ = walk_segment((out / "commitlog" / name).read_bytes(), int(name))
        msgs += [m for _, m, _ in recs]
    return out, summary, msgs


def _props(m: Message) -> dict[str, str]:
    """Parsed properties (non-empty name and value, later duplicates win)."""
    out = {}
    for item in m.properties.split("\x02"):
        k, sep, v = item.partition("\x01")
        if sep and k and v:
            out[k] = v
    return out


def test_sample_store_layout_and_config(sample) -> None:
    """Small profile broker.conf, full-size segments with BLANKs, valid CRCs, lock file."""
    out, summary, msgs = sample
    assert len(msgs) == summary["records"] == 3000
    assert summary["blank_records"] >= 5 and len(summary["segments"]) == summary["blank_records"] + 1
    assert (out / "lock").read_bytes() == b"lock"
    s = load_settings(out / "broker.conf")
    assert (s.mapped_file_size_commitlog, s.mapped_file_size_consume_queue, s.max_hash_slot_num,
            s.max_index_num, s.message_index_enable) == (262144, 2000, 64, 256, True)
    assert len(s.delay_levels_ms) == 18
    for name in summary["segments"]:
        assert (out / "commitlog" / name).stat().st_size == 262144
    for m in msgs:
        assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF


def test_built_sample_messages_are_the_stored_records(sample) -> None:
    """build_sample_messages gives, field for field, what the store holds (offsets and host bits too)."""
    _, _, stored = sample
    built = build_sample_messages()
    assert [replace(m, body_crc=None, magic_v2=None) for m in stored] == \
        [replace(m, body_crc=None, magic_v2=None) for m in built]


def test_sample_store_covers_the_special_cases(sample) -> None:
    """Topics, transaction types, IPv6, zlib, empty body, schedule props, MIN_VALUE key."""
    _, _, msgs = sample
    topics = {m.topic for m in msgs}
    assert {NON_ASCII_TOPIC, WEIRD_TOPIC, "SCHEDULE_TOPIC_XXXX", "BatchTopic"} <= topics
    tran = {m.sys_flag & 0xC for m in msgs}
    assert tran == {0x0, 0x4, 0x8, 0xC}
    assert all(m.queue_offset == 0 for m in msgs if m.sys_flag & 0xC in (0x4, 0xC))
    assert any(m.sys_flag & 0x10 for m in msgs) and any(m.sys_flag & 0x20 for m in msgs)
    assert any(not m.sys_flag & 0x20 for m in msgs)
    assert any(m.body == b"" for m in msgs)
    zipped = [m for m in msgs if m.sys_flag & 0x1]
    assert zipped and all(len(zlib.decompress(m.body)) > 4096 for m in zipped)
    props = [_props(m) for m in msgs]
    assert any("UNIQ_KEY" not in p for p in props)
    assert any("  " in p.get("KEYS", "") for p in props)
    sched = [p for m, p in zip(msgs, props) if m.topic == "SCHEDULE_TOPIC_XXXX"]
    assert sched and all({"DELAY", "REAL_TOPIC", "REAL_QID"} <= p.keys() for p in sched)
    assert all(m.queue_id == int(p["DELAY"]) - 1 for m, p in zip(msgs, props) if m.topic == "SCHEDULE_TOPIC_XXXX")
    commits = [m for m in msgs if m.sys_flag & 0xC == 0x8]
    by_offset = {m.physical_offset: m for m in msgs}
    assert all(by_offset[c.prepared_transaction_offset].topic == "RMQ_SYS_TRANS_HALF_TOPIC" for c in commits)
    # index keys: one hashes to Integer.MIN_VALUE
    keys = {f"{m.topic}#{k}" for m, p in zip(msgs, props) for k in p.get("KEYS", "").split(" ") if k}
    assert f"{MIN_VALUE_KEY_TOPIC}#{MIN_VALUE_KEY}" in keys
    assert java_string_hash(f"{MIN_VALUE_KEY_TOPIC}#{MIN_VALUE_KEY}") == -(2**31)


def test_sample_uniq_keys_are_client_message_ids(sample) -> None:
    """UNIQ_KEY is hex upper and starts with the born host IP (32 hex for IPv4)."""
    _, _, msgs = sample
    checked = 0
    for m in msgs:
        uk = _props(m).get("UNIQ_KEY")
        if uk is None or m.topic != "TopicTest" or m.sys_flag & 0xC == 0x8:
            continue
        raw = bytes.fromhex(uk)
        assert uk == uk.upper()
        assert len(uk) == (32 if len(m.born_host) == 4 else 56)
        assert raw[:len(m.born_host)] == m.born_host  # client IP first
        checked += 1
    assert checked > 100


def test_sample_timestamps_increase_and_restart_moves_store_host(sample) -> None:
    """Store times never go back (batches share one); the restart jumps 40 days."""
    _, _, msgs = sample
    ts = [m.store_timestamp for m in msgs]
    assert all(b >= a for a, b in zip(ts, ts[1:]))
    strictly = [m.store_timestamp for m in msgs if m.topic != "BatchTopic"]
    assert all(b > a for a, b in zip(strictly, strictly[1:]))
    jump = max(b - a for a, b in zip(ts, ts[1:]))
    assert jump >= 40 * 86_400_000
    assert len(msgs[0].store_host) == 4 and len(msgs[-1].store_host) == 16


def test_sample_store_is_deterministic_and_seeded(tmp_path: Path) -> None:
    """Same seed -> same bytes; another seed -> other bytes."""
    digests = []
    for run, seed in enumerate((3, 3, 4)):
        out = tmp_path / f"s{run}"
        write_sample_store(out, n=500, seed=seed)
        digests.append([sha256_file(p) for p in sorted((out / "commitlog").iterdir())])
    assert digests[0] == digests[1] != digests[2]


def test_sample_store_cli_prints_one_line_and_refuses_a_used_directory(tmp_path: Path, capsys) -> None:
    """The CLI prints one summary line and exits 2 on a used directory."""
    assert sample_main([str(tmp_path / "x"), "--messages", "300", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "300 records" in out
    assert sample_main([str(tmp_path / "x"), "--messages", "300"]) == 2
