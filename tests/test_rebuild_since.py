"""`rebuild --since OUT1`: OUT2 equals a full rebuild of the grown store, byte for byte; once the head
expired, the golden files less what the broker's clean service deletes; OUT1 is never modified; and every wrong OUT1
is one line, exit 2, nothing written."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from jobs.rebuild import main as rebuild_main
from tests.conftest import GOLDEN
from tests.golden_walk import records, records_in
from tests.hostile import tree_digest
from tests.helpers import rebuild_refused, signalled_at_hook
from tests.rebuild_helpers import (consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes, grown,
                                   index_hashes, rebuild_store, report, since_argv)
from storegen.earlier import expire_head
from tests.since_helpers import cut_offset, earlier_store, index_files_expired, queue_files_after_clean


# plain 4.x, 5.x LMQ (queues placed out of step: continued from OUT1's write position), 5.x controller mode (a
# dispatch limit), and a medium store (hundreds of index files, rolls)
CASES = [("clean-small-11", 0.7), ("v5-lmq-clean-small-11", 0.5), ("v5-controller-clean-small-11", 0.6),
         ("clean-medium-11", 0.37)]


@pytest.mark.parametrize("case,fraction", CASES)
def test_since_equals_the_golden_store(case, fraction, spark, tmp_path):
    """Consume queues sha256-equal to the golden files, index files equal in name order, and the names those of a
    full rebuild; OUT1 untouched; the report says what was decoded and reused, and where OUT2 was built to."""
    out1, store = grown(case, tmp_path, fraction)
    before = tree_digest(out1)
    assert rebuild_store(case, store, tmp_path / "out2", "--since", str(out1)) == 0
    assert consume_queue_hashes(tmp_path / "out2") == golden_consume_queue_hashes(case)
    assert index_hashes(tmp_path / "out2") == golden_index_hashes(case)
    assert rebuild_store(case, store, tmp_path / "full") == 0
    assert sorted(p.name for p in (tmp_path / "out2/index").iterdir()) == \
        sorted(p.name for p in (tmp_path / "full/index").iterdir())
    assert tree_digest(out1) == before
    r, full = report(tmp_path / "out2"), report(tmp_path / "full")
    assert r["built_to"] == full["built_to"] and r["index_files"] == full["index_files"]
    s = r["since"]
    assert s["built_to_before"] == report(out1)["built_to"]["offset"] and s["decoded_from"] <= s["built_to_before"]
    assert s["bytes_decoded"] < full["bytes_read"] and s["bytes_reused"] > 0


@pytest.mark.parametrize("shape", ["dledger", "lmq", "transactions"])
def test_since_on_a_grown_synthetic_store_equals_a_full_rebuild(shape, spark, tmp_path):
    """storegen's synthetic stores are prefix-stable (the first 20,000 messages of a 30,000-message store are the
    20,000-message store's bytes): a DLedger store (its data files and committed position), a 4.x LMQ store
    (multi-dispatch units) and one sent in transactions (half records, COMMITs) grown by half since OUT1; OUT2 equals
    a full rebuild of the grown store, file for file."""
    import dataclasses

    from storegen.synth import StoreSpec, write_bench_store

    extra = {"dledger": dict(dledger=True), "lmq": dict(lmq_share=0.3, lmq_queues=50),
             "transactions": dict(transaction_share=0.3)}[shape]
    spec = StoreSpec(messages=20000, segment_size=1 << 20, consume_queue_file_size=6000, max_hash_slot_num=64,
                     max_index_num=2000, **extra)
    for n in (20000, 30000):
        write_bench_store(tmp_path / f"s{n}", dataclasses.replace(spec, messages=n))

    def run(store: str, out: str, *extra_args: str) -> int:
        return rebuild_main(["--store", str(tmp_path / store), "--broker-config", str(tmp_path / store / "broker.conf"),
                             "--out", str(tmp_path / out), "--json", *extra_args])
    assert run("s20000", "out1") == 0 and run("s30000", "full") == 0
    assert run("s30000", "out2", "--since", str(tmp_path / "out1")) == 0
    full, out2 = tree_digest(tmp_path / "full"), tree_digest(tmp_path / "out2")
    full.pop("reput-report.json"), out2.pop("reput-report.json")
    assert out2 == full and len(full) > 100


def test_since_continues_a_since_output(spark, tmp_path):
    """Night after night: OUT3 --since OUT2 --since OUT1 equals the golden store; a night with nothing new equals
    the night before (the files the last segment reaches built again, the same bytes; the index only copied)."""
    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.3)
    mid = earlier_store(case, tmp_path / "s2", cut_offset(case, 0.8))
    assert rebuild_store(case, mid, tmp_path / "out2", "--since", str(out1)) == 0
    assert rebuild_store(case, mid, tmp_path / "again", "--since", str(tmp_path / "out2")) == 0
    assert tree_digest(tmp_path / "again") | {"reput-report.json": ""} == \
        tree_digest(tmp_path / "out2") | {"reput-report.json": ""}
    quiet_night = report(tmp_path / "again")["since"]
    assert quiet_night["index_files_written"] == [] and quiet_night["index_keys_added"] == 0
    assert rebuild_store(case, store, tmp_path / "out3", "--since", str(tmp_path / "out2")) == 0
    assert consume_queue_hashes(tmp_path / "out3") == golden_consume_queue_hashes(case)
    assert index_hashes(tmp_path / "out3") == golden_index_hashes(case)


@pytest.mark.parametrize("expired", [3, 40])
def test_since_after_the_head_expired_keeps_what_the_clean_service_keeps(expired, spark, tmp_path, capsys):
    """The store lost its oldest segments since OUT1: OUT2 holds the golden consume-queue files less those whose
    every unit points below the commit log's min offset (each queue's last file kept), and the golden index files
    less the leading ones whose endPhyOffset is below it (read from the golden files, not through reput)."""
    case = "clean-medium-11"
    out1, store = grown(case, tmp_path, 0.6)
    min_offset = expire_head(store, expired)
    assert rebuild_store(case, store, tmp_path / "out2", "--since", str(out1)) == 0
    assert f"head expired since OUT1 (its min offset is now {min_offset})" in capsys.readouterr().err
    kept = queue_files_after_clean(case, min_offset)
    golden = golden_consume_queue_hashes(case)
    assert consume_queue_hashes(tmp_path / "out2") == {k: v for k, v in golden.items() if k in kept}
    assert len(kept) < len(golden)
    gone = index_files_expired(case, min_offset)
    assert gone > 0 and index_hashes(tmp_path / "out2") == golden_index_hashes(case)[gone:]
    s = report(tmp_path / "out2")["since"]
    assert s["commitlog_min_offset"] == min_offset and len(s["expired"]["index_files"]) == gone
    assert s["expired"]["consumequeue_files"] == len(golden) - len(kept)


def test_wrong_out1s_are_refused(spark, tmp_path, capfd):
    """OUT1 of another store, a store recovered since OUT1 (the bytes before its end differ), a damaged, missing or
    newer report, a partial OUT1, other settings, OUT1 as OUT2: one line, exit 2, nothing written, OUT1 intact."""
    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    before = tree_digest(out1)
    out2 = tmp_path / "out2"
    other = tmp_path / "other"
    assert rebuild_store("clean-medium-11", GOLDEN / "clean-medium-11", other) == 0
    rebuild_refused(since_argv(case, store, out2, other), capfd, out2, "the store no longer holds what it was built from")
    # recovered since: truncated at the start of OUT1's last record (zeros from there, as recovery leaves them)
    last = max(r.physical_offset for r in records(case) if r.physical_offset < report(out1)["built_to"]["offset"])
    recovered = earlier_store(case, tmp_path / "recovered", last)
    rebuild_refused(since_argv(case, recovered, out2, out1), capfd, out2, "byte offset", "recovered or replaced")
    rebuild_refused(since_argv(case, store, out2, out1, "--only", "index"), capfd, out2, "--since and --only")
    rebuild_refused(since_argv(case, store, out1, out1), capfd, out1 / "nothing", "must be outside --since")
    rebuild_refused(since_argv(case, store, out1 / "inside", out1), capfd, out1 / "inside", "must be outside --since")
    conf = tmp_path / "broker.conf"
    conf.write_text((GOLDEN / case / "broker.conf").read_text() + "\nduplicationEnable=true\n")
    rebuild_refused(since_argv(case, store, out2, out1)[:2] + ["--broker-config", str(conf)] + since_argv(case, store, out2, out1)[4:],
             capfd, out2, "duplicationEnable False then, True now")
    base = (GOLDEN / case / "broker.conf").read_text()
    levels = base.split("messageDelayLevel=")[1].splitlines()[0]
    with_conf = since_argv(case, store, out2, out1)[:2] + ["--broker-config", str(conf)] \
        + since_argv(case, store, out2, out1)[4:]
    conf.write_text(base + f"\nmessageDelayLevel={levels.replace('1s', '2s', 1)}\n")
    rebuild_refused(with_conf, capfd, out2, "messageDelayLevel '1s ", "then, '2s ")  # schedule units' delivery times
    conf.write_text(base + f"\nmessageDelayLevel={levels}  \n")
    assert rebuild_main(with_conf) == 0  # the same levels (trailing blanks dropped)
    shutil.rmtree(out2)
    assert tree_digest(out1) == before
    for name, edit, words in (
            ("damaged", lambda t: t[:len(t) // 2], ("reput-report.json: byte offset", "not JSON")),
            ("newer", lambda t: json.dumps({**json.loads(t), "report_version": 99}), ("newer reput", "99")),
            ("partial", lambda t: json.dumps({**json.loads(t), "only": "index"}), ("partial rebuild",)),
            ("no built_to", lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "built_to"}),
             ("no built_to",))):
        bad = tmp_path / name.replace(" ", "-")
        shutil.copytree(out1, bad)
        (bad / "reput-report.json").write_text(edit((out1 / "reput-report.json").read_text()))
        rebuild_refused(since_argv(case, store, out2, bad), capfd, out2, *words)
    missing = tmp_path / "missing"
    shutil.copytree(out1, missing)
    (missing / "reput-report.json").unlink()
    rebuild_refused(since_argv(case, store, out2, missing), capfd, out2, "no reput-report.json")


def test_an_out1_queue_file_changed_since_is_named(spark, tmp_path, capfd):
    """A unit of OUT1 that the commit log no longer gives (OUT1 damaged where the new scan overlaps it, its mtime
    kept, as bit rot keeps it): refused naming OUT1's file and the unit's byte offset, nothing written."""
    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    r = report(out1)
    decoded_from = max(int(p.name) for p in (store / "commitlog").iterdir() if int(p.name) < r["built_to"]["offset"])
    victim, at = None, None
    for f in sorted((out1 / "consumequeue").rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            for i in range(0, len(data), 20):
                phy = int.from_bytes(data[i:i + 8], "big", signed=True)
                if decoded_from <= phy < r["built_to"]["offset"] and int.from_bytes(data[i + 8:i + 12], "big") > 0:
                    victim, at = f, i
    assert victim is not None
    data = bytearray(victim.read_bytes())
    data[at + 19] ^= 1  # the tags code's last byte
    was = victim.stat()
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(was.st_atime_ns, was.st_mtime_ns))  # past the record of OUT1's files (io.out_files)
    out2 = tmp_path / "out2"
    rebuild_refused(since_argv(case, store, out2, out1), capfd, out2, f"{victim.name} at byte offset {at}", "full rebuild")


@pytest.mark.parametrize("byte, field", [(39, "indexCount"), (31, "endPhyOffset")])
def test_a_flipped_byte_in_the_header_of_out1s_last_index_file_is_named(byte, field, spark, tmp_path, capfd):
    """One bit of the header of the index file --since continues flipped, its mtime kept (bit rot): it carried on
    into every later index file and their names, exit 0. Refused naming the file and the field's byte offset."""
    from storage_format.index_file import HEADER_FIELD_OFFSETS

    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    last = max((f for f in (out1 / "index").iterdir() if f.name.isdigit()), key=lambda f: f.name)
    data = bytearray(last.read_bytes())
    data[byte] ^= 1 if field == "endPhyOffset" else 0xC0
    was = last.stat()
    last.write_bytes(bytes(data))
    os.utime(last, ns=(was.st_atime_ns, was.st_mtime_ns))  # past the record of OUT1's files (io.out_files)
    out2 = tmp_path / "out2"
    rebuild_refused(since_argv(case, store, out2, out1), capfd, out2,
                    f"{last.name} at byte offset {HEADER_FIELD_OFFSETS[field]}: {field} ", "full rebuild")


def test_since_waits_for_no_in_place_run_on_out1(spark, tmp_path, capfd):
    """An --in-place run holds OUT1 (its lock beside OUT1): a plain --since OUT1 --out OUT2 started meanwhile is
    refused naming that run, before it reads OUT1 (it read OUT1 half switched and blamed a broker)."""
    from jobs.pipeline.io.run_lock import RunLock, beside

    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    out2 = tmp_path / "out2"
    with RunLock(beside(out1.resolve()), "rebuild", str(out1.resolve())):
        rebuild_refused(since_argv(case, store, out2, out1), capfd, out2, "is being written by reput rebuild",
                        f"pid {os.getpid()}")
    assert rebuild_main(since_argv(case, store, out2, out1)) == 0


def test_a_night_missed_past_expiry_is_named_as_such(spark, tmp_path, capfd):
    """The store's head expired past OUT1's end (nights missed past fileReservedTime): refused saying OUT1's end
    expired and where the log now starts (it blamed a recovered or replaced store)."""
    from tests.since_helpers import expire

    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.3)
    end = report(out1)["built_to"]["offset"]
    starts = sorted(int(p.name) for p in (store / "commitlog").iterdir())
    first = expire(case, store, sum(1 for s in starts if s < end))
    assert first >= end
    out2 = tmp_path / "out2"
    rebuild_refused(since_argv(case, store, out2, out1), capfd, out2,
                    f"OUT1's end (commit-log offset {end}, in ", f"has expired from the store: its commit log now "
                    f"starts at {first}", "full rebuild")


def test_the_nightly_demo_stores_are_one_store_a_day_apart(tmp_path):
    """storegen.earlier (make nightly-demo, the bench's nightly stage): last night's log is tonight's up to a record
    boundary 7/8 of the way through, zeros after it in its segment; tonight's lost its oldest segment."""
    from storegen.earlier import main as earlier_main

    assert earlier_main([str(tmp_path / "n"), "--messages", "2000"]) == 0
    tonight, last = tmp_path / "n/store/commitlog", tmp_path / "n/last-night/commitlog"
    kept = sorted(p.name for p in tonight.iterdir())
    before = sorted(p.name for p in last.iterdir())
    assert before[0] == "0" * 20 and before[0] not in kept and set(before[1:]) <= set(kept)
    cut_seg = before[-1]
    data, whole = (last / cut_seg).read_bytes(), (tonight / cut_seg).read_bytes()
    starts = [r.physical_offset - int(cut_seg) for r in records_in(tmp_path / "n/store")
              if 0 <= r.physical_offset - int(cut_seg) < len(whole)]
    cuts = [c for c in starts if data[:c] == whole[:c] and not data[c:].strip(b"\0")]
    assert len(data) == len(whole) and cuts and cuts[0] > 0  # the first record kept whole, the rest zeros



def test_ctrl_c_during_since_publishes_nothing_and_leaves_out1(spark, tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole process group) while a --since build task runs: exit 130, one line,
    no OUT2 nor its staging directory, no process left, OUT1 byte-identical; the same run again publishes OUT2."""
    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    before = tree_digest(out1)
    (tmp_path / "o").mkdir()
    out2 = tmp_path / "o" / "out2"
    run = signalled_at_hook("rebuild", [*since_argv(case, store, out2, out1), "--master", "local[2]", "--quiet"],
                            "in-build-task", tmp_path / "paused")
    lines = [ln for ln in run.stderr.splitlines() if not ln.startswith("reput test hook:")]
    assert run.returncode == 130 and lines[-1:] == ["reput rebuild: interrupted; nothing published"], run.stderr
    assert "Traceback" not in run.stderr and os.listdir(tmp_path / "o") == []
    assert run.group_gone and tree_digest(out1) == before
    assert rebuild_store(case, store, out2, "--since", str(out1)) == 0
    assert consume_queue_hashes(out2) == golden_consume_queue_hashes(case)


def test_since_reading_out1_files_a_few_units_at_a_time_equals_the_golden_store(spark, tmp_path, monkeypatch):
    """OUT1's consume-queue files read from the end back a few units at a time (outputs.continued.STEP made 2 units:
    the placer's tail grows four times over and over, the join reads from the overlap on, and each file's head is
    copied by copy_file_range, as for the production sizes of files far larger than a step): the golden files."""
    import jobs.pipeline.outputs.continued as continued

    monkeypatch.setattr(continued, "STEP", 40)
    case = "clean-small-11"
    out1, store = grown(case, tmp_path, 0.7)
    assert rebuild_store(case, store, tmp_path / "out2", "--since", str(out1), "--engine", "local") == 0
    assert consume_queue_hashes(tmp_path / "out2") == golden_consume_queue_hashes(case)
    assert index_hashes(tmp_path / "out2") == golden_index_hashes(case)
    prefixes = report(tmp_path / "out2")["since"]["consumequeue_prefixes"]
    assert prefixes["copy_file_range"]["files"] > 0, prefixes
