"""DLedger-mode recovery (issue 20 item 3): the broker's rules as pure functions, planned from facts gathered here
without Spark and compared byte for byte with what RocketMQ 4.9.8 + DLedger 0.3.1.2 made of `dledger-unclean-11`
(`dledger-unclean-11-recovered`); DLedger's recovery walk on damaged data (its stop rules, the index rewrite);
then `jobs.recover` end to end (OUT, a second run, --full-index, --dry-run, in place with rollback, refusals).
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from storage_format import dledger as fmt
from storage_format import recovery as R
from storage_format.checkpoint import checkpoint_bytes, parse_checkpoint
from storage_format.index_file import HEADER_SIZE, IndexHeader, empty_file_index_count
from storage_format.index_build import build_index_file
from storage_format.recovery import dledger as D
from storage_format.commitlog import decode_buffer
from storage_format.consume_queue import has_cq_entry, tags_codes
from storage_format.index_keys import index_keys
from storage_format.properties import TAGS
from storage_format.settings import load_settings

from .conftest import GOLDEN, manifest, restored_copy
from .hostile import DLEDGER_BUILDERS

CASE, RECOVERED = "dledger-unclean-11", "dledger-unclean-11-recovered"
HOME = "dledger-n0"
FILE = 262144  # mappedFileSizeCommitLog of the golden DLedger stores


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def readers(store: Path):
    """(data starts, read range, index starts, read unit) over a store's DLedger files (zeros past a cut file)."""
    data_dir, index_dir = store / HOME / "data", store / HOME / "index"
    data = sorted(int(p.name) for p in data_dir.iterdir())
    index = sorted(int(p.name) for p in index_dir.iterdir()) if index_dir.is_dir() else []

    def read(start: int, pos: int, n: int) -> bytes:
        with open(data_dir / f"{start:020d}", "rb") as fh:
            fh.seek(pos)
            return fh.read(n)

    def unit(start: int, pos: int, n: int = fmt.INDEX_UNIT_SIZE) -> bytes:
        with open(index_dir / f"{start:020d}", "rb") as fh:
            fh.seek(pos)
            return fh.read(n)
    return data, read, index, unit


# ---------------------------------------------------------------------------------------------
# the pure plan on the golden crash, facts gathered without Spark


def decode(read, data: list[int], lo: int, hi: int, settings):
    """Records of [lo, hi) decoded with the read path's reference walk over DLedger entries (no Spark): per queue
    (queue offset, phy, size, tagsCode), index keys, the last consume-queue record (offset, store time)."""
    queues, keys, last_cq = {}, [], None
    for s in data:
        a, b = max(lo, s), min(hi, s + FILE)
        if a >= b:
            continue
        chunk = decode_buffer(read(s, a - s, b - a), a, header=fmt.ENTRY_HEADER_SIZE, path=f"{s:020d}")
        cols = chunk.columns
        if not len(cols):
            continue
        ts = cols.store_timestamp.astype(np.int64)
        tags = tags_codes(cols.property_binary(TAGS), cols.topic, cols.delay_level, ts, settings.delay_levels_ms)
        cq = np.flatnonzero(has_cq_entry(cols.sys_flag))
        names = cols.topic.to_pylist()
        for r in cq.tolist():
            queues.setdefault((names[r], int(cols.queue_id[r])), []).append(
                (int(cols.queue_offset[r]), int(cols.physical_offset[r]), int(cols.total_size[r]), int(tags[r])))
        if len(cq):
            last_cq = (int(cols.physical_offset[cq[-1]]), int(ts[cq[-1]]))
        k = index_keys(cols)
        keys.append(R.KeyBatch(k.key_hash.astype(np.int32), k.phy.astype(np.int64), k.store_ts.astype(np.int64)))
    entries = {key: R.QueueEntries(*(np.asarray(c, dtype=t) for c, t in zip(zip(*rows), ("i8", "i8", "i4", "i8"))))
               for key, rows in queues.items()}
    return entries, R.KeyBatch.concat(keys), last_cq


def gather(store: Path):
    """The facts of `plan_dledger` read straight from a local store (the Spark stage's job, done here by hand)."""
    settings = load_settings(GOLDEN / CASE / "broker.conf")
    data, read, index, unit = readers(store)
    entries = D.walk_entries(data, FILE, read, index, unit)
    cq_root = store / "consumequeue"
    size = settings.consume_queue_file_size
    loads = {}
    for t in sorted(cq_root.iterdir()):
        for q in sorted(t.iterdir()):
            files = sorted(int(f.name) for f in q.iterdir())
            ld = R.load_queue(t.name, int(q.name), files, lambda s, q=q: (q / f"{s:020d}").read_bytes(), size)
            loads[ld.key] = ld

    def read_cq(key, start):
        return (cq_root / key[0] / str(key[1]) / f"{start:020d}").read_bytes()

    bare = R.QueueFacts(loads, {}, size, read_cq)
    reput = D.dledger_reput_from({k: v.max_phy for k, v in loads.items()}, D.queues_after_cut(bare, entries.write_end),
                                 data[0], entries.write_end)
    queues, keys, last_cq = decode(read, data, reput, entries.write_end, settings)
    tails = {k: e.take(e.phy + e.size > loads[k].max_phy if k in loads else slice(None)) for k, e in queues.items()}
    cp_raw = (store / "checkpoint").read_bytes()
    cp = parse_checkpoint(cp_raw)
    infos = [R.IndexFileInfo(p.name, IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]))
             for p in sorted((store / "index").iterdir())]
    kept, deleted = R.index_files_after_load(infos, cp, (store / "abort").exists())
    facts = D.DLedgerFacts(
        abort_present=(store / "abort").exists(), settings=settings, checkpoint=cp, log_starts=tuple(data),
        entries=entries, committed_index=entries.last_index, committed_end=entries.write_end, one_member=True,
        self_id="n0", currterm_raw=(store / HOME / "currterm").read_bytes(),
        queues=R.QueueFacts(loads, tails, size, read_cq), tail_from=reput,
        last_dispatched_record=entries.last_entry_pos + fmt.ENTRY_HEADER_SIZE,
        index=R.IndexResumeFacts(kept[-1] if kept else None, keys, settings.max_index_num),
        last_cq_record_ts=lambda off: last_cq[1] if last_cq is not None and last_cq[0] >= off else None,
        index_deleted=tuple(i.name for i in deleted))
    return facts, cp_raw, settings, read_cq, deleted


@pytest.fixture(scope="module")
def crash(tmp_path_factory) -> Path:
    return restored_copy(CASE, tmp_path_factory.mktemp("dledger") / "store")


def test_walk_finds_the_write_end_the_broker_found(crash):
    m = manifest(CASE)["dledger_scan"]
    data, read, index, unit = readers(crash)
    e = D.walk_entries(data, FILE, read, index, unit)
    assert e.write_end == m["write_end"] == 1685849
    assert e.last_index == m["last_entry_index"] and e.begin_index == m["first_entry_index"]
    assert e.walk_from == data[-3] and e.precheck[0]["passes"]
    assert e.stop.reason == D.STOP_SIZE0 and e.index_rewrite is None
    assert not e.data_files_deleted and not e.index_files_deleted


def test_plan_equals_the_brokers_recovery(crash):
    """The pure plan over hand-gathered facts renders exactly the files the broker wrote."""
    facts, cp_raw, settings, read_cq, deleted = gather(crash)
    plan = D.plan_dledger(facts)
    files = manifest(RECOVERED)["files"]
    assert plan.queues.reput_from == manifest(RECOVERED)["oracle_self_check"]["details"]["resume_offset"]
    assert not plan.queues.truncate_queues  # no queue reaches the write end
    rendered = {}
    for key, st in plan.queues.states.items():
        for f in st.changed_files():
            rendered[f"consumequeue/{key[0]}/{key[1]}/{f:020d}"] = R.render_queue_file(st, f, lambda s, k=key:
                                                                                        read_cq(k, s))
    assert sorted(rendered) == ["consumequeue/Pay-Events/1/00000000000000006000",
                                "consumequeue/TopicTest/3/00000000000000004000"]
    for rel, data in rendered.items():
        assert sha(data) == files[rel]["sha256"], rel
    assert sha(checkpoint_bytes(plan.checkpoint, 4, cp_raw)) == files["checkpoint"]["sha256"]
    for name, data in plan.dledger_files.items():
        assert sha(data) == files[f"{HOME}/{name}"]["sha256"], name
    # the index: the newest file goes (newer than the checkpoint), one new file holds the dispatched keys
    assert [f.name for f in deleted] == ["20261125204801296"]
    r = plan.index_resume
    assert r.appended is None and len(r.new_files) == 1
    t = r.new_files[0]
    k = t.all_keys()
    new = build_index_file(k.key_hash, k.phy, k.store_ts, settings.max_hash_slot_num, settings.max_index_num,
                           t.inherited, empty_file_index_count(4))
    assert sha(new) == files["index/20261125204803478"]["sha256"]
    # the records between the last kept file's end and the resume point are never indexed again
    assert any("not indexed again" in n for n in plan.notes)


def test_dledger_texts_round_trip():
    assert D.dledger_checkpoint_text(3595, 3595) == (GOLDEN / RECOVERED / HOME / "checkpoint").read_bytes()
    assert D.currterm_text("n0", 0) == (GOLDEN / RECOVERED / HOME / "currterm").read_bytes()
    assert fmt.parse_checkpoint(D.dledger_checkpoint_text(7, 9).decode()) == {"committedIndex": 7, "endIndex": 9}


# ---------------------------------------------------------------------------------------------
# DLedger's recovery walk on damaged data (synthetic logs written with the format module)


def entry(index: int, pos: int, body: int = 60, term: int = 0) -> bytes:
    """One DLedger entry (the body is filler: the walk never reads it)."""
    head = struct.pack(">iiqqqiiii", fmt.ENTRY_MAGIC, fmt.ENTRY_HEADER_SIZE + body, index, term, pos, 0, 0, 0, body)
    return head + bytes(body)


def log(files: int, per_file: int, size: int = 1024, body: int = 60) -> tuple[dict[int, bytearray], bytearray]:
    """Data files of `per_file` entries each (a blank ends every full file) and the matching index bytes."""
    data, idx, n = {}, bytearray(), 0
    for f in range(files):
        start = f * size
        buf = bytearray(size)
        at = 0
        for _ in range(per_file):
            e = entry(n, start + at, body)
            buf[at:at + len(e)] = e
            idx += fmt.index_unit(fmt.read_entry_header(e, 0))
            at += len(e)
            n += 1
        if f < files - 1:
            buf[at:at + 8] = struct.pack(">ii", fmt.BLANK_MAGIC, size - at)
        data[start] = buf
    return data, idx


def walk(data: dict[int, bytearray], idx: bytearray, size: int = 1024) -> D.EntryRecovery:
    index = bytes(idx).ljust(4096, b"\0")
    return D.walk_entries(sorted(data), size, lambda s, pos, n: bytes(data[s][pos:pos + n]),
                          [0] if idx is not None else [], lambda s, pos, n: index[pos:pos + n])


def test_walk_stops_at_a_torn_entry_and_deletes_later_files():
    data, idx = log(5, 6)  # 6 entries of 108 bytes per 1 KiB file
    torn = 3 * 1024 + 2 * 108  # file 3, third entry: its size no longer matches bodySize
    struct.pack_into(">i", data[3 * 1024], 2 * 108 + 4, 999)
    e = walk(data, idx)
    assert e.stop.reason == D.STOP_BAD_ENTRY and e.stop.offset == torn and "size 999" in e.stop.detail
    assert e.write_end == torn and e.last_index == 3 * 6 + 1
    assert e.data_files_deleted == (4 * 1024,)
    assert e.index_end == (3 * 6 + 2) * 32 and e.index_rewrite is None


@pytest.mark.parametrize("field,value,why", [(8, 99, "index 99 does not follow"), (24, 5, "pos 5 !="),
                                             (0, 7, "magic 7"), (16, -1, "term -1 <")])
def test_walk_stops_where_dledger_checks_fail(field, value, why):
    data, idx = log(3, 6)
    at = 2 * 108  # third entry of the last file
    struct.pack_into(">q" if field in (8, 16, 24) else ">i", data[2048], at + field, value)
    e = walk(data, idx)
    assert e.stop.offset == 2048 + at and why in e.stop.detail
    assert e.last_index == 2 * 6 + 1


def test_walk_rewrites_the_index_from_the_first_disagreeing_unit():
    data, idx = log(3, 6)
    bad = 8  # entry 8's unit says another size
    struct.pack_into(">i", idx, bad * 32 + 12, 1)
    e = walk(data, idx)
    rw = e.index_rewrite
    assert rw is not None and rw.from_index == bad and not rw.rebuilt and "size" in rw.reason
    good = bytes(log(3, 6)[1])
    assert rw.units == good[bad * 32:]  # every unit from there on, as DLedger appends them
    rendered = rw.render(0, bytes(idx).ljust(4096, b"\0"))
    assert rendered[:18 * 32] == good and len(rendered) == fmt.INDEX_FILE_SIZE


def test_walk_rebuilds_a_missing_index():
    data, _ = log(3, 6)
    e = D.walk_entries(sorted(data), 1024, lambda s, pos, n: bytes(data[s][pos:pos + n]), [], lambda s, pos, n: b"")
    rw = e.index_rewrite
    # the pre-check fails everywhere (no unit): the walk starts at the first file, index 0, and writes every unit
    assert e.walk_from == 0 and rw.from_index == 0 and not rw.rebuilt and rw.fresh_files == (0,)
    assert rw.units == bytes(log(3, 6)[1])


def test_precheck_walks_back_past_a_file_whose_first_entry_disagrees():
    data, idx = log(5, 6)
    struct.pack_into(">q", idx, (2 * 6) * 32 + 24, 77)  # the third-last file's first unit has another term
    e = walk(data, idx)
    assert [p["passes"] for p in e.precheck] == [False, True] and e.walk_from == 1024
    assert e.index_rewrite.from_index == 12  # the walk then rewrites from that unit on


def test_a_blank_ends_the_last_file():
    data, idx = log(2, 6)
    struct.pack_into(">ii", data[1024], 6 * 108, fmt.BLANK_MAGIC, 1024 - 6 * 108)
    e = walk(data, idx)
    assert e.stop.reason == D.STOP_BLANK_LAST and e.write_end == 2048


def test_the_broker_exits_when_the_end_is_far_before_the_last_file():
    data, idx = log(4, 6)
    data[1024][4:8] = struct.pack(">i", 0)  # file 1 now ends the data after its first entry... in the middle
    struct.pack_into(">i", data[1024], 0, fmt.ENTRY_MAGIC)
    struct.pack_into(">q", idx, 6 * 32 + 12, 0)  # and the pre-check of file 1 fails, so the walk starts at 0
    with pytest.raises(R.RecoveryError, match="processOffset is too small") as e:
        walk(data, idx)
    assert str(e.value).startswith("DLedger data file 00000000000000001024 byte 0: DLedger's recovery ends there (")


def test_files_that_are_not_adjacent_are_refused():
    data, idx = log(3, 6)
    data[5000] = data.pop(2048)
    with pytest.raises(R.RecoveryError, match="not adjacent"):
        walk(data, idx)


# ---------------------------------------------------------------------------------------------
# jobs.recover end to end (Spark)


SKIP = ("broker.conf", "manifest.json", "reput-recover-report.json", "reput-files.parquet")


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path (the golden's own extras and an OUT's record of its files
    left out)."""
    return {str(p.relative_to(root)): sha(p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in SKIP}


def assert_matches_recovered(out: Path) -> None:
    """OUT equals the broker's recovery: the DLedger member's files (data, full-length index, checkpoint and
    currterm with their .bak), consume queues, index files in name order, checkpoint; no abort; lock."""
    files = manifest(RECOVERED)["files"]
    got = tree(out)
    for prefix in (f"{HOME}/", "consumequeue/"):
        expect = {k: v["sha256"] for k, v in files.items() if k.startswith(prefix)}
        mine = {k: v for k, v in got.items() if k.startswith(prefix)}
        assert mine == expect, f"{prefix}: differs at {sorted(set(mine.items()) ^ set(expect.items()))[:3]}"
    assert [got[k] for k in sorted(k for k in got if k.startswith("index/"))] == \
        [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]
    assert got["checkpoint"] == files["checkpoint"]["sha256"]
    assert not (out / "abort").exists() and not (out / "commitlog").exists()
    assert (out / "lock").read_bytes() == b"lock"


def run_recover(*args: str) -> int:
    from jobs.recover import main

    return main(list(args))


def run_cli(capsys, *args: str) -> tuple[int, str]:
    """The job as the console runs it: (exit status, stderr)."""
    from jobs.pipeline.runtime.cli import run_main
    from jobs.recover import main

    with pytest.raises(SystemExit) as exit_info:
        run_main("recover", main, list(args))
        raise SystemExit(0)
    return exit_info.value.code, capsys.readouterr().err


CONF = str(GOLDEN / CASE / "broker.conf")


@pytest.fixture(scope="module")
def recovered_out(spark, crash, tmp_path_factory) -> Path:
    before = tree(crash)
    out = tmp_path_factory.mktemp("dledger-out") / "out"
    assert run_recover("--store", str(crash), "--broker-config", CONF, "--out", str(out), "--json") == 0
    assert tree(crash) == before  # --out only reads the store
    return out


def test_out_equals_the_brokers_recovery(recovered_out):
    assert_matches_recovered(recovered_out)
    report = json.loads((recovered_out / "reput-recover-report.json").read_text())
    d = report["dledger"]
    assert report["recovery"] == "dledger" and d["write_end"] == 1685849
    assert d["entries_past_checkpoint_committed_index"] == 3595 - 1503
    assert report["post_start_redispatch"]["from_offset"] == 1685061


def test_second_run_on_out_plans_no_change(recovered_out, tmp_path):
    plan = tmp_path / "plan.json"
    assert run_recover("--store", str(recovered_out), "--broker-config", CONF, "--dry-run", "--json",
                       "--report", str(plan)) == 0
    p = json.loads(plan.read_text())
    assert p["changes"] is False, p
    assert p["checkpoint"]["before"] == p["checkpoint"]["after"] and not p["dledger"]["files_rewritten"]


def test_dry_run_reports_and_writes_nothing(spark, crash, tmp_path, capsys):
    before = tree(crash)
    code, err = run_cli(capsys, "--store", str(crash), "--broker-config", CONF, "--dry-run")
    assert code == 0 and "Traceback" not in err
    assert tree(crash) == before


def test_full_index_is_an_explicit_reported_choice(spark, crash, tmp_path):
    out = tmp_path / "out"
    assert run_recover("--store", str(crash), "--broker-config", CONF, "--out", str(out), "--full-index",
                       "--json") == 0
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert report["index"]["mode"].startswith("full rebuild") and "--full-index" in " ".join(report["warnings"])
    keys = sum(IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]).index_count - 1 for p in (out / "index").iterdir())
    broker = sum(IndexHeader.from_bytes(p.read_bytes()[:HEADER_SIZE]).index_count - 1
                 for p in (GOLDEN / RECOVERED / "index").iterdir())
    assert keys == broker + manifest(RECOVERED)["oracle_self_check"]["details"]["index_keys_never_indexed"]
    files = manifest(RECOVERED)["files"]
    assert {k: v for k, v in tree(out).items() if k.startswith("consumequeue/")} == \
        {k: v["sha256"] for k, v in files.items() if k.startswith("consumequeue/")}


@pytest.mark.parametrize("which", ["broker", "reput"])
def test_verify_names_the_brokers_own_index_loss(which, spark, recovered_out, tmp_path, capsys):
    """verify of the broker's own DLedger recovery (and of reput's, byte-identical to it): the index findings are
    named as the broker's index loss, with the keys it never indexed (the golden manifest's count) and the way
    to restore them, not a bare INCONSISTENT (issue 37 item 8)."""
    from jobs.pipeline.runtime.cli import run_main
    from jobs.verify import main as verify_main

    store = restored_copy(RECOVERED, tmp_path / "store") if which == "broker" else recovered_out
    with pytest.raises(SystemExit) as exit_info:
        run_main("verify", verify_main, ["--store", str(store), "--broker-config", CONF, "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 1 and all(k.startswith("index.") for k in report["finding_counts"])
    gap = report["index_gap"]
    assert gap["keys"] == manifest(RECOVERED)["oracle_self_check"]["details"]["index_keys_never_indexed"]
    assert "index loss after its DLedger recovery" in gap["message"] and "--full-index" in gap["message"]


def test_in_place_then_rollback(spark, tmp_path):
    store = restored_copy(CASE, tmp_path / "store")
    before = tree(store)
    backup = tmp_path / "backup"
    assert run_recover("--store", str(store), "--broker-config", CONF, "--in-place", "--backup-dir", str(backup),
                       "--json") == 0
    assert_matches_recovered(store)
    assert run_recover("--store", str(store), "--broker-config", CONF, "--rollback", "--backup-dir",
                       str(backup), "--json") == 0
    assert tree(store) == before


def test_the_golden_cut_index_is_refused_naming_the_file(spark, capsys):
    """The DLedger index stored cut (as in golden) is a file DLedger refuses to load: exit 2, one line."""
    code, err = run_cli(capsys, "--store", str(GOLDEN / CASE), "--broker-config", CONF, "--dry-run")
    assert code == 2 and "dledger-n0/index/00000000000000000000" in err and "167772160" in err
    assert "Traceback" not in err


def test_a_torn_entry_cuts_the_log_and_the_queues(spark, tmp_path, capsys):
    """An entry torn in the second-last data file: DLedger stops there, the last data file goes, consume queues
    reaching past the new end are cut, and the input of --out is untouched."""
    store = restored_copy(CASE, tmp_path / "store")
    data = sorted((store / HOME / "data").iterdir())
    f = data[-2]
    buf = bytearray(f.read_bytes())
    h = fmt.read_entry_header(buf, 0)
    at = h.size  # the second entry of that file
    struct.pack_into(">i", buf, at + 4, 7)  # its size
    f.write_bytes(bytes(buf))
    before = tree(store)
    out = tmp_path / "out"
    assert run_recover("--store", str(store), "--broker-config", CONF, "--out", str(out), "--json") == 0
    assert tree(store) == before
    report = json.loads((out / "reput-recover-report.json").read_text())
    d = report["dledger"]
    cut = int(f.name) + at
    assert d["write_end"] == cut and d["stop"]["reason"] == D.STOP_BAD_ENTRY
    assert d["data_files_to_delete"] == [data[-1].name] and not (out / HOME / "data" / data[-1].name).exists()
    cq = report["consumequeue"]
    assert cq["truncate_dirty_logic_files"] is True and (cq["to_cut"] or cq["to_delete"])
    assert all(c["first_unit_left_behind_phy_offset"] >= cut for c in cq["to_cut"])
    assert fmt.parse_checkpoint((out / HOME / "checkpoint").read_text())["endIndex"] == h.index
    assert report["post_start_redispatch"]["from_offset"] <= cut


def test_a_data_file_of_the_wrong_size_is_refused(spark, tmp_path, capsys):
    store = restored_copy(CASE, tmp_path / "store")
    last = sorted((store / HOME / "data").iterdir())[-1]
    with open(last, "r+b") as fh:
        fh.truncate(1000)
    code, err = run_cli(capsys, "--store", str(store), "--broker-config", CONF, "--dry-run")
    assert code == 2 and last.name in err and "Traceback" not in err


def test_a_record_dispatch_cannot_read_is_refused(spark, tmp_path, capsys):
    """DLedger's walk has no record checks; a record RocketMQ's dispatch rejects in the range the restart
    dispatches is refused (the broker would log '[BUG]' and skip data), one line, the store untouched."""
    store = restored_copy(CASE, tmp_path / "store")
    last = sorted((store / HOME / "data").iterdir())[-1]
    buf = bytearray(last.read_bytes())
    at = 1685061 - int(last.name)  # the first entry the restart dispatches
    struct.pack_into(">i", buf, at + fmt.ENTRY_HEADER_SIZE + 4, 0x1234)  # its record's magic
    last.write_bytes(bytes(buf))
    before = tree(store)
    code, err = run_cli(capsys, "--store", str(store), "--broker-config", CONF, "--dry-run")
    assert code == 2 and "Traceback" not in err and "1685061" in err, err
    assert tree(store) == before


def test_committed_position_readings(crash):
    data, read, index, unit = readers(crash)
    e = D.walk_entries(data, FILE, read, index, unit)

    def unit_end(i: int) -> int:
        return fmt.committed_end(unit(0, i * fmt.INDEX_UNIT_SIZE).ljust(fmt.INDEX_UNIT_SIZE, b"\0"))
    assert D.committed_position(e, fmt.READING_SURVIVING, 1503, unit_end) == (3595, e.write_end)
    m = manifest(CASE)["dledger_scan"]
    assert D.committed_position(e, fmt.READING_CHECKPOINT, 1503, unit_end) == (1503, m["checkpoint_committedPos"])
    assert D.committed_position(e, fmt.READING_CHECKPOINT, 99999, unit_end) == (3595, e.write_end)
    assert D.committed_position(e, fmt.READING_CHECKPOINT, None, unit_end) == (3595, e.write_end)


def test_checkpoint_reading_dispatches_nothing_past_the_committed_index(spark, crash, tmp_path):
    """--dledger-reading checkpoint: the restart dispatches only up to committedIndex 1503 (offset 701267), which
    the consume queues already passed: nothing is dispatched, nothing is cut (they end before the write end)."""
    out = tmp_path / "out"
    assert run_recover("--store", str(crash), "--broker-config", CONF, "--out", str(out), "--dledger-reading",
                       "checkpoint", "--json") == 0
    report = json.loads((out / "reput-recover-report.json").read_text())
    d = report["dledger"]
    assert d["reading"]["reading"] == "checkpoint" and d["committed_index"] == 1503
    assert d["committed_position"] == 701267 and report["post_start_redispatch"]["from_offset"] == 1685061
    cq = report["consumequeue"]
    assert not (cq["to_rewrite"] or cq["to_create"] or cq["to_delete"] or cq["to_cut"])
    assert (out / HOME / "checkpoint").read_bytes() == D.dledger_checkpoint_text(1503, 3595)
    assert {k: v for k, v in tree(out).items() if k.startswith("consumequeue/")} == \
        {k: v for k, v in tree(crash).items() if k.startswith("consumequeue/")}


@pytest.mark.parametrize("entry_index,rewritten", [(3000, True), (100, False)])
def test_a_damaged_index_unit_is_rewritten_where_dledger_checks_it(spark, tmp_path, entry_index, rewritten):
    """A DLedger index unit that disagrees with its entry: inside the walked range DLedger rewrites the units from
    there on (OUT's index equals the broker's recovered one); before it (entry 100) DLedger never looks."""
    store = restored_copy(CASE, tmp_path / "store")
    idx = store / HOME / "index" / f"{0:020d}"
    with open(idx, "r+b") as fh:
        fh.seek(entry_index * fmt.INDEX_UNIT_SIZE + 12)
        fh.write(struct.pack(">i", 7))  # the unit's size field
    damaged = sha(idx.read_bytes())
    out = tmp_path / "out"
    assert run_recover("--store", str(store), "--broker-config", CONF, "--out", str(out), "--json") == 0
    d = json.loads((out / "reput-recover-report.json").read_text())["dledger"]
    got = sha((out / HOME / "index" / f"{0:020d}").read_bytes())
    if rewritten:
        assert d["index"]["rewritten_from_index"] == entry_index and "size" in d["index"]["rewrite_reason"]
        assert d["index"]["rewritten_units"] == 3595 - entry_index + 1
        assert f"{HOME}/index/{0:020d}" in d["files_rewritten"]
        assert got == manifest(RECOVERED)["files"][f"{HOME}/index/{0:020d}"]["sha256"]
        assert_matches_recovered(out)
    else:
        assert d["index"]["rewritten_from_index"] is None and got == damaged


def test_the_upgraded_mixed_store_keeps_its_plain_segments(spark, tmp_path):
    """dledger-upgrade-11 (plain segments below dividedCommitlogOffset, DLedger data above), shut down cleanly:
    the restart changes nothing but currterm.bak (the election persists the term again); the plain segments are
    copied untouched; a second run plans nothing."""
    case = "dledger-upgrade-11"
    store = restored_copy(case, tmp_path / "store")
    out = tmp_path / "out"
    conf = str(GOLDEN / case / "broker.conf")
    assert run_recover("--store", str(store), "--broker-config", conf, "--out", str(out), "--json") == 0
    before, after = tree(store), tree(out)
    assert {k for k in before if k.startswith("commitlog/")} and \
        {k: v for k, v in after.items() if k != f"{HOME}/currterm.bak"} == before
    assert (out / HOME / "currterm.bak").read_bytes() == (store / HOME / "currterm").read_bytes()
    plan = tmp_path / "plan.json"
    assert run_recover("--store", str(out), "--broker-config", conf, "--dry-run", "--json", "--report",
                       str(plan)) == 0
    assert json.loads(plan.read_text())["changes"] is False


def test_an_entry_with_an_empty_body_passes_dledgers_checks():
    """DLedger checks size > 44 (DLedgerEntry.HEADER_SIZE), so an entry of 48 bytes (bodySize 0) passes its walk."""
    data, idx = log(2, 6)
    e = entry(12, 1024 + 6 * 108, body=0)
    data[1024][6 * 108:6 * 108 + len(e)] = e
    idx += fmt.index_unit(fmt.read_entry_header(e, 0))
    r = walk(data, idx)
    assert r.last_index == 12 and r.write_end == 1024 + 6 * 108 + 48 and r.stop.reason == D.STOP_SIZE0


# ---------------------------------------------------------------------------------------------
# the hostile DLedger corpus (tests/hostile.py) through recover


@pytest.mark.parametrize("builder", DLEDGER_BUILDERS, ids=lambda b: b.__name__)
def test_hostile_dledger_store_through_recover(builder, golden, spark, tmp_path, capsys):
    """Each damaged DLedger store of the corpus: a data file of the wrong size is refused (one line naming it);
    the rest lie where DLedger's recovery does not look (a middle data file, its index units) or pass its checks
    (a torn record behind an intact entry header, a blank's length): the plan changes nothing there and the dry
    run's audit names the damage by file and byte offset. Never a traceback, the store unchanged."""
    d = builder(golden, tmp_path / "store")
    before = tree(d.store)
    code, err = run_cli(capsys, "--store", str(d.store), "--broker-config", str(d.broker_config), "--dry-run",
                        "--json", "--report", str(tmp_path / "plan.json"))
    assert "Traceback" not in err and tree(d.store) == before
    where = f"{d.file} at byte offset {d.offset}"
    if d.expect.get("recover") == "error" or (d.expect["rebuild"] == "error" and d.expect["inspect"] == "error"):
        # the unreadable data file; a stray name in the DLedger index directory (the broker does not start)
        errors = [line for line in err.splitlines() if line.startswith("reput recover: error: ")]
        assert code == 2 and len(errors) == 1 and where in errors[0], err
        return
    assert code == 0, err
    plan = json.loads((tmp_path / "plan.json").read_text())
    cq = plan["consumequeue"]
    assert not (cq["to_rewrite"] or cq["to_create"] or cq["to_delete"] or cq["to_cut"])
    assert not plan["dledger"]["data_files_to_delete"] and plan["dledger"]["index"]["rewritten_from_index"] is None
    if d.expect["verify"] == "reported" and d.expect["rebuild"] == "error":  # damage in the entry chain
        assert any(where in w for w in plan["warnings"]), (where, plan["warnings"])


def test_in_place_killed_then_resumed(tmp_path):
    """The real CLI in place on a DLedger store, killed mid-switch: --resume finishes it (the store equals the
    broker's recovery), --rollback then restores the crashed input byte for byte."""
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    store = restored_copy(CASE, tmp_path / "store")
    before = tree(store)
    backup = tmp_path / "backup"
    cmd = [sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config", CONF, "--in-place",
           "--backup-dir", str(backup), "--master", "local[1]", "--json"]
    killed = subprocess.run(cmd, cwd=repo, env=dict(os.environ, REPUT_CRASH_AT="op-2"), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    done = subprocess.run(cmd[:5] + ["--resume"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_matches_recovered(store)
    back = subprocess.run(cmd[:5] + ["--rollback", "--backup-dir", str(backup)], cwd=repo, capture_output=True,
                          text=True, timeout=120)
    assert back.returncode == 0, back.stderr
    assert tree(store) == before


def test_dry_run_warns_of_a_record_whose_body_crc_fails(golden, spark, tmp_path, capsys):
    """A record DLedger keeps (it checks no CRC) whose body CRC fails: the dry run's audit names it by file and byte
    offset, and what each broker does with it (the docs promised it; the audit did not check CRCs)."""
    store = restored_copy("dledger-unclean-11", tmp_path / "store")
    data = store / "dledger-n0" / "data" / "00000000000001572864"
    with open(data, "r+b") as f:  # ten bytes of the body of the record whose entry starts at byte 112626
        f.seek(112626 + 48 + 140)
        f.write(b"\0" * 10)
    code, err = run_cli(capsys, "--store", str(store), "--broker-config", str(store / "broker.conf"), "--dry-run",
                        "--json", "--report", str(tmp_path / "plan.json"))
    assert code == 0, err
    warnings = json.loads((tmp_path / "plan.json").read_text())["warnings"]
    assert any(f"{data} at byte offset 112626): body CRC" in w and "checkCRCOnRecover" in w for w in warnings), warnings
