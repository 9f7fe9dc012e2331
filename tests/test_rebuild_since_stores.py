"""`rebuild --since OUT1` where OUT1 is a `recover --out` or a `convert` OUT: a store the broker is
started on. OUT2 continues OUT1's files as the broker does once it runs on OUT1: for RocketMQ's own recovered stores
(nothing new since) it equals them byte for byte, quirks kept; over a grown store it equals a full rebuild. What
cannot be continued is refused by name, in one line: a recovery that left the broker something --since cannot
reproduce, a DLedger store recovered, an OUT1 a broker has opened or is running on, --in-place on a store."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from jobs.convert import main as convert_main
from jobs.rebuild import main as rebuild_main
from jobs.recover import main as recover_main
from storegen.synth import StoreSpec, write_bench_store
from tests.conftest import GOLDEN, restored_copy
from tests.hostile import tree_digest
from tests.rebuild_helpers import consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes, index_hashes
from tests.helpers import lock_held, rebuild_refused

SPEC = StoreSpec(messages=20000, segment_size=1 << 20, consume_queue_file_size=6000, max_hash_slot_num=64,
                 max_index_num=2000)


def recovered(case: str, tmp_path: Path) -> Path:
    """`recover --out` of a writable copy of the golden case: the store the broker is started on afterwards."""
    store = restored_copy(case, tmp_path / "crashed")
    assert recover_main(["--store", str(store), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--out", str(tmp_path / "recovered"), "--json"]) == 0
    return tmp_path / "recovered"


def since(store: Path, conf: Path, out: Path, out1: Path, *extra: str) -> list[str]:
    return ["--store", str(store), "--broker-config", str(conf), "--out", str(out), "--since", str(out1), *extra]


# 4.9.8 plain; 4.9.8 LMQ (its abnormal recovery gave 600 schedule units the TAGS hash, not the delivery time: OUT1's
# units are kept, compared by offset and size); 5.3.3 plain and LMQ
@pytest.mark.parametrize("case", ["unclean-11", "lmq-unclean-11", "v5-unclean-11", "v5-lmq-unclean-11"])
def test_since_a_recovered_store_equals_what_rocketmq_made_of_it(case, spark, tmp_path):
    """The recovered store continued with nothing new: consume queues and index files sha256-equal to RocketMQ's
    own `-recovered` store (started, dispatched, shut down), index names those recover gave; OUT1 untouched."""
    out1 = recovered(case, tmp_path)
    before = tree_digest(out1)
    assert rebuild_main(since(out1, GOLDEN / case / "broker.conf", tmp_path / "out2", out1, "--json")) == 0
    assert consume_queue_hashes(tmp_path / "out2") == golden_consume_queue_hashes(f"{case}-recovered")
    assert index_hashes(tmp_path / "out2") == golden_index_hashes(f"{case}-recovered")
    assert sorted(p.name for p in (tmp_path / "out2/index").iterdir()) == \
        sorted(p.name for p in (out1 / "index").iterdir())
    assert tree_digest(out1) == before
    r = json.loads((tmp_path / "out2/reput-report.json").read_text())
    made = json.loads((out1 / "reput-recover-report.json").read_text())
    assert r["since"]["built_to_before"] == made["built_to"]["offset"] == made["truncation"]["offset"]


def test_since_a_recovered_earlier_store_equals_a_full_rebuild_of_the_grown_one(spark, tmp_path):
    """A whole store (its rebuilt queues, index and checkpoint in place) with an abort file, recovered, then grown
    by half: OUT2 equals a full rebuild of the grown store, file for file."""
    for n in (20000, 30000):
        write_bench_store(tmp_path / f"s{n}", dataclasses.replace(SPEC, messages=n))
    conf = tmp_path / "s30000/broker.conf"
    assert rebuild_main(["--store", str(tmp_path / "s20000"), "--broker-config", str(conf),
                         "--out", str(tmp_path / "b"), "--json"]) == 0
    for part in ("consumequeue", "index"):
        (tmp_path / "b" / part).rename(tmp_path / "s20000" / part)
    (tmp_path / "s20000/abort").write_bytes(b"")
    assert recover_main(["--store", str(tmp_path / "s20000"), "--broker-config", str(conf),
                         "--out", str(tmp_path / "r1"), "--json"]) == 0
    assert rebuild_main(since(tmp_path / "s30000", conf, tmp_path / "out2", tmp_path / "r1", "--json")) == 0
    assert rebuild_main(["--store", str(tmp_path / "s30000"), "--broker-config", str(conf),
                         "--out", str(tmp_path / "full"), "--json"]) == 0
    assert consume_queue_hashes(tmp_path / "out2") == consume_queue_hashes(tmp_path / "full")
    assert index_hashes(tmp_path / "out2") == index_hashes(tmp_path / "full")
    # the recovery named the index files it made by the time it made them, as the broker does; the files --since
    # rolls are named by rebuild's rule, after them
    out1, names = sorted(p.name for p in (tmp_path / "r1/index").iterdir()), \
        sorted(p.name for p in (tmp_path / "out2/index").iterdir())
    assert names[:len(out1)] == out1 and len(names) > len(out1) > 1


def test_since_a_converted_store_equals_a_full_rebuild_and_the_later_convert(spark, tmp_path):
    """DLedger stores of 20,000 and 30,000 messages (prefix-stable) converted: --since the first convert's OUT over
    the second equals a full rebuild of it and the second convert's own consume queues and index files."""
    for n in (20000, 30000):
        write_bench_store(tmp_path / f"d{n}", dataclasses.replace(SPEC, messages=n, dledger=True))
        assert convert_main(["--store", str(tmp_path / f"d{n}"), "--broker-config", str(tmp_path / f"d{n}/broker.conf"),
                             "--out", str(tmp_path / f"c{n}"), "--json"]) == 0
    conf = tmp_path / "c30000/reput-broker.conf"
    assert rebuild_main(since(tmp_path / "c30000", conf, tmp_path / "out2", tmp_path / "c20000", "--json")) == 0
    assert rebuild_main(["--store", str(tmp_path / "c30000"), "--broker-config", str(conf),
                         "--out", str(tmp_path / "full"), "--json"]) == 0
    full, out2, made = (tree_digest(tmp_path / d) for d in ("full", "out2", "c30000"))
    full.pop("reput-report.json"), out2.pop("reput-report.json")
    assert out2 == full and all(made[k] == v for k, v in out2.items())
    assert sum(k.startswith("index/") for k in out2) > 1 and sum(k.startswith("consumequeue/") for k in out2) > 100


@pytest.mark.parametrize("case,words", [
    ("v5-controller-unclean-11", ("104 records from commit-log offset 3811015", "never dispatches")),
    ("unclean-torn-11", ("cut 1 consume queue (e.g. Pay-Events/0)", "overwrites")),
    ("dledger-unclean-11", ("DLedger-mode store",))])
def test_a_recovery_that_cannot_be_continued_is_refused_by_name(case, words, spark, tmp_path, capfd):
    """Recoveries whose result --since cannot reproduce: 5.x controller mode leaving records the broker never
    dispatches, a cut queue with units left past the truncation point, a DLedger store (its data files' tail
    rewritten, keys left unindexed): the recover report says why, --since refuses with it."""
    out1 = recovered(case, tmp_path)
    made = json.loads((out1 / "reput-recover-report.json").read_text())
    assert made["built_to"] is None and all(w in made["built_to_not_continuable"] for w in words)
    out2 = tmp_path / "out2"
    rebuild_refused(since(out1, GOLDEN / case / "broker.conf", out2, out1), capfd, out2, "cannot be continued", *words,
             "run one full rebuild")


def test_a_recovered_store_a_broker_opened_or_runs_on_is_refused(spark, tmp_path, capfd):
    """A recover OUT the broker was started on moves on past its report: refused while a broker holds its lock, once
    it left an abort file or rewrote the checkpoint, or an index file holds entries past OUT1's end; --in-place on a
    recover OUT (a store) is refused too."""
    case = "unclean-11"
    out1 = recovered(case, tmp_path)
    conf, out2 = GOLDEN / case / "broker.conf", tmp_path / "out2"
    live = tmp_path / "live"  # the store the broker runs on, OUT1 kept as reput wrote it
    shutil.copytree(out1, live)
    rebuild_refused(since(live, conf, out2, out1)[:4] + ["--since", str(out1), "--in-place", "--backup-dir",
                                                  str(tmp_path / "bak")], capfd, out2, "--in-place", "recover OUT")
    with lock_held(out1 / "lock"):
        rebuild_refused(since(out1, conf, out2, out1), capfd, out2, "a broker is running on it")
    for name, edit, words in (
            ("abort", lambda d: (d / "abort").write_bytes(b""), ("its abort file",)),
            ("checkpoint", lambda d: (d / "checkpoint").write_bytes(b"\1" + (d / "checkpoint").read_bytes()[1:]),
             ("checkpoint differs from the one reput wrote",)),
            ("index", lambda d: _index_end_past(d), ("at byte offset 24", "indexed on since"))):
        bad = tmp_path / name
        shutil.copytree(out1, bad)
        edit(bad)
        rebuild_refused(since(bad, conf, out2, bad), capfd, out2, *words)


def _index_end_past(store: Path) -> None:
    """One key put into the last index file for a record past everything, as a broker indexing on puts it (its entry
    at position indexCount, the count, endPhyOffset and hashSlotCount moved on, the header still agreeing with the
    entries), its mtime kept: past the record of OUT1's files (io.out_files), to the check of what the index holds."""
    from storage_format.index_build import time_diff
    from storage_format.index_file import HEADER_SIZE, IndexHeader
    from storage_format.settings import load_settings

    last = max((store / "index").iterdir())
    layout = load_settings(store / "broker.conf").index_layout
    was = last.stat()
    with open(last, "r+b") as f:
        h = IndexHeader.from_bytes(f.read(HEADER_SIZE))
        f.seek(layout.entry_at(h.index_count))
        f.write(struct.pack(">iqii", 7, 1 << 40, time_diff(h.end_timestamp, h.begin_timestamp), 0))
        f.seek(0)
        f.write(dataclasses.replace(h, end_phy_offset=1 << 40, index_count=h.index_count + 1,
                        hash_slot_count=h.hash_slot_count + 1).to_bytes())
    os.utime(last, ns=(was.st_atime_ns, was.st_mtime_ns))
