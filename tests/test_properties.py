"""Property parsing: the vectorised locator agrees with the broker's scalar rules on any input."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from storage_format.properties import locate_properties, parse_properties, split_keys

NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "A")
PIECES = st.sampled_from(["\x01", "\x02", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "A", "x", " ", "é", "🔑", ""])
PROPS = st.lists(PIECES, max_size=14).map("".join)


@settings(max_examples=400, deadline=None)
@given(records=st.lists(PROPS, min_size=1, max_size=6), gaps=st.lists(st.binary(max_size=5), min_size=6, max_size=6))
def test_locate_matches_scalar_parser(records, gaps):
    """For every record and wanted name, the located value equals the broker's parsed map; bytes
    between records (other fields of the record) never leak into a record's properties."""
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
        expected = parse_properties(raw)
        for name in NAMES:
            s, n = found[name][0][i], found[name][1][i]
            got = None if s < 0 else data[s:s + n].decode()
            assert got == expected.get(name), (raw, name)


def test_broker_parsing_rules():
    """Empty names and values are dropped, a later duplicate wins, a value may hold \\x01."""
    raw = "\x01v\x02TAGS\x01\x02KEYS\x01a\x02KEYS\x01b\x01c\x02UNIQ_KEY\x01u"
    assert parse_properties(raw) == {"KEYS": "b\x01c", "UNIQ_KEY": "u"}
    assert parse_properties("") == {} and parse_properties(None) == {}


def test_split_keys_drops_empty_tokens_keeps_duplicates():
    assert split_keys(" a  b a ") == ["a", "b", "a"]
    assert split_keys("") == [] and split_keys(None) == []
