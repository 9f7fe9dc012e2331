"""The reading jobs on DLedger stores: the committed-position rule (pure, and as rebuild/verify/inspect apply
and report it), store discovery without a config, query by offset msgId (PHYSICALOFFSET = entry pos + 48) and
by key, dump with the entry header beside each record and across the mixed layout."""
from __future__ import annotations

import json
import struct

import pytest

from jobs.dump import main as dump_main
from jobs.inspect import main as inspect_main
from jobs.query import main as query_main
from jobs.verify import main as verify_main
from storage_format.dledger import (READING_CHECKPOINT, READING_SURVIVING, committed_end, committed_reading, peer_count,
                                    peers_problem)
from storage_format.msg_id import encode_offset_msg_id
from tests.conftest import GOLDEN, expected_scan, manifest, restored_copy
from tests.rebuild_helpers import consume_queue_hashes, golden_index_hashes, index_hashes, report, run_rebuild

STORE_HOST = ("192.168.0.10", 10911)


def test_committed_reading_rule():
    """A one-member group (or none named) reads every surviving entry; a group of several stops at the
    checkpoint's committedIndex; a flag chooses either; without a checkpoint there is nothing to stop at."""
    assert peer_count("n0-127.0.0.1:40911") == 1 and peer_count("n0-a:1;n1-b:2;n2-c:3") == 3 and peer_count(None) == 0
    one = committed_reading("n0-127.0.0.1:40911", 1503)
    assert one.reading == READING_SURVIVING and not one.explicit and "one-member" in one.reason
    three = committed_reading("n0-a:1;n1-b:2;n2-c:3", 1503)
    assert three.reading == READING_CHECKPOINT and "3-member" in three.reason
    assert committed_reading("n0-a:1;n1-b:2", None).reading == READING_SURVIVING
    assert "no committedIndex" in committed_reading("n0-a:1;n1-b:2", None).reason
    unset = committed_reading(None, 7)
    assert unset.reading == READING_SURVIVING and "dLegerPeers not set" in unset.reason
    flagged = committed_reading("n0-a:1", 5, READING_CHECKPOINT)
    assert flagged.explicit and flagged.reading == READING_CHECKPOINT and flagged.to_dict()["chosen_by"] == "flag"
    with pytest.raises(ValueError):
        committed_reading("n0-a:1", 5, "everything")
    assert committed_end(struct.pack(">iqiqq", 1, 1000, 431, 7, 0)) == 1431
    with pytest.raises(ValueError):
        committed_end(bytes(32))


def test_checkpoint_reading_stops_dispatch_at_the_committed_position(spark, tmp_path, capsys):
    """dledger-unclean-11's checkpoint lags (committedIndex 1503 of 3,596 entries): the default reading (one
    member) dispatches every entry and reports 2,092 entries past committedIndex; --dledger-reading checkpoint
    stops at the end of entry 1503 (the manifest's committedPos), dispatching fewer records."""
    case = "dledger-unclean-11"
    store = restored_copy(case, tmp_path / "store")
    m = manifest(case)["dledger_scan"]
    args = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--json"]
    assert inspect_main(args) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)["dledger"]
    assert d["entries"] == m["entries"] and d["entries_past_committed_index"] == m["last_entry_index"] - 1503
    assert d["committed_reading"]["reading"] == READING_SURVIVING and d["dispatch_limit"] is None
    assert "2092 entries lie past committedIndex 1503" in cap.err
    assert verify_main(args[:-1] + ["--dledger-reading", "checkpoint", "--report", str(tmp_path / "v.json"),
                                    "--work-dir", str(tmp_path / "w")]) in (0, 1)
    v = json.loads((tmp_path / "v.json").read_text())
    assert v["dledger"]["reading_checked"] == READING_CHECKPOINT
    assert v["dispatch"]["confirm_offset"] == m["checkpoint_committedPos"] == v["dledger"]["dispatch_limit"]
    assert v["dispatch"]["dispatched_up_to"] == m["checkpoint_committedPos"]
    assert v["dispatch"]["records_not_dispatched"] == m["last_entry_index"] - 1503
    capsys.readouterr()


def test_store_found_without_a_config(spark, tmp_path, capsys):
    """No broker config: the single dledger-n0/data/ is read (a note says so) and the rebuild is the broker's, its
    index files too: their layout is taken from the store's own (25 files of 5,416 bytes, as the broker's), not
    the default's (one 420,000,040-byte file)."""
    from jobs.rebuild import main as rebuild_main

    case = "dledger-clean-small-11"
    out = tmp_path / "out"
    assert rebuild_main(["--store", str(GOLDEN / case), "--out", str(out), "--json"]) == 0
    err = capsys.readouterr().err
    assert "DLedger mode (enableDLegerCommitLog=true, dLegerSelfId=n0) from dledger-n0/data/" in err
    assert "mappedFileSizeCommitLog=262144" in err
    want = {k: v["sha256"] for k, v in manifest(case)["files"].items() if k.startswith("consumequeue/")}
    assert consume_queue_hashes(out) == want
    assert "maxIndexNum=256 taken from the index files' headers and entries on disk" in err
    assert index_hashes(out) == golden_index_hashes(case)
    assert report(out)["dledger"]["committed_reading"]["reading"] == READING_SURVIVING


def _query(capsys, case: str, *args: str) -> dict:
    code = query_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                       "--json", *args])
    return {"code": code, **json.loads(capsys.readouterr().out)}


def test_query_by_offset_msg_id_and_key(spark, capsys):
    """An offset msgId carries the record's PHYSICALOFFSET (entry pos + 48) in DLedger data as in the plain part;
    an entry header's own offset is named as one; a key is found through the index files."""
    case = "dledger-upgrade-11"
    divided = manifest(case)["commitlog_scan"]["dividedCommitlogOffset"]
    for offset, topic in ((0, "TopicTest"), (divided + 48, "Topic-订单")):
        got = _query(capsys, case, "--msg-id", encode_offset_msg_id(*STORE_HOST, offset))
        assert got["code"] == 0 and [m["physical_offset"] for m in got["messages"]] == [offset]
        assert got["messages"][0]["topic"] == topic
    got = _query(capsys, case, "--msg-id", encode_offset_msg_id(*STORE_HOST, divided))
    assert got["code"] == 1 and not got["messages"]
    assert f"the message behind it is at offset {divided + 48}" in json.dumps(got, ensure_ascii=False)
    got = _query(capsys, case, "--topic", "Topic-订单", "--key", "k-318")
    assert got["code"] == 0 and [m["physical_offset"] for m in got["messages"]] == [divided + 48]


def test_dump_shows_entry_headers_and_crosses_into_dledger_data(capsys):
    """Records dumped from the last plain record of an upgraded store: the plain BLANK, then DLedger records
    with their entry header (pos = offset - 48, index 0, 1 ...)."""
    case = "dledger-upgrade-11"
    blank = manifest(case)["commitlog_scan"]["last_blank"]["offset"]
    divided = manifest(case)["commitlog_scan"]["dividedCommitlogOffset"]
    args = ["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"), "--json"]
    assert dump_main(args + ["--offset", str(divided + 48), "--count", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["kind"] for r in rows] == ["record"] * 3
    assert [r["dledger_entry"]["index"] for r in rows] == [0, 1, 2]
    assert all(r["dledger_entry"]["pos"] + 48 == r["physical_offset"] for r in rows)
    assert rows[0]["physical_offset"] == divided + 48 and rows[0]["byte"] == 48
    # from the plain part's last records across the BLANK into the DLedger data
    from storage_format.commitlog import decode_buffer

    seg = GOLDEN / case / "commitlog" / f"{blank - blank % 262144:020d}"
    cols = decode_buffer(seg.read_bytes(), int(seg.name)).columns
    last = cols.base_offset + int(cols.pos[-1])
    assert dump_main(args + ["--offset", str(last), "--count", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["kind"] for r in rows] == ["record", "blank", "record"]
    assert "dledger_entry" not in rows[0] and rows[1]["offset"] == blank
    assert rows[2]["physical_offset"] == divided + 48 and rows[2]["dledger_entry"]["index"] == 0
    assert dump_main(args + ["--offset", str(divided + 40), "--count", "1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["kind"] == "end" and "pos + 48" in rows[0]["reason"]


def test_dump_of_a_consume_queue_points_into_dledger_data(capsys):
    """A consume queue of a DLedger store lists the records its entries point at (phyOffset = pos + 48)."""
    case = "dledger-clean-small-11"
    args = ["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"), "--json"]
    assert dump_main(args + ["--topic", "TopicTest", "--queue", "0", "--count", "5"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 5 and all(r["kind"] == "entry" and r["problem"] is None for r in rows)
    assert all(r["message"]["topic"] == "TopicTest" and r["message"]["total_size"] == r["size"] for r in rows)


def test_expected_scan_counts_both_parts_of_an_upgraded_store():
    scan = expected_scan("dledger-upgrade-11")
    assert scan["message_records"] == 1783 + 1763 and scan["blank_end_of_file_records"] == 3 + 3


def test_store_path_dledger_commit_log_is_honoured(spark, tmp_path, capsys):
    """storePathDLedgerCommitLog puts the data files elsewhere (the member's index and checkpoint stay in
    dledger-<id>/ under the store root): every job reads them there; the rebuild is the broker's."""
    import shutil

    from jobs.rebuild import main as rebuild_main

    case = "dledger-clean-small-11"
    store = restored_copy(case, tmp_path / "store")
    data = tmp_path / "elsewhere" / "data"
    shutil.move(str(store / "dledger-n0" / "data"), data)
    conf = tmp_path / "broker.conf"
    conf.write_text((store / "broker.conf").read_text() + f"storePathDLedgerCommitLog={data}\n")
    out = tmp_path / "out"
    assert rebuild_main(["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--json"]) == 0
    want = {k: v["sha256"] for k, v in manifest(case)["files"].items() if k.startswith("consumequeue/")}
    assert consume_queue_hashes(out) == want
    assert report(out)["dledger"]["data_dir"] == str(data)
    capsys.readouterr()


def test_plain_segment_past_the_dledger_data_start_is_refused(tmp_path):
    """In the mixed layout a plain segment at or above the first DLedger data file (dividedCommitlogOffset)
    would never be read by the broker: refused, named, rather than silently left out."""
    from storage_format.errors import StoreFormatError
    from storage_format.log_sources import LogFile, divided_offset, plan_log

    plain = [LogFile(f"{s:020d}", 100, f"/s/commitlog/{s:020d}") for s in (0, 100, 200)]
    data = [LogFile(f"{s:020d}", 100, f"/s/dledger-n0/data/{s:020d}") for s in (300, 400)]
    segs = plan_log(plain, data, 100)
    assert [(s.start, s.header) for s in segs] == [(0, 0), (100, 0), (200, 0), (300, 48), (400, 48)]
    assert divided_offset(segs) == 300 and divided_offset(segs[3:]) is None
    with pytest.raises(StoreFormatError, match="dividedCommitlogOffset 200"):
        plan_log(plain, data[:0] + [LogFile(f"{200:020d}", 100, "/s/dledger-n0/data/x")], 100)
    with pytest.raises(StoreFormatError, match="DLedger data file is 99 bytes"):
        plan_log([], [LogFile(f"{0:020d}", 99, "/s/d")], 100)


def test_names_in_a_log_directory_the_broker_would_not_take_are_refused():
    """Every name in commitlog/ or DLedger data/ that is not a 20-digit offset is refused, naming the file and
    what the broker does with it (MappedFileQueue.doLoad: length check, then Long.parseLong of the name)."""
    from storage_format.errors import StoreFormatError
    from storage_format.log_sources import LogFile, plan_log
    from storage_format.segment_names import java_parse_long

    assert [java_parse_long(n) for n in ("00000000000000000100", "000000000000000000100", "+7", "-0", "\u0661")] \
        == [100, 100, 7, 0, 1]
    assert [java_parse_long(n) for n in ("", "+", "1a", "x.bak", "9223372036854775808", "\U0001D7CE")] == [None] * 6
    good = [LogFile(f"{s:020d}", 100, f"/s/commitlog/{s:020d}") for s in (0, 100)]
    cases = {
        LogFile("00000000000000000000.bak", 100, "/s/commitlog/x.bak"): "throws NumberFormatException",
        LogFile("0000000000000000000a", 100, "/s/commitlog/a"): "throws NumberFormatException",
        LogFile("000000000000000000100", 100, "/s/commitlog/d"): "second file for offset 100",
        LogFile("+200", 100, "/s/commitlog/p"): "loads it as the file for offset 200",
        LogFile("notes", 3, "/s/commitlog/n"): "refuses one whose length is not the file size 100",
        LogFile("sub", 4096, "/s/commitlog/sub", kind="a directory"): "the broker does not start",
    }
    for stray, consequence in cases.items():
        for plain, data in (([*good, stray], None), ([], [*good, stray])):
            with pytest.raises(StoreFormatError, match=consequence) as err:
                plan_log(plain, data, 100)
            assert str(err.value).startswith(f"{stray.path} at byte offset 0: not a ")


@pytest.mark.parametrize("peers, self_id, refused", [
    (None, "n0", None),  # unset: a store read without its broker config
    ("n0-127.0.0.1:40911", "n0", None),
    ("n0-a:1;n1-b:2;n2-c:3", "n1", None),
    ("n0-a:1;", "n0", None),  # Java's split drops the trailing empty item
    ("n0-", "n0", None),  # an empty address: DLedgerConfig takes it
    ("n1-a:1;n2-b:2", "n0", "fail to init self address"),
    ("garbage", "n0", "'garbage' is not <id>-<host>:<port>"),
    ("", "n0", "'' is not <id>-<host>:<port>"),
    ("n0-a:1;;n1-b:2", "n0", "'' is not <id>-<host>:<port>"),
    ("n0", "n0", "'n0' is not <id>-<host>:<port>"),
])
def test_peers_the_broker_does_not_start_with_are_named(peers, self_id, refused):
    """dLegerPeers as DLedger 0.3.1.2's DLedgerConfig.initSelfAddress reads it: an item without `-` after its id
    throws, a list without dLegerSelfId's id throws "fail to init self address"; the broker does not start."""
    problem = peers_problem(peers, self_id)
    assert (problem is None) == (refused is None) and (refused is None or refused in problem), problem
