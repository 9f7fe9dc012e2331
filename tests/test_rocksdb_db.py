"""The read-only reader of a RocksDB consume-queue database (jobs.pipeline.io.rocksdb_db) on copies of the golden
cases: every key of each expected-cq.jsonl (written by an independent reader) read back, nothing written into the
store, the private link directory gone afterwards, and the one-line errors (no extra, a database that cannot be
opened)."""
from __future__ import annotations

import os
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.io import rocksdb_db
from jobs.pipeline.io.rocksdb_db import RocksUnavailable, open_cq_database
from jobs.pipeline.runtime.failure import one_line
from storage_format import rocksdb_cq as rc
from storage_format.errors import StoreFormatError
from storage_format.rocksdb_files import LOG_BLOCK, manifest_cut
from tests.rocksdb_helpers import ALL_CASES, expected_cq, expected_items, rocks_case, rocks_copy, store_listing


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's directory for this test only: the link directories the reader makes land (and must vanish) here."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_key_of_the_golden_dump_is_read_back_and_nothing_is_written(case, tmp_path, private_tmp):
    store = rocks_copy(case, tmp_path / case)
    before = store_listing(store)
    dump = expected_cq(case)
    with open_cq_database(store / "consumequeue", f"{case}/consumequeue") as db:
        assert [p.name for p in private_tmp.iterdir()] and db.path == store / "consumequeue"
        assert sorted(db.column_families()) == [rc.DEFAULT_CF, rc.OFFSET_CF]
        units = list(db.unit_items())
        offsets = list(db.offset_items())
        batches = list(db.unit_batches(size=1000))
        checkpoint = db.checkpoint()
        assert db.unreferenced_files() == []
    assert units == expected_items(case, rc.DEFAULT_CF)
    assert offsets == expected_items(case, rc.OFFSET_CF)
    assert [len(b.keys) for b in batches[:-1]] == [1000] * (len(batches) - 1)
    assert [k for b in batches for k in b.keys] == [k for k, _ in units]
    assert {b.values.dtype for b in batches} == {rc.UNIT_VALUE_DTYPE}
    values = np.concatenate([b.values for b in batches])
    assert values["phy_offset"].tolist() == [r["commitLogOffset"] for r in dump if r["cf"] == rc.DEFAULT_CF]
    assert values["store_timestamp"].tolist() == [r["storeTimestamp"] for r in dump if r["cf"] == rc.DEFAULT_CF]
    points = [r["checkpointPhyOffset"] for r in dump if "checkpointPhyOffset" in r]
    assert len(points) == 1 and checkpoint == points[0]
    assert store_listing(store) == before
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("case", ["rocksdb-lmq-clean-11"])
def test_one_queues_key_range_reads_exactly_its_units(case, tmp_path, private_tmp):
    store = rocks_copy(case, tmp_path / case)
    dump = [r for r in expected_cq(case) if r["cf"] == rc.DEFAULT_CF]
    queues = sorted({(r["topic"], r["queueId"]) for r in dump})
    with open_cq_database(store / "consumequeue", case) as db:
        for topic, queue_id in queues:
            lower, upper = rc.queue_key_range(topic.encode(), queue_id)
            got = [rc.parse_unit_key(k).queue_offset for k, _ in db.unit_items(lower, upper)]
            assert got == [r["queueOffset"] for r in dump if (r["topic"], r["queueId"]) == (topic, queue_id)]
            for size in (65536, 3, 1, max(len(got), 1)):  # batch edges anywhere, and at the range's end
                batches = list(db.unit_batches(lower, upper, size=size))
                assert [rc.parse_unit_key(k).queue_offset for b in batches for k in b.keys] == got, size
                assert all(0 < len(b.keys) <= size for b in batches), size
        assert list(db.unit_topics()) == sorted({t.encode() for t, _ in queues}, key=lambda t: (len(t), t))
        nowhere = rc.queue_key_range(b"no-such-topic", 0)
        assert list(db.unit_items(*nowhere)) == [] and list(db.unit_batches(*nowhere)) == []
    assert len(queues) > 20


def test_the_link_directory_goes_also_when_the_reader_fails(tmp_path, private_tmp):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    before = store_listing(store)
    with pytest.raises(ZeroDivisionError):
        with open_cq_database(store / "consumequeue", "s/consumequeue") as db:
            next(db.unit_items())
            assert len(list(private_tmp.iterdir())) == 1
            1 / 0
    assert list(private_tmp.iterdir()) == []
    assert store_listing(store) == before


def test_a_missing_extra_is_one_line_naming_it(tmp_path, private_tmp, monkeypatch):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # `import rocksdict` raises ImportError
    with pytest.raises(RocksUnavailable) as err:
        with open_cq_database(store / "consumequeue", "s/consumequeue"):
            pass
    line = one_line(err.value)
    assert "reput[rocksdb]" in line and "\n" not in line and "REPUT_DEBUG" not in line
    assert list(private_tmp.iterdir()) == []


def _manifest(db: Path) -> Path:
    return db / (db / "CURRENT").read_text().strip()


@pytest.mark.parametrize("damage, named", [
    ("no CURRENT", "CURRENT"),
    ("CURRENT names nothing", "MANIFEST-"),
    ("truncated MANIFEST", "MANIFEST-"),
    ("MANIFEST cut at a record", "MANIFEST-"),
    ("empty MANIFEST", "MANIFEST-"),
    ("missing sst", ".sst"),
])
def test_a_database_that_cannot_be_opened_is_one_line_naming_the_file(damage, named, tmp_path, private_tmp):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "s")
    db = store / "consumequeue"
    if damage == "no CURRENT":
        (db / "CURRENT").unlink()
    elif damage == "CURRENT names nothing":
        _manifest(db).unlink()
    elif damage == "truncated MANIFEST":
        os.truncate(_manifest(db), _manifest(db).stat().st_size // 2)
    elif damage == "MANIFEST cut at a record":  # whole records, the flushes' edits gone: RocksDB opens it empty
        os.truncate(_manifest(db), 464)
    elif damage == "empty MANIFEST":
        os.truncate(_manifest(db), 0)
    else:
        next(db.glob("*.sst")).unlink()
    before = store_listing(store)
    with pytest.raises(StoreFormatError) as err:
        with open_cq_database(db, "s/consumequeue") as opened:
            list(opened.unit_items())
    line = one_line(err.value)
    assert "\n" not in line and line.startswith("s/consumequeue/") and named in line.split(":")[0], line
    assert str(private_tmp) not in line
    assert store_listing(store) == before
    assert list(private_tmp.iterdir()) == []


def test_a_unit_value_of_the_wrong_size_is_left_out_and_listed_by_its_key():
    """A value that is not 28 bytes (verify reports it, malformed_key; it stopped the whole run with exit 2)."""
    values = [bytes(rc.UNIT_VALUE_SIZE), bytes(rc.UNIT_VALUE_SIZE - 1), bytes(rc.UNIT_VALUE_SIZE + 1)]
    batch = rocksdb_db.CqDatabase._batch([b"k0", b"k1", b"k2"], values)
    assert batch.keys == [b"k0"] and len(batch.values) == 1
    assert batch.bad_values == ((b"k1", rc.UNIT_VALUE_SIZE - 1), (b"k2", rc.UNIT_VALUE_SIZE + 1))


def _written_db(path: Path, families: tuple[str, ...], units: dict[bytes, bytes]) -> Path:
    """A small database written here with the binding (not a broker's): only the shapes the goldens lack."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    db = rocksdict.Rdict(str(path), opts, column_families={cf: rocksdict.Options(raw_mode=True) for cf in families})
    for k, v in units.items():
        db[k] = v
    db.flush()
    db.close()
    (path / "rocksdict-config.json").unlink(missing_ok=True)
    return path


def test_a_database_without_the_checkpoint_key_reads_none(tmp_path, private_tmp):
    key, value = rc.unit_key(b"T", 0, 0), rc.unit_value(rc.Unit(0, 100, 0, 1))
    db_dir = _written_db(tmp_path / "db", (rc.OFFSET_CF,), {key: value})
    with open_cq_database(db_dir, "db") as db:
        assert db.checkpoint() is None and list(db.offset_items()) == []
        assert list(db.unit_items()) == [(key, value)]
        assert db.unreferenced_files() == []
        (db_dir / "000999.sst").write_bytes(b"")
        assert db.unreferenced_files() == ["000999.sst"]


def test_a_database_without_the_offset_family_is_refused_by_name(tmp_path, private_tmp):
    db_dir = _written_db(tmp_path / "db", (), {b"k": b"v"})
    with pytest.raises(StoreFormatError, match="^db/MANIFEST-[0-9]+: lists the column families default, without offset"):
        with open_cq_database(db_dir, "db"):
            pass
    assert list(private_tmp.iterdir()) == []


def test_a_database_with_another_column_family_is_refused_by_name(tmp_path, private_tmp):
    """RocketMQ 5.3.3 opens its consume-queue database with `default` and `offset` only, and RocksDB refuses to open
    one without all of its families ("Column families not opened: extra", load() fails): verify said CONSISTENT."""
    db_dir = _written_db(tmp_path / "db", (rc.OFFSET_CF, "extra"), {b"k": b"v"})
    with pytest.raises(StoreFormatError, match="^db/MANIFEST-[0-9]+: lists the column families [a-z, ]+: extra "
                                               "besides default and offset.*the broker does not start"):
        with open_cq_database(db_dir, "db"):
            pass
    assert list(private_tmp.iterdir()) == []


def _log(payloads: list[bytes]) -> tuple[bytes, list[int]]:
    """A RocksDB log file written as log_writer.cc writes one (CRCs left 0: the structure check does not read
    them), and the offsets where each record ends."""
    out, ends = bytearray(), []
    for payload in payloads:
        left, first = payload, True
        while True:
            room = LOG_BLOCK - len(out) % LOG_BLOCK
            if room < 7:
                out += bytes(room)
                continue
            chunk, left = left[:room - 7], left[room - 7:]
            kind = (1 if not left else 2) if first else (4 if not left else 3)
            out += struct.pack("<IHB", 0, len(chunk), kind) + chunk
            first = False
            if not left:
                break
        ends.append(len(out))
    return bytes(out), ends


def test_manifest_structure_whole_and_cut():
    data, ends = _log([b"a" * 39, b"", b"b" * 40000, b"c" * 32761, b"d" * 100, b"e" * 70000])
    assert manifest_cut(data) is None and manifest_cut(data + bytes(4096)) is None  # preallocated zeros
    cuts = {n: manifest_cut(data[:n]) for n in range(len(data))}
    assert all(cuts[n] is None for n in [0, *ends[:-1]])
    assert all(cut is not None for n, cut in cuts.items() if n not in (0, *ends[:-1]))
    assert cuts[ends[1] + 10].offset == ends[1]  # the record that does not end, by offset
    assert manifest_cut(data[:5] + b"\x09" + data[6:]) is not None  # not a log record type


@pytest.mark.parametrize("case", ALL_CASES)
def test_the_golden_manifests_are_whole_records(case):
    db = rocks_case(case) / "consumequeue"
    assert manifest_cut(_manifest(db).read_bytes()) is None


def test_a_block_that_fails_its_checksum_is_refused_not_read_as_the_end(tmp_path, private_tmp):
    """A data block of an SST file changed on disk (bit rot): RocksDB's iterator stops there and says so only in its
    status; every way the reader iterates refuses naming the file and the block's byte offset, where it read a
    smaller database before."""
    store = rocks_copy("rocksdb-clean-11", tmp_path / "store")
    sst = max((store / "consumequeue").glob("*.sst"), key=lambda p: p.stat().st_size)
    data = bytearray(sst.read_bytes())
    data[len(data) // 3] ^= 0xFF
    sst.write_bytes(bytes(data))
    with open_cq_database(store / "consumequeue", "STORE/consumequeue") as db:
        for read in (lambda: list(db.unit_items()), lambda: list(db.unit_batches(size=1000)),
                     lambda: list(db.unit_topics())):
            with pytest.raises(StoreFormatError) as exc:
                read()
            assert exc.value.path == f"STORE/consumequeue/{sst.name}" and exc.value.offset is not None
            assert "block checksum mismatch" in str(exc.value), exc.value
