"""recover --out doing less and overlapping it: the background copy thread (what it reconciles, a failing copy
and an interrupt while it copies leave no OUT and no staging), the consume-queue load reading a file only up
to its first invalid unit, and a kept consume-queue file written as a copy with its span of written units
over it: each equal to the whole-file way, and the recovered store still the broker's."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jobs.pipeline.io import background_copy as bgmod
from jobs.pipeline.io.background_copy import BackgroundCopy, CopyItem
from jobs.pipeline.io.copy import COPY_LINK, COPY_RANGE, COPY_RANGE_HOLES
from jobs.pipeline.io.fs import Location
from storage_format import recovery as R
from storage_format.consume_queue import build_queue_files
from storage_format.recovery import queues as Q

from .conftest import GOLDEN
from .recovery_helpers import (CONF, assert_matches_recovered, cq_file, entries, interrupted_recover_leaves_nothing,
                               run_recover, staging_left, writable_copy)

CASE = "unclean-11"
FS = 100  # consume-queue file size of the unit tests: 5 units


# ---------------------------------------------------------------------------------------------
# the background copy thread


def _files(tmp_path: Path, n: int) -> list[Path]:
    src = tmp_path / "src"
    src.mkdir()
    out = []
    for i in range(n):
        p = src / f"f{i}"
        p.write_bytes(os.urandom(1000 + i) + bytes(3 << 20) + b"\x01")
        out.append(p)
    return out


def test_finish_makes_exactly_the_wanted_copies(tmp_path):
    """Copies given early and still wanted are kept; one given with other flags is made again; one no longer
    wanted is removed; one never given is made by finish."""
    a, b, c, d = _files(tmp_path, 4)
    dest = Location(str(tmp_path / "dest"))
    with BackgroundCopy(dest) as bg:
        bg.add([CopyItem("x/a", str(a), a.stat().st_size), CopyItem("x/b", str(b), b.stat().st_size),
                CopyItem("x/c", str(c), c.stat().st_size)])
        deadline = time.monotonic() + 60
        while len(bg._done) < 3 and time.monotonic() < deadline:  # made early (else finish takes them itself)
            time.sleep(0.01)
        done = bg.finish([CopyItem("x/a", str(a), a.stat().st_size),
                          CopyItem("x/b", str(b), b.stat().st_size, zero_holes=True),
                          CopyItem("x/d", str(d), d.stat().st_size, link=True)])
    got = sorted(p.name for p in (tmp_path / "dest" / "x").iterdir())
    assert got == ["a", "b", "d"]
    for name, src in (("a", a), ("b", b), ("d", d)):
        assert (tmp_path / "dest" / "x" / name).read_bytes() == src.read_bytes()
    assert os.stat(tmp_path / "dest" / "x" / "d").st_ino == d.stat().st_ino  # the link asked for
    assert sorted(m for m, _, _ in done.results) == sorted([COPY_RANGE, COPY_RANGE_HOLES, COPY_LINK])
    assert done.early_files == 1 and done.early_bytes == a.stat().st_size  # only a was made as wanted


def test_a_failing_copy_is_raised_by_finish_and_stops_the_thread(tmp_path, monkeypatch):
    a, b = _files(tmp_path, 2)
    calls = []

    def failing(src, dst, link=False, zero_holes=False, cancel=None):
        calls.append(src.path)
        raise OSError(errno.ENOSPC, "No space left on device", dst.path)
    monkeypatch.setattr(bgmod, "copy_file", failing)
    bg = BackgroundCopy(Location(str(tmp_path / "dest")))
    with bg:
        bg.add([CopyItem("a", str(a), 1), CopyItem("b", str(b), 1)])
        bg._thread.join(timeout=60)  # the thread stops at its first error (finish would otherwise take "b" itself)
        with pytest.raises(OSError, match="No space left"):
            bg.finish([])
    assert calls == [str(a)]  # the thread stopped at its first error


def test_an_error_elsewhere_cancels_the_thread_between_chunks(tmp_path, monkeypatch):
    """Leaving the block with an exception stops the copy in progress at its next chunk and waits for the
    thread: nothing is written after the caller removes the output."""
    from jobs.pipeline.io import copy as copymod

    monkeypatch.setattr(copymod, "CHUNK", 4096)
    (a,) = _files(tmp_path, 1)
    started = []
    real = copymod._copy_extent

    def slow(fin, fout, start, end, src, cancel=None):
        started.append(start)
        time.sleep(0.05)
        return real(fin, fout, start, end, src, cancel)
    monkeypatch.setattr(copymod, "_copy_extent", slow)
    bg = BackgroundCopy(Location(str(tmp_path / "dest")))
    with pytest.raises(RuntimeError, match="planning failed"):
        with bg:
            bg.add([CopyItem("a", str(a), a.stat().st_size)])
            while not started:
                time.sleep(0.01)
            raise RuntimeError("planning failed")
    assert not bg._thread.is_alive()
    assert "a" not in bg._done  # cancelled before it was complete


def test_recover_out_failing_background_copy_leaves_no_out_and_no_staging(golden, spark, tmp_path, monkeypatch):
    """A copy that fails in the background thread (a full disk) fails the job with the OSError naming the file;
    OUT is absent and no staging directory is left beside it; the input store is unchanged."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    real = bgmod.copy_file

    def full_disk(src, dst, link=False, zero_holes=False, cancel=None):
        if "/commitlog/" in dst.path:
            raise OSError(errno.ENOSPC, "No space left on device", dst.path)
        return real(src, dst, link, zero_holes, cancel=cancel)
    monkeypatch.setattr(bgmod, "copy_file", full_disk)
    parent = tmp_path / "outs"
    parent.mkdir()
    with pytest.raises(OSError, match="No space left on device"):
        run_recover("--store", str(store), "--broker-config", str(CONF), "--out", str(parent / "out"), "--json")
    assert not (parent / "out").exists() and staging_left(parent) == []
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


def test_recover_out_reports_the_background_copy(golden, spark, tmp_path):
    """An OUT made with the background thread equals the broker's recovery; the report counts what it copied
    while recovery planned (copies_while_planning) beside how each copy was made (copies)."""
    out = tmp_path / "out"
    assert run_recover("--store", str(GOLDEN / CASE), "--broker-config", str(CONF), "--out", str(out), "--json") == 0
    assert_matches_recovered(out, CASE)
    report = json.loads((out / "reput-recover-report.json").read_text())
    early = report["copies_while_planning"]
    assert set(early) == {"files", "bytes", "join_wait_s"}
    total = sum(c["bytes"] for c in report["copies"].values())
    assert 0 < early["files"] <= sum(c["files"] for c in report["copies"].values())
    assert 0 < early["bytes"] <= total


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_during_the_background_copy_leaves_no_out_and_no_staging(golden, tmp_path, sig, status):
    """A signal while the background thread copies (held at its test hook; 1 s later, somewhere in the JVM's
    start or the validation): exit 130/143 with the one line, the thread stopped before the staging directory
    goes, OUT absent, no staging left, the store unchanged."""
    interrupted_recover_leaves_nothing(tmp_path, "in-background-copy", 1.0, sig, status)


# ---------------------------------------------------------------------------------------------
# consume queues: the load reads to the first invalid unit; kept files are a copy plus a span


def _ranges(files: dict[int, bytes]):
    reads: list[tuple[int, int, int]] = []

    def read_range(start: int, at: int, n: int) -> bytes:
        reads.append((start, at, n))
        return files[start][at:at + n]
    return read_range, reads


@given(sizes=st.lists(st.integers(0, 5), min_size=1, max_size=4), bad=st.sampled_from(["phy", "size", "none"]),
       chunk=st.integers(1, 6))
@settings(max_examples=80, deadline=None)
def test_chunked_load_equals_the_whole_file_load(sizes, bad, chunk):
    """load_queue reading growing chunks (any chunk size) gives the whole-file load: the same files, write
    offset, maxPhysicOffset and removed files, whatever unit is the first invalid one."""
    old = Q.LOAD_CHUNK_UNITS
    Q.LOAD_CHUNK_UNITS = chunk
    try:
        files, phy = {}, 0
        for i, n in enumerate(sizes):
            units = []
            for _ in range(n):
                units.append((phy, 10, 0))
                phy += 10
            if bad != "none" and i == len(sizes) - 1 and n:
                units[-1] = (-1, 10, 0) if bad == "phy" else (units[-1][0], 0, 0)
            files[i * FS] = cq_file(units)
        whole = R.load_queue("T", 0, list(files), files.__getitem__, FS)
        read_range, reads = _ranges(files)
        chunked = R.load_queue("T", 0, list(files), files.__getitem__, FS, read_range=read_range)
        assert chunked == whole
    finally:
        Q.LOAD_CHUNK_UNITS = old


def test_chunked_load_stops_at_the_first_invalid_unit():
    """A 6 MB-like file with 3 valid units reads one chunk, not the whole file."""
    size = 20 * 1000
    files = {0: cq_file([(0, 10, 0), (10, 10, 0), (20, 10, 0)]).ljust(size, b"\0")}
    read_range, reads = _ranges(files)
    old = Q.LOAD_CHUNK_UNITS
    Q.LOAD_CHUNK_UNITS = 8
    try:
        ld = R.load_queue("T", 0, [0], files.__getitem__, size, read_range=read_range)
    finally:
        Q.LOAD_CHUNK_UNITS = old
    assert (ld.write_offset, ld.max_phy) == (60, 30) and reads == [(0, 0, 160)]


@given(have=st.integers(1, 14), lost=st.integers(0, 6), extra=st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_copy_plus_span_equals_the_rendered_file(have, lost, extra):
    """For every file recovery keeps from the crash, the crash-time bytes with render_span's units written at
    its offset are render_queue_file's bytes."""
    total = have + extra
    e = entries([(q, 1000 + 100 * q, 100) for q in range(total)])
    kept = max(0, have - lost)
    crash = build_queue_files(e.queue_offset[:kept], e.phy[:kept], e.size[:kept], e.tags[:kept], FS) if kept else {}
    state = R.QueueState.start(R.load_queue("T", 0, list(crash), crash.__getitem__, FS), FS)
    state.dispatch(e)
    for f in state.changed_files():
        want = R.render_queue_file(state, f, crash.__getitem__)
        if f in state.created:
            with pytest.raises(ValueError):
                R.render_span(state, f, lambda at, n: b"")
            continue
        at, units = R.render_span(state, f, lambda at, n, f=f: crash[f][at:at + n])
        got = bytearray(crash[f])
        got[at:at + units.nbytes] = units.tobytes()
        assert bytes(got) == want and len(got) == FS


def test_render_span_of_a_file_without_written_units_is_empty():
    files = {0: cq_file([(0, 10, 0), (10, 10, 0)])}
    state = R.QueueState.start(R.load_queue("T", 0, [0], files.__getitem__, FS), FS)
    at, units = R.render_span(state, 0, lambda at, n: files[0][at:at + n])
    assert at == 0 and len(units) == 0 and units.dtype == np.zeros(0, dtype=Q.CQ_DTYPE).dtype


def test_segments_before_the_start_are_copied_from_the_start(golden, spark, tmp_path, monkeypatch):
    """A crash whose checkpoint puts the recovery's start segment fifth: the four segments before it are known
    before any scan (start_of, unchanged_segment_copies: sealed, no holes) and are what the thread copies first;
    OUT equals the OUT made without the thread (copies as Spark tasks), file for file."""
    import dataclasses

    import jobs.recover as job
    from jobs.pipeline.recover.inputs import segment_heads
    from jobs.pipeline.recover.gather import start_of
    from jobs.pipeline.recover.write import unchanged_segment_copies
    from jobs.pipeline.store.segments import list_segments
    from storage_format.checkpoint import checkpoint_bytes, parse_checkpoint
    from storage_format.settings import load_settings_with_warnings

    from .hostile import tree_digest

    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    settings = load_settings_with_warnings(CONF).settings
    segs = list_segments(Location(str(store)), settings)
    fifth = list(segment_heads(segs))[::-1][4]  # newest first: reversed, the fifth segment's first record
    raw = (store / "checkpoint").read_bytes()
    cp = parse_checkpoint(raw)
    ts = fifth.store_timestamp + 3000  # min_timestamp subtracts the broker's 3 s safety margin
    cp = dataclasses.replace(cp, physic_msg_timestamp=ts, logics_msg_timestamp=ts, index_msg_timestamp=ts)
    (store / "checkpoint").write_bytes(checkpoint_bytes(cp, 4, raw))
    first = start_of(Location(str(store)), settings)
    assert first.start.offset == segs[4].start
    early = unchanged_segment_copies(first, settings, link_sealed=False)
    assert [c.rel for c in early] == [f"commitlog/{s.start:020d}" for s in segs[:4]]
    assert not any(c.link or c.zero_holes for c in early)
    assert all(c.link for c in unchanged_segment_copies(first, settings, link_sealed=True))

    def run(out: Path) -> dict[str, str]:
        assert run_recover("--store", str(store), "--broker-config", str(CONF), "--out", str(out), "--json") == 0
        digest = tree_digest(out)
        digest.pop("reput-recover-report.json")
        index = sorted(k for k in digest if k.startswith("index/") and not k.endswith("/"))
        named = {f"index/#{i}": digest.pop(k) for i, k in enumerate(index)}  # named by the clock: by order
        return {**digest, **named}
    with_thread = run(tmp_path / "with-thread")
    report = json.loads((tmp_path / "with-thread" / "reput-recover-report.json").read_text())
    assert report["start_segment"]["offset"] == segs[4].start
    assert report["copies_while_planning"]["files"] >= 4
    monkeypatch.setattr(job, "_background", lambda *a: contextlib.nullcontext())
    assert run(tmp_path / "tasks") == with_thread
    assert "copies_while_planning" not in json.loads((tmp_path / "tasks" / "reput-recover-report.json").read_text())
