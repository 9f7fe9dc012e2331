"""An index continued (rebuild --since, verify) without Spark: the files new keys fill (by counts) against
recovery.resume_index over the keys themselves, rebuild's names continued, and the clean service's deletions
(storage_format.clean_service); OUT1's consume-queue files read from the end back and joined."""
from __future__ import annotations

import datetime as dt
import shutil

import numpy as np
from hypothesis import given, settings, strategies as st

from jobs.pipeline.outputs.index_continuation import IndexSpan, continue_index, index_spans
from storage_format import recovery
from storage_format.clean_service import expired_index_files, expired_queue_files
from storage_format.index_file import IndexHeader, format_name
from storage_format.index_keys import KeyBatch

UTC = dt.timezone.utc


def _last_file(count: int, name: str = "20261101000000000", end_phy: int = 100) -> recovery.IndexFileInfo:
    return recovery.IndexFileInfo(name, IndexHeader(1, 2, 3, end_phy, 1, count))


@settings(max_examples=300, deadline=None)
@given(max_entries=st.integers(2, 9), loaded=st.one_of(st.none(), st.integers(0, 9)), keys=st.integers(0, 40),
       trailing_record=st.booleans())
def test_spans_by_count_are_resume_index_over_the_keys(max_entries, loaded, keys, trailing_record):
    """index_spans (counts) gives the files, and the keys of each, that recovery.resume_index gives over the keys
    themselves, for a last file of any fill (or none), any number of new keys, a record after the last key or not."""
    last = None if loaded is None else _last_file(min(loaded, max_entries))
    start = 1000
    phy = start + np.arange(keys, dtype=np.int64) * 10
    batch = KeyBatch(np.arange(keys, dtype=np.int32), phy, 1_700_000_000_000 + phy)
    last_record = (int(phy[-1]) + 10 if trailing_record else int(phy[-1])) if keys else (start if trailing_record
                                                                                          else None)
    resume = recovery.resume_index(last, [recovery.DispatchPass("since", start, last_record, batch)], max_entries)
    spans = index_spans(last, keys, last_record is not None, keys == 0 or trailing_record, max_entries)
    expected = [(t.appends_to, len(t.all_keys())) for t in resume.targets] if last_record is not None else []
    assert [(sp.appends_to, sp.hi - sp.lo) for sp in spans] == expected
    assert [sp.lo for sp in spans] == sorted(sp.lo for sp in spans) and (not spans or spans[-1].hi == keys)


def test_names_continue_rebuilds_rule():
    """Files keep their names once they hold a key; OUT1's trailing empty file and new files are named by the store
    time of their first key (the last record's without one), bumped past the name before."""
    t0 = 1_780_000_000_000
    out1 = [_last_file(5, format_name(t0)), _last_file(0, format_name(t0 + 50))]  # the last one empty (4.x: 0)
    spans = [IndexSpan(out1[1].name, 0, 4), IndexSpan(None, 4, 4)]
    plan = continue_index(out1, spans, [t0 + 10, None], [900, None], 800, t0 + 70, 0, UTC)
    assert [f.name for f in plan.files] == [format_name(t0), format_name(t0 + 10), format_name(t0 + 70)]
    assert [f.continues for f in plan.files] == [out1[0].name, out1[1].name, None] and plan.expired == []
    quiet = continue_index(out1, [], [], [], 800, None, 0, UTC)  # no new record: nothing renamed
    assert [f.name for f in quiet.files] == [out1[0].name, out1[1].name]


def test_clean_service_rules():
    """ConsumeQueue.deleteExpiredFile: oldest first, every file but the last while its last unit lies below the min
    offset, the first kept stops it; IndexService.deleteExpiredFile: only when the first file's end lies below it."""
    last_phy = {0: 10, 100: 20, 200: 5, 300: 40}
    assert expired_queue_files([0, 100, 200, 300], last_phy.get, 21) == [0, 100, 200]
    assert expired_queue_files([0, 100, 200, 300], last_phy.get, 15) == [0]
    assert expired_queue_files([0], last_phy.get, 1000) == []  # a queue's last file stays
    assert expired_index_files([10, 20, 5, 40], 21) == 3
    assert expired_index_files([30, 20, 5], 21) == 0  # the first file ends past it: nothing
    assert expired_index_files([10, 20], 1000) == 1
    out1 = [_last_file(5, format_name(1_780_000_000_000 + i), end_phy=e) for i, e in enumerate((10, 20, 500))]
    plan = continue_index(out1, [], [], [], 600, None, 300, UTC)
    assert plan.expired == [out1[0].name, out1[1].name] and [f.name for f in plan.files] == [out1[2].name]


@settings(max_examples=200, deadline=None)
@given(units=st.integers(0, 8000), used=st.data())
def test_used_length_is_the_end_of_the_last_unit_holding_a_non_zero_byte(units, used):
    """outputs.cq_tail.used_length (searched from the end back, a step at a time) equals the end of the last
    20-byte unit with any non-zero byte, read unit by unit; a trailing part shorter than a unit is ignored."""
    from jobs.pipeline.outputs.cq_tail import used_length

    data = bytearray(units * 20 + used.draw(st.integers(0, 19)))
    for at in used.draw(st.lists(st.integers(0, max(0, len(data) - 1)), max_size=4)) if data else []:
        data[at] = used.draw(st.integers(1, 255))
    whole = len(data) - len(data) % 20
    expected = max(((i + 1) * 20 for i in range(whole // 20) if any(data[i * 20:(i + 1) * 20])), default=0)
    assert used_length(memoryview(bytes(data))) == expected


@settings(max_examples=200, deadline=None)
@given(out1_units=st.integers(1, 30), first=st.data(), new_units=st.integers(0, 10), tags_moved=st.data())
def test_a_recover_out1_keeps_its_units_compared_by_offset_and_size(out1_units, first, new_units, tags_moved):
    """outputs.continued.joined with keep_tags (OUT1 a recover OUT): where both hold units, OUT1's are kept (another
    tagsCode than the scan's is the broker's recovery's, not a fault); the scan's from OUT1's end on; a unit whose
    offset or size differs is refused naming its byte offset. Without keep_tags the tagsCode differs: refused."""
    import struct
    import tempfile
    from pathlib import Path

    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.outputs.continued import joined
    from storage_format.errors import StoreFormatError

    def unit(i: int, tags: int) -> bytes:
        return struct.pack(">qiq", 1000 + 100 * i, 100, tags)

    start = first.draw(st.integers(0, out1_units - 1))
    moved = set(tags_moved.draw(st.lists(st.integers(start, out1_units - 1), max_size=3)))
    out1 = b"".join(unit(i, 7 + (i in moved)) for i in range(out1_units))
    path = Path(tempfile.mkdtemp(prefix="joined-")) / "00000000000000000000"  # a new file: read_data keeps recent ones
    path.write_bytes(out1 + bytes(40))
    scan = bytes(20 * start) + b"".join(unit(i, 7) for i in range(start, out1_units + new_units))
    got = joined(Location(str(path)), memoryview(scan), 20 * start, lambda: True, keep_tags=True)
    assert got.prefix == len(out1) and out1[:got.prefix] + bytes(got.rest) == out1 + scan[len(out1):]
    if moved:
        try:
            joined(Location(str(path)), memoryview(scan), 20 * start, lambda: True)
            raise AssertionError("another tagsCode passed without keep_tags")
        except StoreFormatError as exc:
            assert exc.offset == 20 * min(moved)
    wrong = bytearray(scan)
    wrong[20 * (out1_units - 1) + 8] ^= 1  # OUT1's last unit's size as the scan has it
    try:
        joined(Location(str(path)), memoryview(bytes(wrong)), 20 * start, lambda: True, keep_tags=True)
        raise AssertionError("another size passed")
    except StoreFormatError as exc:
        assert exc.offset == 20 * (out1_units - 1)
    shutil.rmtree(path.parent)


def _unit_before_whole(data: bytes, phy: int) -> tuple[int, int | None] | None:
    """outputs.continued._unit_before for one file read whole (the reading before it read from the end back)."""
    from jobs.pipeline.outputs.continued import _real
    from storage_format.consume_queue import unpack_entries

    units = unpack_entries(data)
    real = np.flatnonzero(_real(units))
    k = int(np.searchsorted(units["phy"][real], phy)) if len(real) else 0
    if not len(real) or k == len(real) or int(units["phy"][real[k]]) != phy:
        return None
    slot = int(real[k])
    if slot == 0:
        return 0, None
    before = units[slot - 1]
    return slot, (int(before["phy"]) + int(before["size"]) if _real(units[slot - 1:slot])[0] else None)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 16000), blanks=st.integers(0, 3), zeros=st.integers(0, 5000), pick=st.data())
def test_the_unit_before_is_found_reading_from_the_end_back(n, blanks, zeros, pick):
    """outputs.continued._unit_before reads a file from its end back (four times as far each time) and finds what a
    reading of the whole file finds: the unit for a commit-log offset and the end of the one before it, for
    offsets held, between units, before the first and past the last; pre-blank units ahead, zeros after."""
    import struct
    import tempfile
    from pathlib import Path

    from jobs.pipeline.io.fs import Location
    from jobs.pipeline.outputs.continued import _unit_before
    from storage_format.consume_queue import PRE_BLANK_SIZE

    phys = [1000 + 37 * i for i in range(n)]
    data = b"".join(struct.pack(">qiq", 0, PRE_BLANK_SIZE, 0) for _ in range(blanks)) + \
        b"".join(struct.pack(">qiq", p, 30, 5) for p in phys) + bytes(20 * zeros)
    target = pick.draw(st.one_of(st.sampled_from(phys) if phys else st.just(5), st.integers(0, 1000 + 37 * n + 50)))
    path = Path(tempfile.mkdtemp(prefix="unit-before-")) / "00000000000000000000"
    path.write_bytes(data)
    try:
        got = _unit_before(Location(str(path.parent)), [0], 1 << 30, target)
    finally:
        shutil.rmtree(path.parent)
    assert got == _unit_before_whole(data, target)


@settings(max_examples=60, deadline=None)
@given(prefix_units=st.integers(0, 5000), rest=st.binary(max_size=400))
def test_a_file_written_after_a_prefix_of_another_is_the_prefix_then_the_rest(prefix_units, rest):
    """io.copy.write_after_prefix: OUT2's file is OUT1's first bytes (copy_file_range between local files), the
    rest, then zeros up to the file size."""
    _after_prefix(prefix_units, rest, "copy_file_range")


def test_a_prefix_is_streamed_where_the_kernel_cannot_copy(monkeypatch):
    """Where either file is not local the prefix is streamed through the filesystem layer: the same bytes."""
    import jobs.pipeline.io.copy as copy

    monkeypatch.setattr(copy, "_local", lambda loc: False)
    _after_prefix(3000, b"\1" * 61, "stream")


def _after_prefix(prefix_units: int, rest: bytes, method: str) -> None:
    import os
    import tempfile

    from jobs.pipeline.io.copy import write_after_prefix
    from jobs.pipeline.io.fs import location

    src_bytes = os.urandom(20 * prefix_units + 60)
    prefix, size = 20 * prefix_units, 20 * prefix_units + len(rest) + 1000
    root = tempfile.mkdtemp(prefix="after-prefix-")
    try:
        src, dst = location(f"{root}/src"), location(f"{root}/q/dst")
        src.write_bytes(src_bytes)
        assert write_after_prefix(src, prefix, rest, dst, size) == (method, prefix, None)
        assert dst.read_bytes() == src_bytes[:prefix] + rest + bytes(size - prefix - len(rest))
    finally:
        shutil.rmtree(root)
