"""convert's fast paths against their plain counterparts: segment files written with O_DIRECT equal the buffered
ones byte for byte, a refused O_DIRECT falls back and says why; the record listing the source scan's decode tasks
make equals the entry walk's reference (kernel and numpy decoders, small splits, a dispatch limit); and an upgraded
store whose DLedger part holds no committed entry (committedIndex -1) keeps its plain part dispatched, as
DLedgerCommitLog.getMaxOffset() does."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs.pipeline.io import direct
from jobs.pipeline.io.direct import BUFFERED_MODE, DIRECT_MODE, SegmentFileWriter
from jobs.pipeline.io.fs import Location, location
from jobs.pipeline.runtime.tasks import SparkRunner
from storage_format import commitlog_layout
from tests.conftest import GOLDEN
from tests.helpers import file_tree_digest

CASE = GOLDEN / "dledger-clean-small-11"


def _write(path: Path, pieces: list[bytes], size: int, is_direct: bool) -> SegmentFileWriter:
    out = SegmentFileWriter(Location(str(path)), size, is_direct)
    for p in pieces:
        if len(p) % 3:  # both ways in: reserve/commit and put
            out.put(p)
        else:
            view = out.reserve(len(p))
            view[:] = np.frombuffer(p, np.uint8)
            out.commit(len(p))
    assert out.close() == sum(map(len, pieces))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_direct_writes_equal_buffered_writes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    size = int(rng.choice([1 << 20, (1 << 20) + 1000, 3 * 4096 + 17]))
    pieces, left = [], int(rng.integers(0, size))
    while left:
        n = min(left, int(rng.integers(1, 300_000)))
        pieces.append(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        left -= n
    a = _write(tmp_path / "direct", pieces, size, True)
    b = _write(tmp_path / "buffered", pieces, size, False)
    assert b.mode == BUFFERED_MODE and b.fallback == "O_DIRECT not asked for"
    assert a.mode == DIRECT_MODE or a.fallback, "a fallback always says why"
    expect = b"".join(pieces) + bytes(size - sum(map(len, pieces)))
    assert (tmp_path / "direct").read_bytes() == expect == (tmp_path / "buffered").read_bytes()


def test_a_refused_o_direct_falls_back_and_says_why(tmp_path, monkeypatch):
    real_open, real_write = os.open, os.write

    def refuse_open(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_open(path, flags, *a)

    pieces = [b"x" * 5000, b"y" * 10]
    monkeypatch.setattr(direct.os, "open", refuse_open)
    out = _write(tmp_path / "a", pieces, 8192 * 2, True)
    assert out.mode == BUFFERED_MODE and "refused O_DIRECT" in out.fallback
    assert (tmp_path / "a").read_bytes() == b"x" * 5000 + b"y" * 10 + bytes(8192 * 2 - 5010)

    monkeypatch.setattr(direct.os, "open", real_open)
    failed = []

    def refuse_first_write(fd, data):  # a filesystem that opens O_DIRECT but refuses its writes
        if not failed:
            failed.append(fd)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_write(fd, data)

    monkeypatch.setattr(direct.os, "write", refuse_first_write)
    for name, n in (("b", 9000), ("c", 100)):  # refused in the writer thread, or in close() (less than a block)
        failed.clear()
        out = _write(tmp_path / name, [b"z" * n], 4096 * 4, True)
        assert failed and out.mode == BUFFERED_MODE and "refused an O_DIRECT write" in out.fallback
        assert (tmp_path / name).read_bytes() == b"z" * n + bytes(4096 * 4 - n)


def _plan(segment_size: int):
    from jobs.pipeline.convert.plan import make_plan
    from jobs.pipeline.scan.split_records import SplitRecords
    from jobs.pipeline.store.segments import list_segments
    from storage_format.settings import load_settings

    settings = load_settings(CASE / "broker.conf")
    segments = list_segments(location(str(CASE)), settings)
    parts = []
    for s in segments:
        offs, sizes, trans, preps, _, _ = commitlog_layout.hop_entries_reference(Path(s.path).read_bytes(), s.start,
                                                                                 0, 2**62)
        parts.append(SplitRecords.listed(int(offs[0]), s.header, np.asarray(sizes, np.int32), np.asarray(trans),
                                         np.asarray(preps), split=len(parts)))
    return make_plan(segments, parts, segment_size, lambda r: r.sizes)


def test_segments_written_direct_equal_buffered(tmp_path):
    """Both write modes, with the transaction ends' pairs read from the work directory as convert writes them."""
    from jobs.pipeline.convert.segments import write_segment
    from jobs.pipeline.convert.transactions import map_transaction_ends
    from jobs.pipeline.runtime.local import LocalRunner

    plan = _plan(1 << 18)
    work = location(str(tmp_path / "work"))
    plan = dataclasses.replace(plan, prepared=map_transaction_ends(LocalRunner(1), plan, work, True))
    assert len(plan.segment_starts) > 2 and plan.blanks > 1
    got = {}
    for how in (True, False):
        log, maps = tmp_path / f"{how}" / "commitlog", tmp_path / f"{how}" / "map"
        log.mkdir(parents=True)
        maps.mkdir()
        tasks = plan.segment_tasks(str(log), str(maps))
        written = [write_segment(dataclasses.replace(t, direct_io=how)) for t in tasks]
        assert {w.write_mode for w in written} == ({DIRECT_MODE} if how else {BUFFERED_MODE}) or \
            all(w.fallback for w in written)
        assert sum(w.records for w in written) == plan.records
        got[how] = (file_tree_digest(log), pq.read_table(maps).to_pydict())
    assert got[True] == got[False] and len(got[True][0]) == len(plan.segment_starts)


@pytest.mark.parametrize("window", [64, 300, 4096])
def test_segments_written_through_small_windows_equal_the_default(tmp_path, monkeypatch, window):
    """A segment writer reading its data files through windows smaller than an entry (each such entry read whole
    next), holding one record or a few: the same segment files and msgId map as the default window."""
    from jobs.pipeline.convert import segments

    plan = _plan(1 << 18)
    got = {}
    for name, size in (("default", segments.CHUNK), ("small", window)):
        monkeypatch.setattr(segments, "CHUNK", size)
        log, maps = tmp_path / name / "commitlog", tmp_path / name / "map"
        log.mkdir(parents=True)
        maps.mkdir()
        written = [segments.write_segment(t) for t in plan.segment_tasks(str(log), str(maps))]
        assert sum(w.records for w in written) == plan.records
        got[name] = (file_tree_digest(log), pq.read_table(maps).to_pydict())
    assert got["small"] == got["default"]


@pytest.mark.parametrize("kernel", ["1", "0"])
@pytest.mark.parametrize("limit_at", [None, 0.6])
def test_the_scans_listing_equals_the_entry_walk(spark, monkeypatch, tmp_path, kernel, limit_at):
    """Small splits (records cut across them, re-walks), both decoders, with and without a dispatch limit in
    the middle of a data file: the listed records are exactly the reference walk's, up to the limit. Their sizes
    and transaction ends stay in the work directory: the driver holds counts and spans (issue 32)."""
    from jobs.pipeline.scan.decode import scan_store
    from jobs.pipeline.store.segments import list_segments
    from storage_format.settings import load_settings

    monkeypatch.setenv("REPUT_DECODE_KERNEL", kernel)
    settings = load_settings(CASE / "broker.conf")
    store = location(str(CASE))
    work = location(str(tmp_path / "work"))
    segments = list_segments(store, settings)
    ref = [commitlog_layout.hop_entries_reference(Path(s.path).read_bytes(), s.start, 0, 2**62) for s in segments]
    offs = np.concatenate([r[0] for r in ref])
    sizes = np.concatenate([r[1] for r in ref]).astype(np.int64)
    limit = None
    if limit_at is not None:
        i = int(len(offs) * limit_at)
        limit = int(offs[i] + sizes[i]) + 5  # inside the next record
    scan = scan_store(SparkRunner(spark.sparkContext), store, settings, split_size=1 << 15, with_cq=False, with_keys=False,
                      dispatch_limit=limit, quiet=True, with_records=True, work=work)
    parts = [s.listed for s in scan.accepted if s.listed is not None]
    keep = np.ones(len(offs), bool) if limit is None else offs + sizes <= limit
    assert len(scan.splits) > 3 * len(segments)
    assert np.concatenate([p.offsets_from(p.sizes_in(work)) for p in parts]).tolist() == offs[keep].tolist()
    assert all(p.sizes is None and p.end_prepared is None for p in parts)
    assert np.concatenate([p.sizes_in(work) for p in parts]).tolist() == sizes[keep].tolist()
    trans = np.concatenate([r[2] for r in ref])[keep]
    preps = np.concatenate([r[3] for r in ref])[keep]
    ends = [p.prepared_in(work) for p in parts]
    assert np.concatenate(ends).tolist() == preps[trans >= 8].tolist() and len(ends[0]) < sum(map(len, ends))
    assert all(p.ends == len(e) and (p.ends_lo, p.ends_hi) == ((int(e.min()), int(e.max())) if len(e) else (0, -1))
               for p, e in zip(parts, ends))
    assert sum(p.prepared for p in parts) == int(np.count_nonzero(trans == 4))


def _empty_dledger_upgrade(root: Path) -> Path:
    """dledger-upgrade-11 as a group of three whose DLedger part holds no entry yet: its first data file zeroed,
    the later ones gone, the DLedger index zeroed, committedIndex -1."""
    store = root / "store"
    shutil.copytree(GOLDEN / "dledger-upgrade-11", store)
    for p in store.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    data = sorted((store / "dledger-n0" / "data").iterdir())
    data[0].write_bytes(bytes(data[0].stat().st_size))
    for p in data[1:]:
        p.unlink()
    for p in (store / "dledger-n0" / "index").iterdir():
        p.write_bytes(bytes(p.stat().st_size))
    for name in ("checkpoint", "checkpoint.bak"):
        (store / "dledger-n0" / name).write_text("committedIndex=-1\nendIndex=-1\n")
    for d in ("consumequeue", "index"):
        shutil.rmtree(store / d, ignore_errors=True)
    conf = (store / "broker.conf").read_text().replace(
        "dLegerPeers=n0-127.0.0.1:40911", "dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.2:40911;n2-127.0.0.3:40911")
    (store / "broker.conf").write_text(conf)
    return store


def test_an_empty_dledger_part_keeps_the_plain_part_dispatched(spark, tmp_path, capsys):
    """committedIndex -1 with the DLedger part empty: the broker's DLedgerCommitLog.getMaxOffset() is the first
    data file's offset (dividedCommitlogOffset), so the plain part below it is dispatched whole; convert copies
    it, leaves nothing out, and builds the same consume queues and index files as rebuild does of the source
    and of OUT."""
    from jobs.convert import FROM_SOURCE, main as convert_main
    from jobs.rebuild import main as rebuild_main

    store = _empty_dledger_upgrade(tmp_path)
    conf = store / "broker.conf"
    divided = int(sorted((store / "dledger-n0" / "data").iterdir())[0].name)
    capsys.readouterr()
    out = tmp_path / "out"
    assert convert_main(["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--json",
                         "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["records_past_committed_position_left_out"] == 0
    assert report["plan"]["dledger_records"] == 0 and report["plan"]["plain_segments_kept"] == 3
    assert report["queues_and_index_built_from"] == FROM_SOURCE
    assert report["max_physical_offset"] <= divided and report["message_records"] > 0
    assert rebuild_main(["--store", str(store), "--broker-config", str(conf), "--out", str(tmp_path / "src"),
                         "--quiet", "--json"]) == 0
    src = json.loads(capsys.readouterr().out)
    assert src["dispatch"]["records_not_dispatched"] == 0 and src["message_records"] == report["message_records"]
    plain_conf = tmp_path / "plain.conf"
    plain_conf.write_text("".join(ln for ln in conf.read_text().splitlines(True) if "dleger" not in ln.lower()))
    assert rebuild_main(["--store", str(out), "--broker-config", str(plain_conf), "--out", str(tmp_path / "again"),
                         "--quiet", "--json"]) == 0
    for part in ("consumequeue", "index"):
        assert file_tree_digest(out / part) == file_tree_digest(tmp_path / "src" / part) == \
            file_tree_digest(tmp_path / "again" / part), part
    assert len(file_tree_digest(out / "consumequeue")) > 0


def test_the_one_host_check_equals_the_reference():
    """hop_copy's one-host check (the msgId map's one prefix) on a golden data file's records (one host), and with
    one record's store address, port or IPv6 flag changed."""
    from storage_format.commitlog_layout import AT_SYS_FLAG, store_host_at
    from storage_format.kernels.layout_kernel import hop_copy

    path = sorted((CASE / "dledger-n0" / "data").iterdir())[0]
    buf = path.read_bytes()
    offs = commitlog_layout.hop_entries_reference(buf, 0, 0, 2**62)[0]
    assert len(offs) > 10
    for change in (None, "address", "port", "v6 flag"):
        b = bytearray(buf)
        at = int(offs[7])
        flag = int.from_bytes(b[at + AT_SYS_FLAG:at + AT_SYS_FLAG + 4], "big")
        if change == "address":
            b[at + store_host_at(flag)] ^= 1
        elif change == "port":
            b[at + store_host_at(flag) + 7] ^= 1
        elif change == "v6 flag":
            b[at + AT_SYS_FLAG:at + AT_SYS_FLAG + 4] = (flag | 0x20).to_bytes(4, "big")
        ref = commitlog_layout.one_store_host_reference(bytes(b), 0, offs)
        cap = len(b) // 68 + 1
        n, _, _, _, got, _ = hop_copy(np.frombuffer(bytes(b), np.uint8), 0, 0, 48, 2**62, np.empty(len(b), np.uint8),
                                      0, np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int64))
        assert n == len(offs) and got == ref == (change is None), change


def test_a_failed_write_in_the_writer_thread_is_raised(tmp_path, monkeypatch):
    """No space left (or any other error) while the other buffer is being filled: the next commit or close raises
    it; nothing is swallowed."""
    def no_space(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(direct.os, "write", no_space)
    out = SegmentFileWriter(Location(str(tmp_path / "f")), 1 << 20, True)
    with pytest.raises(OSError) as err:
        for _ in range(4):
            out.put(b"q" * 10_000)
        out.close()
    out.abort()
    assert err.value.errno == errno.ENOSPC
