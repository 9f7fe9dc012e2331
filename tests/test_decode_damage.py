"""Damage inside a commit-log segment, found by the decoder alone (no Spark): the hostile corpus's
decode-level cases end the record chain at the damaged record's file and byte offset, with the reason
the broker's checks give, and keep every record before it."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage_format.commitlog import decode_buffer
from storage_format.errors import StoreFormatError
from tests.hostile import DECODE_ENDS, VICTIM_RECORD


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
