"""Features reput does not implement are refused by name (exit 2, nothing written, before Spark starts), found
from the broker config and from the store's files; a single storePathCommitLog is honoured."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.runtime.cli import run_main
from storegen.encoder import write_store
from storage_format.record import Message
from storage_format.settings import BrokerSettings
from storage_format.store_layout import (StoreListing, UnsupportedStoreError, check_store, commitlog_path,
                                         inner_batch_records, layout_refusal, setting_refusal)
from tests.conftest import GOLDEN
from tests.rebuild_helpers import consume_queue_hashes, golden_consume_queue_hashes

BASE = "v5-clean-small-11"

# (id, extra broker.conf lines, files to create in the store, the name the message must carry)
REFUSALS = [
    ("dledger-multi-path", "enableDLegerCommitLog=true\ndLegerSelfId=n0\nstorePathDLedgerCommitLog=/a/data,/b/data\n",
     [], "storePathDLedgerCommitLog"),
    ("rocksdb-setting", "storeType=defaultRocksDB\n", [], "storeType=defaultRocksDB"),
    ("rocksdb-layout", "", ["consumequeue/CURRENT", "consumequeue/MANIFEST-000005", "consumequeue/000009.sst"],
     "consumequeue/"),
    ("batchcq-layout", "", ["batchconsumequeue/BatchTopic/0/00000000000000000000"], "batchconsumequeue/"),
    ("cqext-setting", "enableConsumeQueueExt=true\n", [], "enableConsumeQueueExt"),
    ("cqext-layout", "", ["consumequeue_ext/TopicTest/0/00000000000000000000"], "consumequeue_ext/"),
    ("propcrc-verify", "forceVerifyPropCRC=true\n", [], "forceVerifyPropCRC"),
    ("propcrc-append", "enabledAppendPropCRC=true\n", [], "enabledAppendPropCRC"),
    ("multi-path", "storePathCommitLog=/data/a/commitlog,/data/b/commitlog\n", [], "storePathCommitLog"),
    ("read-only-paths", "readOnlyCommitLogStorePaths=/data/old/commitlog\n", [], "readOnlyCommitLogStorePaths"),
]


def make_store(root: Path, conf_extra: str, files: list[str]) -> Path:
    """A copy of the golden store with the feature's setting in its broker.conf and its files added."""
    store = root / "store"
    shutil.copytree(GOLDEN / BASE, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (store / "broker.conf").write_text((GOLDEN / BASE / "broker.conf").read_text() + conf_extra)
    for rel in files:
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_bytes(b"\0" * 64)
    return store


def job_argv(job: str, store: Path, tmp: Path) -> list[str]:
    """Arguments for one job; every output goes under tmp/out*."""
    common = ["--store", str(store), "--broker-config", str(store / "broker.conf")]
    return common + {"rebuild": ["--out", str(tmp / "out")],
                     "verify": ["--report", str(tmp / "out.json"), "--work-dir", str(tmp / "out-work")],
                     "recover": ["--out", str(tmp / "out")],
                     "inspect": [],
                     "catalog": ["--table", str(tmp / "out-table")],
                     "query": ["--msg-id", "C0A8000A00002A9F0000000000000000"],
                     "dump": ["--offset", "0"]}[job]


def job_main(job: str):
    import importlib

    return importlib.import_module(f"jobs.{job}").main


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("job", ["rebuild", "verify", "recover", "inspect", "catalog", "query", "dump"])
@pytest.mark.parametrize("case,conf,files,name", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_every_job_refuses_by_name(job, case, conf, files, name, tmp_path, capsys):
    store = make_store(tmp_path, conf, files)
    before = tree(store)
    with pytest.raises(SystemExit) as exc:
        run_main(job, job_main(job), job_argv(job, store, tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and name in err[0] and "does not implement" in err[0], err
    assert "Traceback" not in "".join(err)
    assert tree(store) == before and not list(tmp_path.glob("out*"))


# DLedger stores reput reads only as the broker would: refused, named, where the config and the files disagree.
DLEDGER_REFUSALS = [
    ("dledger-no-self-id", "enableDLegerCommitLog=true\n", [], "dLegerSelfId"),
    ("dledger-layout-config-off", "", ["dledger-n0/data/00000000000000000000"], "dledger-n0/"),
]


@pytest.mark.parametrize("job", ["rebuild", "verify", "recover", "inspect", "catalog", "query", "dump"])
@pytest.mark.parametrize("case,conf,files,name", DLEDGER_REFUSALS, ids=[r[0] for r in DLEDGER_REFUSALS])
def test_every_job_refuses_a_dledger_mismatch_by_name(job, case, conf, files, name, tmp_path, capsys):
    store = make_store(tmp_path, conf, files)
    before = tree(store)
    with pytest.raises(SystemExit) as exc:
        run_main(job, job_main(job), job_argv(job, store, tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and name in err[0] and "Traceback" not in err[0], err
    assert tree(store) == before and not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("job", ["rebuild", "verify", "inspect", "query", "dump"])
def test_several_dledger_members_without_a_config_are_refused_naming_them(job, tmp_path, capsys):
    """Without a broker config a single dledger-<id>/data/ is read; two are refused, both named."""
    store = make_store(tmp_path, "", ["dledger-n0/data/00000000000000000000", "dledger-n1/data/00000000000000000000"])
    before = tree(store)
    argv = [a for a in job_argv(job, store, tmp_path)]
    i = argv.index("--broker-config")
    del argv[i:i + 2]
    with pytest.raises(SystemExit) as exc:
        run_main(job, job_main(job), argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and "dledger-n0/data/" in err[0] and "dledger-n1/data/" in err[0], err
    assert tree(store) == before and not list(tmp_path.glob("out*"))


def test_dledger_discovery_pure():
    from storage_format.store_layout import discover_dledger

    listing = StoreListing(frozenset({"dledger-n7/", "consumequeue/"}), dledger_data=frozenset({"dledger-n7/"}))
    found = discover_dledger(BrokerSettings(), listing)
    assert found.enable_dleger_commit_log and found.d_leger_self_id == "n7"
    check_store(found, listing)  # dledger-n7/ is expected in DLedger mode
    assert discover_dledger(BrokerSettings(), StoreListing(frozenset({"commitlog/"}))) == BrokerSettings()
    with pytest.raises(UnsupportedStoreError, match="dledger-n7/"):
        check_store(BrokerSettings(), listing)
    with pytest.raises(UnsupportedStoreError, match="dLegerSelfId"):
        check_store(BrokerSettings(enable_dleger_commit_log=True), StoreListing(frozenset()))


def test_the_checks_pure():
    assert setting_refusal(BrokerSettings()) is None
    assert layout_refusal(StoreListing(frozenset({"commitlog/", "consumequeue/", "index/", "checkpoint"}))) is None
    # empty feature directories hold nothing reput would miss
    assert layout_refusal(StoreListing(frozenset({"batchconsumequeue/", "consumequeue_ext/"}))) is None
    assert "storeType=DEFAULTROCKSDB" in setting_refusal(BrokerSettings(store_type="DEFAULTROCKSDB"))
    assert setting_refusal(BrokerSettings(read_only_commit_log_store_paths="")) is None
    with pytest.raises(UnsupportedStoreError, match="IDENTITY"):
        check_store(BrokerSettings(), StoreListing(frozenset({"consumequeue/"}), frozenset({"IDENTITY"})))
    assert commitlog_path(BrokerSettings(store_path_commit_log=" /x/commitlog ")) == "/x/commitlog"
    assert commitlog_path(BrokerSettings()) is None
    assert inner_batch_records(np.array([0, 0x80, 0x10, 0x84])).tolist() == [1, 3]


def test_inner_batch_record_is_refused_by_name(spark, tmp_path, capsys):
    """A record with the inner-batch sysFlag (BatchConsumeQueue) is named, not blamed on damage."""
    store = tmp_path / "store"
    msgs = [Message(topic="T", body=b"x", store_timestamp=1_700_000_000_000 + i, sys_flag=0x80 if i == 3 else 0)
            for i in range(6)]
    write_store(store, msgs, 1 << 16)
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=65536\n")
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", job_main("rebuild"), ["--store", str(store), "--broker-config", str(conf),
                                                  "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "inner-batch sysFlag 0x80" in err and "BatchConsumeQueue" in err
    assert not (tmp_path / "out").exists()


def test_single_store_path_commit_log_is_honoured(spark, tmp_path, capsys):
    """The commit log outside the store root, named by storePathCommitLog: rebuild is byte-exact; recover
    --in-place is refused (its switch covers the store root only)."""
    store = make_store(tmp_path, "", [])
    elsewhere = tmp_path / "disk2" / "commitlog"
    elsewhere.parent.mkdir()
    shutil.move(str(store / "commitlog"), elsewhere)
    conf = tmp_path / "broker.conf"
    conf.write_text((store / "broker.conf").read_text() + f"storePathCommitLog={elsewhere}\n")
    out = tmp_path / "rebuilt"
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", job_main("rebuild"), ["--store", str(store), "--broker-config", str(conf),
                                                  "--out", str(out), "--json"])
    assert exc.value.code == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes(BASE)
    with pytest.raises(SystemExit) as exc:
        run_main("recover", job_main("recover"), ["--store", str(store), "--broker-config", str(conf),
                                                  "--in-place", "--backup-dir", str(tmp_path / "bak")])
    assert exc.value.code == 2 and "storePathCommitLog" in capsys.readouterr().err


# A broker config that leaves out the store's file sizes (issue 37 item 3): the broker with it fails to load the
# store's consume queues or misreads its index files, so every job refuses it by name before reading anything.
CONFIG_MISMATCHES = [("cq-size", "clean-small-11", ("mappedFileSizeConsumeQueue",), "mappedFileSizeConsumeQueue=6000000"),
                     ("index-size", "clean-small-11", ("maxIndexNum",), "maxIndexNum=20000000"),
                     ("dledger-all", "dledger-clean-small-11",
                      ("mappedFileSizeConsumeQueue", "maxIndexNum", "maxHashSlotNum"), "mappedFileSizeConsumeQueue")]


@pytest.mark.parametrize("job", ["rebuild", "verify", "recover", "inspect", "convert"])
@pytest.mark.parametrize("case,store,dropped,name", CONFIG_MISMATCHES, ids=[c[0] for c in CONFIG_MISMATCHES])
def test_a_config_that_does_not_fit_the_stores_files_is_refused_by_name(job, case, store, dropped, name, tmp_path,
                                                                        capsys):
    """One line naming the setting, its value, the store's file and size; exit 2, nothing written."""
    if job == "convert" and not store.startswith("dledger"):
        return  # convert reads DLedger stores only
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(line for line in (GOLDEN / store / "broker.conf").read_text().splitlines(True)
                            if not line.startswith(dropped)))
    own = job_argv(job, GOLDEN / store, tmp_path)[4:] if job != "convert" else ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exc:
        run_main(job, job_main(job), ["--store", str(GOLDEN / store), "--broker-config", str(conf)] + own)
    err = [line for line in capsys.readouterr().err.strip().splitlines() if ": warning: " not in line]
    assert exc.value.code == 2 and len(err) == 1, err
    assert name in err[0] and "does not fit the store" in err[0] and str(GOLDEN / store) in err[0], err
    assert not list(tmp_path.glob("out*"))


def test_config_disagreement_pure():
    """Every sampled file of one size that is not the config's: named; one odd file among others (damage, verify's
    finding) or empty files (a crash's): not a config question."""
    from storage_format.settings import config_disagreement

    s = BrokerSettings(mapped_file_size_consume_queue=2000, max_hash_slot_num=64, max_index_num=256)
    assert config_disagreement(s, [("a", 2000), ("b", 0)], [("i", 5416)]) is None
    assert config_disagreement(s, [("a", 2000), ("b", 4000)], [("i", 5416), ("j", 99)]) is None
    assert config_disagreement(s, [("a", 4000)], [("i", 99)]) is None  # a lone file: damage as likely as a config
    assert "(b)" in config_disagreement(s, [("a", 0), ("b", 4000), ("c", 4000)], [])
    assert "maxHashSlotNum=64, maxIndexNum=256 make 5416-byte" in config_disagreement(s, [], [("i", 99), ("j", 99)])


@pytest.mark.parametrize("job", ["inspect", "convert"])
def test_a_directory_inside_a_store_and_a_wrong_member_are_named(job, tmp_path, capsys):
    """--store at dledger-n0/ (or commitlog/) says to use the store root; a dLegerSelfId with no directory names
    the dledger-* members the store holds (issue 37 item 9); one line, exit 2."""
    store = GOLDEN / "dledger-clean-small-11"
    wrong = tmp_path / "n1.conf"
    wrong.write_text((store / "broker.conf").read_text().replace("dLegerSelfId=n0", "dLegerSelfId=n1"))
    out = ["--out", str(tmp_path / "out")] if job == "convert" else []
    for argv, said in ((["--store", str(store / "dledger-n0"), "--broker-config", str(store / "broker.conf")],
                        f"use the store root, {store}"),
                       (["--store", str(store), "--broker-config", str(wrong)], "the store holds dledger-n0 ")):
        with pytest.raises(SystemExit) as exc:
            run_main(job, job_main(job), argv + out)
        err = [line for line in capsys.readouterr().err.strip().splitlines() if ": warning: " not in line]
        assert exc.value.code == 2 and len(err) == 1 and said in err[0], err
