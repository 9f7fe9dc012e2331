"""index_header_check: an index file's header against its own entries, on every index file the broker wrote in the
golden stores (none is refused) and with one flipped byte in each field (each is named by its byte offset)."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage_format.index_file import HEADER_FIELD_OFFSETS, HEADER_SIZE, IndexHeader
from storage_format.index_header_check import header_problem
from storage_format.settings import load_settings
from tests.conftest import GOLDEN


def _check(data: bytes, layout) -> tuple[int, str] | None:
    return header_problem(IndexHeader.from_bytes(data[:HEADER_SIZE]), layout,
                          lambda offset, size: data[offset:offset + size])


def _golden_index_files() -> list[tuple[Path, object]]:
    found = []
    for conf in sorted(GOLDEN.rglob("broker.conf")):
        index = conf.parent / "index"
        if index.is_dir():
            layout = load_settings(conf).index_layout
            found += [(f, layout) for f in sorted(index.iterdir()) if f.is_file() and f.stat().st_size == layout.size]
    return found


def test_every_index_file_the_broker_wrote_agrees_with_its_header():
    files = _golden_index_files()
    assert len(files) > 100
    assert [(f, _check(f.read_bytes(), layout)) for f, layout in files
            if _check(f.read_bytes(), layout) is not None] == []


@pytest.mark.parametrize("field, back, flip", [("indexCount", 1, 0x01), ("indexCount", 1, 0x40),
                                               ("endPhyOffset", 1, 0x01), ("beginPhyOffset", 1, 0x02),
                                               ("endTimestamp", 3, 0x08), ("hashSlotCount", 1, 0x40)])
def test_a_flipped_header_byte_is_named_by_its_field(field, back, flip):
    """One bit of a field's byte `back` from its end flipped, as bit rot does (a flip below a second in endTimestamp
    goes unseen: the entries keep whole seconds, and the next put overwrites it)."""
    f, layout = next((f, layout) for f, layout in _golden_index_files()
                     if IndexHeader.from_bytes(f.read_bytes()[:HEADER_SIZE]).index_count > 20)
    data = bytearray(f.read_bytes())
    end = HEADER_FIELD_OFFSETS[field] + (4 if field in ("indexCount", "hashSlotCount") else 8) - back
    data[end] ^= flip
    found = _check(bytes(data), layout)
    assert found is not None and found[0] == HEADER_FIELD_OFFSETS[field], (field, found)
