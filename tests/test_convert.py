"""convert (issue 21): a DLedger store as a plain store. The layout rule and the compiled passes against their
references; the golden DLedger stores converted: the source untouched, every record the same bytes but for
PHYSICALOFFSET and the prepared offset, every (topic, queue, offset) the same message, consume queues and index
files equal to reput's own rebuild of OUT; and the broker itself (the oracle build, tests/oracle.py): RocketMQ
4.9.8's plain store opening OUT with a normal recovery that truncates nothing and rebuilding the same consume queues
and index files byte for byte, and 5.3.3 in controller mode opening OUT and truncating nothing."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from storage_format import commitlog_layout
from storage_format.commitlog_layout import (AT_PHYSICAL_OFFSET, AT_SYS_FLAG, blank_record, is_transaction_end, layout,
                                             layout_reference, prepared_offset_at, rewrite_reference, rolls)
from storage_format.kernels.layout_kernel import hop_copy, hop_entries, rewrite_prepared
from tests.conftest import GOLDEN
from tests.oracle import broker_rebuild, consume_queues, deliver_nothing, index_files, rebuild_timer, v5_reopen
from tests.helpers import file_tree_digest, lock_held, run_job_lines, signalled_at_hook

CASES = ("dledger-clean-small-11", "dledger-upgrade-11", "dledger-rebuild-headless-11")


# -- the layout rule ---------------------------------------------------------------------------------------------

def test_the_roll_rule_by_hand():
    """A record goes in when size + 8 fits the bytes left; otherwise a BLANK of the bytes left ends the segment."""
    assert not rolls(42, 50) and rolls(43, 50)
    lay = layout_reference(np.array([50, 42, 43, 30]), 100, 0)
    assert lay.offsets.tolist() == [0, 50, 100, 143] and lay.blanks.tolist() == [92] and lay.end == 173
    lay = layout_reference(np.array([50, 43, 30]), 100, 200)
    assert lay.offsets.tolist() == [200, 300, 343] and lay.blanks.tolist() == [250] and lay.end == 373
    assert lay.segment_starts == [200, 300]
    assert blank_record(250, 100) == struct.pack(">iI", 50, 0xCBD43194)
    with pytest.raises(ValueError, match="never fits"):
        layout_reference(np.array([93]), 100)


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 500), max_size=300), st.integers(509, 2000), st.integers(0, 3))
def test_layout_kernel_equals_the_reference(sizes, segment_size, first):
    sizes = np.array(sizes, np.int64)
    start = first * segment_size
    a, b = layout(sizes, segment_size, start), layout_reference(sizes, segment_size, start)
    c = layout(sizes.astype(np.int32), segment_size, start)  # convert's listing gives int32 sizes
    assert c.offsets.dtype == np.int64 and c.offsets.tolist() == b.offsets.tolist() and c.end == b.end
    assert a.offsets.tolist() == b.offsets.tolist() and a.blanks.tolist() == b.blanks.tolist() and a.end == b.end
    # every record fits its segment with the end marker's 8 bytes to spare
    seg = (a.offsets - a.start) // segment_size
    assert np.all((a.offsets - a.start) % segment_size + sizes + 8 <= segment_size)
    assert np.all(np.diff(seg) >= 0)


def test_storegen_places_records_by_the_same_rule(tmp_path):
    """storegen's SegmentWriter and commitlog_layout.layout put the same records at the same offsets."""
    from storegen.encoder import SegmentWriter, record_size
    from storegen.sample import build_sample_messages

    msgs = build_sample_messages(300, seed=3)
    with SegmentWriter(tmp_path / "commitlog", 8192) as w:
        offsets = [w.append(m) for m in msgs]
    lay = layout(np.array([record_size(m) for m in msgs]), 8192, 0)
    assert lay.offsets.tolist() == offsets


# -- the compiled passes against their references, on golden DLedger data ---------------------------------------

def _data_files(case: str) -> list[Path]:
    return sorted((GOLDEN / case / "dledger-n0" / "data").iterdir())


def test_hop_kernel_equals_the_reference(golden):
    for path in _data_files("dledger-clean-small-11")[:3]:
        base = int(path.name)
        buf = path.read_bytes()
        for cut in (len(buf), len(buf) // 2 + 7):  # a chunk ending mid-entry: both stop before it, asking for more
            arr = np.frombuffer(buf[:cut], np.uint8)
            n = cut // 68 + 1
            out = np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int8), np.empty(n, np.int64)
            got, stop, ended, _ = hop_entries(arr, base, 0, 2**62, 48, *out)
            ref = commitlog_layout.hop_entries_reference(buf[:cut], base, 0, 2**62)
            assert (stop, ended) == ref[4:] and got == len(ref[0]) and got > 0
            for a, b in zip(out, ref[:4]):
                assert a[:got].tolist() == b.tolist()
            assert ended == (cut == len(buf))


def test_hop_copy_kernel_equals_the_reference(golden):
    path = _data_files("dledger-clean-small-11")[0]
    base = int(path.name)
    buf = path.read_bytes()
    offs, sizes, trans, preps, _, _ = commitlog_layout.hop_entries_reference(buf, base, 0, 2**62)
    new = 1000 + np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64)))
    ends = preps[trans >= 8]
    prepared = {int(p): int(p) + 12345 for p in ends[::2]}  # half of them mapped, the rest left as they are
    ref = bytearray(int(new[-1] + sizes[-1] - 1000))
    done_ref = rewrite_reference(buf, base, offs, sizes, new, ref, 1000, prepared)
    got = np.empty(len(buf), np.uint8)
    cap = len(buf) // 68 + 1
    got_offs, got_sizes, got_new = np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int64)
    n, _, ended, copied, one_host, _ = hop_copy(np.frombuffer(buf, np.uint8), base, 0, 48, 2**62, got, 1000,
                                                got_offs, got_sizes, got_new)
    assert ended and n == len(offs) and copied == len(ref) and one_host
    assert got_offs[:n].tolist() == offs.tolist() and got_sizes[:n].tolist() == sizes.tolist()
    assert got_new[:n].tolist() == new.tolist()
    got = got[:copied]
    keys = np.array(sorted(prepared), np.int64)
    done = rewrite_prepared(got, 1000, new, keys, np.array([prepared[k] for k in keys.tolist()], np.int64))
    assert got.tobytes() == bytes(ref) and done == done_ref and done > 0
    cut = len(buf) // 2 + 7  # a chunk ending mid-entry: the walk stops before it, asking for more
    n, stop, ended, copied, _, _ = hop_copy(np.frombuffer(buf[:cut], np.uint8), base, 0, 48, 2**62,
                                         np.empty(cut, np.uint8), 1000, got_offs, got_sizes, np.empty(cap, np.int64))
    ref_cut = commitlog_layout.hop_entries_reference(buf[:cut], base, 0, 2**62)
    assert (n, stop, ended) == (len(ref_cut[0]), ref_cut[4], 0) and copied == int(ref_cut[1].sum())
    n, stop, _, copied, _, _ = hop_copy(np.frombuffer(buf, np.uint8), base, 0, 48, 5, got, 1000, got_offs, got_sizes,
                                     got_new)
    assert n == 5 and stop == int(offs[5] - base - 48) and copied == int(sizes[:5].sum())


# -- the golden DLedger stores converted -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def converted(spark, tmp_path_factory):
    """Each case converted once (source hashed before and after), with reput's rebuild of the source and of OUT."""
    from jobs.convert import main as convert_main
    from jobs.rebuild import main as rebuild_main

    root = tmp_path_factory.mktemp("convert")
    out = {}
    for case in CASES:
        src = GOLDEN / case
        before = file_tree_digest(src)
        dest = root / case
        assert convert_main(["--store", str(src), "--broker-config", str(src / "broker.conf"), "--out", str(dest),
                             "--quiet", "--json"]) == 0
        assert file_tree_digest(src) == before, f"{case}: the source changed"
        conf = root / f"{case}.conf"
        conf.write_text("".join(line for line in (src / "broker.conf").read_text().splitlines(True)
                                if "dleger" not in line.lower()))
        assert rebuild_main(["--store", str(src), "--broker-config", str(src / "broker.conf"),
                             "--out", str(root / f"{case}-src-rebuild"), "--quiet", "--json"]) == 0
        assert rebuild_main(["--store", str(dest), "--broker-config", str(conf),
                             "--out", str(root / f"{case}-out-rebuild"), "--quiet", "--json"]) == 0
        out[case] = (dest, conf, root)
    return out


def _log_bytes(store: Path) -> dict[int, bytes]:
    """Every commit-log file of a store (plain segments and DLedger data files) by start offset."""
    files = {}
    for d in (store / "commitlog", store / "dledger-n0" / "data"):
        if d.is_dir():
            files.update({int(p.name): p.read_bytes() for p in d.iterdir()})
    return files


def _at(files: dict[int, bytes], offset: int, size: int) -> bytes:
    start = max(s for s in files if s <= offset)
    return files[start][offset - start:offset - start + size]


def _offset_map(out: Path) -> dict[int, int]:
    t = pq.read_table(out / "reput-msgid-map").to_pydict()
    return dict(zip(t["old_physical_offset"], t["new_physical_offset"]))


@pytest.mark.parametrize("case", CASES)
def test_records_change_only_in_their_offsets(converted, case):
    out, _, _ = converted[case]
    src, dst = _log_bytes(GOLDEN / case), _log_bytes(out)
    moved = _offset_map(out)
    report = json.loads((out / "reput-convert-report.json").read_text())
    assert len(moved) == report["plan"]["dledger_records"] == report["plan"]["offset_msg_ids_changed"] > 0
    rewritten = 0
    for old, new in moved.items():
        size = struct.unpack(">i", _at(src, old, 4))[0]
        a, b = bytearray(_at(src, old, size)), bytearray(_at(dst, new, size))
        assert struct.unpack_from(">q", b, AT_PHYSICAL_OFFSET)[0] == new
        b[AT_PHYSICAL_OFFSET:AT_PHYSICAL_OFFSET + 8] = a[AT_PHYSICAL_OFFSET:AT_PHYSICAL_OFFSET + 8]
        flag = struct.unpack_from(">i", a, AT_SYS_FLAG)[0]
        if is_transaction_end(flag):
            at = prepared_offset_at(flag)
            half = struct.unpack_from(">q", a, at)[0]
            assert struct.unpack_from(">q", b, at)[0] == moved.get(half, half)
            rewritten += moved.get(half, half) != half
            b[at:at + 8] = a[at:at + 8]
        assert a == b, (case, old, new)
    assert rewritten == report["prepared_offsets_rewritten"]
    walked = dict(_walk_records(dst))  # OUT read back without reput's decoder: every record where it lies, CRC valid
    assert len(walked) == report["message_records"] and all(map(_independent_crc_ok, walked.values()))
    assert set(moved.values()) <= walked.keys()
    for name in report["plain_segments_copied"]:  # the plain part of an upgraded store stays where it is
        assert (out / "commitlog" / name).read_bytes() == (GOLDEN / case / "commitlog" / name).read_bytes()
    assert not (out / "abort").exists() and (out / "checkpoint").is_file()
    assert file_tree_digest(out / "config") == file_tree_digest(GOLDEN / case / "config")


def _cq_entries(root: Path) -> dict[str, list[tuple[int, int, int]]]:
    out = {}
    for p in sorted((root / "consumequeue").rglob("*")):
        if p.is_file():
            raw = p.read_bytes()
            out[p.relative_to(root / "consumequeue").as_posix()] = [
                e for e in struct.iter_unpack(">qiq", raw) if e != (0, 0, 0)]
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_queue_offset_serves_the_same_message(converted, case):
    """(topic, queue, offset) -> the same size, tagsCode and record (but for its offsets) before and after."""
    out, _, root = converted[case]
    before, after = _cq_entries(root / f"{case}-src-rebuild"), _cq_entries(out)
    assert before.keys() == after.keys() and sum(map(len, after.values())) > 0
    moved = _offset_map(out)
    src, dst = _log_bytes(GOLDEN / case), _log_bytes(out)
    for rel, entries in before.items():
        assert len(entries) == len(after[rel])
        for (phy, size, tags), (phy2, size2, tags2) in zip(entries, after[rel]):
            if size == 2**31 - 1:  # a filler before a queue's first entry (fillPreBlank): the same in both
                assert (phy, tags) == (phy2, tags2) == (0, 0) and size2 == size
                continue
            assert (moved.get(phy, phy), size, tags) == (phy2, size2, tags2)
            a, b = _at(src, phy, size), _at(dst, phy2, size)
            assert a[:AT_PHYSICAL_OFFSET] == b[:AT_PHYSICAL_OFFSET] and a[-40:] == b[-40:]


@pytest.mark.parametrize("case", CASES)
def test_queues_and_index_equal_reputs_rebuild_of_out(converted, case):
    """Built from the source scan's work files with the offsets mapped (no records left out here), they equal
    reput's rebuild of OUT's commit log; the segments went out with O_DIRECT (or the report says why not)."""
    from jobs.convert import FROM_SOURCE, REPORT_NAME

    out, _, root = converted[case]
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["queues_and_index_built_from"] == FROM_SOURCE
    writes = report["segment_writes"]
    assert sum(writes["modes"].values()) == len(report["segments_written"])
    assert writes["modes"].get("direct") == len(report["segments_written"]) or writes["direct_io_fallbacks"]
    rebuilt = root / f"{case}-out-rebuild"
    for part in ("consumequeue", "index"):
        assert file_tree_digest(out / part) == file_tree_digest(rebuilt / part), part


def _index_entries(store: Path) -> int:
    """Index entries in a store's index files (the header's indexCount, at byte 36, counts one unused slot)."""
    return sum(struct.unpack_from(">i", p.read_bytes(), 36)[0] - 1 for p in (store / "index").iterdir())


def test_an_index_file_in_shares_gets_the_new_offsets(converted, tmp_path, monkeypatch):
    """One index file built in shares beside the segment writes (outputs.build.share_index_tasks, here at any size:
    each share maps its keys, the plain part's and the DLedger part's, to OUT's offsets as it reads them) equals
    reput's rebuild of OUT's commit log, built by one task."""
    from jobs.convert import main as convert_main
    from jobs.pipeline.outputs import build
    from jobs.rebuild import main as rebuild_main

    from tests.conftest import restored_copy

    case = "dledger-upgrade-11"
    out, _, _ = converted[case]
    keys = _index_entries(out)
    # the source's own index files are of the golden sizes, which this config changes: every job refuses a config
    # that does not fit the store's files, so the source here has none (convert builds OUT's index anew)
    src = restored_copy(case, tmp_path / "src")
    shutil.rmtree(src / "index")
    one_file = "".join(line for line in (src / "broker.conf").read_text().splitlines(True)
                       if not line.startswith(("maxIndexNum", "maxHashSlotNum")))
    one_file += f"maxIndexNum={2 * keys + 2}\nmaxHashSlotNum=4096\n"
    (tmp_path / "one.conf").write_text(one_file)
    (tmp_path / "plain.conf").write_text("".join(line for line in one_file.splitlines(True)
                                                 if "dleger" not in line.lower()))
    with monkeypatch.context() as m:
        m.setattr(build, "MIN_SHARE_KEYS", 1)
        assert convert_main(["--store", str(src), "--broker-config", str(tmp_path / "one.conf"), "--out",
                             str(tmp_path / "shared"), "--quiet", "--json"]) == 0
    report = json.loads((tmp_path / "shared" / "reput-convert-report.json").read_text())
    assert report["timings"]["index_share_tasks"] >= 2 and len(report["index_files"]) == 1
    assert rebuild_main(["--store", str(tmp_path / "shared"), "--broker-config", str(tmp_path / "plain.conf"),
                         "--out", str(tmp_path / "rebuilt"), "--quiet", "--json"]) == 0
    assert file_tree_digest(tmp_path / "shared" / "index") == file_tree_digest(tmp_path / "rebuilt" / "index")
    assert _index_entries(tmp_path / "shared") == keys


@pytest.mark.parametrize("case", CASES)
def test_the_broker_opens_out_and_rebuilds_the_same_files(converted, oracle, case, tmp_path):
    """The broker's recovery of OUT truncates nothing; its rebuild of OUT's commit log gives OUT's files, with the
    stores' own settings (a broker run that lost an index file to a same-millisecond name runs again:
    tests/oracle.py's broker_rebuild)."""
    out, conf, _ = converted[case]
    end = json.loads((out / "reput-convert-report.json").read_text())["max_physical_offset"]
    # 1. OUT as a broker finds it: a normal recovery (no abort) that truncates nothing and changes nothing (its delay
    # offsets all delivered, so that the schedule service appends nothing whatever the clock says)
    whole = tmp_path / "whole"
    shutil.copytree(out, whole, ignore=shutil.ignore_patterns("reput-*"))
    deliver_nothing(whole)
    before = file_tree_digest(whole)
    figures = rebuild_timer(oracle, whole, conf, tmp_path / "whole.log")
    assert figures["max_phy_offset"] == end and figures["commitlog_appended_bytes"] == 0
    assert "last shutdown normally" in (tmp_path / "whole.log").read_text()
    after = file_tree_digest(whole)
    data = lambda d: {k: v for k, v in d.items() if k.split("/")[0] not in ("lock", "config")}  # noqa: E731
    assert data(after) == data(before)  # (config/: the schedule service persists its delay offsets at shutdown)
    # 2. the broker's own rebuild of OUT's commit log: OUT's consume queues and index files
    figures = broker_rebuild(oracle, out / "commitlog", tmp_path / "bare", conf)
    assert figures["max_phy_offset"] == end
    assert consume_queues(tmp_path / "bare") == consume_queues(out)
    assert index_files(tmp_path / "bare") == index_files(out) and len(index_files(out)) > 1


def test_5_3_3_in_controller_mode_opens_out_and_truncates_nothing(converted, oracle, tmp_path):
    """RocketMQ 5.3.3 in controller mode (the kit's V5Golden reopen, with OUT's reput-broker.conf and controller
    mode chosen as the kit's broker-controller.conf chooses it) opens the converted dledger-clean-small-11 with a
    normal recovery: its commit log ends where OUT's does, nothing is appended, and no commit-log, consume-queue or
    index byte changes (issue 37 item 6)."""
    out, _, _ = converted["dledger-clean-small-11"]
    end = json.loads((out / "reput-convert-report.json").read_text())["max_physical_offset"]
    conf = tmp_path / "controller.conf"
    conf.write_text((out / "reput-broker.conf").read_text() + "enableControllerMode=true\nallAckInSyncStateSet=true\n")
    store = tmp_path / "store"
    shutil.copytree(out, store, ignore=shutil.ignore_patterns("reput-*"))
    before = file_tree_digest(store)
    events = {e["event"]: e for e in v5_reopen(oracle, store, conf)}
    assert not events["store_open"]["abort_before"] and events["store_open"]["maxPhy_after_load"] == end
    assert events["settled"]["maxPhy"] == end and events["settled"]["appended_bytes"] == 0
    assert not events["shutdown"]["abort_file_after"]
    log = (tmp_path / "store.reopen.log").read_text()
    assert "last shutdown normally" in log and "The commitlog files are deleted" not in log
    # OUT's checkpoint holds masterFlushedOffset = confirmPhyOffset = OUT's end (issue 55 item 1): with
    # allAckInSyncStateSet the broker corrects nothing (else one "Correcting. Key:" line per message) and logs no
    # ERROR about the confirm offset
    assert struct.unpack_from(">2q", (out / "checkpoint").read_bytes(), 24) == (end, end)
    assert "Correcting" not in log and not [x for x in log.splitlines() if "ERROR" in x and "confirmOffset" in x]
    after = file_tree_digest(store)
    kept = ("commitlog", "consumequeue", "index")
    data = lambda d: {k: v for k, v in d.items() if k.split("/")[0] in kept}  # noqa: E731
    assert data(after) == data(before) and len(data(before)) > 20


# -- the operator's side -----------------------------------------------------------------------------------------

def test_old_ids_are_found_through_the_map(converted, capsys):
    from jobs.query import main as query_main

    out, conf, _ = converted["dledger-upgrade-11"]
    from jobs.pipeline.convert.msgid_map import with_ids

    row = with_ids(pq.read_table(out / "reput-msgid-map")).slice(5, 1).to_pylist()[0]
    capsys.readouterr()
    query_main(["--store", str(out), "--broker-config", str(conf), "--msg-id", row["old_offset_msg_id"], "--json"])
    r = json.loads(capsys.readouterr().out)
    assert r["query"]["converted"]["new_physical_offset"] == row["new_physical_offset"]
    assert r["messages"][0]["physical_offset"] == row["new_physical_offset"]
    assert r["messages"][0]["offset_msg_id"] == row["new_offset_msg_id"]


def test_dry_run_writes_nothing(spark, tmp_path, capsys):
    from jobs.convert import main as convert_main

    case = GOLDEN / "dledger-upgrade-11"
    capsys.readouterr()
    assert convert_main(["--store", str(case), "--broker-config", str(case / "broker.conf"), "--out",
                         str(tmp_path / "out"), "--dry-run", "--json", "--quiet"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())
    assert plan["dledger_records"] > 0 and plan["plain_segments_kept"] == 3 and plan["schedule_messages_moved"] > 0
    assert plan["offset_msg_ids_changed"] == plan["dledger_records"]


def test_refusals(no_spark, tmp_path, capsys):
    plain = GOLDEN / "clean-small-11"
    code, err = run_job_lines("convert", ["--store", str(plain), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "is not a DLedger store" in err[-1]
    case = GOLDEN / "dledger-clean-small-11"
    code, err = run_job_lines("convert", ["--store", str(case), "--out", str(case / "inside")], capsys)
    assert code == 2 and "must be outside the store" in err[-1]
    assert not (case / "inside").exists() and not (tmp_path / "o").exists()


def test_refused_while_a_broker_holds_the_lock(no_spark, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "dledger-clean-small-11", store)
    with lock_held(store / "lock"):
        code, err = run_job_lines("convert", ["--store", str(store), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "is locked by process" in err[-1] and not (tmp_path / "o").exists()
    assert "--force" not in err[-1]  # convert has no --force to offer (issue 37 item 9)


@hsettings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**62), max_size=50),
       st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16), st.integers(-2**31, 2**31 - 1))
def test_one_host_msg_ids_equal_the_general_encoder(offsets, host, port):
    from storage_format.msg_id import encode_offset_msg_ids, offset_msg_ids_one_host

    offs = np.array(offsets, np.int64)
    fast = offset_msg_ids_one_host(host + struct.pack(">i", port), offs)
    assert fast.to_pylist() == encode_offset_msg_ids([host] * len(offs), [port] * len(offs), offs).to_pylist()


def test_ctrl_c_while_writing_leaves_nothing(tmp_path):
    """Ctrl-C (SIGINT to the process group) while a task writes a segment: exit 130, one line, no OUT and
    no staging directory."""
    store = GOLDEN / "dledger-clean-small-11"
    (tmp_path / "out").mkdir()
    run = signalled_at_hook("convert", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                        str(tmp_path / "out" / "plain"), "--master", "local[2]", "--quiet"],
                            "in-convert-write", tmp_path / "paused")
    lines = [ln for ln in run.stderr.splitlines() if not ln.startswith(("reput test hook:", "reput convert: note:"))]
    assert run.returncode == 130 and lines[-1:] == ["reput convert: interrupted; nothing published"], run.stderr
    assert "Traceback" not in run.stderr and os.listdir(tmp_path / "out") == []
    assert run.group_gone


def test_entries_past_the_committed_index_are_left_out(spark, tmp_path, capsys):
    """A group of three: only entries up to committedIndex are committed; convert leaves the rest out, says so
    and counts them; `--dledger-reading surviving` keeps them."""
    from jobs.convert import main as convert_main
    from storegen.encoder import write_dledger_store
    from storegen.sample import SEGMENT_SIZE, broker_conf_text, build_sample

    store = tmp_path / "store"
    written = write_dledger_store(store, build_sample(600, seed=5).puts(), SEGMENT_SIZE, committed_index=400)
    conf = store / "broker.conf"
    conf.write_text(broker_conf_text() + "enableDLegerCommitLog=true\ndLegerSelfId=n0\n"
                                         "dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.2:40911;n2-127.0.0.3:40911\n")
    before = file_tree_digest(store)
    runs = {}
    for reading in (None, "surviving"):
        out = tmp_path / f"out-{reading}"
        capsys.readouterr()
        argv = ["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--json", "--quiet"]
        assert convert_main(argv + (["--dledger-reading", reading] if reading else [])) == 0
        captured = capsys.readouterr()
        runs[reading] = (json.loads(captured.out), captured.err, out)
    assert file_tree_digest(store) == before
    report, err, out = runs[None]
    from jobs.convert import FROM_READ_BACK, FROM_SOURCE
    assert report["queues_and_index_built_from"] == FROM_READ_BACK and "second scan of OUT" in err
    assert runs["surviving"][0]["queues_and_index_built_from"] == FROM_SOURCE
    past = written.last_index - 400
    assert past > 0 and report["plan"]["records_past_committed_position_left_out"] == past
    assert report["message_records"] == 401 and "left out of OUT" in err
    assert report["dledger"]["entries_past_committed_index"] == past
    full, _, full_out = runs["surviving"]
    assert full["message_records"] == written.last_index + 1
    assert full["plan"]["records_past_committed_position_left_out"] == 0
    # the committed part is the same bytes either way
    cut = (out / "commitlog").iterdir()
    for seg in sorted(cut)[:-1]:
        assert seg.read_bytes() == (full_out / "commitlog" / seg.name).read_bytes()


# -- damage (issue 35) --------------------------------------------------------------------------------------------

def _independent_crc_ok(record: bytes) -> bool:
    """The record's body CRC, read with the test's own offsets (FORMAT.md: bodyCRC at 8; bornHost at 48, then
    storeTimestamp, storeHost, reconsumeTimes, preparedTransactionOffset, bodyLength), not reput's decoder."""
    import zlib
    flag = struct.unpack_from(">i", record, 36)[0]
    born = 8 if flag & 0x10 == 0 else 20
    store = 8 if flag & 0x20 == 0 else 20
    at = 48 + born + 8 + store + 4 + 8
    n = struct.unpack_from(">i", record, at)[0]
    return zlib.crc32(record[at + 4:at + 4 + n]) & 0x7FFFFFFF == struct.unpack_from(">i", record, 8)[0]


def _walk_records(log: dict[int, bytes]):
    """(offset, bytes) of every record of a plain commit log, walked with the test's own struct (magic v1/v2, a
    BLANK ends a segment): each record's PHYSICALOFFSET must be where it lies."""
    for start, data in sorted(log.items()):
        at = 0
        while at + 8 <= len(data) and struct.unpack_from(">I", data, at + 4)[0] in (0xDAA320A7, 0xAABBCCDD):
            n = struct.unpack_from(">i", data, at)[0]
            assert struct.unpack_from(">q", data, at + AT_PHYSICAL_OFFSET)[0] == start + at
            yield start + at, data[at:at + n]
            at += n


def test_a_store_of_transactions_keeps_every_commit_pointing_at_its_half_record(spark, tmp_path):
    """Half of the messages sent in transactions (storegen: a half record, then its COMMIT), small splits and
    segments so that ends and their half records fall in different splits and new segments: in OUT every COMMIT's
    prepared offset is its half record's new offset (read back with the test's own walk); the report counts the
    ends, and none of them travelled to the driver (the plan's counts come from the tasks' pairs files)."""
    from jobs.convert import main as convert_main
    from storegen.synth import StoreSpec, write_bench_store

    spec = StoreSpec(messages=6000, body_min=16, body_max=200, topics=3, queues=2, segment_size=1 << 18,
                     dledger=True, transaction_share=0.5)
    store, out = tmp_path / "store", tmp_path / "out"
    write_bench_store(store, spec, progress=False)
    assert convert_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
                         "--split-size", "64k", "--quiet", "--json"]) == 0
    report = json.loads((out / "reput-convert-report.json").read_text())
    moved = _offset_map(out)
    walked = dict(_walk_records(_log_bytes(out)))
    halves = {new for new in moved.values() if b"\x18RMQ_SYS_TRANS_HALF_TOPIC" in walked[new]}  # its topic field
    commits = 0
    for new, rec in walked.items():
        flag = struct.unpack_from(">i", rec, AT_SYS_FLAG)[0]
        if is_transaction_end(flag):
            commits += 1
            assert struct.unpack_from(">q", rec, prepared_offset_at(flag))[0] in halves, new
    assert commits == len(halves) > 2000
    assert report["plan"]["transaction_ends_rewritten"] == commits == report["prepared_offsets_rewritten"]
    assert report["plan"]["transaction_ends_pointing_outside"] == 0 and len(report["segments_written"]) > 3


def test_a_record_whose_body_crc_fails_is_refused_then_listed_with_the_flag(spark, tmp_path, capsys):
    """A DLedger record with a flipped body byte (DLedger serves it; a plain broker's recovery cuts its log there):
    convert refuses in one line naming the data file, byte offset, and the old and new offsets, writing nothing;
    with --accept-bad-crc it converts, says so, and the report lists the record, its new offset holding it (CRC still
    failing) and what the broker will do."""
    from tests.hostile import dledger_bad_body_crc

    d = dledger_bad_body_crc(GOLDEN, tmp_path / "store")
    old = int(d.file.name) + d.offset + 48
    argv = ["--store", str(d.store), "--broker-config", str(d.broker_config), "--out", str(tmp_path / "out")]
    code, err = run_job_lines("convert", argv + ["--quiet"], capsys)
    errors = [line for line in err if line.startswith("reput convert: error: ")]
    assert code == 2 and len(errors) == 1 and not (tmp_path / "out").exists(), err
    assert f"{d.file} at byte offset {d.offset} (old offset {old}, new offset " in errors[0]
    assert "--accept-bad-crc" in errors[0] and "checkCRCOnRecover" in errors[0]
    code, err = run_job_lines("convert", argv + ["--quiet", "--accept-bad-crc"], capsys)
    assert code == 0 and any("1 records fail their body CRC check" in line for line in err), err
    report = json.loads((tmp_path / "out" / "reput-convert-report.json").read_text())["plan"]["bad_crc_records"]
    (bad,) = report["records"]
    assert report["count"] == 1 and report["accepted"] and bad["old_offset"] == old and bad["byte_offset"] == d.offset
    assert bad["file"] == str(d.file) and bad["records_after"] > 0 and "broker" in bad["broker_will"]
    new = bad["new_offset"]
    log = _log_bytes(tmp_path / "out")
    size = struct.unpack(">i", _at(log, new, 4))[0]
    record = _at(log, new, size)
    assert struct.unpack_from(">q", record, AT_PHYSICAL_OFFSET)[0] == new and not _independent_crc_ok(record)
    records = dict(_walk_records(log))  # every other record of OUT passes its CRC (the test's own walk)
    assert [o for o, r in records.items() if not _independent_crc_ok(r)] == [new]
    assert len(records) == json.loads((tmp_path / "out" / "reput-convert-report.json").read_text())["message_records"]


def test_a_term_that_goes_down_ends_what_convert_copies(spark, tmp_path, capsys):
    """An entry whose term is below the one before it ends DLedger's log (its recovery cuts there): convert refuses
    the store as it refuses any log that does not end cleanly, naming that entry (issue 35 item 2)."""
    from tests.hostile import dledger_term_down

    d = dledger_term_down(GOLDEN, tmp_path / "store")
    code, err = run_job_lines("convert", ["--store", str(d.store), "--broker-config", str(d.broker_config), "--out",
                                    str(tmp_path / "out"), "--quiet"], capsys)
    errors = [line for line in err if line.startswith("reput convert: error: ")]
    assert code == 2 and len(errors) == 1 and f"{d.file} at byte offset {d.offset}" in errors[0], err
    assert "below the previous entry's term" in errors[0] and not (tmp_path / "out").exists()


def test_a_store_that_did_not_shut_down_cleanly_is_refused(no_spark, tmp_path, capsys):
    """`abort` present (the golden DLedger crash): convert refuses before Spark starts, naming it and saying to
    recover first, as docs/convert.md says (issue 37 item 5); nothing written."""
    from tests.conftest import restored_copy

    store = restored_copy("dledger-unclean-11", tmp_path / "store")
    assert (store / "abort").exists()
    code, err = run_job_lines("convert", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                    str(tmp_path / "out")], capsys)
    assert code == 2 and len(err) == 1 and f"{store / 'abort'} exists" in err[0], err
    assert "run `reput recover` first" in err[0] and not (tmp_path / "out").exists()


def test_a_record_with_a_negative_queue_id_is_named_and_counted(spark, tmp_path, capsys):
    """A DLedger record whose queueId is -1 (no broker assigns one; the dispatch still files it under `-1/`): convert
    says so in a warning line naming the file and byte offset, as rebuild and inspect do, and its report counts
    it (issue 36 item 4)."""
    from tests.conftest import restored_copy

    store = restored_copy("dledger-clean-small-11", tmp_path / "store")
    data = sorted((store / "dledger-n0" / "data").iterdir())[-1]
    buf, at = data.read_bytes(), 0
    while struct.unpack_from(">i", buf, at)[0] == 1:  # the log's last entry: the last of its queue (no gap after it)
        entry, at = at, at + struct.unpack_from(">i", buf, at + 4)[0]
    with open(data, "r+b") as f:
        f.seek(entry + 48 + 12)
        f.write(struct.pack(">i", -1))
    code, err = run_job_lines("convert", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                    str(tmp_path / "out"), "--quiet"], capsys)
    warnings = [line for line in err if line.startswith("reput convert: warning: ")]
    assert code == 0 and len(warnings) == 1, err
    assert f"{data} at byte offset {entry + 48}" in warnings[0] and "queueId -1" in warnings[0]
    report = json.loads((tmp_path / "out" / "reput-convert-report.json").read_text())
    assert report["plan"]["negative_queue_ids"]["records"] == 1


def test_a_queue_offset_that_goes_backwards_is_written_as_the_broker_writes_it(spark, tmp_path, capsys):
    """A DLedger record whose queueOffset repeats the one before it (207 then 206): convert names it in a warning
    (file and byte offset), counts it in its report, and OUT's consume queues are the source's rebuild (the
    broker's rule: that entry skipped, the queue's later entries one offset earlier; checked against an independent
    model in test_hostile) with every offset mapped to OUT's (issues 35 item 5, 36 item 1)."""
    from tests.hostile import dledger_queue_offset_backwards

    d = dledger_queue_offset_backwards(GOLDEN, tmp_path / "store")
    args = ["--store", str(d.store), "--broker-config", str(d.broker_config), "--quiet"]
    code, err = run_job_lines("convert", args + ["--out", str(tmp_path / "out")], capsys)
    warnings = [line for line in err if line.startswith("reput convert: warning: ")]
    assert code == 0 and len(warnings) == 1 and d.named("convert") in warnings[0], err
    report = json.loads((tmp_path / "out" / "reput-convert-report.json").read_text())
    assert report["plan"]["out_of_step_queues"]["first_offset"] == d.victim["phy"]
    assert run_job_lines("rebuild", args + ["--out", str(tmp_path / "src-rebuild")], capsys)[0] == 0
    moved = _offset_map(tmp_path / "out")
    want = {q: [(moved[phy], size, tags) if size < 2**31 - 1 else (phy, size, tags) for phy, size, tags in units]
            for q, units in _cq_entries(tmp_path / "src-rebuild").items()}
    assert _cq_entries(tmp_path / "out") == want


def test_a_checkpoint_of_random_bytes_is_replaced_and_named(spark, tmp_path, capsys):
    """A store checkpoint of random bytes (times no record put there): OUT gets a fresh one made from the last
    record's storeTimestamp, not the garbage, and the warning names the file, the byte offset and the field
    (issue 36 item 5)."""
    from tests.conftest import restored_copy

    store = restored_copy("dledger-clean-small-11", tmp_path / "store")
    (store / "checkpoint").write_bytes(np.random.default_rng(7).bytes(4096))
    code, err = run_job_lines("convert", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                    str(tmp_path / "out"), "--quiet"], capsys)
    warnings = [line for line in err if line.startswith("reput convert: warning: ")]
    assert code == 0 and len(warnings) == 1 and f"{store / 'checkpoint'} at byte offset 0" in warnings[0], err
    out = (tmp_path / "out" / "checkpoint").read_bytes()
    last = max(_walk_store_times(tmp_path / "out"))
    end = json.loads((tmp_path / "out" / "reput-convert-report.json").read_text())["max_physical_offset"]
    assert len(out) == 4096 and struct.unpack_from(">5q", out) == (last, last, last, end, end)
    assert out[40:] == bytes(4056)


def _walk_store_times(store: Path) -> list[int]:
    """storeTimestamp of every record of a plain store, read with struct (FORMAT.md: sysFlag at 36, bornHost at 48,
    8 bytes or 20 with an IPv6 born host, then storeTimestamp)."""
    return [struct.unpack_from(">q", rec, 56 if struct.unpack_from(">i", rec, 36)[0] & 0x10 == 0 else 68)[0]
            for _, rec in _walk_records(_log_bytes(store))]


def test_out_carries_the_broker_config_to_start_it_with(converted, capsys):
    """OUT holds reput-broker.conf; `convert --check-config` accepts it for OUT and refuses the source's config,
    which leads to the DLedger store, by key (issue 37 item 1)."""
    out, _, _ = converted[CASES[0]]
    conf = out / "reput-broker.conf"
    code, err = run_job_lines("convert", ["--store", str(out), "--check-config", str(conf)], capsys)
    assert code == 0 and err == [], err
    code, err = run_job_lines("convert", ["--store", str(out), "--check-config", str(GOLDEN / CASES[0] / "broker.conf")],
                        capsys)
    assert code == 2 and len(err) == 1 and "enableDLegerCommitLog=true" in err[0], err


def test_the_documented_spark_sql_join_maps_old_ids_to_new(converted, spark):
    """docs/convert.md's join (old offset ids to new through the exported map), run as written: every old id of the
    map gets its new id, equal to msgid_map.with_ids (issue 37 item 7)."""
    from jobs.pipeline.convert.msgid_map import with_ids

    out, _, _ = converted[CASES[0]]
    ids = with_ids(pq.read_table(out / "reput-msgid-map")).select(["old_offset_msg_id", "new_offset_msg_id"])
    want = dict(zip(*(ids.column(c).to_pylist() for c in ("old_offset_msg_id", "new_offset_msg_id"))))
    text = (Path(__file__).resolve().parents[1] / "docs" / "convert.md").read_text()
    sql = text[text.index("      CREATE TEMPORARY VIEW idmap"):].split("\n\n", 1)[0]
    create, select = (part.strip().replace("NEWSTORE", str(out)) for part in sql.split(";")[:2])
    spark.createDataFrame([(k,) for k in want], ["offset_msg_id"]).createOrReplaceTempView("old_ids")
    spark.sql(create)
    got = {r["offset_msg_id"]: r["new_offset_msg_id"] for r in spark.sql(select).collect()}
    assert got == want and len(got) == 3524


def test_dump_at_an_old_offset_points_at_the_new_one(converted, capsys):
    """`dump --offset OLD` on OUT, where no record starts any more: the end row says where that record is now, from
    the msgId map (issue 37 item 9)."""
    out, conf, _ = converted[CASES[0]]
    moved = _offset_map(out)
    starts = set(moved.values())
    old = next(o for o in sorted(moved) if o not in starts)
    from jobs.dump import main as dump_main
    from jobs.pipeline.runtime.cli import run_main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main("dump", dump_main, ["--store", str(out), "--broker-config", str(conf), "--offset", str(old), "--count",
                                     "1", "--json"])
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert exc.value.code == 0 and row["kind"] == "end" and row["moved_to"] == moved[old]
    assert f"now at offset {moved[old]}" in row["detail"]
