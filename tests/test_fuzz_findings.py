"""The differential fuzzer's findings (issue 13), each pinned by a test of the rule the input broke. The
settings ones (messageDelayLevel with superscript digits, unbounded index sizes) are in test_settings.py."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from jobs.pipeline.recover.gather import new_index_names
from storage_format.commitlog import decode_buffer
from storage_format.consume_queue import tags_codes
from storage_format.index_file import (HEADER_SIZE, IndexHeader, IndexState, empty_file_index_count,
                                       first_ms_named_after, format_name)
from storage_format.index_build import build_index_file
from storage_format.properties import TAGS
from storage_format.record import SCHEDULE_TOPIC, Message
from storage_format.recovery import IndexFileInfo
from storage_format.settings import BrokerSettings
from storegen.encoder import encode_record, write_store

TS = 1_700_000_000_000
DELAYS = BrokerSettings().delay_levels_ms


def decode(msgs: list[Message]):
    buf = b""
    for m in msgs:
        buf += encode_record(m, len(buf))
    return decode_buffer(buf + bytes(64), 0, 0, len(buf))


def with_delay(topic: str, delay: str) -> Message:
    return Message(topic=topic, body=b"x", store_timestamp=TS, properties=f"TAGS\x01t\x02DELAY\x01{delay}\x02")


def test_non_integer_delay_on_another_topic_is_ignored_like_the_broker():
    """The broker parses DELAY only for SCHEDULE_TOPIC_XXXX: elsewhere any text is fine."""
    chunk = decode([with_delay("TopicA", "soon"), with_delay("TopicA", "3")])
    assert chunk.count == 2 and chunk.end.reason != "bad_delay_level"
    cols = chunk.columns
    assert cols.delay_level.tolist() == [-1, 3]
    codes = tags_codes(cols.property_binary(TAGS), cols.topic, cols.delay_level, cols.store_timestamp, DELAYS)
    assert codes.tolist() == [116, 116]  # "t".hashCode(): no delivery time outside the schedule topic


def test_unicode_digits_in_a_schedule_delay_are_a_java_int():
    """Integer.parseInt takes any Unicode decimal digit: "\\u0663" (Arabic-Indic three) is level 3."""
    chunk = decode([with_delay(SCHEDULE_TOPIC, "\u0663"), with_delay(SCHEDULE_TOPIC, "\uff11")])
    assert chunk.count == 2 and chunk.end.reason != "bad_delay_level"
    cols = chunk.columns
    codes = tags_codes(cols.property_binary(TAGS), cols.topic, cols.delay_level, cols.store_timestamp, DELAYS)
    assert codes.tolist() == [TS + DELAYS[2], TS + DELAYS[0]]


def test_a_schedule_delay_java_rejects_still_ends_the_valid_log():
    chunk = decode([with_delay(SCHEDULE_TOPIC, "1"), with_delay(SCHEDULE_TOPIC, "\u00b2")])
    assert chunk.count == 1 and chunk.end.reason == "bad_delay_level"


@pytest.mark.parametrize("v2, length", [(True, b"\xac\x00"), (False, b"\x82")], ids=["v2-short", "v1-byte"])
def test_a_negative_topic_length_ends_the_log_as_an_invalid_record(v2, length):
    """A negative topicLength (v2: a signed short of -21504, further back than the buffer's start) is an invalid
    record where the broker's reader throws, for the reference decoder too: it raised IndexError (found by
    test_split_kernel's generated stores, 2026-12-05)."""
    rec = bytearray(encode_record(Message(topic="TopicA", body=b"xy", store_timestamp=TS, magic_v2=v2), 0))
    at = rec.index(b"xy") + 2  # topicLength follows the body
    rec[at:at + len(length)] = length
    chunk = decode_buffer(bytes(rec) + bytes(64), 0, 0, len(rec))
    assert chunk.count == 0 and chunk.end.reason == "size_mismatch" and chunk.end.offset == 0
    assert "topicLength" in chunk.end.detail and "is negative" in chunk.end.detail


def test_index_file_name_that_is_no_date_only_has_to_sort():
    """IndexService.load only sorts names: recovery names new files after an undated one, not a ValueError."""
    bogus = "20261301256199999"  # month 13
    ms = first_ms_named_after(bogus)
    assert format_name(ms) == "20270101000000000" > bogus
    kept = [IndexFileInfo("20261101000000000", IndexHeader()), IndexFileInfo(bogus, IndexHeader())]
    names = new_index_names(kept, 2, dt.timezone.utc, now_ms=TS)
    assert names == sorted(names) and names[0] > bogus
    assert new_index_names(kept, 0, dt.timezone.utc, now_ms=TS) == []
    with pytest.raises(ValueError, match="sorts after every date"):
        first_ms_named_after("99991301000000000")


def test_empty_index_file_count_per_generation():
    """4.9.8 never writes an empty file's header count (0 on disk); 5.3.3 flushes it at shutdown (1)."""
    z = np.zeros(0, np.int64)
    for generation, count in ((4, 0), (5, 1)):
        data = build_index_file(z.astype(np.int32), z, z, 4, 4, IndexState(TS, 500), empty_file_index_count(generation))
        assert IndexHeader.from_bytes(data[:HEADER_SIZE]) == IndexHeader(TS, TS, 500, 500, 0, count)


@pytest.mark.parametrize("version,count", [(None, 0), ("5", 1)])
def test_rebuild_writes_the_trailing_empty_index_file_per_generation(spark, tmp_path, capsys, version, count):
    """The last index file exactly full, then a record without keys: the broker opens an empty file."""
    from jobs.rebuild import main as rebuild_main

    store = tmp_path / "store"
    msgs = [Message(topic="T", body=b"x", store_timestamp=TS + i, properties=f"KEYS\x01k{i}\x02") for i in range(3)]
    msgs.append(Message(topic="T", body=b"x", store_timestamp=TS + 9))
    write_store(store, msgs, 1 << 16)
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=65536\nmaxHashSlotNum=4\nmaxIndexNum=4\n")
    out = tmp_path / "out"
    extra = ["--rocketmq-version", version] if version else []
    assert rebuild_main(["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--json",
                         *extra]) == 0
    files = sorted((out / "index").iterdir())
    assert len(files) == 2
    assert IndexHeader.from_bytes(files[0].read_bytes()[:HEADER_SIZE]).index_count == 4
    last = IndexHeader.from_bytes(files[1].read_bytes()[:HEADER_SIZE])
    assert last == IndexHeader(TS + 2, TS + 2, msgs[2].physical_offset, msgs[2].physical_offset, 0, count)
    assert ("--rocketmq-version 5" in capsys.readouterr().err) == (version is None)  # a guessed 4.x says so
