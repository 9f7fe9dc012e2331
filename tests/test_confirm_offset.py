"""Controller mode / duplicationEnable: the confirm-offset rules (pure), and a controller-mode store made from
the golden v5-clean-small-11 checked against them (rebuild, verify) by an independent reading of its files."""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from storage_format.checkpoint import Checkpoint
from storage_format.confirm_offset import (NO_LIMIT, DispatchLimit, confirm_after_abnormal, confirm_after_normal,
                                           recovery_limit, reput_limit, stored_confirm_applies)
from storage_format.consume_queue import CQ_DTYPE
from storage_format.errors import SettingsError
from storage_format.index_file import ENTRY_DTYPE, HEADER_SIZE, IndexHeader
from storage_format.settings import BrokerSettings
from tests.conftest import GOLDEN
from tests.rebuild_helpers import consume_queue_hashes, report, sha256

CTRL = BrokerSettings(enable_controller_mode=True, all_ack_in_sync_state_set=True)
CP = Checkpoint(confirm_phy_offset=1_000)


# ---------------------------------------------------------------------------------------------
# which confirm offset bounds dispatch (CommitLog.getConfirmOffset at start-up)


@pytest.mark.parametrize("settings,stored", [
    (BrokerSettings(), False),
    (BrokerSettings(enable_controller_mode=True), False),  # a master: the max offset
    (BrokerSettings(enable_controller_mode=True, broker_role="SYNC_MASTER"), False),
    (BrokerSettings(enable_controller_mode=True, broker_role="SLAVE"), True),
    (CTRL, True),
    (BrokerSettings(duplication_enable=True), True),
    (BrokerSettings(all_ack_in_sync_state_set=True), False),  # without controller mode it means nothing
])
def test_stored_confirm_applies(settings, stored):
    assert (stored_confirm_applies(settings) is not None) == stored
    assert (recovery_limit(settings, CP).offset == 1_000) == stored
    assert (reput_limit(settings, CP).offset == 1_000) == stored


def test_read_uncommitted_lifts_the_reput_limit_only():
    s = BrokerSettings(enable_controller_mode=True, all_ack_in_sync_state_set=True, read_uncommitted=True)
    assert reput_limit(s, CP).offset is None and "readUnCommitted" in reput_limit(s, CP).reason
    assert recovery_limit(s, CP).offset == 1_000


def test_reput_limit_needs_a_checkpoint():
    assert reput_limit(BrokerSettings(), None) is NO_LIMIT
    with pytest.raises(SettingsError, match="enableControllerMode.*no checkpoint"):
        reput_limit(CTRL, None)


def test_dispatch_takes_records_ending_at_or_below_the_confirm_offset():
    start, size = np.array([0, 100, 200, 300]), np.array([100, 100, 100, 100])
    assert DispatchLimit(300, "").allows(start, size).tolist() == [True, True, True, False]
    assert DispatchLimit(299, "").allows(start, size).tolist() == [True, True, False, False]
    assert NO_LIMIT.allows(start, size).all()


# ---------------------------------------------------------------------------------------------
# the confirm offset recovery leaves (recoverAbnormally / recoverNormally)


def test_abnormal_controller_lowers_to_the_end_of_the_last_dispatched_record():
    # v5-controller-unclean-11: stored 3811163 inside the record at 3811015 (327 bytes): lowered to 3811015
    cp = Checkpoint(confirm_phy_offset=3_811_163)
    got = confirm_after_abnormal(CTRL, cp, 0, 3_670_016, 3_854_000, 3_811_015)
    assert got.offset == 3_811_015 and "lowered" in got.why


def test_abnormal_controller_edge_cases():
    cp = Checkpoint(confirm_phy_offset=500)
    assert confirm_after_abnormal(CTRL, cp, 1_024, 1_024, 2_000, None).offset == 1_024  # below min: raised
    assert confirm_after_abnormal(CTRL, Checkpoint(confirm_phy_offset=4_000), 0, 1_024, 2_000, None).offset == 1_024
    assert confirm_after_abnormal(CTRL, Checkpoint(confirm_phy_offset=3_000), 0, 0, 2_900, 3_000).offset == 3_000
    # controller master without allAckInSyncStateSet: the max offset bounds nothing; end of the last record
    master = BrokerSettings(enable_controller_mode=True)
    assert confirm_after_abnormal(master, cp, 0, 0, 2_900, 3_100).offset == 3_100


@pytest.mark.parametrize("settings", [BrokerSettings(), BrokerSettings(duplication_enable=True)])
def test_abnormal_without_controller_mode_is_the_last_valid_record_start(settings):
    assert confirm_after_abnormal(settings, CP, 0, 1_024, 2_900, 2_950).offset == 2_900
    assert confirm_after_abnormal(settings, CP, 0, 1_024, None, None).offset == 1_024


def test_normal_recovery_clamps_in_controller_mode():
    assert confirm_after_normal(CTRL, Checkpoint(confirm_phy_offset=9_000), 0, 5_000, 4_900).offset == 5_000
    assert confirm_after_normal(CTRL, Checkpoint(confirm_phy_offset=10), 1_024, 5_000, 4_900).offset == 1_024
    assert confirm_after_normal(CTRL, Checkpoint(confirm_phy_offset=4_000), 0, 5_000, 4_900).offset == 4_000
    assert confirm_after_normal(BrokerSettings(), CP, 0, 5_000, 4_900).offset == 4_900


# ---------------------------------------------------------------------------------------------
# a controller-mode store made from v5-clean-small-11 (Spark)

BASE = "v5-clean-small-11"
SLOTS = 64  # the small profile's maxHashSlotNum


def units(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), dtype=CQ_DTYPE)


@pytest.fixture(scope="module")
def controller_store(tmp_path_factory) -> tuple[Path, int, int]:
    """v5-clean-small-11 with enableControllerMode + allAckInSyncStateSet and a checkpoint confirmPhyOffset in
    the middle of a record taken from a consume queue: (store, confirm offset, that record's offset)."""
    root = tmp_path_factory.mktemp("controller")
    store = root / "store"
    shutil.copytree(GOLDEN / BASE, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    u = units(sorted((store / "consumequeue" / "TopicTest" / "0").iterdir())[1])
    rec = u[u["size"] > 0][40]
    confirm = int(rec["phy"]) + int(rec["size"]) // 2
    cp = bytearray((store / "checkpoint").read_bytes())
    struct.pack_into(">q", cp, 32, confirm)
    (store / "checkpoint").write_bytes(bytes(cp))
    conf = (GOLDEN / BASE / "broker.conf").read_text() + "enableControllerMode=true\nallAckInSyncStateSet=true\n"
    (store / "broker.conf").write_text(conf)
    return store, confirm, int(rec["phy"])


def expected_consume_queues(store: Path, confirm: int) -> dict[str, bytes]:
    """The golden consume queues with every unit of a record ending past the confirm offset zeroed; a file
    left without units is never created."""
    out = {}
    for f in sorted((store / "consumequeue").rglob("*")):
        if not f.is_file():
            continue
        u = units(f).copy()
        u[u["phy"] + u["size"].astype(np.int64) > confirm] = np.zeros(1, CQ_DTYPE)
        if u["size"].any():
            out[str(f.relative_to(store))] = u.tobytes()
    return out


def index_entries(index_dir: Path) -> list[int]:
    """phyOffset of every index entry, file by file in name order."""
    out = []
    for f in sorted(index_dir.iterdir()):
        data = f.read_bytes()
        h = IndexHeader.from_bytes(data[:HEADER_SIZE]).as_loaded()
        at = HEADER_SIZE + SLOTS * 4 + ENTRY_DTYPE.itemsize
        out += np.frombuffer(data, ENTRY_DTYPE, count=h.index_count - 1, offset=at)["phy"].tolist()
    return out


def test_rebuild_of_a_controller_store_stops_at_its_confirm_offset(spark, controller_store, tmp_path, capsys):
    from jobs.rebuild import main as rebuild_main

    store, confirm, straddling = controller_store
    out = tmp_path / "out"
    assert rebuild_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
                         "--split-size", "65536", "--json"]) == 0
    want = expected_consume_queues(store, confirm)
    got = consume_queue_hashes(out)
    assert got == {k: hashlib.sha256(v).hexdigest() for k, v in want.items()}
    golden_phys = index_entries(store / "index")
    assert index_entries(out / "index") == [p for p in golden_phys if p < straddling]
    d = report(out)["dispatch"]
    assert (d["confirm_offset"], d["first_record_not_dispatched"]) == (confirm, straddling)
    assert "allAckInSyncStateSet" in capsys.readouterr().err


def test_verify_of_a_controller_store_reports_entries_past_the_confirm_offset(spark, controller_store, tmp_path):
    """The golden files were dispatched to the end: past the confirm offset the broker would not have them."""
    from jobs.verify import main as verify_main

    store, confirm, straddling = controller_store
    rep = tmp_path / "r.json"
    assert verify_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--report", str(rep),
                        "--work-dir", str(tmp_path / "w")]) == 1
    r = json.loads(rep.read_text())
    assert r["dispatch"]["confirm_offset"] == confirm and r["findings_total"] > 0
    assert sha256(store / "checkpoint") != sha256(GOLDEN / BASE / "checkpoint")  # the store made for the test


def test_recover_dry_run_says_how_far_dispatch_goes(spark, tmp_path, capsys):
    """The plan (JSON and the summary for people) gives the confirm offset, why, and the confirm offset after."""
    from jobs.recover import main as recover_main

    case = "v5-controller-unclean-11"
    plan_file = tmp_path / "plan.json"
    assert recover_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--dry-run", "--plan", str(plan_file)]) == 0
    text = capsys.readouterr().out
    plan = json.loads(plan_file.read_text())
    c = json.loads((GOLDEN / case / "manifest.json").read_text())["controller"]
    d = plan["dispatch"]
    assert (d["confirm_offset"], d["first_record_not_dispatched"], d["records_not_dispatched"]) == \
        (c["checkpoint_confirmPhyOffset"], c["record_straddling_confirm"]["offset"], c["records_beyond_confirm"])
    straddling = c["record_straddling_confirm"]["offset"]
    assert plan["checkpoint"]["after"]["confirm_phy_offset"] == straddling
    assert f"dispatch stops at the confirm offset {c['checkpoint_confirmPhyOffset']}" in text
    assert f"confirmPhyOffset     {c['checkpoint_confirmPhyOffset']} -> {straddling}" in text


def test_recover_keeps_the_epoch_file(spark, tmp_path):
    """5.3.3's load and recovery never touch epochFileCheckpoint (only a later role change truncates it):
    recover --out carries it and its .bak over byte for byte."""
    from jobs.recover import main as recover_main

    case = "v5-controller-unclean-cqahead-11"
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / case, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    entries = b"1-0\n2-1290988\n"  # EpochFileCache (CheckpointFile): count, CRC32 & 0x7FFFFFFF, epoch-startOffset
    epoch = b"2\n%d\n" % (zlib.crc32(entries) & 0x7FFFFFFF) + entries
    (store / "epochFileCheckpoint").write_bytes(epoch)
    (store / "epochFileCheckpoint.bak").write_bytes(b"1\n1-0\n")
    out = tmp_path / "out"
    assert recover_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
                         "--json"]) == 0
    assert (out / "epochFileCheckpoint").read_bytes() == epoch
    assert (out / "epochFileCheckpoint.bak").read_bytes() == b"1\n1-0\n"
    assert sha256(out / "checkpoint") == json.loads((GOLDEN / f"{case}-recovered" / "manifest.json").read_text())[
        "files"]["checkpoint"]["sha256"]
