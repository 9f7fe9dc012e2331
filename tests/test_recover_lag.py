"""recover --out with much dispatch lag (issue 23, item 7): the re-dispatch tail's index keys sliced rather than
masked and copied, the files a queue's written units touch found without hashing every unit, and the new index
files written by a thread beside the consume-queue renders; each equal to the plain way, and a failing or
interrupted index write leaving no OUT and no staging."""
from __future__ import annotations

import errno
import signal
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jobs.pipeline.io.fs import Location
from jobs.pipeline.io.workdir import WorkColumn
from jobs.pipeline.recover.inputs import at_or_after
from storage_format.index_keys import KeyBatch
from storage_format.recovery import queues as Q

from .conftest import GOLDEN
from .recovery_helpers import (CONF, assert_matches_recovered, interrupted_recover_leaves_nothing, run_recover,
                               staging_left, writable_copy)

CASE = "unclean-11"


# ---------------------------------------------------------------------------------------------
# the tail of index keys: a suffix slice where the offsets ascend, the mask elsewhere


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=60), st.integers(-10, 5100), st.booleans(),
       st.integers(0, 1 << 40))
def test_at_or_after_selects_what_the_mask_selects(values, offset, ascending, base):
    """Stored as they are (int64) or narrowed above a base (uint32), ascending or not: the rows chosen are the
    rows whose value is >= offset, and a slice when the values ascend."""
    raw = np.array(sorted(values) if ascending else values, np.int64)
    for column, wide in ((WorkColumn(raw), raw), (WorkColumn(raw.astype(np.uint32), base), raw + base)):
        at = offset + (column.base if column.values.dtype == np.uint32 else 0)
        rows = at_or_after(column, at)
        assert np.array_equal(column.take(rows), wide[wide >= at])
        if ascending or len(raw) < 2:
            assert isinstance(rows, slice)


def test_at_or_after_beyond_the_narrowed_range():
    """An offset past what a uint32 above the base can hold selects nothing; one below the base everything."""
    column = WorkColumn(np.array([0, 5, 7], np.uint32), 1 << 40)
    assert column.take(at_or_after(column, (1 << 40) + (1 << 33))).size == 0
    assert column.take(at_or_after(column, 3)).tolist() == [(1 << 40), (1 << 40) + 5, (1 << 40) + 7]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 1000), max_size=50), st.integers(-5, 1005), st.booleans())
def test_key_batch_from_offset_equals_the_mask(phys, offset, ascending):
    phy = np.array(sorted(phys) if ascending else phys, np.int64)
    keys = KeyBatch(np.arange(len(phy), dtype=np.int32), phy, phy * 3)
    got, expect = keys.from_offset(offset), keys.take(phy >= offset)
    for a, b in ((got.key_hash, expect.key_hash), (got.phy, expect.phy), (got.store_ts, expect.store_ts)):
        assert np.array_equal(a, b) and a.dtype == b.dtype


def test_concat_of_one_batch_is_that_batch():
    one = KeyBatch(np.zeros(3, np.int32), np.arange(3), np.arange(3))
    assert KeyBatch.concat([one]) is one
    two = KeyBatch.concat([one, one])
    assert len(two) == 6 and two.phy.tolist() == [0, 1, 2, 0, 1, 2]


# ---------------------------------------------------------------------------------------------
# the files a queue's written units touch


def _state_with_runs(runs: list[list[int]], file_size: int) -> Q.QueueState:
    load = Q.QueueLoad("T", 0, tuple(range(0, 10 * file_size, file_size)), 0, -1)
    st_ = Q.QueueState.start(load, file_size)
    st_.written_at = [np.array(r, np.int64) for r in runs]
    return st_


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 49), max_size=30), st.booleans()), max_size=5))
def test_changed_files_are_the_files_of_every_written_unit(runs):
    """Runs whose offsets ascend (as dispatch writes them) or not: the changed files are exactly the files
    holding a written unit (file size 100: 5 units), as np.unique over every offset finds them."""
    fs = 100
    offsets = [sorted(u * 20 for u in r) if asc else [u * 20 for u in r] for r, asc in runs]
    st_ = _state_with_runs(offsets, fs)
    every = np.array([o for r in offsets for o in r], np.int64)
    assert st_.changed_files() == sorted(set(np.unique(every - every % fs).tolist()))


# ---------------------------------------------------------------------------------------------
# the new index files written beside the consume-queue renders


def test_recover_out_writes_the_index_beside_the_queues(golden, spark, tmp_path):
    out = tmp_path / "out"
    assert run_recover("--store", str(GOLDEN / CASE), "--broker-config", str(CONF), "--out", str(out), "--json") == 0
    assert_matches_recovered(out, CASE)


def test_a_failing_index_write_leaves_no_out_and_no_staging(golden, spark, tmp_path, monkeypatch):
    """The index writer thread's error (a full disk) fails the job with it; OUT is absent, no staging left."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    real = Location.write_with_zero_tail
    failed = []

    def full_disk(self, chunks, size):
        if "/index/" in self.path:
            failed.append(self.path)
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        return real(self, chunks, size)
    monkeypatch.setattr(Location, "write_with_zero_tail", full_disk)
    parent = tmp_path / "outs"
    parent.mkdir()
    with pytest.raises(OSError, match="No space left on device"):
        run_recover("--store", str(store), "--broker-config", str(CONF), "--out", str(parent / "out"), "--json")
    assert failed  # the case creates an index file
    assert not (parent / "out").exists() and staging_left(parent) == []
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_during_the_index_write_leaves_no_out_and_no_staging(golden, tmp_path, sig, status):
    """A signal while the index writer thread is held at its test hook (the consume queues rendered, the job
    waiting for it): exit 130/143 with the one line, the thread stopped before the staging directory goes, OUT
    absent, no staging left, the store unchanged."""
    interrupted_recover_leaves_nothing(tmp_path, "in-index-write", 0.3, sig, status)


# ---------------------------------------------------------------------------------------------
# a kept consume-queue file's span: read from the crash-time file only where a unit in it is not written


def _span_state(at: list[int], crash: bytes) -> Q.QueueState:
    load = Q.QueueLoad("T", 0, (0,), 0, -1)
    st_ = Q.QueueState.start(load, len(crash))
    n = len(at)
    st_.written_at = [np.array(at, np.int64)]
    st_.written = [Q.QueueEntries(np.arange(n, dtype=np.int64), 5000 + np.arange(n, dtype=np.int64) * 7,
                                  np.full(n, 7, np.int32), np.arange(n, dtype=np.int64) + 90)]
    return st_


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=14))
def test_render_span_reads_only_where_a_unit_is_not_written(slots):
    """Units written at any slots (gaps, repeats, any order): the span is the crash-time bytes with the written
    units on top (the last write of a slot wins), as render_units renders it; the crash-time file is read only
    when some unit between the first and last written one is not written."""
    crash = bytes(range(200))  # 10 units of recognisable bytes
    reads = []

    def read_range(at: int, n: int) -> bytes:
        reads.append((at, n))
        return crash[at:at + n]
    state = _span_state([s * 20 for s in slots], crash)
    at, units = Q.render_span(state, 0, read_range)
    got = bytearray(crash)
    got[at:at + units.nbytes] = units.tobytes()
    assert bytes(got) == Q.render_units(state, 0, lambda f: crash).tobytes()
    lo, hi = min(slots), max(slots) + 1
    assert (reads == []) == (set(slots) == set(range(lo, hi)))


# ---------------------------------------------------------------------------------------------
# the segments from the start segment on, copied while the validating scan runs


def test_segments_from_the_start_are_copied_as_if_p_lies_in_the_last(golden, spark, tmp_path):
    """Before any scan every segment is queued as it is made when P lies in the last one (all sealed but the last,
    which keeps its zero blocks as holes). unclean-11's P lies in the segment before an empty one the broker
    pre-allocated: OUT has no copy of that one, and its predecessor, now the last kept, is made again with holes;
    OUT is the broker's recovery."""
    from jobs.pipeline.io.copy import COPY_RANGE_HOLES
    from jobs.pipeline.recover.gather import start_of
    from jobs.pipeline.recover.write import likely_segment_copies
    from jobs.pipeline.store.segments import list_segments
    from storage_format.settings import load_settings_with_warnings

    import json

    settings = load_settings_with_warnings(CONF).settings
    store = Location(str(GOLDEN / CASE))
    segs = list_segments(store, settings)
    first = start_of(store, settings)
    likely = likely_segment_copies(first, settings, link_sealed=False)
    assert [c.rel for c in likely] == [f"commitlog/{s.start:020d}" for s in segs]
    assert [c.zero_holes for c in likely] == [False] * (len(segs) - 1) + [True] and not any(c.link for c in likely)
    linked = likely_segment_copies(first, settings, link_sealed=True)
    assert [c.link for c in linked] == [True] * (len(segs) - 1) + [False]
    out = tmp_path / "out"
    assert run_recover("--store", str(GOLDEN / CASE), "--broker-config", str(CONF), "--out", str(out), "--json") == 0
    assert_matches_recovered(out, CASE)
    kept = sorted(p.name for p in (out / "commitlog").iterdir())
    assert len(kept) < len(segs)  # the pre-allocated segment after P is not in OUT
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert report["copies"][COPY_RANGE_HOLES]["files"] == 1
    assert report["copies_while_planning"]["files"] >= len(kept) - 1


def test_a_running_broker_s_segments_are_copied_once_p_is_known(golden, spark, locked, tmp_path, monkeypatch):
    """--force on a store whose broker still writes: before the scan only the segments before the start segment
    are queued (never written again); the rest once validation has found P. Without the broker, every
    consume-queue file and every segment is queued at once."""
    from jobs.pipeline.io import background_copy as bgmod
    from jobs.pipeline.recover.gather import start_of
    from storage_format.settings import load_settings_with_warnings

    settings = load_settings_with_warnings(CONF).settings
    first_adds: list[list[str]] = []
    real = bgmod.BackgroundCopy.add

    def spy(self, items):
        if not getattr(self, "_spied", False):
            self._spied = True
            first_adds.append([c.rel for c in items])
        return real(self, items)
    monkeypatch.setattr(bgmod.BackgroundCopy, "add", spy)
    for running in (True, False):
        store = locked(CASE) if running else writable_copy(GOLDEN / CASE, tmp_path / "free")
        first = start_of(Location(str(store)), settings)
        out = tmp_path / f"out-{running}"
        args = ["--store", str(store), "--broker-config", str(CONF), "--out", str(out), "--json"]
        assert run_recover(*args, *(["--force"] if running else [])) == 0
        before_start = [f"commitlog/{s.start:020d}" for s in first.segments if s.start < first.start.offset]
        every = [f"commitlog/{s.start:020d}" for s in first.segments]
        queued = first_adds[-1]
        assert [r for r in queued if r.startswith("commitlog/")] == (before_start if running else every)
        queues = sorted(str(p.relative_to(store)) for p in (store / "consumequeue").rglob("*") if p.is_file())
        assert sorted(r for r in queued if r.startswith("consumequeue/")) == ([] if running else queues)
        assert_matches_recovered(out, CASE)


def test_queue_file_copies_list_every_consume_queue_file_or_none(tmp_path):
    """Every regular file of consumequeue/<topic>/<queueId>/ named by its 20-digit offset, with its size and the
    URI the plan copies it from; nothing at all when a name is not a consume-queue file's (the plan's listing
    refuses or names it) or the directory is missing."""
    from jobs.pipeline.recover.write import queue_file_copies

    store = tmp_path / "store"
    for topic, qid, names in (("T1", "0", ["00000000000000000000", "00000000000006000000"]), ("T2", "3", ["0" * 20])):
        d = store / "consumequeue" / topic / qid
        d.mkdir(parents=True)
        for i, n in enumerate(names):
            (d / n).write_bytes(b"x" * (10 + i))
    got = queue_file_copies(Location(str(store)))
    assert [(c.rel, c.size, c.link, c.zero_holes) for c in got] == [
        ("consumequeue/T1/0/00000000000000000000", 10, False, False),
        ("consumequeue/T1/0/00000000000006000000", 11, False, False),
        ("consumequeue/T2/3/00000000000000000000", 10, False, False)]
    assert got[0].src == Location(str(store)).child("consumequeue", "T1", "0").uri + "/00000000000000000000"
    (store / "consumequeue" / "T2" / "3" / "stray.txt").write_bytes(b"")
    assert queue_file_copies(Location(str(store))) == []
    assert queue_file_copies(Location(str(tmp_path / "none"))) == []


def test_a_removed_copy_takes_the_directories_it_leaves_empty(tmp_path):
    """A copy made early and no longer wanted goes with the directories below the top level it leaves empty (a
    queue whose files recovery deletes); a directory still holding a wanted copy, and the top level, stay."""
    from jobs.pipeline.io.background_copy import BackgroundCopy, CopyItem

    src = tmp_path / "f"
    src.write_bytes(b"data")
    dest = tmp_path / "dest"
    with BackgroundCopy(Location(str(dest))) as bg:
        items = [CopyItem(rel, str(src), 4) for rel in ("cq/T/0/a", "cq/U/1/b", "cq/U/2/c")]
        bg.add(items)
        bg.finish([items[2]])
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["cq", "cq/U", "cq/U/2", "cq/U/2/c"]


def test_queue_entries_taken_whole_are_not_copied():
    """A mask selecting every entry (dispatch's skip rule with much lag) gives the same entries back; any
    other selection the selected rows."""
    e = Q.QueueEntries(np.arange(4, dtype=np.int64), np.arange(4, dtype=np.int64) * 10, np.full(4, 10, np.int32),
                       np.zeros(4, np.int64))
    assert e.take(np.ones(4, bool)) is e
    part = e.take(np.array([False, True, True, False]))
    assert part.phy.tolist() == [10, 20] and part.size.dtype == np.int32
    assert e.take(slice(1, 3)).queue_offset.tolist() == [1, 2]


def test_finish_copies_beside_the_thread_and_drops_what_is_no_longer_wanted(tmp_path, monkeypatch):
    """At finish the calling thread takes the queued copies beside the background thread (two at once at the
    end), and a queued copy no longer wanted is never made; the result is exactly the wanted copies."""
    import threading

    from jobs.pipeline.io import background_copy as bgmod
    from jobs.pipeline.io.background_copy import BackgroundCopy, CopyItem

    srcs = []
    for i in range(6):
        p = tmp_path / f"s{i}"
        p.write_bytes(bytes([i]) * (1000 + i))
        srcs.append(p)
    who: dict[str, str] = {}
    real = bgmod.copy_file

    def slow(src, dst, link=False, zero_holes=False, cancel=None):
        who[dst.path.rsplit("/", 1)[-1]] = threading.current_thread().name
        if threading.current_thread().name == "reput-background-copy":
            time.sleep(0.3)  # the thread is busy: the caller takes what is queued
        return real(src, dst, link, zero_holes, cancel=cancel)
    monkeypatch.setattr(bgmod, "copy_file", slow)
    dest = tmp_path / "dest"
    items = [CopyItem(f"d/f{i}", str(p), p.stat().st_size) for i, p in enumerate(srcs)]
    with BackgroundCopy(Location(str(dest))) as bg:
        bg.add(items)
        while "f0" not in who:  # the thread is busy with its first copy
            time.sleep(0.01)
        done = bg.finish(items[:5])  # f5 is no longer wanted
    assert sorted(p.name for p in (dest / "d").iterdir()) == [f"f{i}" for i in range(5)]
    for i in range(5):
        assert (dest / "d" / f"f{i}").read_bytes() == srcs[i].read_bytes()
    assert "f5" not in who  # dropped from the queue, never copied
    assert who["f0"] == "reput-background-copy" and all(who[f"f{i}"] == threading.current_thread().name
                                                        for i in range(1, 5))
    assert len(done.results) == 5 and done.early_files == 1
