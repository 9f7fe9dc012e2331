"""The compiled record-start search (kernels.record_search) against its numpy reference
(commitlog.find_first_record / find_first_start): same answer at every start on every golden commit log, and on
generated buffers (records planted at any alignment, 0xDA noise, magics whose physicalOffset does not match,
records cut by the buffer's end, zero ranges)."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jobs.pipeline.io.fs import location
from jobs.pipeline.scan.result import DECODER_NO_START, SplitTask
from jobs.pipeline.scan.decode import decode_split
from jobs.pipeline.store.segments import list_segments
from storage_format.commitlog import find_first_record, find_first_start
from storage_format.record import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from storage_format.scan_plan import plan_splits
from storage_format.settings import load_settings
from storage_format.kernels.split_decode import find_first_record_fast, find_first_start_fast
from tests.conftest import GOLDEN, case_params, golden_cases


def _starts(n: int, step: int) -> list[int]:
    """Search starts across a buffer of n bytes: every `step` bytes, each at all 8 alignments."""
    return sorted({min(n, s + k) for s in range(0, n + 1, step) for k in range(8)})


@pytest.mark.parametrize("case", case_params(golden_cases()))
def test_kernel_search_equals_reference_on_golden(case):
    """Every golden commit log (and DLedger data file: entries by the pos rule): the compiled search finds the
    record the reference finds, from starts spread over each segment at every alignment, to the segment's end
    and to a stop short of it."""
    settings = load_settings(GOLDEN / case / "broker.conf")
    segments = list_segments(location(str(GOLDEN / case)), settings)
    assert segments, case
    found = 0
    for seg in segments:
        data = Path(seg.path).read_bytes()
        n = len(data)
        for start in _starts(n, max(4096, n // 64)):
            for stop in (n, min(n, start + 700)):
                want = find_first_start(data, seg.start, start, stop, seg.header)
                got = find_first_start_fast(data, seg.start, start, stop, seg.header)
                assert got == want, (case, seg.path, start, stop)
                found += want is not None
    assert found, f"{case}: no search found a record (the comparison compared nothing)"


def _record_head(size: int, magic: int, phy: int) -> bytes:
    """The bytes the search reads of a record: totalSize, magic, ... physicalOffset at +28 (36 bytes)."""
    return struct.pack(">iI", size, magic) + bytes(20) + struct.pack(">q", phy)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 3000), base=st.sampled_from([0, 1 << 30, (1 << 40) + 3]), data=st.data())
def test_kernel_search_equals_reference_on_generated(n, base, data):
    """Random buffers with planted heads (a right one, a wrong physicalOffset, the blank magic, a head cut by
    the end) and stray 0xDA bytes: same answer from every start to every stop tried."""
    buf = bytearray(n)
    for _ in range(data.draw(st.integers(0, 8))):
        at = data.draw(st.integers(0, max(0, n - 1)))
        kind = data.draw(st.sampled_from(["ok", "ok2", "wrong_phy", "blank", "da"]))
        if kind == "da":
            buf[at:at + 1] = b"\xda"[:max(0, n - at)]
            continue
        magic = {"ok": MAGIC_V1, "ok2": MAGIC_V2, "wrong_phy": MAGIC_V1, "blank": MAGIC_BLANK}[kind]
        head = _record_head(100, magic, base + at + (1 if kind == "wrong_phy" else 0))
        buf[at:at + len(head)] = head[:max(0, n - at)]
    buf = bytes(buf[:n])
    start = data.draw(st.integers(0, n + 8))
    stop = data.draw(st.integers(0, n + 8))
    assert find_first_record_fast(buf, base, start, stop) == find_first_record(buf, base, start, stop)


def test_kernel_search_finds_every_planted_record_at_each_alignment():
    """A record head at each alignment after a long zero range (words skipped whole), and none in zeros."""
    zeros = bytes(1 << 16)
    assert find_first_record_fast(zeros, 0, 0, len(zeros)) is None
    for at in range(4096, 4096 + 16):
        buf = bytearray(zeros)
        buf[at:at + 36] = _record_head(200, MAGIC_V2, 7 * 4096 + at)
        for start in (0, 1, at - 3, at):
            assert find_first_record_fast(bytes(buf), 7 * 4096, start, len(buf)) == at
            assert find_first_record(bytes(buf), 7 * 4096, start, len(buf)) == at
        assert find_first_record_fast(bytes(buf), 7 * 4096, at + 1, len(buf)) is None
        assert find_first_record_fast(bytes(buf), 7 * 4096, 0, at) is None  # at is past the stop


def test_zero_split_summary_is_the_references(tmp_path):
    """A split in a zero range that is really stored (not a sparse hole): the kernel path states no record
    start without handing the split to the reference, and its summary is the reference's field for field."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    size = 1 << 20
    seg = store / "commitlog" / f"{0:020d}"
    data = bytearray(b"\x01" * size)  # written bytes, then zeros: no hole anywhere
    data[1 << 18:] = bytes(size - (1 << 18))
    seg.write_bytes(bytes(data))
    conf = tmp_path / "broker.conf"
    conf.write_text(f"mappedFileSizeCommitLog={size}\n")
    settings = load_settings(conf)
    splits = [sp for sp in plan_splits(list_segments(location(str(store)), settings), 1 << 18)
              if not sp.at_segment_start]
    assert len(splits) == 3
    for sp in splits:
        got = {}
        for kernel in (True, False):
            task = SplitTask(split=sp, settings=settings, work=location(str(tmp_path / f"w{kernel}")), kernel=kernel,
                             check_crc=True)
            s = decode_split(task)
            got[kernel] = s
        assert got[True].decoder == DECODER_NO_START and not got[True].fallback
        fields = [{k: v for k, v in vars(s).items() if k not in ("decoder", "fallback", "seconds")} for s in got.values()]
        assert fields[0] == fields[1], sp
        assert got[True].records == 0 and got[True].first_offset is None
