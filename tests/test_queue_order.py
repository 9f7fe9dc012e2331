"""Queue offsets that do not step by 1 (a damaged queueOffset): the placement rule against a line-by-line
transcription of RocketMQ's ConsumeQueue.putMessagePositionInfo over mapped files, and the record the jobs name."""
from __future__ import annotations

import shutil

import numpy as np
from hypothesis import given, settings as hsettings, strategies as st

from jobs.pipeline.scan.queue_order import _first_misplaced
from storage_format.consume_queue import place_units

UNIT = 20


def broker_units(offsets: list[int], file_size: int = 10 * UNIT) -> dict[int, int]:
    """{logical byte position: entry number} as ConsumeQueue.putMessagePositionInfo writes entries (each ending
    past the one before) into an empty queue: getLastMappedFile(expectLogicOffset) creates a file only when there is
    none or the last is full; the first file created gets pre-blank units up to the first entry; an entry whose
    offset is not 0 and below the write position is skipped; any other is appended at the write position."""
    return broker_queue(offsets, file_size)[0]


def broker_queue(offsets: list[int], file_size: int = 10 * UNIT) -> tuple[dict[int, int], list[int]]:
    """broker_units' entries and the start of every file the queue's mapped-file queue holds after them (a file
    created for an entry then skipped as a repeat included)."""
    files: list[int] = []  # file start offsets
    wrote = 0  # write position inside the last file
    first_create = True
    units: dict[int, int] = {}
    for n, cq_offset in enumerate(offsets):
        expect = cq_offset * UNIT
        if not files:
            files.append(expect - expect % file_size)
        elif wrote == file_size:
            files.append(files[-1] + file_size)
            wrote, first_create = 0, False
        if first_create and cq_offset != 0 and wrote == 0 and len(files) == 1:
            wrote = expect % file_size  # fillPreBlank
        if cq_offset != 0 and expect < files[-1] + wrote:
            continue  # "Build consume queue repeatedly"
        units[files[-1] + wrote] = n
        wrote += UNIT
    return units, files


@hsettings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.lists(st.integers(-3, 4), min_size=1, max_size=60))
def test_place_units_is_the_brokers_rule(start, steps):
    """Any run of offsets (repeats, jumps, restarts at 0): the entries kept and where they land are the broker's."""
    offsets = [start]
    for s in steps:
        offsets.append(max(0, offsets[-1] + s))
    qo = np.array(offsets, np.int64)
    phy = np.arange(len(qo), dtype=np.int64) * 100
    keep, at = place_units(qo, phy, np.full(len(qo), 50))
    want = broker_units(offsets)
    assert dict(zip((at * UNIT).tolist(), np.flatnonzero(keep).tolist())) == want


@hsettings(max_examples=400, deadline=None)
@given(st.integers(0, 40), st.lists(st.tuples(st.integers(-12, 6), st.integers(1, 30)), min_size=1, max_size=12),
       st.lists(st.integers(0, 40), max_size=6))
def test_the_files_a_placed_queue_leaves_are_the_brokers(start, runs, cuts):
    """Every file the broker's queue holds after dispatch: those with units, and the one getLastMappedFile creates
    for an entry it then skips as a repeat while the last file is full (left empty: QueuePlacer.empty_next_file),
    placed whole or chunk by chunk."""
    from storage_format.consume_queue import QueuePlacer

    offsets, at = [], start
    for step, length in runs:
        at = max(0, at + step)
        offsets += list(range(at, at + length))
        at += length
    file_size = 10 * UNIT
    units, files = broker_queue(offsets, file_size)
    qo = np.array(offsets, np.int64)
    phy = np.arange(len(qo), dtype=np.int64) * 100
    size = np.full(len(qo), 50)
    edges = sorted({min(c, len(qo)) for c in cuts} | {0, len(qo)})
    placer = QueuePlacer()
    ats = [placer.place(qo[a:b], phy[a:b], size[a:b])[1] for a, b in zip(edges[:-1], edges[1:])]
    holding = {int(p) * UNIT // file_size * file_size for p in np.concatenate(ats).tolist()}
    empty = placer.empty_next_file(file_size)
    assert sorted(holding | ({empty} if empty is not None else set())) == files
    assert empty is None or empty not in holding


def test_a_repeat_after_a_full_file_leaves_the_next_file_empty():
    """By hand (golden broker-anomalies/q-stuck-after-full-11's shape): offsets 0..9 fill a 10-unit file, then 9
    again: the broker creates the file at unit 10 and leaves it empty; a repeat mid-file or a record dispatched
    twice (its end not past maxPhysicOffset, skipped before any file is asked for) creates none."""
    from storage_format.consume_queue import QueuePlacer

    size = np.full(12, 50)
    stuck = QueuePlacer()
    stuck.place(np.array([*range(10), 9, 9]), np.arange(12) * 100, size)
    assert stuck.empty_next_file(200) == 200
    mid = QueuePlacer()
    mid.place(np.array([*range(9), 8, 8]), np.arange(11) * 100, size[:11])
    assert mid.empty_next_file(200) is None
    twice = QueuePlacer()
    twice.place(np.array([*range(10), 9]), np.array([*range(10), 9]) * 100, size[:11])
    assert twice.empty_next_file(200) is None
    later = QueuePlacer()  # a kept entry after the repeat fills the file: nothing left empty
    later.place(np.array([*range(10), 9, 10]), np.arange(12) * 100, size)
    assert later.empty_next_file(200) is None


def test_the_first_misplaced_record_is_named():
    """Named: the first record that does not land at its stored offset, with the queue's next offset there and
    whether the broker skips it; None when every record lands where it says."""
    phy = np.arange(6, dtype=np.int64) * 100
    size = np.full(6, 50)
    assert _first_misplaced(np.array([3, 4, 5, 6, 7, 8]), phy, size) is None
    assert _first_misplaced(np.array([3, 4, 3, 5, 6, 7]), phy, size) == (200, 3, 5, True)  # a repeat: skipped
    assert _first_misplaced(np.array([3, 4, 9, 10, 11, 12]), phy, size) == (200, 9, 5, False)  # a jump: moved
    assert _first_misplaced(np.array([3, 4, 5, 7, 7, 8]), phy, size) == (300, 7, 6, False)


@hsettings(max_examples=400, deadline=None)
@given(st.integers(0, 40), st.lists(st.tuples(st.integers(-6, 6), st.integers(1, 30)), min_size=1, max_size=12))
def test_place_units_by_runs_equals_the_reference(start, runs):
    """The run-at-a-time placement equals the one-entry-at-a-time reference: runs of consecutive offsets with jumps,
    steps back and restarts at 0 between them."""
    from storage_format.consume_queue import place_units_reference

    offsets, at = [], start
    for step, length in runs:
        at = max(0, at + step)
        offsets += list(range(at, at + length))
        at += length
    qo = np.array(offsets, np.int64)
    phy = np.arange(len(qo), dtype=np.int64) * 100
    got, want = place_units(qo, phy, np.full(len(qo), 50)), place_units_reference(qo, phy, np.full(len(qo), 50))
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@hsettings(max_examples=400, deadline=None)
@given(st.integers(0, 40), st.lists(st.tuples(st.integers(-6, 6), st.integers(1, 30)), min_size=1, max_size=12),
       st.lists(st.integers(0, 40), max_size=8), st.lists(st.integers(0, 300), max_size=4))
def test_placing_a_queue_chunk_by_chunk_equals_placing_it_whole(start, runs, cuts, repeats):
    """QueuePlacer carries the write position and the last end across chunks: cut anywhere (empty chunks too), with
    jumps, steps back, restarts at 0 and entries dispatched twice (ends not growing), the kept entries and their
    positions are place_units' over the whole queue."""
    from storage_format.consume_queue import QueuePlacer

    offsets, at = [], start
    for step, length in runs:
        at = max(0, at + step)
        offsets += list(range(at, at + length))
        at += length
    qo = np.array(offsets, np.int64)
    phy = np.arange(len(qo), dtype=np.int64) * 100
    for r in repeats:  # a record dispatched twice: its end is not past the one before
        if r < len(phy) - 1:
            phy[r + 1] = phy[r]
    size = np.full(len(qo), 50)
    want_keep, want_at = place_units(qo, phy, size)
    edges = sorted({min(c, len(qo)) for c in cuts} | {0, len(qo)})
    placer = QueuePlacer()
    keeps, ats = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        keep, at_ = placer.place(qo[a:b], phy[a:b], size[a:b])
        keeps.append(keep)
        ats.append(at_)
        empty = placer.place(qo[:0], phy[:0], size[:0])  # an empty chunk (a split without this queue's rows)
        assert len(empty[0]) == len(empty[1]) == 0
    assert np.concatenate(keeps).tolist() == want_keep.tolist() and np.concatenate(ats).tolist() == want_at.tolist()


def _tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_long_out_of_step_queue_built_file_by_file_equals_it_built_whole(golden, spark, tmp_path, monkeypatch,
                                                                           capsys):
    """A damaged queue (a step back, and a 2^40 jump) placed by the broker's rule: read split by split and written
    file by file (what a queue longer than STREAMED_ROWS gets, so a task's memory does not grow with the queue),
    its files are the bytes it gets built whole; small splits and 10-unit files make many of both."""
    from jobs.pipeline.outputs import build
    from jobs.rebuild import main as rebuild_main
    from tests.hostile import bitflip_queue_offset, queue_offset_backwards

    for builder in (queue_offset_backwards, bitflip_queue_offset):
        d = builder(golden, tmp_path / builder.__name__ / "store")
        shutil.rmtree(d.store / "consumequeue")  # the broker's own 100-unit files: a 10-unit config would not fit
        conf = tmp_path / builder.__name__ / "broker.conf"
        conf.write_text(d.broker_config.read_text() + "\nmappedFileSizeConsumeQueue=200\n")  # 10 units a file
        outs = {}
        for streamed in (False, True):
            monkeypatch.setattr(build, "STREAMED_ROWS", 0 if streamed else 10**12)
            planned = []
            plan_cq = build.plan_cq
            monkeypatch.setattr("jobs.rebuild.plan_cq", lambda *a, **k: planned.extend(plan_cq(*a, **k)) or planned)
            out = tmp_path / builder.__name__ / f"out-{streamed}"
            assert rebuild_main(["--store", str(d.store), "--broker-config", str(conf), "--out", str(out),
                                 "--only", "consumequeue", "--split-size", "4096", "--quiet"]) == 0
            assert any(i.streamed for t in planned for i in t.items) == streamed
            assert all(len(t.items) == 1 for t in planned if any(i.streamed for i in t.items))
            damaged = [i for t in planned for i in t.items if i.placed]
            assert damaged and all(i.last_file >= i.first_file + 4 * 200 for i in damaged)  # of several files
            outs[streamed] = _tree(out / "consumequeue")
        capsys.readouterr()
        assert outs[True] == outs[False] and len(outs[True]) > 10
