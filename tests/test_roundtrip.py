"""Encoder -> vectorised decoder round trips: what SegmentWriter stores, commitlog decodes back unchanged."""
from __future__ import annotations

import os
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from storage_format import commitlog
from storegen.encoder import SegmentWriter, record_size, write_store
from storage_format.record import Message, properties_string
from storage_format.record_reader import records_from_columns
from storegen.sample import SEGMENT_SIZE, build_sample


def decode_records(buf: bytes, base_offset: int) -> tuple[list[Message], object]:
    """The decoder's records of one segment buffer (CRC checked) and how its walk ended."""
    chunk = commitlog.decode_buffer(buf, base_offset, check_crc=True)
    return records_from_columns(chunk.columns), chunk.end


def decode_store(commitlog_dir: Path) -> tuple[list[Message], list[str]]:
    """All records of a commit-log directory, segment by segment, and each segment's end reason."""
    records: list[Message] = []
    ends = []
    for name in sorted(os.listdir(commitlog_dir)):
        recs, end = decode_records((commitlog_dir / name).read_bytes(), int(name))
        records += recs
        ends.append(end.reason)
    return records, ends


def as_stored(msg: Message) -> Message:
    """What a decoder must return for an encoded message: derived CRC, magic and IPv6 bits filled in."""
    v2 = len(msg.topic.encode("utf-16-le")) // 2 > 127 if msg.magic_v2 is None else msg.magic_v2
    flags = (msg.sys_flag & ~0x30) | (0x10 if len(msg.born_host) == 16 else 0) \
        | (0x20 if len(msg.store_host) == 16 else 0)
    crc = zlib.crc32(msg.body) & 0x7FFFFFFF if msg.body_crc is None else msg.body_crc
    return replace(msg, sys_flag=flags, body_crc=crc, magic_v2=v2)


INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16))
text_no_sep = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                      min_size=1, max_size=16)
prop_items = st.dictionaries(
    st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "traceId", "区域"]), text_no_sep), text_no_sep, max_size=6
)
topics = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
    st.sampled_from(["TopicTest", "主题-Ω-topic", "%|weird_topic-%"]),
    st.text(alphabet="abcXYZ-_%|0123456789主🔑", min_size=128, max_size=200),
)


@st.composite
def messages(draw) -> Message:
    """Random storable messages: any topic (v1 ones within Java's signed length byte), IPv4/IPv6, empty bodies."""
    topic = draw(topics)
    assume(topic != "SCHEDULE_TOPIC_XXXX")
    long_topic = len(topic.encode("utf-16-le")) // 2 > 127
    assume(long_topic or len(topic.encode()) <= 127)
    return Message(
        topic=topic, body=draw(st.one_of(st.just(b""), st.binary(max_size=400))), queue_id=draw(st.integers(0, 7)),
        flag=draw(INT32), sys_flag=draw(st.integers(0, 0x7FF)), born_timestamp=draw(INT64), born_host=draw(hosts),
        born_port=draw(st.integers(0, 65535)), store_timestamp=draw(INT64), store_host=draw(hosts),
        store_port=draw(st.integers(0, 65535)), reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64), properties=properties_string(draw(prop_items)),
    )


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(messages(), st.lists(messages(), min_size=1, max_size=3)), min_size=1, max_size=25),
       st.integers(1024, 4096))
def test_segment_writer_then_decode_buffer_returns_the_same_messages(units, segment_size: int) -> None:
    """Random puts -> SegmentWriter segments -> decode_buffer -> records: identical, every segment ends cleanly."""
    for u in units:  # a put larger than a segment is refused by the writer (tested in test_encoder)
        assume(sum(record_size(m) for m in ([u] if isinstance(u, Message) else u)) + 8 <= segment_size)
    with tempfile.TemporaryDirectory() as d:
        w = SegmentWriter(d, segment_size)
        for u in units:
            if isinstance(u, Message):
                w.append(u)
            else:
                w.append_batch(u)
        summary = w.close()
        got, ends = decode_store(Path(d))
    flat = [m for u in units for m in ([u] if isinstance(u, Message) else u)]
    assert got == [as_stored(m) for m in flat]
    assert ends[:-1] == ["blank"] * summary.blank_records
    assert ends[-1] != "blank"


def test_sample_store_decodes_to_its_messages(tmp_path: Path) -> None:
    """The whole default sample store decodes to exactly the messages it was built from."""
    sample = build_sample()
    msgs = sample.messages
    summary = write_store(tmp_path, sample.puts(), SEGMENT_SIZE)
    got, ends = decode_store(tmp_path / "commitlog")
    assert len(got) == summary.records == len(msgs)
    assert got == [as_stored(m) for m in msgs]
    assert ends.count("blank") == summary.blank_records >= 5
