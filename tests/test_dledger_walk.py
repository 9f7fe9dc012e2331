"""commitlog.walk_entries' fast lane (`_accepted_run`: an entry every rule accepts, read in one unpack) against the
walk taken rule by rule: the same record positions, blanks and end (reason, offset, detail) or the same
NeedMoreBytes, on a golden DLedger data file as written and with bytes changed at random, cut short, and with split
stops inside it."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_format import commitlog
from storage_format.commitlog import NeedMoreBytes, walk_entries
from tests.conftest import GOLDEN

DATA = GOLDEN / "dledger-clean-small-11" / "dledger-n0" / "data" / "00000000000000000000"
HEAD = Path(DATA).read_bytes()[:1 << 16]


def rule_by_rule(pos, prev, prev_term, *_rest):
    return pos, prev, prev_term


def walk(buf: bytes, stop: int, segment_end: int):
    """The walk's answer, or the bytes it asked for."""
    try:
        positions, blanks, end = walk_entries(buf, 0, 0, stop, segment_end)  # the file starts the log
    except NeedMoreBytes as more:
        return ("more", more.needed_end)
    return (positions.tolist(), blanks, end)


def both(buf: bytes, stop: int, segment_end: int, monkeypatch) -> tuple:
    fast = walk(buf, stop, segment_end)
    with monkeypatch.context() as m:
        m.setattr(commitlog, "_accepted_run", lambda buf, pos, stop, limit, base, end, prev, prev_term, append:
                  (pos, prev, prev_term))
        slow = walk(buf, stop, segment_end)
    return fast, slow


def test_the_golden_file_walks_the_same_and_whole(monkeypatch):
    data = Path(DATA).read_bytes()
    fast, slow = both(data, len(data), len(data), monkeypatch)
    assert fast == slow and len(fast[0]) > 100


@pytest.mark.parametrize("cut", [1 << 12, 5000, 1 << 15])
def test_a_buffer_cut_short_asks_for_the_same_bytes(cut, monkeypatch):
    fast, slow = both(HEAD[:cut], cut, 1 << 30, monkeypatch)
    assert fast == slow and fast[0] == "more"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(HEAD) - 1), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, len(HEAD)), st.integers(len(HEAD) // 2, len(HEAD)))
def test_changed_bytes_and_any_stop_give_the_same_walk(changes, stop, segment_end):
    """Any stop; the data file's end at the buffer's or before it (a buffer read past the file's end)."""
    from _pytest.monkeypatch import MonkeyPatch

    buf = bytearray(HEAD)
    for at, value in changes:
        buf[at] = value
    with MonkeyPatch.context() as mp:
        fast, slow = both(bytes(buf), stop, segment_end, mp)
    assert fast == slow
