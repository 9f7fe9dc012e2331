"""How recover --out copies what it does not change: os.copy_file_range (holes kept), a byte stream through
the fs layer, the counted fallback, and the --link-sealed-segments opt-in (refused across filesystems); every
method byte-identical to the broker's recovery, the input store unchanged. --in-place backs up by hard link."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from jobs.pipeline.io import copy as copymod
from jobs.pipeline.io.fs import Location
from jobs.pipeline.runtime.cli import JobError

from .conftest import GOLDEN
from .recovery_helpers import assert_matches_recovered, run_recover, tree, writable_copy

CASE = "unclean-11"


def _source(tmp_path: Path) -> Path:
    """A file with data, a hole and a data tail (a broker's last segment is sparse past its write position)."""
    p = tmp_path / "src"
    with open(p, "wb") as f:
        f.write(os.urandom(100_000))
        f.seek(3 << 20)
        f.write(b"\x01tail")
        f.truncate(5 << 20)
    return p


def test_zero_blocks_become_holes_only_when_asked(tmp_path):
    """copy_file with zero_holes: the written zeros of the source (a broker that preallocated its last segment)
    are left as holes in the copy, the same bytes read back; without it they are copied as they are."""
    src = tmp_path / "src"
    data = os.urandom(100_000) + bytes(8 << 20) + b"\x01" + bytes((1 << 20) + 5) + b"\x02tail"
    src.write_bytes(data)
    with open(src, "r+b") as f:
        f.truncate(len(data) + (3 << 20))  # and a real hole after
    before = src.read_bytes()
    holes = copymod.copy_file(Location(str(src)), Location(str(tmp_path / "holes")), zero_holes=True)
    plain = copymod.copy_file(Location(str(src)), Location(str(tmp_path / "plain")))
    assert holes == (copymod.COPY_RANGE_HOLES, len(before), None) and plain == (copymod.COPY_RANGE, len(before), None)
    assert (tmp_path / "holes").read_bytes() == before == (tmp_path / "plain").read_bytes()
    assert src.read_bytes() == before
    assert (tmp_path / "holes").stat().st_blocks * 512 <= 4 * copymod.ZERO_BLOCK  # the blocks holding data
    assert (tmp_path / "plain").stat().st_blocks * 512 >= 8 << 20  # the written zeros written again


def test_warm_mapped_file_broker_keeps_its_zeros(spark, golden, tmp_path):
    """warmMapedFileEnable=true (the broker preallocates and zero-fills its segments): recover --out copies the
    last segment's zeros as they are, no holes; the output still equals the broker's recovery."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    conf = tmp_path / "broker.conf"
    conf.write_text((GOLDEN / CASE / "broker.conf").read_text() + "\nwarmMapedFileEnable=true\n")
    assert run_recover("--store", str(store), "--broker-config", str(conf), "--out", str(tmp_path / "out"),
                       "--json") == 0
    report = json.loads((tmp_path / "out" / "reput-recover-report.json").read_text())
    assert set(report["copies"]) == {copymod.COPY_RANGE}
    assert_matches_recovered(tmp_path / "out", CASE)


@pytest.mark.parametrize("method", ["range", "stream", "fallback"])
def test_each_copy_method_is_byte_identical(tmp_path, monkeypatch, method):
    src = _source(tmp_path)
    before, mtime = src.read_bytes(), src.stat().st_mtime_ns
    if method == "fallback":
        def refuse(*a, **k):
            raise OSError(errno.EXDEV, "cross-device")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    dst = tmp_path / "out" / "dst"
    if method == "stream":
        dst.parent.mkdir()
        got = (copymod.COPY_STREAM, copymod.copy_stream(Location(str(src)), Location(str(dst))), None)
    else:
        got = copymod.copy_file(Location(str(src)), Location(str(dst)))
    want = {"range": (copymod.COPY_RANGE, None), "stream": (copymod.COPY_STREAM, None),
            "fallback": (copymod.COPY_STREAM_FALLBACK, "copy_file_range: EXDEV")}[method]
    assert (got[0], got[2]) == want and got[1] == len(before)
    assert dst.read_bytes() == before
    assert src.read_bytes() == before and src.stat().st_mtime_ns == mtime
    if method == "range":  # the hole stays a hole (blocks allocated: well under the file's size)
        assert dst.stat().st_blocks * 512 < 1 << 20


def _named(t: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """A tree's files by path, new index files (named by the run's clock) by content only."""
    return {k: v for k, v in t.items() if not k.startswith("index/")}, sorted(v for k, v in t.items() if k.startswith("index/"))


def _recover_out(store: Path, out: Path, *extra: str) -> dict:
    assert run_recover("--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--out",
                       str(out), "--json", *extra) == 0
    return json.loads((out / "reput-recover-report.json").read_text())


def test_out_by_copy_and_by_link_equals_the_broker(spark, golden, tmp_path, capsys):
    """--out with the default copies and with --link-sealed-segments: both equal the broker's recovery, the
    input store is unchanged, the report counts each method, stderr names the link as a non-default choice."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    before = tree(store)
    report = _recover_out(store, tmp_path / "copied")
    assert_matches_recovered(tmp_path / "copied", CASE)
    assert set(report["copies"]) == {copymod.COPY_RANGE, copymod.COPY_RANGE_HOLES}
    last = sorted((store / "commitlog").iterdir())[-1]  # the segment the broker writes next: its zeros as holes
    assert report["copies"][copymod.COPY_RANGE_HOLES] == {"files": 1, "bytes": last.stat().st_size}
    assert "hard link" not in capsys.readouterr().err
    report = _recover_out(store, tmp_path / "linked", "--link-sealed-segments")
    assert_matches_recovered(tmp_path / "linked", CASE)
    assert _named(tree(tmp_path / "linked")) == _named(tree(tmp_path / "copied"))
    segs = sorted((tmp_path / "linked" / "commitlog").iterdir())
    sealed = segs[:-1]
    assert report["copies"][copymod.COPY_LINK] == {"files": len(sealed), "bytes": sum(p.stat().st_size for p in sealed)}
    for p in sealed:  # the same inode as the input's segment; the last one (the broker appends to it) a copy
        assert p.stat().st_ino == (store / "commitlog" / p.name).stat().st_ino
    assert segs[-1].stat().st_ino != (store / "commitlog" / segs[-1].name).stat().st_ino
    err = capsys.readouterr().err
    assert f"--link-sealed-segments: {len(sealed)} sealed commit-log segments" in err and "hard links" in err
    assert tree(store) == before


def test_link_refused_across_filesystems(spark, golden, tmp_path, monkeypatch):
    """A hard link cannot cross filesystems: refused by name before anything is written (simulated: OUT's
    parent reports another device), and never silently turned into a copy."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    real = copymod.device
    monkeypatch.setattr(copymod, "device", lambda p: real(p) + (1 if p == str(tmp_path / "elsewhere") else 0))
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(JobError, match="--link-sealed-segments: .* different filesystems"):
        run_recover("--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--out",
                    str(tmp_path / "elsewhere" / "out"), "--link-sealed-segments")
    assert not (tmp_path / "elsewhere" / "out").exists()
    with pytest.raises(SystemExit):
        run_recover("--store", str(store), "--in-place", "--backup-dir", str(tmp_path / "b"),
                    "--link-sealed-segments")


def test_in_place_backup_is_linked_and_rolls_back(spark, golden, tmp_path, monkeypatch):
    """--in-place on the store's filesystem backs up the files it replaces or deletes as hard links (the
    switch never writes an old inode): the backup holds the old bytes, --rollback restores them."""
    store = writable_copy(GOLDEN / CASE, tmp_path / "store")
    before = tree(store)
    backup = tmp_path / "backup"
    assert run_recover("--store", str(store), "--broker-config", str(GOLDEN / CASE / "broker.conf"), "--in-place",
                       "--backup-dir", str(backup)) == 0
    assert_matches_recovered(store, CASE)
    man = json.loads((backup / "reput-backup.json").read_text())
    assert man["backup"]["hard_linked"] > 0 and man["backup"]["copied"] == 0
    for op in man["ops"]:
        if op["op"] != "create":
            assert before[op["path"]] == tree(backup)[op["path"]]
    assert run_recover("--store", str(store), "--rollback", "--backup-dir", str(backup)) == 0
    assert tree(store) == before


def test_new_index_files_are_written_with_a_sparse_tail(tmp_path):
    """The index files recovery creates (and empty ones it renders) are written up to their last entry, the rest
    a sparse tail: the same bytes as index_build.build_index_file (the broker's file, tested against the golden
    recoveries in test_recovery), without writing the hundreds of MB of zeros a default-sized file ends with."""
    import numpy as np

    from jobs.pipeline.recover.write import RecoveryOutput, new_index_file, write_output
    from storage_format.index_file import IndexState
    from storage_format.index_build import build_index_file
    from storage_format.index_keys import KeyBatch
    from storage_format.settings import BrokerSettings

    settings = BrokerSettings(max_hash_slot_num=50_000, max_index_num=200_000)  # 4.2 MB files
    rng = np.random.default_rng(7)
    n = 3000
    keys = KeyBatch(rng.integers(0, 2**31 - 1, n).astype(np.int32), np.arange(n, dtype=np.int64) * 300,
                     np.arange(n, dtype=np.int64) + 1_792_001_971_329)
    inherited = IndexState(1_792_001_000_000, 4096)
    out = RecoveryOutput()
    out.render_zero_tailed["index/new"] = (new_index_file(keys, settings, inherited, 4), settings.index_file_size)
    out.render_zero_tailed["index/empty"] = ((), settings.index_file_size)
    write_output(None, None, out, Location(str(tmp_path / "OUT")), quiet=True)
    new, empty = tmp_path / "OUT" / "index" / "new", tmp_path / "OUT" / "index" / "empty"
    assert new.read_bytes() == build_index_file(keys.key_hash, keys.phy, keys.store_ts, settings.max_hash_slot_num,
                                                settings.max_index_num, inherited)
    assert empty.read_bytes() == bytes(settings.index_file_size)
    written = 40 + 4 * settings.max_hash_slot_num + 20 * (n + 1)
    assert new.stat().st_blocks * 512 < written + (1 << 20) < settings.index_file_size  # the zeros after: a hole
    assert empty.stat().st_blocks * 512 < (1 << 20)
    assert set(out.rendered) == {"index/new", "index/empty"}


def test_consume_queue_renders_are_dealt_into_few_tasks(tmp_path):
    """Rewritten consume-queue files go to at most one task per parallel slot (a task per queue costs a Spark
    round trip each), every file once, each queue's files in order within one task."""
    from jobs.pipeline.recover.write import _cq_tasks

    queues = [[(f"consumequeue/T/{q}/{f:020d}", None, None, f) for f in range(q % 3 + 1)] for q in range(64)]
    dest = Location(str(tmp_path))
    for slots, want in ((2, 2), (5, 5), (100, 64)):
        tasks = _cq_tasks(queues, dest, slots)
        assert len(tasks) == want and all(t.dest == dest for t in tasks)
        items = [it for t in tasks for it in t.items]
        assert sorted(items) == sorted(it for q in queues for it in q)
        for t in tasks:
            for q in queues:
                mine = [it for it in t.items if it in q]
                assert mine in ([], q)


def test_rendered_consume_queue_files_keep_their_zero_tail_sparse(tmp_path):
    """A rendered consume-queue file is written through its last non-zero unit, the zeros after as a sparse
    tail: the same bytes as the whole render (render_queue_file), whatever units are set."""
    import numpy as np

    from storage_format.consume_queue import CQ_DTYPE
    from jobs.pipeline.recover.write import used_units

    rng = np.random.default_rng(3)
    for n, set_at in ((1000, []), (1000, [0]), (1000, [999]), (300_000, [5, 17, 60_000]), (300_000, [70_000])):
        units = np.zeros(n, CQ_DTYPE)
        for i in set_at:
            units[i] = (int(rng.integers(1, 2**40)), 0, 0) if i % 2 else (0, 0, -1)
        dst = Location(str(tmp_path / f"cq-{n}-{len(set_at)}"))
        dst.write_with_zero_tail([used_units(units)], units.nbytes)
        assert Path(dst.path).read_bytes() == units.tobytes()
        assert len(used_units(units)) == ((max(set_at) + 1) * units.itemsize if set_at else 0)
        if n == 300_000:
            assert os.stat(dst.path).st_blocks * 512 < (max(set_at) + 1) * units.itemsize + (1 << 20)
