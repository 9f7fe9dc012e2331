"""jobs.query against the golden stores: the offsets a key query finds are exactly what the golden index
files give for that key and window (a model transcribed from IndexService.queryOffset and
IndexFile.selectPhyOffset over raw bytes), with hash collisions filtered out by the golden records."""
from __future__ import annotations

import json
import random
import struct
import zlib
from functools import lru_cache

import pytest

from jobs.query import main as query_main
from jobs.query import preview
from storage_format.index_file import select_phy_offsets
from storage_format.index_file import IndexHeader
from tests import golden_walk
from tests.conftest import GOLDEN

LONG_MAX = 2**63 - 1
SMALL = ("clean-small-11", "v5-clean-small-11")


# ------------------------------------------------------------------- an independent model of the index


def jhash(s: str) -> int:
    """Java String.hashCode (UTF-16 units), signed 32-bit."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def index_hash(key: str) -> int:
    h = jhash(key)
    return 0 if h == -(2**31) else abs(h)


@lru_cache(maxsize=None)
def index_files(case: str) -> list[tuple[str, tuple, bytes]]:
    """(name, header (begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count), bytes) by name."""
    out = []
    for f in sorted((golden_walk.case_dir(case) / "index").iterdir()):
        raw = f.read_bytes()
        out.append((f.name, struct.unpack_from(">qqqqii", raw, 0), raw))
    return out


def broker_query(case: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
    """IndexService.queryOffset transcribed: newest file first, isTimeMatched, selectPhyOffset."""
    slots = int(golden_walk.broker_conf(case)["maxHashSlotNum"])
    kh = index_hash(key)
    out: list[int] = []
    for _, (b_ts, e_ts, _, _, _, count), raw in reversed(index_files(case)):
        matched = (begin < b_ts and end > e_ts) or (b_ts <= begin <= e_ts) or (b_ts <= end <= e_ts)
        if matched:
            (nxt,) = struct.unpack_from(">i", raw, 40 + (kh % slots) * 4)
            if 0 < nxt <= count and count > 1:
                while len(out) < max_num:
                    h, phy, diff, prev = struct.unpack_from(">iqii", raw, 40 + slots * 4 + nxt * 20)
                    if diff < 0:
                        break
                    t = b_ts + diff * 1000
                    if h == kh and begin <= t <= end:
                        out.append(phy)
                    if prev <= 0 or prev > count or prev == nxt or t < begin:
                        break
                    nxt = prev
        if b_ts < begin or len(out) >= max_num:
            break
    return out


def expected(case: str, topic: str, key: str, uniq: bool, max_num: int = 64, begin: int = 0,
             end: int = LONG_MAX) -> tuple[list[int], list[int], list[int]]:
    """(candidates in broker order, offsets of real matches, offsets of hash collisions)."""
    cands = broker_query(case, f"{topic}#{key}", max_num, begin, end)
    recs = golden_walk.records_by_offset(case)
    hits = sorted({o for o in cands if golden_walk.carries(recs[o], topic, key, uniq)})
    return cands, hits, sorted(set(cands) - set(hits))


def run(capsys, case: str, *args: str) -> tuple[int, dict]:
    code = query_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                       "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def offsets(result: dict) -> list[int]:
    return [m["physical_offset"] for m in result["messages"]]


def collide(key: str) -> str:
    """A different string with the same Java hash (last two UTF-16 units (a, b) -> (a-1, b+31))."""
    a, b = key[-2], key[-1]
    other = key[:-2] + chr(ord(a) - 1) + chr(ord(b) + 31)
    assert other != key and jhash(other) == jhash(key)
    return other


def sample_uniq(case: str, n: int, seed: int = 7) -> list[tuple[str, str]]:
    pairs = sorted({(r.topic.decode(), r.properties["UNIQ_KEY"]) for r in golden_walk.records(case)
                    if "UNIQ_KEY" in r.properties and (r.sys_flag & 0xC) != 0xC})
    return random.Random(seed).sample(pairs, n)


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("case", SMALL)
def test_keys_find_exactly_the_index_offsets(case, golden, capsys):
    """For sampled keys: the candidates (order included), the matches and the collisions equal the
    model's; with no limit the matches are every indexed record carrying the key."""
    for topic, key in golden_walk.sample_keys(case, 25):
        code, got = run(capsys, case, "--topic", topic, "--key", key, "--max-num", "100000")
        cands, hits, coll = expected(case, topic, key, False, 100000)
        assert got["lookups"][0]["candidates"] == cands, (topic, key)
        assert offsets(got) == hits and hits, (topic, key)
        assert [c["physical_offset"] for c in got["hash_collisions"]] == coll
        every = sorted(o for o, r in golden_walk.records_by_offset(case).items()
                       if (r.sys_flag & 0xC) != 0xC and golden_walk.carries(r, topic, key, False))
        assert hits == every and code == 0


@pytest.mark.parametrize("case", SMALL)
def test_uniq_keys_find_exactly_the_index_offsets(case, golden, capsys):
    """For sampled unique keys: the candidates and the matches equal the model's, and are not empty (a
    query and a model that both found nothing would agree too)."""
    for topic, uniq in sample_uniq(case, 12):
        code, got = run(capsys, case, "--topic", topic, "--uniq-key", uniq)
        cands, hits, _ = expected(case, topic, uniq, True)
        assert got["lookups"][0]["candidates"] == cands, (topic, uniq)
        assert offsets(got) == hits and hits and code == 0, (topic, uniq)
        assert all(m["properties"]["UNIQ_KEY"] == uniq for m in got["messages"])


def test_default_limit_is_64_newest_first(golden, capsys):
    """A key on more than 64 records: the broker's 64 newest candidates, duplicates counted."""
    case = "clean-small-11"
    _, got = run(capsys, case, "--topic", "TopicTest", "--key", "dup")
    cands, hits, _ = expected(case, "TopicTest", "dup", False)
    assert len(cands) == 64 and got["lookups"][0]["candidates"] == cands
    assert offsets(got) == hits and len(hits) < 64  # some records carry `dup` twice
    assert got["warnings"] == ["TopicTest#dup: the index gave 64 candidate offsets, the --max-num cap: more may "
                               "carry the key; raise --max-num"]
    _, few = run(capsys, case, "--topic", "TopicTest", "--key", "dup", "--max-num", "3")
    assert few["lookups"][0]["candidates"] == cands[:3]
    _, every = run(capsys, case, "--topic", "TopicTest", "--key", "dup", "--max-num", "1000")
    assert every["warnings"] == []


def test_a_unique_key_given_as_a_key_is_named_so(golden, capsys):
    """A record's UNIQ_KEY given as --key: the index finds it (topic#key hashes the same), the client's filter drops
    it (not among its KEYS), and a warning says to use --uniq-key instead of counting it as a mere collision."""
    case = "clean-small-11"
    topic, uniq = sample_uniq(case, 1)[0]
    code, got = run(capsys, case, "--topic", topic, "--key", uniq)
    hit = expected(case, topic, uniq, True)[1]
    assert code == 1 and got["messages"] == [] and hit
    assert got["warnings"] == [f"the record at offset {hit[0]} carries {uniq!r} as its unique key (UNIQ_KEY), not "
                               f"among its keys: query it with --uniq-key"]


def test_an_index_file_skipped_is_a_warning_naming_it(tmp_path, capsys):
    """An index file of the wrong size is skipped as the broker skips it; its messages are not found through the
    index, which a warning on stderr (and in the report) says, naming the file."""
    import shutil

    case = "clean-small-11"
    store = tmp_path / case
    shutil.copytree(GOLDEN / case, store)
    victim = sorted((store / "index").iterdir())[5]
    with victim.open("r+b") as f:
        f.truncate(3000)
    code = query_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--topic", "TopicTest",
                       "--key", "dup", "--max-num", "1000"])
    err = capsys.readouterr().err
    assert code == 0 and (f"reput query: warning: {victim} skipped: index file is 3000 bytes, expected 5416 "
                          f"(maxHashSlotNum, maxIndexNum); the messages it indexes are not found through the index "
                          f"(--scan reads the commit log)") in err, err


@pytest.mark.parametrize("case", ("clean-small-11", "clean-medium-11"))
def test_time_windows(case, golden, capsys):
    """Windows across the store's life (incl. the +40-day restart and, in medium, the clock stepped
    back) give exactly the model's candidates and matches."""
    recs = [r for r in golden_walk.records(case) if r.topic == b"TopicTest"]
    topic, key = "TopicTest", "dup"
    times = sorted(r.store_timestamp for r in recs if key in r.properties.get("KEYS", "").split(" "))
    windows = [(times[0], times[len(times) // 2]), (times[len(times) // 3], times[-1]),
               (times[len(times) // 2] - 500, times[len(times) // 2] + 500), (0, times[5]),
               (times[-1] - 3_600_000, LONG_MAX)]
    for begin, end in windows:
        code, got = run(capsys, case, "--topic", topic, "--key", key, "--begin", str(begin), "--end", str(end),
                        "--max-num", "1000")
        cands, hits, _ = expected(case, topic, key, False, 1000, begin, end)
        assert got["lookups"][0]["candidates"] == cands, (begin, end)
        assert offsets(got) == hits
    iso_begin = "2026-11-22T05:08:01"
    _, got = run(capsys, case, "--topic", topic, "--key", key, "--begin", iso_begin, "--max-num", "1000")
    assert got["query"]["begin"] == 1795324081000


@pytest.mark.parametrize("case", SMALL)
def test_hash_collisions_are_filtered_out(case, golden, capsys):
    """A key crafted to share a real key's Java hash gets that key's offsets from the index, and the
    record check drops every one of them (exit 1: nothing found); the same for the key whose hash is
    Integer.MIN_VALUE (index hash 0, slot 0)."""
    topic, key = golden_walk.sample_keys(case, 1, seed=3)[0]
    mh = sorted({k for r in golden_walk.records(case) if r.topic == b"TopicTest"
                 for k in r.properties.get("KEYS", "").split(" ") if k.startswith("mh-")})
    assert mh and jhash(f"TopicTest#{mh[0]}") == -(2**31)
    for t, k in ((topic, key), ("TopicTest", mh[0])):
        fake = collide(k)
        code, got = run(capsys, case, "--topic", t, "--key", fake, "--max-num", "1000")
        real_cands, real_hits, _ = expected(case, t, k, False, 1000)
        assert got["lookups"][0]["candidates"] == real_cands and real_hits
        assert got["messages"] == [] and code == 1
        assert sorted({c["physical_offset"] for c in got["hash_collisions"]}) == sorted(set(real_cands))


def test_uniq_key_without_topic_searches_every_topic(golden, capsys):
    """A delayed message's UNIQ_KEY is indexed under SCHEDULE_TOPIC_XXXX and again under its real topic
    after delivery: without --topic both records are found."""
    case = "clean-small-11"
    recs = golden_walk.records(case)
    uniq = next(r.properties["UNIQ_KEY"] for r in recs
                if r.topic == b"SCHEDULE_TOPIC_XXXX" and "UNIQ_KEY" in r.properties)
    want = sorted(r.physical_offset for r in recs
                  if r.properties.get("UNIQ_KEY") == uniq and (r.sys_flag & 0xC) != 0xC)
    code, got = run(capsys, case, "--uniq-key", uniq)
    assert code == 0 and offsets(got) == want and len(want) >= 2
    assert {m["topic"] for m in got["messages"]} >= {"SCHEDULE_TOPIC_XXXX"}


def _raw_body(case: str, offset: int) -> bytes:
    """A record's stored body, read with the FORMAT.md layout."""
    seg_size = int(golden_walk.broker_conf(case)["mappedFileSizeCommitLog"])
    start = offset - offset % seg_size
    buf = (golden_walk.case_dir(case) / "commitlog" / f"{start:020d}").read_bytes()
    pos = offset - start
    (sys_flag,) = struct.unpack_from(">i", buf, pos + 36)
    at = pos + 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8
    (n,) = struct.unpack_from(">i", buf, at)
    return buf[at + 4:at + 4 + n]


@pytest.mark.parametrize("case", SMALL)
def test_msg_id_reads_the_record(case, golden, capsys):
    """Offset message ids (IPv4 and IPv6 store hosts) decode to the record's offset; compressed bodies
    are shown decompressed."""
    recs = golden_walk.records(case)
    picks = [next(r for r in recs if len(r.store_host) == 4), next(r for r in recs if len(r.store_host) == 16),
             next(r for r in recs if r.sys_flag & 0x1)]
    for r in picks:
        msg_id = (r.store_host + struct.pack(">iq", r.store_port, r.physical_offset)).hex().upper()
        code, got = run(capsys, case, "--msg-id", msg_id, "--show-body")
        assert code == 0 and offsets(got) == [r.physical_offset] and not got["warnings"]
        m = got["messages"][0]
        assert m["offset_msg_id"] == msg_id and m["topic"] == r.topic.decode()
        assert m["store_timestamp"] == r.store_timestamp
        raw = _raw_body(case, r.physical_offset)
        body = zlib.decompress(raw) if r.sys_flag & 0x1 else raw
        assert m["body_length"] == len(body) and m["stored_body_length"] == len(raw)
        assert m["body_preview"] == preview(body)
        if r.sys_flag & 0x1:
            assert m["body_compression"] == "zlib" and m["body"] == body.decode("utf-8")


def test_msg_id_without_record(golden, capsys):
    """An id whose offset holds no record and that no message carries as its unique key finds nothing,
    says why (after trying it as a unique key, as mqadmin queryMsgById does)."""
    case = "clean-small-11"
    code, got = run(capsys, case, "--msg-id", "C0A8000A00002A9F0000000000000005")
    assert code == 1 and got["messages"] == [] and got["unreadable"][0]["physical_offset"] == 5
    assert got["query"]["fallback"] == "uniq_key" and "--uniq-key" in got["warnings"][0]


@pytest.mark.parametrize("case", SMALL)
def test_msg_id_falls_back_to_the_unique_key(case, golden, capsys):
    """A producer's msgId (UNIQ_KEY, IPv4 and IPv6 clients) given as --msg-id: it decodes as an offset id
    whose offset holds no record, so it is searched as a unique key (32 offsets per topic, as
    MQAdminImpl.queryMessageByUniqKey asks) and finds what --uniq-key finds."""
    recs = golden_walk.records(case)
    for width in (32, 56):
        uniq = next(r.properties["UNIQ_KEY"] for r in recs if len(r.properties.get("UNIQ_KEY", "")) == width
                    and (r.sys_flag & 0xC) != 0xC)
        code, got = run(capsys, case, "--msg-id", uniq)
        _, by_uniq = run(capsys, case, "--uniq-key", uniq)
        want = sorted(r.physical_offset for r in recs
                      if r.properties.get("UNIQ_KEY") == uniq and (r.sys_flag & 0xC) != 0xC)
        assert code == 0 and offsets(got) == offsets(by_uniq) == want
        assert got["query"]["fallback"] == "uniq_key" and got["query"]["max_num"] == 32 and not got["unreadable"]


def test_torn_record_is_reported_unreadable(golden, capsys):
    """unclean-torn-11 still indexes the torn record: its keys' offset is listed as unreadable."""
    m = json.loads((GOLDEN / "unclean-torn-11" / "manifest.json").read_text())["torn"]
    intact = golden_walk.records_by_offset("unclean-11")[m["torn_record_offset"]]  # the same record before tearing
    key = next(k for k in intact.properties.get("KEYS", "").split(" ") if k)
    code, got = run(capsys, "unclean-torn-11", "--topic", m["torn_record_topic"], "--key", key)
    assert m["torn_record_offset"] in got["lookups"][0]["candidates"]
    assert m["torn_record_offset"] in [u["physical_offset"] for u in got["unreadable"]]
    assert m["torn_record_offset"] not in offsets(got)


def test_scan_finds_the_same_as_the_index(spark, golden, capsys):
    """--scan (Spark over the commit log, no index) finds every record carrying the key: the same
    set as an unlimited index query."""
    case = "clean-small-11"
    _, by_index = run(capsys, case, "--topic", "TopicTest", "--key", "dup", "--max-num", "100000")
    code, by_scan = run(capsys, case, "--topic", "TopicTest", "--key", "dup", "--scan")
    assert code == 0 and offsets(by_scan) == offsets(by_index) and len(offsets(by_scan)) > 64


def test_select_phy_offsets_stops_like_the_broker():
    """The chain walk ends at an entry older than `begin` (even when older entries would match), at a
    negative timeDiff, and never spins on a loop."""
    h = IndexHeader(1_000_000, 1_010_000, 0, 0, 1, 5)
    chain = {4: (7, 400, 5, 3), 3: (7, 300, 0, 2), 2: (7, 200, 9, 1), 1: (7, 100, 9, 0)}
    out: list[int] = []
    select_phy_offsets(h, 4, chain.__getitem__, 7, 64, 1_001_000, LONG_MAX, out)
    assert out == [400]  # position 3 is older than begin: the walk stops before 2 and 1
    out = []
    select_phy_offsets(h, 4, chain.__getitem__, 7, 64, 0, LONG_MAX, out)
    assert out == [400, 300, 200, 100]
    out = []
    select_phy_offsets(h, 4, {4: (7, 400, -1, 3)}.__getitem__, 7, 64, 0, LONG_MAX, out)
    assert out == []
    out = []
    select_phy_offsets(h, 4, {4: (7, 400, 0, 3), 3: (7, 300, 0, 4)}.__getitem__, 7, 64, 0, LONG_MAX, out)
    assert out == [400, 300, 400, 300, 400]  # cut after indexCount steps


def test_bad_arguments_exit_2(golden, capsys):
    case = str(GOLDEN / "clean-small-11")
    with pytest.raises(SystemExit) as e:
        query_main(["--store", case, "--key", "k"])
    assert e.value.code == 2
    from jobs.pipeline.runtime.cli import run_main
    with pytest.raises(SystemExit) as e:
        run_main("query", query_main, ["--store", case, "--msg-id", "XYZ"])
    assert e.value.code == 2


def test_uniq_key_in_an_lmq_store_skips_lmq_queues(golden, capsys):
    """A multi-dispatched record is indexed only under its own topic: without --topic its UNIQ_KEY is found
    there, and no %LMQ% queue (which holds no index key) is searched."""
    case = "lmq-clean-small-11"
    recs = golden_walk.records(case)
    rec = next(r for r in recs if "INNER_MULTI_DISPATCH" in r.properties and "UNIQ_KEY" in r.properties
               and "%LMQ%" in r.properties["INNER_MULTI_DISPATCH"])
    code, got = run(capsys, case, "--uniq-key", rec.properties["UNIQ_KEY"])
    assert code == 0 and rec.physical_offset in offsets(got)
    searched = got["query"]["topics_searched"]
    assert searched and not any(t.startswith("%LMQ%") for t in searched)
