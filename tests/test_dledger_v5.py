"""RocketMQ 5.x stores in DLedger mode (issue 56), against what RocketMQ 5.3.3 + DLedger 0.3.1.2 wrote and made of a
crash (golden `v5dledger/`, a subfolder the suites' walks over the golden root do not enter: taken in here by name)
and against the broker itself (the oracle kit, on a store crashed at test time).

The generation decided from the store (abort's PID, abort.bak), not 4.9.8's by default; 5.3.3's recovery rules as
pure functions (the load dispatch's start file, its end computed without entry headers, a truncation that deletes a
file the dispatch created); `recover --out` equal to the broker's recovery byte for byte (index files by content),
with and without --rocketmq-version 5, --full-index, the refusal where 5.3.3 would lose units; `verify` of the
broker's recovered store CONSISTENT with its double-indexed records set apart and named, of the crash image its
dispatch lag named; `rebuild` of the clean case byte-exact."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from storage_format import recovery as R
from storage_format.checkpoint import parse_checkpoint
from storage_format.index_file import HEADER_SIZE, IndexHeader
from storage_format.recovery import dledger_v5 as V5
from storage_format.settings import load_settings

from .conftest import GOLDEN, manifest, restored_copy

SUB = "v5dledger"
CLEAN, CASE, RECOVERED = (f"{SUB}/v5-dledger-{c}" for c in ("clean-small-11", "unclean-11", "unclean-11-recovered"))
HOME = "dledger-n0"
CONF = str(GOLDEN / CASE / "broker.conf")
DETAILS = manifest(RECOVERED)["oracle_self_check"]["details"]
SKIP = ("broker.conf", "manifest.json", "reput-recover-report.json", "reput-files.parquet")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root by relative path (the golden's extras and reput's own reports left out)."""
    return {p.relative_to(root).as_posix(): sha(p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in SKIP}


def differences(out: Path, broker: dict[str, str]) -> list[str]:
    """What differs between OUT and the broker's store (path -> sha256): every file but the index files by path,
    the index files by content in name order (the broker names them by its wall clock); the compaction service's
    position checkpoint, which reput does not write (the plan names it), left out."""
    mine = tree(out)
    keys = (set(mine) | set(broker)) - {"compaction/position-checkpoint"}
    diff = sorted(k for k in keys if not k.startswith("index/") and mine.get(k) != broker.get(k))
    if [mine[k] for k in sorted(mine) if k.startswith("index/")] != \
            [broker[k] for k in sorted(broker) if k.startswith("index/")]:
        diff.append("index/ (by content in name order)")
    return diff


def golden_files(case: str) -> dict[str, str]:
    return {k: v["sha256"] for k, v in manifest(case)["files"].items()}


def run_job(main, capsys, *args: str) -> tuple[int, str]:
    """A job as the console runs it, in this process on the local engine: (exit status, stderr)."""
    from jobs.pipeline.runtime.cli import run_main

    with pytest.raises(SystemExit) as exit_info:
        run_main(main.__module__.rsplit(".", 1)[-1], main, [*args, "--engine", "local", "--quiet"])
    return exit_info.value.code, capsys.readouterr().err


def recover(capsys, *args: str) -> tuple[int, str]:
    from jobs.recover import main

    return run_job(main, capsys, *args)


def verify(capsys, store: Path, tmp_path: Path, conf: str = CONF) -> tuple[int, dict, str]:
    from jobs.verify import main

    report = tmp_path / "verify.json"
    code, err = run_job(main, capsys, "--store", str(store), "--broker-config", conf, "--report", str(report),
                        "--work-dir", str(tmp_path / "work"))
    return code, json.loads(report.read_text()), err


@pytest.fixture(scope="module")
def crash(tmp_path_factory) -> Path:
    return restored_copy(CASE, tmp_path_factory.mktemp("v5dl") / "store")


# ---------------------------------------------------------------------------------------------
# 5.3.3's rules, pure


def heads(store: Path) -> list[R.SegmentHead]:
    """The data files' first records, newest first."""
    files = sorted((store / HOME / "data").iterdir(), reverse=True)
    return [V5.dispatch_file_head(p.read_bytes()[:200], int(p.name)) for p in files]


def test_the_load_dispatch_starts_where_the_broker_logged_it(crash):
    """The newest data file whose first record is older than min(physic, logics) - 3 s: the broker logged
    'dledger recover from this mappFile .../00000000000000786432' on this crash."""
    settings = load_settings(CONF)
    checkpoint = parse_checkpoint((crash / "checkpoint").read_bytes())
    choice = V5.choose_dispatch_file(sorted(int(p.name) for p in (crash / HOME / "data").iterdir()), heads(crash),
                                     checkpoint, settings)
    assert f"{choice.offset:020d}" == DETAILS["recovery_start_file"]
    assert [x["matches"] for x in choice.looked_at] == [False] * 4 + [True]
    # a V2 record first (a topic over 127 characters) never starts it: 5.3.3 checks the V1 magic only
    v2 = [R.SegmentHead(h.start, 0xDAA320AB, h.store_timestamp) if h.start == choice.offset else h
          for h in heads(crash)]
    later = V5.choose_dispatch_file([0], v2, checkpoint, settings)
    assert later.offset < choice.offset and "not the V1 message magic" in later.looked_at[4]["why"]


def test_the_computed_end_leaves_out_the_entry_headers_of_the_last_file(crash):
    """processOffset = the last file's start + the message sizes in it: the broker's own figure for this crash, from
    the entries counted in the crash's last data file."""
    last = sorted((crash / HOME / "data").iterdir())[-1]
    data, at, n = last.read_bytes(), 0, 0
    while struct.unpack_from(">i", data, at + 4)[0]:  # entry sizes up to the zero that ends the data
        at += struct.unpack_from(">i", data, at + 4)[0]
        n += 1
    ld = V5.LoadDispatch(choice=R.StartChoice(786432, ""), end=int(last.name) + at, end_reason="",
                         last_file=int(last.name), entries_in_last_file=n)
    assert ld.end == DETAILS["dledger_write_end"] and ld.computed_end == DETAILS["recovery_processOffset"]
    assert ld.to_dict()["computed_end_short_by"] == DETAILS["recovery_processOffset_deficit"]


def entries(phys: list[int], first_qo: int = 0) -> R.QueueEntries:
    n = len(phys)
    return R.QueueEntries(np.arange(first_qo, first_qo + n, dtype=np.int64), np.asarray(phys, np.int64),
                          np.full(n, 10, np.int32), np.zeros(n, np.int64))


def test_a_cut_deletes_the_file_a_dispatch_created_and_the_next_dispatch_starts_it_afresh():
    """5.3.3 dispatches past the point it then cuts at: a consume-queue file the load dispatch created goes with
    its units (truncateDirtyLogicFiles), and start()'s dispatch creates it again holding only its own units."""
    full = b"".join(struct.pack(">qiq", phy, 10, 0) for phy in range(940, 990, 10))  # 5 units of 20 bytes
    read = {0: full, 100: bytes(100)}.__getitem__  # the crash-time files (the second one never existed)
    st = R.QueueState.start(R.QueueLoad("T", 0, (0,), 100, 990), 100)
    st.dispatch(entries([1000, 1010, 1020], first_qo=5))
    assert st.created == [100] and st.files == [0, 100]
    st.truncate(1000, read)
    assert st.files == [0] and st.created == [] and not st.written and st.max_phy == 990
    st.dispatch(entries([1000], first_qo=5))
    assert st.created == [100]
    assert list(R.render_units(st, 100, read)["phy"][:3]) == [1000, 0, 0]


def test_units_between_the_wrong_end_and_a_later_reput_start_are_lost():
    tails = {("T", 0): entries([100, 200, 300, 400])}
    assert V5.lost_units(tails, cut_at=150, reput_from=120, dispatched_to=500) == 0
    assert V5.lost_units(tails, cut_at=150, reput_from=350, dispatched_to=500) == 2  # 200 and 300


# ---------------------------------------------------------------------------------------------
# recover, end to end


@pytest.fixture(scope="module")
def recovered_out(crash, tmp_path_factory) -> tuple[Path, str]:
    """`recover --out` of the crash without a version flag, and what it named on stderr."""
    import contextlib
    import io

    from jobs.pipeline.runtime.cli import run_main
    from jobs.recover import main

    before = tree(crash)
    out = tmp_path_factory.mktemp("v5dl-out") / "out"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        run_main("recover", main, ["--store", str(crash), "--broker-config", CONF, "--out", str(out), "--json",
                                   "--engine", "local", "--quiet"])
    assert exit_info.value.code == 0, err.getvalue()
    assert tree(crash) == before  # --out only reads the store
    return out, err.getvalue()


def test_out_equals_5_3_3s_recovery(recovered_out):
    """Consume queues, DLedger data/index/checkpoint/currterm, checkpoint, abort.bak and lock byte for byte, the
    index files by content (the broker's two double-indexed records included); the plan and stderr name the
    generation from the store's markers, the model, the end bug and the records indexed again."""
    out, err = recovered_out
    assert differences(out, golden_files(RECOVERED)) == []
    assert not (out / "abort").exists()
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert report["generation"] == "5.x" and any("abort holds '25732'" in e for e in report["generation_evidence"])
    assert V5.MODEL in report["generation_evidence"]
    ld = report["load_dispatch"]
    assert ld["from_data_file"] == DETAILS["recovery_start_file"] and ld["computed_end"] == \
        DETAILS["recovery_processOffset"]
    assert report["post_start_redispatch"]["from_offset"] == DETAILS["reput_start_offset"]
    assert report["markers"]["compaction/position-checkpoint"].startswith("not written")
    assert {b["record_offset"] for b in report["index"]["boundary_records_indexed_again"]} == {1851740, 1879399}
    assert "RocketMQ 5.x" in err and V5.MODEL in err and "without the 48-byte entry headers" in err
    assert err.count("is indexed again") == 2 and "Traceback" not in err


def test_the_version_flag_plans_what_the_markers_say(crash, capsys, tmp_path):
    """--rocketmq-version 5 plans exactly what detection does; --rocketmq-version 4 applies 4.9.8's model, by name
    (never silently: its plan and stderr say so), whose index the broker's is not."""
    plans = {}
    for flag in ((), ("--rocketmq-version", "5"), ("--rocketmq-version", "4")):
        report = tmp_path / f"plan{len(plans)}.json"
        code, err = recover(capsys, "--store", str(crash), "--broker-config", CONF, "--dry-run", "--json",
                            "--report", str(report), *flag)
        assert code == 0, err
        plans[flag[1:]] = (json.loads(report.read_text()), err)
    drop = ("generation_evidence", "timings", "engine")
    for plan, _ in plans.values():  # new index files are named by the wall clock
        for new in plan["index"]["to_create"]:
            new["file"] = None
    (auto, _), (five, _), (four, err4) = plans[()], plans[("5",)], plans[("4",)]
    assert {k: v for k, v in auto.items() if k not in drop} == {k: v for k, v in five.items() if k not in drop}
    assert five["generation_evidence"][0] == "given on the command line (5.x)"
    assert four["generation"] == "4.x" and "modelled on RocketMQ 4.9.8" in " ".join(four["generation_evidence"])
    assert "RocketMQ 4.x" in err4 and "4.9.8" in err4
    assert four["index"]["to_create"][0]["entries"] != auto["index"]["to_create"][0]["entries"]


def test_full_index_rebuilds_the_index_without_the_brokers_double_entries(crash, capsys, tmp_path):
    out = tmp_path / "out"
    code, err = recover(capsys, "--store", str(crash), "--broker-config", CONF, "--out", str(out), "--full-index")
    assert code == 0, err
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert report["index"]["mode"].startswith("full rebuild") and "--full-index" in " ".join(report["warnings"])
    entries_in = [IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]).index_count - 1
                  for p in sorted((out / "index").iterdir())]
    broker = [IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]).index_count - 1
              for p in sorted((GOLDEN / RECOVERED / "index").iterdir())]
    assert sum(entries_in) == sum(broker) - 2 and entries_in[:-1] == broker[:-1]
    assert [d for d in differences(out, golden_files(RECOVERED)) if not d.startswith("index/")] == []


def test_a_second_run_on_out_plans_no_change(recovered_out, capsys, tmp_path):
    out, _ = recovered_out
    plan = tmp_path / "plan.json"
    code, err = recover(capsys, "--store", str(out), "--broker-config", CONF, "--dry-run", "--json", "--report",
                        str(plan))
    p = json.loads(plan.read_text())
    assert code == 0 and p["changes"] is False, err
    assert p["load_dispatch"]["from_offset"] is None and p["generation"] == "5.x"


def test_a_dledger_checkpoint_past_the_wrong_end_is_refused(capsys, tmp_path):
    """committedIndex 3830 puts start()'s dispatch past 5.3.3's wrong end (1,875,590): the broker would cut the
    units between them and never put them back; reput refuses in one line naming the file and the way out."""
    store = restored_copy(CASE, tmp_path / "store")
    (store / HOME / "checkpoint").write_bytes(b"committedIndex=3830\nendIndex=3833\n")
    before = tree(store)
    code, err = recover(capsys, "--store", str(store), "--broker-config", CONF, "--out", str(tmp_path / "out"))
    lines = [x for x in err.splitlines() if x.startswith("reput recover: error: ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"{HOME}/checkpoint" in lines[0] and "reput rebuild" in lines[0] and "1875590" in lines[0]
    assert tree(store) == before and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# verify


@pytest.mark.parametrize("which", ["broker", "reput"])
def test_verify_sets_the_brokers_double_indexed_records_apart(which, recovered_out, capsys, tmp_path):
    """The broker's recovered store (and reput's, identical to it): CONSISTENT, the two records 5.3.3 indexes twice
    counted apart and named, never findings."""
    store = restored_copy(RECOVERED, tmp_path / "store") if which == "broker" else recovered_out[0]
    code, report, err = verify(capsys, store, tmp_path)
    assert code == 0 and report["findings_total"] == 0, report["finding_counts"]
    twice = report["double_indexed"]
    assert [r["offset"] for r in twice["records"]] == [1851740, 1879399] and twice["entries"] == 2
    assert sum(twice["findings_set_apart"].values()) > 0 and "double-indexed by the broker" in err


def stream(*keys: str) -> tuple[np.ndarray, np.ndarray]:
    """(keyHash, phyOffset) of keys written as record letter + key number: 'a1' is record a's first key."""
    return (np.array([int(k[1:]) for k in keys], np.int64), np.array([ord(k[0]) for k in keys], np.int64))


@pytest.mark.parametrize("disk,repeats", [
    (("a1", "a2", "a1", "a2", "b1", "c1"), [(ord("a"), 2)]),  # a dispatch started at record a: its keys again
    (("a1", "a2", "b1", "c1", "c1"), [(ord("c"), 1)]),  # the last record again, at the end
    (("a1", "a2", "a1", "a2", "b1", "c1", "c1"), [(ord("a"), 2), (ord("c"), 1)]),  # both: a crash and a restart
    (("a1", "a2", "a2", "b1", "c1"), None),  # a key again, but not from its record's first: not the broker
    (("a1", "a2", "b1"), None),  # a key missing
    (("a1", "a2", "c1", "b1", "c1"), None),  # another record's keys in between
])
def test_verify_aligns_only_the_brokers_repeats(disk, repeats):
    """The store's key stream is the log's with a record's keys (put so far) put again right after themselves."""
    got = __import__("jobs.pipeline.verify.double_index", fromlist=["align"]).align(
        stream("a1", "a2", "b1", "c1"), stream(*disk))
    assert (None if got is None else [(r.offset, r.keys) for r in got[1]]) == repeats


def test_verify_keeps_a_damaged_index_inconsistent(capsys, tmp_path):
    """The rule sets apart the broker's repeats only: one entry changed in the broker's last index file is damage."""
    store = restored_copy(RECOVERED, tmp_path / "store")
    last = sorted((store / "index").iterdir())[-1]
    data = bytearray(last.read_bytes())
    at = len(data) - 256 * 20 + 50 * 20  # entry position 50: its keyHash
    struct.pack_into(">i", data, at, struct.unpack_from(">i", data, at)[0] ^ 1)
    last.write_bytes(bytes(data))
    code, report, _ = verify(capsys, store, tmp_path)
    assert code == 1 and "double_indexed" not in report
    assert any(k.startswith("index.") for k in report["finding_counts"])


def test_verify_names_the_crash_images_lag_as_the_broker_will_treat_it(crash, capsys, tmp_path):
    """The crash image: its findings are the undispatched tail, named with what 5.3.3's next start does (the data
    file its load dispatch starts from, the DLedger checkpoint's committedPos) and `reput recover`; still exit 1."""
    code, report, err = verify(capsys, crash, tmp_path)
    lag = report["recovery_lag"]
    assert code == 1 and lag["consume_queue_units"] == 2 and lag["index_entries"] == 2
    assert f"{lag['load_dispatch_from']:020d}" == DETAILS["recovery_start_file"]
    assert lag["reput_from"] == DETAILS["reput_start_offset"] and lag["log_end"] == DETAILS["dledger_write_end"]
    assert "reput recover" in lag["message"] and lag["message"] in err


@pytest.mark.parametrize("from_end", [1, 3], ids=["last-unit", "a-unit-before-the-last"])
def test_a_crash_between_a_data_entry_and_its_index_unit(from_end, capsys, tmp_path):
    """The crash image with a DLedger index unit zeroed: the last one (the crash fell between the entry and its index
    unit; DLedgerMmapFileStore.recover writes it again from the data) is part of the named lag; one before it is
    damage, and nothing is named a lag."""
    store = restored_copy(CASE, tmp_path / "store")
    index = store / HOME / "index" / "00000000000000000000"
    data = bytearray(index.read_bytes())
    used = max(i for i in range(0, len(data), 32) if any(data[i:i + 32])) + 32
    at = used - from_end * 32
    data[at:at + 32] = bytes(32)
    index.write_bytes(bytes(data))
    code, report, err = verify(capsys, store, tmp_path)
    assert code == 1 and report["finding_counts"].get("dledger_index.missing_entry") == 1, report["finding_counts"]
    if from_end == 1:
        lag = report["recovery_lag"]
        assert lag["dledger_index_units"] == 1 and lag["consume_queue_units"] == 2 and lag["message"] in err
        assert "the DLedger index lacks its last 1 unit" in lag["message"]
    else:
        assert "recovery_lag" not in report


def test_the_clean_case_rebuilds_byte_exact_and_verifies(capsys, tmp_path):
    """v5-dledger-clean-small-11: rebuild --out equals the broker's consume queues and index files; verify says
    CONSISTENT; recover plans nothing but the election's currterm.bak."""
    from jobs.rebuild import main as rebuild_main

    store = restored_copy(CLEAN, tmp_path / "store")
    files = golden_files(CLEAN)
    out = tmp_path / "out"
    conf = str(GOLDEN / CLEAN / "broker.conf")
    code, err = run_job(rebuild_main, capsys, "--store", str(store), "--broker-config", conf, "--out", str(out))
    assert code == 0, err
    got = tree(out)
    assert {k: v for k, v in got.items() if k.startswith("consumequeue/")} == \
        {k: v for k, v in files.items() if k.startswith("consumequeue/")}
    assert [got[k] for k in sorted(got) if k.startswith("index/")] == \
        [files[k] for k in sorted(files) if k.startswith("index/")]
    code, report, _ = verify(capsys, store, tmp_path)
    assert code == 0 and report["findings_total"] == 0 and "double_indexed" not in report
    plan = tmp_path / "plan.json"
    code, err = recover(capsys, "--store", str(store), "--broker-config", CONF, "--dry-run", "--json", "--report",
                        str(plan))
    p = json.loads(plan.read_text())
    assert code == 0 and p["generation"] == "5.x" and p["dledger"]["files_rewritten"] == [f"{HOME}/currterm.bak"]


# ---------------------------------------------------------------------------------------------
# the broker itself: 5.3.3's DLedger recovery of a store crashed now, beside recover --out (CI)


def test_the_brokers_dledger_recovery_of_a_fresh_crash_equals_recover_out(oracle, capsys, tmp_path):
    """The kit's 5.3.3 + DLedger 0.3.1.2 writes a store and dies mid-write (Runtime.halt); a copy is recovered by the
    broker (reopen: abnormal DLedger recovery, start, election, dispatch, clean shutdown) and by `recover --out`:
    the same files (index by content); verify calls the broker's store CONSISTENT (its double-indexed records set
    apart) and names the crash's lag. Where the DLedger checkpoint lands past 5.3.3's wrong end (a few percent of
    crashes) reput refuses, and the broker's store does lack the units the refusal names."""
    from tests.oracle import v5_dledger, v5_dledger_conf

    conf = v5_dledger_conf(oracle.kit, tmp_path / "broker.conf")
    crashed, broker = tmp_path / "crashed", tmp_path / "broker"
    v5_dledger(oracle, "write-unclean", crashed, conf)
    shutil.copytree(crashed, broker)
    events = v5_dledger(oracle, "reopen", broker, conf)
    out = tmp_path / "out"
    code, err = recover(capsys, "--store", str(crashed), "--broker-config", str(conf), "--out", str(out))
    if code == 2:
        assert_the_broker_cut_them(broker, events, err)
        return
    assert code == 0, err
    assert differences(out, tree(broker)) == []
    plan = json.loads((out / "reput-recover-report.json").read_text())
    assert plan["load_dispatch"]["computed_end_short_by"] > 0
    # verify: the broker's store CONSISTENT, its double-indexed records set apart; the crash's lag named
    code, report, _ = verify(capsys, broker, tmp_path, str(conf))
    assert code == 0 and len(report["double_indexed"]["records"]) == 2, report["finding_counts"]
    code, report, _ = verify(capsys, crashed, tmp_path, str(conf))
    assert code == 1 and report["recovery_lag"]["reput_from"] == plan["post_start_redispatch"]["from_offset"]


def flip_body_byte(store: Path, offset: int) -> None:
    """One body byte of the record in the entry at `offset` changed: its body CRC fails (DLedger checks none)."""
    data = store / HOME / "data"
    start = max(int(p.name) for p in data.iterdir() if int(p.name) <= offset)
    f = data / f"{start:020d}"
    buf = bytearray(f.read_bytes())
    r = offset - start + 48
    sys_flag = struct.unpack_from(">i", buf, r + 36)[0]
    hosts = (20 if sys_flag & 0x10 else 8) + (20 if sys_flag & 0x20 else 8)
    body = r + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + hosts + 4 + 8 + 4  # after the body length
    buf[body] ^= 0xFF
    f.write_bytes(bytes(buf))


@pytest.mark.full
def test_a_body_crc_stops_the_load_dispatch_as_the_broker_does(oracle, capsys, tmp_path):
    """A body CRC that fails inside the load dispatch (checkCRCOnRecover): 5.3.3's dispatch during load stops there and
    computes its end in that file; start()'s dispatch, which checks no CRC, goes on. The broker's recovery of the
    golden crash with one body byte changed, and `recover --out` of it: the same files."""
    from tests.oracle import v5_dledger, v5_dledger_conf

    crashed = restored_copy(CASE, tmp_path / "crashed")
    flip_body_byte(crashed, 1577401)  # an entry in data file 1572864, between the load dispatch's start and end
    broker = tmp_path / "broker"
    shutil.copytree(crashed, broker)
    v5_dledger(oracle, "reopen", broker, v5_dledger_conf(oracle.kit, tmp_path / "broker.conf"))
    out = tmp_path / "out"
    code, err = recover(capsys, "--store", str(crashed), "--broker-config", CONF, "--out", str(out))
    assert code == 0, err
    ld = json.loads((out / "reput-recover-report.json").read_text())["load_dispatch"]
    assert ld["to_offset"] == 1577401 and "body CRC" in ld["end_reason"] and ld["last_file"] == f"{1572864:020d}"
    assert differences(out, tree(broker)) == []


def assert_the_broker_cut_them(broker: Path, events: list[dict], err: str) -> None:
    """What reput's refusal says 5.3.3 does, 5.3.3 did: its log shows the consume queues cut at the end it computed,
    its events the dispatch after start() resuming past them (so it never dispatches [cut, resume) again)."""
    cut = re.search(r"cut (\d+) consume-queue units of \[(\d+), (\d+)\)", err)
    assert cut is not None, err
    n, lo, hi = (int(x) for x in cut.groups())
    log = (broker.parent / f"{broker.name}.reopen.log").read_text()
    assert n > 0 and f">= processOffset({lo}), truncate dirty logic files" in log
    assert next(e for e in events if e["event"] == "store_open")["reputFrom_after_start"] == hi


@pytest.mark.full
def test_the_broker_cuts_the_units_the_refusal_names(oracle, capsys, tmp_path):
    """The refused case against 5.3.3 itself: the golden crash with its DLedger checkpoint moved past the wrong end;
    the broker cuts its queues where the refusal says and resumes dispatch past the units it names."""
    from tests.oracle import v5_dledger, v5_dledger_conf

    crashed = restored_copy(CASE, tmp_path / "crashed")
    (crashed / HOME / "checkpoint").write_bytes(b"committedIndex=3830\nendIndex=3833\n")
    broker = tmp_path / "broker"
    shutil.copytree(crashed, broker)
    events = v5_dledger(oracle, "reopen", broker, v5_dledger_conf(oracle.kit, tmp_path / "broker.conf"))
    code, err = recover(capsys, "--store", str(crashed), "--broker-config", CONF, "--out", str(tmp_path / "out"))
    assert code == 2
    assert_the_broker_cut_them(broker, events, err)

