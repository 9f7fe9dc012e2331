"""Property parsing against expectations written from the broker's rules (tables below and
tests.golden_walk.parse_properties), never against another function of storage_format.properties."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storage_format.properties import locate_properties, parse_properties, split_keys
from tests.golden_walk import parse_properties as broker_map

NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "A")
PIECES = st.sampled_from(["\x01", "\x02", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "A", "x", " ", "é", "🔑", ""])
PROPS = st.lists(PIECES, max_size=14).map("".join)

# (properties string, the map MessageDecoder.string2messageProperties returns), worked out by hand.
BROKER_TABLE = [
    ("", {}),
    ("TAGS\x01a", {"TAGS": "a"}),
    ("TAGS\x01a\x02", {"TAGS": "a"}),
    ("TAGS\x01a\x02KEYS\x01k1 k2", {"TAGS": "a", "KEYS": "k1 k2"}),
    ("\x01v\x02TAGS\x01\x02KEYS\x01a\x02KEYS\x01b\x01c\x02UNIQ_KEY\x01u", {"KEYS": "b\x01c", "UNIQ_KEY": "u"}),
    ("TAGS", {}),  # no \x01: no item
    ("TAGS\x01", {}),  # empty value
    ("\x01TAGS", {}),  # empty name
    ("\x02\x02A\x01\x01\x02", {"A": "\x01"}),  # a value may be just \x01
    ("TAGS\x01x\x02TAGS\x01y", {"TAGS": "y"}),  # the later duplicate wins
    ("A\x01é🔑\x02é\x01v", {"A": "é🔑", "é": "v"}),
    ("KEYS\x02\x01TAGS\x01t", {}),  # \x01 opening an item: empty name, whatever follows
]


@pytest.mark.parametrize(("raw", "expected"), BROKER_TABLE)
def test_parser_matches_the_broker_table(raw, expected):
    """The scalar parser, the vectorised locator and the test's own model give the table's map."""
    assert parse_properties(raw) == expected
    assert broker_map(raw) == expected
    data = raw.encode()
    found = locate_properties(np.frombuffer(data, np.uint8), np.array([0]), np.array([len(data)]), NAMES)
    for name in NAMES:
        s, n = found[name][0][0], found[name][1][0]
        assert (None if s < 0 else data[s:s + n].decode()) == expected.get(name), (raw, name)


@settings(max_examples=400, deadline=None)
@given(records=st.lists(PROPS, min_size=1, max_size=6), gaps=st.lists(st.binary(max_size=5), min_size=6, max_size=6))
def test_locate_matches_the_broker_rules(records, gaps):
    """For every record and wanted name, the located value equals the broker's map (the test's own
    model); bytes between records (other fields of the record) never leak into a record's properties."""
    data, starts, lengths = b"", [], []
    for raw, gap in zip(records, gaps):
        data += gap
        encoded = raw.encode()
        starts.append(len(data))
        lengths.append(len(encoded))
        data += encoded
    data += b"\x02\x01TAGS"
    found = locate_properties(np.frombuffer(data, np.uint8), np.array(starts), np.array(lengths), NAMES)
    for i, raw in enumerate(records):
        expected = broker_map(raw)
        assert parse_properties(raw) == expected, raw
        for name in NAMES:
            s, n = found[name][0][i], found[name][1][i]
            got = None if s < 0 else data[s:s + n].decode()
            assert got == expected.get(name), (raw, name)


def test_none_is_empty():
    assert parse_properties(None) == {}


def test_split_keys_drops_empty_tokens_keeps_duplicates():
    """KEYS split on single spaces (IndexService.buildIndex: keys.split(" ")), empty tokens dropped."""
    assert split_keys(" a  b a ") == ["a", "b", "a"]
    assert split_keys("") == [] and split_keys(None) == []
