"""Where the consume queues are (storage_format.cq_layout, the store gate): each golden RocksDB case told apart from
its files with and without its broker config, a config that contradicts the files refused by name for every job, the
jobs that do not read a RocksDB store yet refusing it by name, and the double-write store handled as the file-CQ
store it is (rebuild byte-exact, verify consistent, its database named as not read and never touched)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jobs.pipeline.io.fs import location
from jobs.pipeline.io.store_gate import ROCKSDB_JOBS, store_cq_layout, store_settings
from storage_format import cq_layout as cl
from storage_format.settings import BrokerSettings, load_settings
from tests.helpers import run_job
from tests.rocksdb_helpers import ALL_CASES, DOUBLE_WRITE, rocks_case, rocks_copy, store_listing

ALL_JOBS = ("rebuild", "verify", "recover", "inspect", "catalog", "query", "dump", "convert")


@pytest.mark.parametrize("case", ALL_CASES)
@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_each_golden_case_is_told_apart(case, with_config, capfd):
    store = location(str(rocks_case(case)))
    given = load_settings(rocks_case(case) / "broker.conf") if with_config else BrokerSettings()
    settings = store_settings(store, given, with_config, "inspect")
    layout = store_cq_layout(store, settings)
    err = capfd.readouterr().err
    if case == DOUBLE_WRITE:
        assert (layout.kind, layout.db_dir, layout.reads_files) == (cl.DOUBLE_WRITE, "consumequeue", True)
        assert settings.rocksdb_cq_double_write_enable and settings.store_type == "default"
        assert "consumequeue/CURRENT" in layout.not_read and "consumequeue/MANIFEST-000005" in layout.not_read
        assert len(layout.not_read) == 8 and "8 files are not read" in err and "nor written" in err
    else:
        assert (layout.kind, layout.db_dir, layout.not_read, layout.reads_database) == (
            cl.ROCKSDB, "consumequeue", (), True)
        assert cl.is_rocksdb_type(settings)
    assert ("no broker config" in err) == (not with_config)


def _listing(cq_files=(), cq_dirs=(), separate=()) -> cl.CqFiles:
    return cl.CqFiles(tuple(cq_files), tuple(cq_dirs), tuple(separate))


DB = ("000008.sst", "CURRENT", "IDENTITY", "LOCK", "MANIFEST-000005", "OPTIONS-000007")


def test_the_decision_pure():
    rocks, default = BrokerSettings(store_type="defaultRocksDB"), BrokerSettings()
    double = BrokerSettings(rocksdb_cq_double_write_enable=True)
    assert cl.cq_layout(default, _listing(cq_dirs=["T"])).kind == cl.FILES
    assert cl.cq_layout(default, _listing()).kind == cl.FILES
    assert cl.cq_layout(BrokerSettings(store_type="DEFAULTROCKSDB"), _listing(DB)).kind == cl.ROCKSDB  # ignoring case
    assert cl.cq_layout(rocks, _listing()).kind == cl.ROCKSDB  # consumequeue/ deleted: the broker makes a new one
    stale = cl.cq_layout(rocks, _listing(DB, ["T"]))
    assert stale.kind == cl.ROCKSDB and stale.not_read == ("consumequeue/T/",)
    assert cl.cq_layout(double, _listing(cq_dirs=["T"])).kind == cl.DOUBLE_WRITE
    assert cl.cq_layout(double, _listing(DB, ["T"])).not_read == tuple(f"consumequeue/{f}" for f in DB)
    elsewhere = cl.cq_layout(rocks, _listing(cq_dirs=["T"], separate=DB))
    assert (elsewhere.kind, elsewhere.db_dir) == (cl.ROCKSDB_ELSEWHERE, "consumequeue_rocksdb")
    # without a config the files decide, and a database is never taken for file queues
    assert cl.discover_cq_layout(default, _listing(DB))[0].store_type == "defaultRocksDB"
    assert cl.discover_cq_layout(default, _listing(DB, ["T"]))[0].rocksdb_cq_double_write_enable
    assert cl.discover_cq_layout(default, _listing(cq_dirs=["T"])) == (default, None)
    assert cl.discover_cq_layout(default, _listing(("LOCK",), ["T"])) == (default, None)  # no database file


@pytest.mark.parametrize("settings, files, named", [
    (BrokerSettings(), _listing(DB), ["consumequeue/CURRENT", "storeType=default", "rocksdbCQDoubleWriteEnable=false"]),
    (BrokerSettings(), _listing(("000009.sst",), ["T"]), ["consumequeue/000009.sst", "storeType=default"]),
    (BrokerSettings(store_type="defaultRocksDB"), _listing(cq_dirs=["TopicTest"]),
     ["storeType=defaultRocksDB", "consumequeue/TopicTest/", "no consumequeue/CURRENT"]),
    (BrokerSettings(), _listing(DB, separate=DB), ["consumequeue_rocksdb/CURRENT", "consumequeue/CURRENT"]),
], ids=["db-config-default", "sst-beside-queues-config-default", "config-rocksdb-files-only", "two-databases"])
def test_a_config_that_contradicts_the_files_is_refused_naming_both(settings, files, named):
    with pytest.raises(cl.CqLayoutError) as err:
        cl.cq_layout(settings, files)
    for word in named:
        assert word in str(err.value), str(err.value)


def _refused(job: str, store: Path, tmp_path: Path, conf: Path | None, capfd, *words: str) -> None:
    before = store_listing(store)
    argv = _argv(job, store, tmp_path, conf)
    code, _, err = run_job(job, argv, capfd)
    lines = [line for line in err.splitlines() if f"reput {job}: error:" in line]
    assert code == 2 and len(lines) == 1, err[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    assert store_listing(store) == before and not list(tmp_path.glob("out*"))


def _argv(job: str, store: Path, tmp: Path, conf: Path | None) -> list[str]:
    common = ["--store", str(store)] + (["--broker-config", str(conf)] if conf else [])
    return common + {"rebuild": ["--out", str(tmp / "out")],
                     "verify": ["--report", str(tmp / "out.json"), "--work-dir", str(tmp / "out-work")],
                     "recover": ["--out", str(tmp / "out")], "inspect": ["--report", str(tmp / "out.json")],
                     "catalog": ["--table", str(tmp / "out-table")], "query": ["--msg-id", "0" * 32],
                     "dump": ["--offset", "0"], "convert": ["--out", str(tmp / "out")]}[job]


@pytest.mark.parametrize("job", [j for j in ALL_JOBS if j not in ROCKSDB_JOBS])
@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_jobs_that_do_not_read_a_rocksdb_store_yet_refuse_it_by_name(job, with_config, tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "rocksdb-clean-11")
    _refused(job, store, tmp_path, store / "broker.conf" if with_config else None, capfd,
             "storeType=defaultRocksDB", "RocksDB consume queues", "does not implement it")


@pytest.mark.parametrize("job", ALL_JOBS)
def test_every_job_refuses_a_config_the_files_contradict(job, tmp_path, capfd):
    """rocksdb-clean-11's database with a config that says file queues (the double-write case's, switched off)."""
    store = rocks_copy("rocksdb-clean-11", tmp_path / "rocksdb-clean-11")
    conf = tmp_path / "file-queues.conf"
    conf.write_text((store / "broker.conf").read_text().replace("storeType=defaultRocksDB", "storeType=default"))
    _refused(job, store, tmp_path, conf, capfd, "consumequeue/CURRENT found", "storeType=default",
             "rocksdbCQDoubleWriteEnable=false")


@pytest.mark.parametrize("job", ALL_JOBS)
def test_every_job_refuses_a_database_in_consumequeue_rocksdb(job, tmp_path, capfd):
    store = rocks_copy("rocksdb-clean-11", tmp_path / "rocksdb-clean-11")
    (store / "consumequeue").rename(store / "consumequeue_rocksdb")
    _refused(job, store, tmp_path, store / "broker.conf", capfd, "consumequeue_rocksdb/CURRENT",
             "useSeparateStorePathForRocksdbCQ", "does not implement it")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_the_double_write_store_is_rebuilt_byte_exact_and_its_database_left_alone(with_config, tmp_path, capfd):
    store = rocks_copy(DOUBLE_WRITE, tmp_path / DOUBLE_WRITE)
    before = store_listing(store)
    argv = ["--store", str(store), "--out", str(tmp_path / "out")] + (
        ["--broker-config", str(store / "broker.conf")] if with_config else [])
    code, _, err = run_job("rebuild", argv, capfd)
    assert code == 0, err[-3000:]
    assert "8 files are not read" in err and "consumequeue/000008.sst" in err
    report = json.loads((tmp_path / "out" / "reput-report.json").read_text())
    assert report["cq_layout"]["layout"] == cl.DOUBLE_WRITE and "consumequeue/CURRENT" in report["cq_layout"]["not_read"]
    queues = sorted(p.relative_to(store) for p in (store / "consumequeue").glob("*/*/*"))
    assert len(queues) == 56
    assert {str(q): _sha(tmp_path / "out" / q) for q in queues} == {str(q): _sha(store / q) for q in queues}
    assert sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out" / "consumequeue").rglob("*")
                  if p.is_file()) == queues  # no database file written into OUT
    # index files by content in name order (their names are the broker's wall-clock creation times)
    assert [_sha(p) for p in sorted((store / "index").iterdir())] == [
        _sha(p) for p in sorted((tmp_path / "out" / "index").iterdir())]
    assert store_listing(store) == before


def test_the_double_write_store_verifies_consistent(tmp_path, capfd):
    store = rocks_copy(DOUBLE_WRITE, tmp_path / DOUBLE_WRITE)
    before = store_listing(store)
    code, _, err = run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf"),
                                      "--report", str(tmp_path / "verify.json")], capfd)
    report = json.loads((tmp_path / "verify.json").read_text())
    assert code == 0 and report["status"] == "consistent", err[-3000:]
    assert report["cq_layout"]["layout"] == cl.DOUBLE_WRITE and len(report["cq_layout"]["not_read"]) == 8
    assert "8 files are not read" in err
    assert store_listing(store) == before
