"""storage_format.dledger: entry headers and DLedger index units read back the golden DLedger stores."""
from __future__ import annotations

import pytest

from storage_format.dledger import (BLANK_MAGIC, ENTRY_HEADER_SIZE, ENTRY_MAGIC, INDEX_UNIT_SIZE, index_unit,
                                    parse_checkpoint, read_entry_header)
from tests.conftest import golden_cases


@pytest.mark.parametrize("case", golden_cases(("dledger-",)))
def test_index_units_equal_the_broker_index(golden, case):
    """Walking every data file's entries gives, unit by unit, the DLedger index the broker wrote (stored cut
    after its last used unit); every record's PHYSICALOFFSET is its entry's pos + 48."""
    home = golden / case / "dledger-n0"
    units = bytearray()
    first = None
    for f in sorted((home / "data").iterdir()):
        data, at = f.read_bytes(), 0
        while at + 8 <= len(data):
            h = read_entry_header(data, at)
            if h.magic == BLANK_MAGIC:
                assert at + h.size == len(data), f"{f.name}@{at}: a blank runs to the file's end"
                break
            if h.magic != ENTRY_MAGIC:
                break
            assert h.pos == int(f.name) + at and h.size == ENTRY_HEADER_SIZE + h.body_size
            assert int.from_bytes(data[at + 48 + 28:at + 48 + 36], "big") == h.record_offset
            first = h.index if first is None else first
            units += index_unit(h)
            at += h.size
    index = (home / "index" / "00000000000000000000").read_bytes()
    assert index[first * INDEX_UNIT_SIZE:] == bytes(units)
    assert not index[:first * INDEX_UNIT_SIZE].strip(b"\0")


def test_checkpoint_text(golden):
    cp = parse_checkpoint((golden / "dledger-unclean-11" / "dledger-n0" / "checkpoint").read_text())
    assert cp["committedIndex"] == 1503


def test_the_checkpoint_is_read_as_dledger_reads_it():
    """DLedger reads committedIndex alone from its checkpoint (java.util.Properties): a hand-added line is ignored,
    `:` separates too; a committedIndex that is not a number is an error naming it (issue 36 item 3)."""
    text = "#Sat Nov 28\ncommittedIndex=3595\nendIndex=3595\nnote=x\n! a comment\nother : y\n"
    assert parse_checkpoint(text) == {"committedIndex": 3595, "endIndex": 3595}
    assert parse_checkpoint("committedIndex : 7") == {"committedIndex": 7}
    with pytest.raises(ValueError, match="committedIndex='7x' is not a number"):
        parse_checkpoint("committedIndex=7x\n")
