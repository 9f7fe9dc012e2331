"""Split planning and stitching: the broker's one sequential scan, assembled from parallel walks."""
from __future__ import annotations

import pytest

from storage_format.commitlog import END_BAD_MAGIC, END_BLANK, END_SIZE_MISMATCH, END_STOP, ScanEnd
from storage_format.scan_plan import (END_MISSING_SEGMENT, END_NO_NEXT_SEGMENT, Segment, SplitWalk, plan_splits,
                                      stitch)

SEG = 1000


def segments(*starts: int) -> list[Segment]:
    return [Segment(s, SEG, f"commitlog/{s:020d}") for s in starts]


@pytest.mark.parametrize("split_size,expected", [
    (0, [(0, 1000)]),
    (400, [(0, 400), (400, 800), (800, 1000)]),
    (1000, [(0, 1000)]),
    (5000, [(0, 1000)]),
])
def test_plan_splits_boundaries(split_size, expected):
    """Splits cover each segment exactly, in order, never crossing a segment end."""
    assert [(s.start, s.stop) for s in plan_splits(segments(0), split_size)] == expected


def walk(i, first, reason, offset, magic=None, records=1):
    return SplitWalk(split_index=i, first_offset=first, end=ScanEnd(reason, offset, magic), records=records)


def test_chain_across_splits_and_segments():
    """A split is accepted where the chain continues; a blank moves the chain to the next segment."""
    sp = plan_splits(segments(0, 1000), 500)
    walks = {0: walk(0, 0, END_STOP, 530), 1: walk(1, 530, END_BLANK, 950),
             2: walk(2, 1000, END_STOP, 1600), 3: walk(3, 1600, END_BAD_MAGIC, 1700, 0)}
    out = stitch(sp, walks)
    assert out.accepted == [0, 1, 2, 3] and not out.redo
    assert out.end.reason == END_BAD_MAGIC and out.end.offset == 1700


def test_false_first_record_is_walked_again():
    """A split whose physicalOffset match is not where the chain continues is redone from there."""
    sp = plan_splits(segments(0), 500)
    out = stitch(sp, {0: walk(0, 0, END_STOP, 520), 1: walk(1, 610, END_STOP, 1000)})
    assert out.redo == {1: 520}


def test_long_record_jumps_over_a_split():
    sp = plan_splits(segments(0), 300)
    walks = {0: walk(0, 0, END_STOP, 650), 1: walk(1, None, END_STOP, 600, records=0),
             2: walk(2, 650, END_BAD_MAGIC, 700, 0), 3: walk(3, None, END_STOP, 1000, records=0)}
    out = stitch(sp, walks)
    assert out.accepted == [0, 2] and out.end.offset == 700


def test_invalid_record_ends_everything_and_later_data_is_reported():
    sp = plan_splits(segments(0, 1000), 0)
    out = stitch(sp, {0: walk(0, 0, END_SIZE_MISMATCH, 300), 1: walk(1, 1000, END_BLANK, 1900)})
    assert out.accepted == [0] and out.end.reason == END_SIZE_MISMATCH
    assert out.data_after_end == ["commitlog/00000000000000001000"]


def test_gap_in_segment_names_ends_the_scan():
    sp = plan_splits(segments(0, 2000), 0)
    out = stitch(sp, {0: walk(0, 0, END_BLANK, 900), 1: walk(1, 2000, END_BLANK, 2900)})
    assert out.end.reason == END_MISSING_SEGMENT and out.end.offset == 1000


def test_last_segment_full_ends_with_no_next_segment():
    sp = plan_splits(segments(0), 0)
    out = stitch(sp, {0: walk(0, 0, END_BLANK, 990)})
    assert out.end.reason == END_NO_NEXT_SEGMENT and out.end.offset == 1000


def test_a_short_log_is_cut_finer_so_every_worker_gets_splits():
    """balanced_split_size: a log too short for TASKS_PER_WORKER splits per worker gets smaller splits (never
    below MIN_BALANCED_SPLIT, never above the size asked); a long one, or 0 (a split per segment), is left alone;
    check_split_count refuses a size that would make more than MAX_SPLITS splits, before any is made."""
    from storage_format.errors import SettingsError
    from storage_format.scan_plan import (MAX_SPLITS, MIN_BALANCED_SPLIT, TASKS_PER_WORKER, balanced_split_size,
                                          check_split_count)

    mib = 1 << 20
    night = [Segment(i * 128 * mib, 128 * mib, f"s{i}") for i in range(3)]  # a night: three segments
    size = balanced_split_size(night, 128 * mib, 2)
    assert size == 48 * mib and len(plan_splits(night, size)) >= TASKS_PER_WORKER * 2
    full = [Segment(i * 128 * mib, 128 * mib, f"s{i}") for i in range(17)]
    assert balanced_split_size(full, 128 * mib, 2) == 128 * mib
    tiny = [Segment(0, 256 << 10, "s0")]
    assert balanced_split_size(tiny, 128 * mib, 2) == MIN_BALANCED_SPLIT
    assert balanced_split_size(night, 0, 2) == 0 and balanced_split_size(night, 8 * mib, 2) == 8 * mib
    assert balanced_split_size(tiny, mib, 2) == mib  # a size asked below the floor is kept, never raised
    check_split_count(night, mib)  # 384 splits: taken
    with pytest.raises(SettingsError, match=r"--split-size 8: 50,331,648 splits of 8 bytes .* \(at most 200,000\)"):
        check_split_count(night, 8)
    assert MAX_SPLITS == 200_000
