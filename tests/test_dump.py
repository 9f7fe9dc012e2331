"""jobs.dump against the golden stores: consume-queue entries, commit-log records and index files as the
broker wrote them, compared with the test-only reader (tests/golden_walk.py) and the manifests."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest

from jobs.dump import main as dump_main
from tests import golden_walk
from tests.conftest import GOLDEN, REPO

SMALL = ("clean-small-11", "v5-clean-small-11")


def dump(capsys, case: str, *args: str, store=None) -> list[dict]:
    """jobs.dump --json on a golden case: its rows."""
    store = store or GOLDEN / case
    assert dump_main(["--store", str(store), "--broker-config", str(GOLDEN / case / "broker.conf"), "--json",
                      *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def queue_units(case: str, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """(phy, size, tagsCode) of a queue's units in order, read from the golden bytes."""
    return [(p, s, t) for tp, q, p, s, t in golden_walk.consume_queue_entries(case) if (tp, q) == (topic, queue_id)]


@pytest.mark.parametrize("case", SMALL)
def test_queue_entries_and_their_records(case, golden, capsys):
    """Every unit of a queue (one read past its end) with the key, unique key and store time of the record
    it points at; the listing ends where the queue ends."""
    by_offset = {r.physical_offset: r for r in golden_walk.records(case)}
    for topic, queue_id in (("TopicTest", 1), ("主题-Ω-topic", 0)):
        units = queue_units(case, topic, queue_id)
        rows = dump(capsys, case, "--topic", topic, "--queue", str(queue_id), "--count", str(len(units) + 5))
        entries = [r for r in rows if r["kind"] == "entry"]
        assert [(r["phy_offset"], r["size"], r["tags_code"]) for r in entries] == units
        assert [r["queue_offset"] for r in entries] == list(range(len(units)))
        assert rows[-1]["kind"] == "end" and rows[-1]["queue_offset"] == len(units)
        for r in entries:
            g = by_offset[r["phy_offset"]]
            m = r["message"]
            assert (m["topic"], m["queue_id"], m["queue_offset"]) == (topic, queue_id, r["queue_offset"])
            assert m["keys"] == g.properties.get("KEYS") and m["uniq_key"] == g.properties.get("UNIQ_KEY")
            assert m["store_timestamp"] == g.store_timestamp and m["total_size"] == r["size"]
            assert r["problem"] is None
            assert r["byte"] == r["queue_offset"] * 20 % int(golden_walk.broker_conf(case)["mappedFileSizeConsumeQueue"])


def test_a_multi_dispatch_queues_units_are_no_problem(golden, capsys):
    """Every unit of every %LMQ% and multi-dispatched queue of an LMQ store points at a record whose
    INNER_MULTI_DISPATCH names the queue at that offset: marked as such, no problem; a unit moved to another record
    is still one."""
    case = "lmq-clean-small-11"
    queues = sorted({(t, q) for t, q, *_ in golden_walk.consume_queue_entries(case) if t.startswith("%")})
    assert queues
    for topic, queue_id in queues:
        rows = [r for r in dump(capsys, case, "--topic", topic, "--queue", str(queue_id), "--count", "1000")
                if r["kind"] == "entry"]
        assert rows and all(r["problem"] is None for r in rows), (topic, [r["problem"] for r in rows][:3])
        assert any(r.get("multi_dispatch") for r in rows) or all(r["message"]["topic"] == topic for r in rows)

def test_a_multi_dispatch_unit_pointing_at_the_wrong_record_is_a_problem(golden, capsys, tmp_path):
    """An %LMQ% queue's unit 1 made to point at unit 0's record (whose INNER_MULTI_QUEUE_OFFSET gives the queue 0):
    a problem, as for any unit whose record is not the queue's at that offset."""
    case = "lmq-clean-small-11"
    store = tmp_path / case
    shutil.copytree(GOLDEN / case, store)
    topic = next(t for t, q, *_ in golden_walk.consume_queue_entries(case) if t.startswith("%LMQ%"))
    qfile = store / "consumequeue" / topic / "0" / "00000000000000000000"
    data = bytearray(qfile.read_bytes())
    data[20:32] = data[0:12]  # unit 1's phy and size := unit 0's
    qfile.write_bytes(bytes(data))
    rows = [r for r in dump(capsys, case, "--topic", topic, "--queue", "0", "--count", "2", store=store)
            if r["kind"] == "entry"]
    assert rows[0]["problem"] is None and rows[0].get("multi_dispatch")
    assert "its properties do not name" in rows[1]["problem"] and not rows[1].get("multi_dispatch"), rows[1]


@pytest.mark.parametrize("size", [1010, 5000])
def test_a_queue_file_of_another_size_is_named(size, golden, capsys, tmp_path):
    """A consume-queue file cut short or grown (the broker's MappedFileQueue.load refuses both: it does not start):
    a `wrong_size` row naming the file, its size and the configured one, before its whole units; a short file's
    listing ends where its whole units do, saying so (it said the file was "only 1000 bytes")."""
    case = "clean-small-11"
    store = tmp_path / case
    shutil.copytree(GOLDEN / case, store)
    qfile = store / "consumequeue" / "TopicTest" / "1" / "00000000000000000000"
    with open(qfile, "r+b") as f:
        f.truncate(size)
    rows = dump(capsys, case, "--topic", "TopicTest", "--queue", "1", "--from", "48", "--count", "5", store=store)
    assert rows[0] == {"kind": "wrong_size", "file": "consumequeue/TopicTest/1/00000000000000000000", "size": size,
                       "expected": 2000}
    assert [r["kind"] for r in rows[1:3]] == ["entry", "entry"]
    if size < 2000:
        assert rows[3]["kind"] == "end" and rows[3]["reason"].endswith("holds 50 whole units, none at byte 1000")


def test_queue_from_and_count_and_filler(golden, capsys):
    """rebuild-headless-11: queues start at a non-zero offset after filler units; by default the listing
    starts at the first entry, --from 0 shows the fillers; --from/--count pick a window."""
    case = "rebuild-headless-11"
    raw = (GOLDEN / case / "consumequeue" / "TopicTest" / "0" / ("0" * 20)).read_bytes()
    units = list(struct.iter_unpack(">qiq", raw))
    fillers = next(i for i, (p, s, _) in enumerate(units) if s != 0x7FFFFFFF)
    rows = dump(capsys, case, "--topic", "TopicTest", "--queue", "0", "--count", "3")
    assert [r["queue_offset"] for r in rows] == [fillers, fillers + 1, fillers + 2]
    assert [(r["phy_offset"], r["size"], r["tags_code"]) for r in rows] == units[fillers:fillers + 3]
    rows = dump(capsys, case, "--topic", "TopicTest", "--queue", "0", "--from", "0", "--count", "2")
    assert [r["kind"] for r in rows] == ["filler", "filler"] and fillers >= 2


@pytest.mark.parametrize("case", SMALL)
def test_records_from_an_offset_cross_segments(case, golden, capsys):
    """Records from offset 0 through two segments: every header field and property equals the golden
    record; the BLANK record ending segment 0 is shown with its size and the walk goes on."""
    recs = golden_walk.records(case)
    seg = int(golden_walk.broker_conf(case)["mappedFileSizeCommitLog"])
    want = [r for r in recs if r.physical_offset < 2 * seg]
    rows = dump(capsys, case, "--offset", "0", "--count", str(len(want)))
    records = [r for r in rows if r["kind"] == "record"]
    assert [r["physical_offset"] for r in records] == [r.physical_offset for r in want]
    for row, g in zip(records, want):
        assert row["topic"] == g.topic.decode() and row["properties"] == g.properties
        assert row["store_timestamp"] == g.store_timestamp and row["born_timestamp"] == g.born_timestamp
        assert row["sys_flag"] == g.sys_flag and row["byte"] == g.physical_offset % seg
    blank = [r for r in rows if r["kind"] == "blank"]
    last0 = max((r for r in records if r["physical_offset"] < seg), key=lambda r: r["physical_offset"])
    assert len(blank) == 1 and blank[0]["offset"] == last0["physical_offset"] + last0["total_size"]
    assert blank[0]["total_size"] == seg - blank[0]["offset"]
    assert rows.index(blank[0]) == len([r for r in want if r.physical_offset < seg])


def test_records_end_at_the_torn_record(golden, capsys):
    """unclean-torn-11: the walk stops at the torn record with the broker's reason (body CRC)."""
    case = "unclean-torn-11"
    torn = json.loads((GOLDEN / case / "manifest.json").read_text())["torn"]["torn_record_offset"]
    before = max(r.physical_offset for r in golden_walk.records("unclean-11") if r.physical_offset < torn)
    rows = dump(capsys, case, "--offset", str(before), "--count", "5")
    assert [r["kind"] for r in rows] == ["record", "end"]
    assert rows[1]["offset"] == torn and rows[1]["reason"] == "crc_mismatch"


def chain_lengths(raw: bytes, slots: int) -> tuple[int, list[int]]:
    """Used slots and the chain length of each, walked over the raw bytes (prevIndex until 0)."""
    count = struct.unpack_from(">i", raw, 36)[0]
    lengths = []
    for s in range(slots):
        (pos,) = struct.unpack_from(">i", raw, 40 + 4 * s)
        if pos == 0:
            continue
        n = 0
        while 0 < pos < count:
            n += 1
            pos = struct.unpack_from(">i", raw, 40 + 4 * slots + 20 * pos + 16)[0]
        lengths.append(n)
    return len(lengths), lengths


@pytest.mark.parametrize("case", SMALL)
def test_index_file_header_slots_and_chains(case, golden, capsys):
    """Each index file (first, a middle one, the last): header fields equal the manifest, used slots and
    chain lengths equal a walk over the raw bytes, no broken chain; --count lists entries."""
    manifest = json.loads((GOLDEN / case / "manifest.json").read_text())["index_files"]
    slots = int(golden_walk.broker_conf(case)["maxHashSlotNum"])
    for f in (manifest[0], manifest[len(manifest) // 2], manifest[-1]):
        rows = dump(capsys, case, "--index-file", f["name"], "--count", "2")
        s = rows[0]
        assert s["header"] == {"beginTimestamp": f["beginTimestamp"], "beginTime": s["header"]["beginTime"],
                               "endTimestamp": f["endTimestamp"], "endTime": s["header"]["endTime"],
                               "beginPhyOffset": f["beginPhyOffset"], "endPhyOffset": f["endPhyOffset"],
                               "hashSlotCount": f["hashSlotCount"], "indexCount": f["indexCount_on_disk"]}
        raw = (GOLDEN / case / "index" / f["name"]).read_bytes()
        used, lengths = chain_lengths(raw, slots)
        c = s["chains"]
        assert s["slots"] == {"total": slots, "used": used} and c["count"] == used
        assert (c["min"], c["max"], sum(lengths)) == (min(lengths, default=0), max(lengths, default=0),
                                                      c["entries_reachable"])
        assert c["broken"] == 0 and s["entries"]["used"] == f["indexCount_on_disk"] - 1
        entries = rows[1:]
        assert [e["position"] for e in entries] == [1, 2][:f["indexCount_on_disk"] - 1]
        for e in entries:
            h, phy, diff, prev = struct.unpack_from(">iqii", raw, 40 + 4 * slots + 20 * e["position"])
            assert (e["keyHash"], e["phyOffset"], e["timeDiff"], e["prevIndex"]) == (h, phy, diff, prev)


def test_text_output_and_errors(golden, tmp_path):
    """As a command: plain text by default; a missing queue, a path as index name and an index file
    of the wrong size are one-line errors with exit status 2."""
    case = GOLDEN / "clean-small-11"
    base = [sys.executable, "-m", "jobs.dump", "--store", str(case), "--broker-config", str(case / "broker.conf")]
    first = golden_walk.records("clean-small-11")[0]
    ok = subprocess.run(base + ["--offset", "0", "--count", "1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("record at offset 0 (segment 00000000000000000000 + byte 0): totalSize ")
    assert f"uniqKey {first.properties['UNIQ_KEY']}" in ok.stdout
    store = tmp_path / "store"
    shutil.copytree(case / "commitlog", store / "commitlog")
    (store / "index").mkdir()
    (store / "index" / "20990101000000000").write_bytes(b"\0" * 100)
    for extra, what in ((["--topic", "NoSuchTopic", "--queue", "0"], "no such consume queue"),
                        (["--index-file", "../checkpoint"], "give the file name inside index/"),
                        (["--index-file", "20990101000000000"], "100 bytes, expected 5416")):
        cmd = base + extra
        cmd[cmd.index("--store") + 1] = str(store)
        bad = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and what in bad.stderr and len(bad.stderr.splitlines()) == 1, bad.stderr
    negative = subprocess.run(base + ["--offset", "-5"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert negative.returncode == 2 and negative.stderr.splitlines()[-1] == \
        "reput dump: error: --from, --count and --offset must not be negative", negative.stderr


@pytest.mark.parametrize("case, first", [("clean-small-11", 0), ("dledger-clean-small-11", 48)])
def test_records_read_a_bounded_window(case, first, golden, capsys, monkeypatch):
    """dump --offset O --count 3 reads a bounded window from O through the fs layer (not the rest of the
    segment), and shows the same rows, each CRC-checked, as a long walk from O does."""
    from jobs.pipeline.dump import readers
    from jobs.pipeline.io.fs import Location

    rows = dump(capsys, case, "--offset", str(first), "--count", "400")
    records = [r for r in rows if r["kind"] == "record"]
    assert len(records) >= 200
    mid = records[150]["physical_offset"]
    want = [r for r in rows if r["kind"] == "record" and r["physical_offset"] >= mid][:3]
    read: list[tuple[int, int]] = []
    real = Location.read_range

    def counted(self, offset, length):
        if "/index/" not in self.uri:  # every job's first look reads a few index-file words (the index layout)
            read.append((offset, length))
        return real(self, offset, length)

    monkeypatch.setattr(Location, "read_range", counted)
    got = dump(capsys, case, "--offset", str(mid), "--count", "3")
    assert got == want
    assert sum(n for _, n in read) <= readers.WINDOW + 48
    assert read[-1][0] <= mid % 262144 and read[-1][0] + read[-1][1] < 262144  # not up to the segment's end


def test_records_past_the_window_are_not_read(golden, capsys, tmp_path):
    """A segment whose bytes past the window are garbage (no record, CRCs broken) still dumps the records
    in front: nothing past the window is decoded or checked."""
    from jobs.pipeline.dump import readers

    case = "clean-small-11"
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / case, store)
    for p in store.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    seg = store / "commitlog" / f"{0:020d}"
    raw = bytearray(seg.read_bytes())
    cut = 3 * readers.WINDOW // 2
    raw[cut:] = bytes([0x5A]) * (len(raw) - cut)
    seg.write_bytes(bytes(raw))
    want = dump(capsys, case, "--offset", "0", "--count", "3")
    assert [r["kind"] for r in want] == ["record"] * 3
    got = dump(capsys, case, "--offset", "0", "--count", "3", store=store)
    assert got == want
