"""Damage inside a commit-log segment, found by the decoder alone (no Spark): the hostile corpus's
decode-level cases end the record chain at the damaged record's file and byte offset, with the reason
the broker's checks give, and keep every record before it."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage_format.commitlog import END_BAD_TOTAL_SIZE, END_SIZE_MISMATCH, decode_buffer
from storage_format.errors import StoreFormatError
from storage_format.kernels.split_decode import decode_fast
from storage_format.record import MAX_DATE_MS, MIN_DATE_MS, Message
from storegen.encoder import encode_record
from tests.hostile import DECODE_ENDS, VICTIM_RECORD


@pytest.mark.parametrize("length", [127, 128, 255])
def test_topic_length_is_read_signed_as_the_broker_reads_it(length: int) -> None:
    """A v1 record's topicLength is a signed byte to RocketMQ 4.9.8 and 5.x (both write `(byte) length`): 128-255
    bytes read back negative and the broker's checkMessageAndReturnSize rejects the record (4.9.8 truncated its log
    there), so the decoder ends the chain at it; a v2 record's two-byte length carries them."""
    v1 = encode_record(Message(topic="T" * length, magic_v2=False), 0)
    v2 = encode_record(Message(topic="T" * length, magic_v2=True), len(v1))
    chunk = decode_buffer(v1 + v2 + bytes(16), 0, path="x")
    if length <= 127:
        assert chunk.count == 2 and chunk.end.is_clean
        return
    assert chunk.count == 0 and chunk.end.reason == "size_mismatch" and chunk.end.offset == 0
    assert f"topicLength {length} is negative as the broker reads it (a signed byte: {length - 256}" in \
        chunk.end.describe()
    assert decode_buffer(v2 + bytes(16), len(v1), path="x").count == 1


@pytest.mark.parametrize("builder", list(DECODE_ENDS), ids=lambda b: b.__name__)
def test_decoder_ends_at_the_damage(builder, golden: Path, tmp_path: Path) -> None:
    d = builder(golden, tmp_path / "store")
    buf = d.file.read_bytes()
    if DECODE_ENDS[builder] == "error":  # bytes no broker could have written: an error naming the offset
        with pytest.raises(StoreFormatError) as exc:
            decode_buffer(buf, int(d.file.name), path=str(d.file))
        assert (exc.value.path, exc.value.offset) == (str(d.file), d.offset)
        assert f"{d.file} at byte offset {d.offset}" in str(exc.value)
        return
    chunk = decode_buffer(buf, int(d.file.name), path=str(d.file))
    assert chunk.end.reason == DECODE_ENDS[builder] and chunk.end.is_invalid and not chunk.end.is_clean
    assert (chunk.end.path, chunk.end.file_offset) == (str(d.file), d.offset)
    assert f"{d.file} at byte offset {d.offset}" in chunk.end.describe()
    assert chunk.count == VICTIM_RECORD and chunk.blank_count == 0
    assert int(chunk.columns.pos[-1] + chunk.columns.total_size[-1]) == d.offset


@pytest.mark.parametrize("builder", [b for b, end in DECODE_ENDS.items() if end != "error"], ids=lambda b: b.__name__)
def test_kernel_checking_crcs_ends_where_the_reference_does(builder, golden: Path, tmp_path: Path) -> None:
    """The same damage, body CRCs checked (recovery's validation): the compiled kernel ends the walk where and
    why the reference does, or (a totalSize or field sum the reference words, after the CRC of the record
    passed) leaves the segment to it."""
    d = builder(golden, tmp_path / "store")
    buf, base = d.file.read_bytes(), int(d.file.name)
    ref = decode_buffer(buf, base, path=str(d.file), check_crc=True)
    fast = decode_fast(buf, base, 0, len(buf), len(buf), path=str(d.file), find_start=False,
                       dated=(MIN_DATE_MS, MAX_DATE_MS), delay_levels_ms=(), check_crc=True)
    assert isinstance(fast, str) == (ref.end.reason in (END_SIZE_MISMATCH, END_BAD_TOTAL_SIZE)), (fast, ref.end)
    if not isinstance(fast, str):
        assert (fast.end, fast.records, fast.blanks) == (ref.end, ref.count, ref.blank_count)
