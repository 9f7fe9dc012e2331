"""Features reput does not implement are refused by name (exit 2, nothing written, before Spark starts), found
from the broker config and from the store's files; a single storePathCommitLog is honoured."""
from __future__ import annotations

import json
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
from tests.helpers import run_job_lines

BASE = "v5-clean-small-11"

# (id, extra broker.conf lines, files to create in the store, the name the message must carry)
REFUSALS = [
    ("dledger-multi-path", "enableDLegerCommitLog=true\ndLegerSelfId=n0\nstorePathDLedgerCommitLog=/a/data,/b/data\n",
     [], "storePathDLedgerCommitLog"),
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


@pytest.mark.parametrize("job", ["rebuild", "verify", "recover", "inspect", "catalog", "query", "dump", "convert"])
@pytest.mark.parametrize("peers,said", [("n1-127.0.0.1:40952;n2-127.0.0.1:40953", "fail to init self address"),
                                        ("garbage", "dLegerPeers='garbage': 'garbage' is not <id>-<host>:<port>")])
def test_peers_the_broker_does_not_start_with_are_refused_by_name(job, peers, said, tmp_path, capsys):
    """A DLedger store whose dLegerPeers DLedger's DLedgerConfig refuses (the member not among them: recover
    --in-place took it for a group of two and stopped dispatch at the checkpoint; an item that is not id-address):
    every job refuses it in one line naming dLegerPeers, before reading the store."""
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "dledger-clean-small-11", store)
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"dLegerPeers={peers}\n" if line.startswith("dLegerPeers=") else line
                            for line in (store / "broker.conf").read_text().splitlines(True)))
    argv = job_argv(job, store, tmp_path) if job != "convert" else [
        "--store", str(store), "--broker-config", str(conf), "--out", str(tmp_path / "out")]
    argv[argv.index("--broker-config") + 1] = str(conf)
    with pytest.raises(SystemExit) as exc:
        run_main(job, job_main(job), argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and said in err[-1] and err[-1].startswith(f"reput {job}: error: dLegerPeers="), err
    assert not list(tmp_path.glob("out*"))


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
    assert setting_refusal(BrokerSettings(store_type="DEFAULTROCKSDB")) is None  # tests/test_rocksdb_layout.py
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
    report = json.loads(capsys.readouterr().out)
    assert report["log_place"] == {"path": str(elsewhere), "outside_store": True, "set_by": "storePathCommitLog",
                                   "another_store": None}
    with pytest.raises(SystemExit) as exc:
        run_main("verify", job_main("verify"), ["--store", str(store), "--broker-config", str(conf), "--json"])
    captured = capsys.readouterr()
    assert exc.value.code == 0 and json.loads(captured.out)["status"] == "consistent"
    assert f"reput verify: note: the log is read from {elsewhere} (storePathCommitLog), outside --store {store}\n" \
        in captured.err
    with pytest.raises(SystemExit) as exc:
        run_main("recover", job_main("recover"), ["--store", str(store), "--broker-config", str(conf),
                                                  "--in-place", "--backup-dir", str(tmp_path / "bak")])
    assert exc.value.code == 2 and "storePathCommitLog" in capsys.readouterr().err


OTHER_LOGS = [(BASE, "storePathCommitLog", "commitlog"),
              ("dledger-clean-small-11", "storePathDLedgerCommitLog", "dledger-n0/data"),
              # an upgraded DLedger store reads its plain segments where storePathCommitLog says
              ("dledger-upgrade-11", "storePathCommitLog", "commitlog")]


@pytest.mark.parametrize("case,key,log_dir", OTHER_LOGS, ids=[f"{c[1]}-{c[0]}" for c in OTHER_LOGS])
def test_another_stores_log_is_named_and_refused_where_the_queues_would_be_compared(no_spark, case, key, log_dir,
                                                                                   tmp_path, capsys):
    """--store COPY with a config whose log path still names the store it was copied from (the copy's queues would
    be compared with the other store's log): verify, recover, dump, query and convert refuse in one line naming the
    setting and the path, before anything is read; inspect says on stderr and in its report where it read the
    log."""
    from tests.conftest import restored_copy

    dledger = case.startswith("dledger")
    original = restored_copy(case, tmp_path / "original")
    copy = restored_copy(case, tmp_path / "copy")
    log = original / log_dir
    conf = tmp_path / "stale.conf"
    conf.write_text((original / "broker.conf").read_text() + f"{key}={log}\n")
    common = ["--store", str(copy), "--broker-config", str(conf)]
    argv = {"verify": ["--json"], "recover": ["--dry-run"], "dump": ["--topic", "TopicTest", "--queue", "0"],
            "query": ["--topic", "TopicTest", "--key", "K"], "convert": ["--out", str(tmp_path / "out")]}
    for job, own in argv.items():
        if job == "convert" and not dledger:
            continue
        code, err = run_job_lines(job, common + own, capsys)
        err = [line for line in err if ": warning: " not in line and ": note: " not in line]
        assert code == 2 and len(err) == 1, (job, err)
        assert err[0] == (f"reput {job}: error: {key} leads to {log}, outside --store {copy}: it lies in {original}, "
                          f"which holds a store's files (another store's log); {job} would read {copy}'s files "
                          f"against that log; point {key} at {copy}'s own log (or remove it from the broker config), "
                          f"or give that store as --store"), err[0]
    assert not (tmp_path / "out").exists()
    code, err = run_job_lines("inspect", common + ["--report", str(tmp_path / "inspect.json"), "--quiet", "--engine", "local"],
                        capsys)
    assert code == 0 and f"reput inspect: note: the log is read from {log} ({key}), outside --store {copy}: it lies " \
        f"in {original}, which holds a store's files (another store's log)" in err, err
    place = json.loads((tmp_path / "inspect.json").read_text())["log_place"]
    assert place["outside_store"] and place["path"] == str(log) and place["set_by"] == key


def test_an_upgraded_stores_plain_log_led_elsewhere_is_refused_by_name(no_spark, tmp_path, capsys):
    """An upgraded DLedger store whose config's storePathCommitLog names a directory without its plain segments:
    convert and verify refuse (they would convert or check the DLedger part alone, the plain part's messages
    silently left out), naming the setting and the store's own log."""
    from tests.conftest import restored_copy

    store = restored_copy("dledger-upgrade-11", tmp_path / "store")
    elsewhere = tmp_path / "nowhere" / "commitlog"
    conf = tmp_path / "led-away.conf"
    conf.write_text((store / "broker.conf").read_text() + f"storePathCommitLog={elsewhere}\n")
    for job, own in {"convert": ["--out", str(tmp_path / "out")], "verify": ["--json"]}.items():
        code, err = run_job_lines(job, ["--store", str(store), "--broker-config", str(conf)] + own, capsys)
        err = [line for line in err if ": warning: " not in line and ": note: " not in line]
        assert code == 2 and err == [
            f"reput {job}: error: storePathCommitLog leads to {elsewhere}, outside --store {store}: --store holds its "
            f"own log, {store / 'commitlog'}, which the setting leads away from; {job} would read {store}'s files "
            f"against that log; point storePathCommitLog at {store}'s own log (or remove it from the broker config), "
            f"or give that store as --store"], (job, err)
    assert not (tmp_path / "out").exists()


# A broker config that leaves out the store's file sizes (issue 37 item 3): the broker with it fails to load the
# store's consume queues or misreads its index files, so every job refuses it by name before reading anything.
EVERY_SIZE = ("set mappedFileSizeCommitLog=262144, mappedFileSizeConsumeQueue=2000, maxHashSlotNum=64, "
              "maxIndexNum=256 as the store's broker had them")
CONFIG_MISMATCHES = [("cq-size", "clean-small-11", ("mappedFileSizeConsumeQueue",), "mappedFileSizeConsumeQueue=6000000"),
                     ("index-size", "clean-small-11", ("maxIndexNum",), "maxIndexNum=20000000"),
                     ("dledger-all", "dledger-clean-small-11",
                      ("mappedFileSizeConsumeQueue", "maxIndexNum", "maxHashSlotNum"), "mappedFileSizeConsumeQueue"),
                     # no size key at all: every missing one named in the one line, before Spark starts
                     ("every-size", "clean-small-11", ("mappedFileSize", "maxIndexNum", "maxHashSlotNum"), EVERY_SIZE),
                     ("dledger-every-size", "dledger-clean-small-11", ("mappedFileSize", "maxIndexNum",
                                                                       "maxHashSlotNum"), EVERY_SIZE)]


@pytest.mark.parametrize("job", ["rebuild", "verify", "recover", "inspect", "convert"])
@pytest.mark.parametrize("case,store,dropped,name", CONFIG_MISMATCHES, ids=[c[0] for c in CONFIG_MISMATCHES])
def test_a_config_that_does_not_fit_the_stores_files_is_refused_by_name(job, case, store, dropped, name, tmp_path,
                                                                        capsys):
    """One line naming the setting, its value, the store's file and size; exit 2, nothing written. convert, which
    reads DLedger stores only, names the config on a plain store too: the config is checked before the store."""
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
    """Every size setting the files show another value of, in one line with the values that fit; one odd file among
    others (damage, verify's finding) or empty files (a crash's): not a config question."""
    from storage_format.index_file import IndexLayout
    from storage_format.settings import FilesShown, config_disagreement

    s = BrokerSettings(mapped_file_size_commitlog=262144, mapped_file_size_consume_queue=2000, max_hash_slot_num=64,
                       max_index_num=256)
    assert config_disagreement(s, FilesShown(consume_queues=(("a", 2000), ("b", 0)), index_files=(("i", 5416),))) \
        is None
    assert config_disagreement(s, FilesShown(consume_queues=(("a", 2000), ("b", 4000)),
                                             index_files=(("i", 5416), ("j", 99)))) is None
    assert config_disagreement(s, FilesShown(consume_queues=(("a", 4000),), index_files=(("i", 99),))) is None
    assert "(b)" in config_disagreement(s, FilesShown(consume_queues=(("a", 0), ("b", 4000), ("c", 4000))))
    assert "maxHashSlotNum=64, maxIndexNum=256 make 5416-byte" in config_disagreement(
        s, FilesShown(index_files=(("i", 99), ("j", 99))))
    line = config_disagreement(BrokerSettings(), FilesShown(
        segments=(("s", 262144),), consume_queues=(("a", 2000), ("b", 2000)), index_files=(("i", 5416),),
        index_layout=IndexLayout(64, 256), timer_logs=(("t", 8192), ("u", 8192))))
    # a value at the broker's default is named so, without saying whether the config set it (BrokerSettings cannot)
    assert line.startswith("mappedFileSizeCommitLog=1073741824 (the broker's default), but the store's commit-log "
                           "files are 262144 bytes (s)") and "maxIndexNum=20000000 (the broker's defaults) make" in line
    assert line.count(";") == 4 and line.endswith("set mappedFileSizeCommitLog=262144, mappedFileSizeConsumeQueue=2000, "
                                                  "maxHashSlotNum=64, maxIndexNum=256, mappedFileSizeTimerLog=8192 as "
                                                  "the store's broker had them"), line
    # one size, another split of it: the layout the entries show is what counts
    assert "show maxHashSlotNum=64, maxIndexNum=256" in config_disagreement(
        BrokerSettings(max_hash_slot_num=69, max_index_num=255), FilesShown(index_files=(("i", 5416),),
                                                                              index_layout=IndexLayout(64, 256)))


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


def test_rebuild_under_other_sizes_is_refused_then_taken_from_the_commit_log_alone(tmp_path, capsys):
    """The comparison docs/convert.md describes (rebuild under a raised maxIndexNum, issue 55 item 5): refused for
    the store's own index files with the way out named, then built from a directory holding only the commit log."""
    from jobs.rebuild import main as rebuild_main
    from storage_format.errors import SettingsError
    from storage_format.index_file import IndexLayout

    store = GOLDEN / "clean-small-11"
    conf = tmp_path / "raised.conf"
    conf.write_text("".join(line for line in (store / "broker.conf").read_text().splitlines(True)
                            if not line.startswith(("maxIndexNum", "maxHashSlotNum")))
                    + "maxIndexNum=100000\nmaxHashSlotNum=4096\n")
    argv = ["--broker-config", str(conf), "--quiet", "--engine", "local"]
    with pytest.raises(SettingsError, match=r"show maxHashSlotNum=64, maxIndexNum=256 .*\(rebuild reads only the commit "
                                       r"log: to use other sizes on purpose, give --store a directory holding only "
                                       r"commitlog/, e.g. a symbolic link to it\)$"):
        rebuild_main(["--store", str(store), "--out", str(tmp_path / "refused"), *argv])
    log_only = tmp_path / "log-only"
    log_only.mkdir()
    (log_only / "commitlog").symlink_to(store / "commitlog")
    assert rebuild_main(["--store", str(log_only), "--out", str(tmp_path / "out"), *argv]) == 0
    sizes = {p.stat().st_size for p in (tmp_path / "out" / "index").iterdir()}
    assert sizes == {IndexLayout(4096, 100000).size} and not (tmp_path / "refused").exists()


def test_recheck_reput_offset_from_cq_is_refused_where_a_start_is_modelled(no_spark, tmp_path, capsys):
    """recheckReputOffsetFromCq=true moves where a 5.x broker's start dispatches again (the consume queues' end, not
    the confirm offset): recover and verify, which say what that start does, refuse it by name before reading
    anything; a job that reads the log alone goes on."""
    store = GOLDEN / "clean-small-11"
    conf = tmp_path / "recheck.conf"
    conf.write_text((store / "broker.conf").read_text() + "recheckReputOffsetFromCq=true\n")
    common = ["--store", str(store), "--broker-config", str(conf)]
    for job, own in {"recover": ["--dry-run"], "verify": ["--json"]}.items():
        code, err = run_job_lines(job, common + own, capsys)
        assert code == 2 and err == [
            f"reput {job}: error: recheckReputOffsetFromCq=true: the broker's start dispatches again from the consume "
            f"queues' end, not from the commit log's confirm offset; reput does not implement it for {job} yet "
            f"(rebuild, inspect, query, dump and convert read the log alone)"], err
    code, err = run_job_lines("inspect", common + ["--quiet", "--engine", "local", "--report",
                                                   str(tmp_path / "inspect.json")], capsys)
    assert code == 0, err
