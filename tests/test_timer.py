"""The 5.x timer store (issue 25): codecs round-trip, read files the real 5.3.3 TimerMessageStore wrote (a
kit crash image in tests/data), agree with an independent writer (tests/timer_writer.py); the warning fires
where a recovery cuts records the timer references and nowhere else (golden v5 recoveries with timer files
added); --repair-timer's transforms equal the timer files as they were right after the last surviving unit.
The broker's behaviour after a repair is proved by scripts/timer_scenarios.py (Java; docs/timer.md)."""
from __future__ import annotations

import dataclasses
import json
import lzma
import shutil
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_format.errors import RecoveryError
from storage_format.recovery import timer as rules
from storage_format.settings import settings_from_mapping
from storage_format.timer import check, log, metrics, wheel

from .conftest import GOLDEN
from .timer_writer import Writer

DATA = Path(__file__).parent / "data"
KIT = json.loads((DATA / "timer-kit-5.3.3.json").read_text())
KIT_SETTINGS = KIT["settings"]
I32, I64 = st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)


# ---------------------------------------------------------------------------------------------------------
# codecs


@given(I64, st.integers(0, 15), I64, I32, I64, I32, I32, I64)
def test_unit_round_trip(prev, magic, wt, delay, off, size, h, res):
    u = log.TimerUnit(prev_pos=prev, magic=magic, write_time=wt, delay=delay, offset_py=off, size_py=size,
                      topic_hash=h, reserved=res)
    raw = log.encode_unit(u)
    assert len(raw) == log.UNIT_SIZE and log.decode_unit(raw) == u
    assert np.frombuffer(raw, log.UNIT_DTYPE)[0]["offset_py"] == off
    assert struct.unpack_from(">q", raw, log.OFFSET_PY_AT)[0] == off


@given(I64, I64, I64, I32, I32)
def test_slot_round_trip(t, first, last, num, magic):
    s = wheel.Slot(t, first, last, num, magic)
    assert wheel.decode_slot(wheel.encode_slot(s), 0) == s


@given(st.lists(I64, min_size=7, max_size=7), st.binary(max_size=64))
def test_timercheck_round_trip_keeps_the_page_tail(values, tail):
    names = [f.name for f in dataclasses.fields(check.TimerCheck)]
    tc = check.TimerCheck(**dict(zip(names, values)))
    base = bytes(56) + tail
    raw = check.timercheck_bytes(tc, base)
    assert len(raw) == check.TIMERCHECK_SIZE and check.parse_timercheck(raw) == tc
    assert raw[56:56 + len(tail)] == tail
    short = check.TimerCheck(last_read_time_ms=values[0], last_timer_log_flush_pos=values[1])
    assert check.parse_timercheck(raw[:16]) == short  # a short file: zeros after


def test_constants_and_settings():
    assert log.BLANK_MAGIC == 0xCBD43194 and wheel.WHEEL_SIZE == 38_707_200
    assert log.units_per_file(1 << 20) == 20164 and log.fits(20163 * 52, 1 << 20) and not log.fits(20164 * 52, 1 << 20)
    assert [wheel.precision_ms(v) for v in (1, 100, 199, 200, 499, 500, 999, 1000, 5000)] == \
        [100, 100, 100, 200, 200, 500, 500, 1000, 1000]
    s = settings_from_mapping({"timerPrecisionMs": "300", "mappedFileSizeTimerLog": "4096",
                               "timerSkipUnknownError": "true", "timerWheelEnable": "false"}).settings
    assert (s.timer_precision, s.mapped_file_size_timer_log, s.timer_skip_unknown_error, s.timer_wheel_enable) == \
        (200, 4096, True, False)


def test_metrics_load_rule():
    ok, bad = b'{"dataVersion":{},"timingCount":{}}', b'{"dataVersion":'
    assert metrics.metrics_problem(ok, None) is None
    assert metrics.metrics_problem(bad, None) is None  # an absent backup counts as loaded (ConfigManager.loadBak)
    assert metrics.metrics_problem(bad, b"") is None
    assert metrics.metrics_problem(b"", ok) is None and metrics.metrics_problem(bad, ok) is None
    assert "does not start" in metrics.metrics_problem(bad, bad)


# ---------------------------------------------------------------------------------------------------------
# against the independent writer

SLOT_TIMES = [1_700_000_100_000 + i * 1000 for i in range(4)]


def written(n: int, file_size: int, slots: list[int], deletes: set[int], first_unit: int = 0) -> Writer:
    """n units, unit i naming commit-log record [100 i, 100 i + 100), in the given slots (cycled)."""
    w = Writer(file_size)
    for i in range(first_unit, first_unit + n):
        t = SLOT_TIMES[slots[i % len(slots)]]
        w.enqueue(1_700_000_000_000, t - 1_700_000_000_000, i * 100, 100, delete=i in deletes)
    return w


def read_of(w: Writer):
    return lambda start: bytes(w.files[start])


def files_of(w: Writer) -> rules.TimerFiles:
    return rules.TimerFiles(log_files=tuple((s, len(d)) for s, d in sorted(w.files.items())),
                            check=check.parse_timercheck(w.timercheck(0, 0)), check_size=4096,
                            wheel_size=wheel.WHEEL_SIZE)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 40), st.sampled_from([140, 300, 400, 1024]), st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_scan_reads_what_the_writer_appended(n, file_size, slots):
    w = written(n, file_size, slots, set())
    end, scans = log.log_end(sorted(w.files), read_of(w), w.wrote, file_size)
    assert end.end == (w.wrote if n else 0)
    got = {}
    for start in sorted(w.files):
        scan = log.scan_file(bytes(w.files[start]))
        for k, row in enumerate(scan.units):
            got[start + k * 52] = (int(row["prev_pos"]), int(row["magic"]), int(row["write_time"]), int(row["delay"]),
                                   int(row["offset_py"]), int(row["size_py"]), int(row["topic_hash"]))
        assert scan.reason == ("blank" if start != max(w.files) else ("end" if scan.stop == file_size else "invalid"))
    assert got == dict(w.appended)
    assert set(end.files) == set(w.files) and not end.deleted


FACTS = dict(timer_queue_cut=True, last_record_ms=None)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.data(), st.sampled_from([140, 300, 400, 1024]),
       st.lists(st.integers(0, 3), min_size=1, max_size=4), st.sets(st.integers(0, 29), max_size=4))
def test_repair_equals_the_store_right_after_the_last_surviving_unit(n, data, file_size, slots, deletes):
    k = data.draw(st.integers(0, n - 1))  # units k.. name records past T
    full, prefix = written(n, file_size, slots, deletes), written(k, file_size, slots, deletes)
    files = files_of(full)
    facts = rules.RecoveryFacts(commit_end=k * 100, timer_queue_max=k, **FACTS)
    tail, after = rules.read_tail(files, read_of(full), file_size, 1000, facts, whole=True)
    assert (tail.stale, tail.suffix, tail.end) == (n - k, True, full.wrote)
    assert tail.cut == full.appended[k][0]
    repair = rules.plan_repair(files, tail, after, full.wheel(), facts, file_size=file_size, precision=1000)
    # the timer log: files rewritten or deleted, the rest kept, equal to the prefix writer's
    got = {s: bytes(d) for s, d in full.files.items() if s not in repair.delete_log}
    for s, keep in repair.render_log.items():
        got[s] = rules.render_log_file(got[s], keep)
    want = {s: bytes(d) for s, d in prefix.files.items()}
    if k == 0:  # nothing survives: the first file stays, all zeros (the broker's scan stops at its start)
        assert got == {0: bytes(file_size)}
    else:
        assert got == want
    assert wheel.with_slots(full.wheel(), repair.slot_edits) == prefix.wheel()
    assert repair.check_after.last_timer_log_flush_pos == prefix.wrote
    assert repair.units_removed == n - k


def test_repair_refuses_stale_units_that_are_no_suffix():
    w = Writer(400)
    for i, off in enumerate([0, 100, 5000, 200, 300]):  # the unit at 5000 is stale, later ones survive
        w.enqueue(1_700_000_000_000, 60_000 + 1000 * (i % 2), off, 100)
    facts = rules.RecoveryFacts(commit_end=400, timer_queue_max=4, **FACTS)
    tail, after = rules.read_tail(files_of(w), read_of(w), 400, 1000, facts, whole=True)
    assert tail.stale == 1 and not tail.suffix and tail.first_stale_elsewhere == 104
    assert "not a suffix" in " ".join(rules.warnings(files_of(w), tail, facts, file_size=400, skip_unknown_error=False))
    with pytest.raises(RecoveryError, match="not a suffix of the timer log: the unit at timer-log offset 104"):
        rules.plan_repair(files_of(w), tail, after, w.wheel(), facts, file_size=400, precision=1000)


def test_repair_refuses_malformed_files_and_warns_about_them():
    w = written(5, 400, [0], set())
    bad = rules.TimerFiles(log_files=((0, 400), (400, 399)), check=check.TimerCheck(), check_size=20,
                           wheel_size=1000)
    facts = rules.RecoveryFacts(commit_end=0, timer_queue_max=0, **FACTS)
    text = " ".join(rules.warnings(bad, None, facts, file_size=400, skip_unknown_error=False))
    assert "timerwheel is 1000 bytes" in text and "config/timercheck is 20 bytes" in text
    assert "timerlog/00000000000000000400 is 399 bytes" in text
    with pytest.raises(RecoveryError, match="timerwheel is 1000 bytes"):
        rules.plan_repair(bad, rules.TimerTail(end=0, scan_from=0, read_from=0, units=0, stale=0, cut=None,
                                               suffix=True, first_stale_elsewhere=None, stale_slot_ms=None),
                          {}, w.wheel(), facts, file_size=400, precision=1000)
    assert rules.file_problems(files_of(w), 400) == []


def test_no_warning_when_nothing_timer_related_is_cut():
    w = written(12, 400, [0, 1, 2], {3})
    files = files_of(w)
    facts = rules.RecoveryFacts(commit_end=1200, timer_queue_max=12, timer_queue_cut=False,
                                last_record_ms=1_700_000_000_500)
    tail, _ = rules.read_tail(files, read_of(w), 400, 1000, facts, wheel=w.wheel())
    assert tail.stale == 0 and tail.cut is None and not tail.wheel_past_end
    assert rules.warnings(files, tail, facts, file_size=400, skip_unknown_error=False) == []


def test_read_time_past_the_last_record_rewinds_only_when_deliveries_were_cut():
    w = written(4, 400, [0, 1, 2, 3], set())  # slots +100 s .. +103 s after write time
    tau = SLOT_TIMES[1] - 1  # the last surviving record: just before slot 1
    files = rules.TimerFiles(log_files=((0, 400),), check=check.TimerCheck(last_read_time_ms=SLOT_TIMES[3],
                                                                         last_timer_log_flush_pos=w.wrote),
                             check_size=4096, wheel_size=wheel.WHEEL_SIZE)
    facts = rules.RecoveryFacts(commit_end=400, timer_queue_max=4, timer_queue_cut=False, last_record_ms=tau)
    tail, after = rules.read_tail(files, read_of(w), 400, 1000, facts, whole=True)
    assert tail.due_between == 2  # slots 1 and 2 lie in (tau, lastReadTimeMs)
    assert any("lost" in x for x in rules.warnings(files, tail, facts, file_size=400, skip_unknown_error=False))
    r = rules.plan_repair(files, tail, after, w.wheel(), facts, file_size=400, precision=1000)
    assert r.check_after.last_read_time_ms == tau // 1000 * 1000 and "at-least-once" in r.read_time_rule
    facts_ok = rules.RecoveryFacts(commit_end=400, timer_queue_max=4, timer_queue_cut=False,
                                   last_record_ms=SLOT_TIMES[3])
    tail_ok, _ = rules.read_tail(files, read_of(w), 400, 1000, facts_ok)
    assert tail_ok.due_between == 0


def test_wheel_slots_past_the_log_end_are_found_and_cleared():
    w = written(6, 400, [0, 1], set())
    wh = bytearray(w.wheel())
    i = wheel.slot_index(SLOT_TIMES[2], 1000)
    wh[i * 32:(i + 1) * 32] = wheel.encode_slot(wheel.Slot(SLOT_TIMES[2] // 1000, 5000, 5052, 2, 0))
    facts = rules.RecoveryFacts(commit_end=600, timer_queue_max=6, timer_queue_cut=False, last_record_ms=None)
    tail, after = rules.read_tail(files_of(w), read_of(w), 400, 1000, facts, whole=True, wheel=bytes(wh))
    assert tail.wheel_past_end == (i,)
    r = rules.plan_repair(files_of(w), tail, after, bytes(wh), facts, file_size=400, precision=1000)
    assert r.slot_edits == {i: wheel.EMPTY} and not r.render_log


# ---------------------------------------------------------------------------------------------------------
# files the real 5.3.3 TimerMessageStore wrote


@pytest.fixture(scope="module")
def kit_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("timer-kit")
    with lzma.open(DATA / "timer-kit-5.3.3.tar.xz") as xz, tarfile.open(fileobj=xz) as tar:
        tar.extractall(root, filter="data")
    return root / "store"


def java_string_hash(s: str) -> int:
    h = 0
    for c in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def record_property(raw: bytes, name: str) -> str:
    """A property of a commit-log record read by searching its properties string (name\\x01value\\x02)."""
    at = raw.index(name.encode() + b"\x01") + len(name) + 1
    return raw[at:raw.index(b"\x02", at)].decode()


def test_kit_store_codecs_agree_with_the_queue_and_the_commit_log(kit_store):
    tl = (kit_store / "timerlog" / "00000000000000000000").read_bytes()
    scan = log.scan_file(tl)
    assert len(scan.units) == 130 and scan.stop == 6760 and scan.reason == "invalid"
    cq = np.frombuffer((kit_store / "consumequeue" / "rmq_sys_wheel_timer" / "0" / "00000000000000000000").read_bytes()
                       [:130 * 20], np.dtype([("phy", ">i8"), ("size", ">i4"), ("tags", ">i8")]))
    assert (scan.units["offset_py"] == cq["phy"]).all() and (scan.units["size_py"] == cq["size"]).all()
    assert (scan.units["topic_hash"] == java_string_hash("TopicTest")).all() and (scan.units["magic"] == 1).all()
    commitlog = (kit_store / "commitlog" / "00000000000000000000").read_bytes()
    for u in scan.units[:100]:  # the A records survive the loss: their TIMER_OUT_MS is the unit's slot time
        raw = commitlog[int(u["offset_py"]):int(u["offset_py"]) + int(u["size_py"])]
        assert int(u["write_time"]) + int(u["delay"]) == int(record_property(raw, "TIMER_OUT_MS"))
    tc = check.parse_timercheck((kit_store / "config" / "timercheck").read_bytes())
    assert (tc.last_read_time_ms, tc.last_timer_log_flush_pos, tc.last_timer_queue_offset,
            tc.master_timer_queue_offset) == (1795645104000, 6760, 130, 130)
    wh = (kit_store / "timerwheel").read_bytes()
    assert len(wh) == wheel.WHEEL_SIZE
    times = log.delayed_times(scan.units)
    used = wheel.used_slots(wh)
    assert sorted(used.tolist()) == sorted({wheel.slot_index(int(t), 1000) for t in times})
    for i in used.tolist():  # each slot's chain is exactly its units, newest first
        s = wheel.decode_slot(wh, i)
        mine = [k * 52 for k in range(130) if times[k] // 1000 == s.time]
        chain, pos = [], s.last_pos
        while pos != -1:
            chain.append(pos)
            pos = int(scan.units[pos // 52]["prev_pos"])
        assert chain == mine[::-1] and (s.first_pos, s.num, s.magic) == (mine[0], len(mine), 0)


def kit_files(store: Path) -> rules.TimerFiles:
    from jobs.pipeline.recover.timer import read_timer_files
    from jobs.pipeline.io.fs import location

    return read_timer_files(location(str(store)))


def test_kit_store_rules(kit_store):
    files = kit_files(kit_store)
    read = lambda s: (kit_store / "timerlog" / log.file_name(s)).read_bytes()  # noqa: E731
    wh = (kit_store / "timerwheel").read_bytes()
    size = KIT_SETTINGS["mappedFileSizeTimerLog"]
    # before the loss (a kill -9 image: every record there): nothing to say
    whole = rules.RecoveryFacts(commit_end=56550, timer_queue_max=130, timer_queue_cut=False, last_record_ms=None)
    tail, _ = rules.read_tail(files, read, size, 1000, whole, wheel=wh)
    assert tail.stale == 0 and rules.warnings(files, tail, whole, file_size=size, skip_unknown_error=False) == []
    # after it: the 30 B units are stale, the cursors are past the cut queue
    cut = rules.RecoveryFacts(commit_end=KIT["first_b_offset"], timer_queue_max=100, timer_queue_cut=True,
                              last_record_ms=None)
    tail, after = rules.read_tail(files, read, size, 1000, cut, whole=True, wheel=wh)
    assert (tail.stale, tail.cut, tail.end, tail.suffix) == (30, 5200, 6760, True)
    text = rules.warnings(files, tail, cut, file_size=size, skip_unknown_error=False)
    assert len(text) == 2 and "below 30 timer-log units" in text[0] and "ends at 100" in text[1]
    r = rules.plan_repair(files, tail, after, wh, cut, file_size=size, precision=1000)
    b_slot = wheel.slot_index(int(log.delayed_times(log.scan_file(read(0)).units)[100]), 1000)
    assert r.render_log == {0: 5200} and r.delete_log == () and r.slot_edits == {b_slot: wheel.EMPTY}
    assert (r.check_after.last_timer_log_flush_pos, r.check_after.last_timer_queue_offset,
            r.check_after.master_timer_queue_offset) == (5200, 100, 100)
    assert r.check_after.last_read_time_ms == files.check.last_read_time_ms


# ---------------------------------------------------------------------------------------------------------
# recover end to end (Spark)


def kit_conf(tmp: Path) -> Path:
    conf = tmp / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in KIT_SETTINGS.items()))
    return conf


def recover(*args: str) -> int:
    from jobs.recover import main

    return main(list(args))


def test_recover_out_copies_or_repairs_the_kit_store(spark, kit_store, tmp_path, capsys):
    conf = kit_conf(tmp_path)
    assert recover("--store", str(kit_store), "--broker-config", str(conf), "--out", str(tmp_path / "plain"),
                   "--json") == 0
    err = capsys.readouterr().err
    assert err.count("reput recover: warning: timer:") == 2
    for rel in ("timerlog/00000000000000000000", "timerwheel", "config/timercheck", "config/timermetrics"):
        assert (tmp_path / "plain" / rel).read_bytes() == (kit_store / rel).read_bytes()
    report = json.loads((tmp_path / "plain" / "reput-recover-report.json").read_text())
    assert report["timer"]["stale_units"] == 30 and report["timer"]["repair"] is None
    assert sum("timer:" in w for w in report["warnings"]) == 2

    assert recover("--store", str(kit_store), "--broker-config", str(conf), "--out", str(tmp_path / "fixed"),
                   "--repair-timer", "--json") == 0
    out = tmp_path / "fixed"
    tl = (kit_store / "timerlog" / "00000000000000000000").read_bytes()
    assert (out / "timerlog" / "00000000000000000000").read_bytes() == tl[:5200] + bytes(len(tl) - 5200)
    before, after = (kit_store / "timerwheel").read_bytes(), (out / "timerwheel").read_bytes()
    diff = np.flatnonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))
    assert len(diff) and {int(d) // 32 for d in diff} == {598731} and after[598731 * 32:598732 * 32] == bytes(32)
    tc = check.parse_timercheck((out / "config" / "timercheck").read_bytes())
    assert (tc.last_timer_log_flush_pos, tc.last_timer_queue_offset) == (5200, 100)
    assert (out / "config" / "timercheck").read_bytes()[56:] == (kit_store / "config" / "timercheck").read_bytes()[56:]
    assert (out / "config" / "timermetrics").read_bytes() == (kit_store / "config" / "timermetrics").read_bytes()

    # verify reports the stale references of the plain OUT as findings, none after the repair
    from jobs.verify import main as verify

    counts = {}
    for name in ("plain", "fixed"):
        verify(["--store", str(tmp_path / name), "--broker-config", str(conf), "--report", str(tmp_path / f"{name}.json")])
        report = json.loads((tmp_path / f"{name}.json").read_text())
        counts[name] = {k: v for k, v in report["finding_counts"].items() if k.startswith("timer.")}
    assert counts == {"plain": {"timer.stale_timer_unit": 30, "timer.timer_cursor_ahead": 2}, "fixed": {}}


def test_recover_in_place_repair_keeps_a_backup(spark, kit_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(kit_store, store)
    conf = kit_conf(tmp_path)
    assert recover("--store", str(store), "--broker-config", str(conf), "--in-place", "--backup-dir",
                   str(tmp_path / "backup"), "--repair-timer", "--json") == 0
    for rel in ("timerlog/00000000000000000000", "timerwheel", "config/timercheck"):
        assert (tmp_path / "backup" / rel).read_bytes() == (kit_store / rel).read_bytes()
    assert check.parse_timercheck((store / "config" / "timercheck").read_bytes()).last_timer_log_flush_pos == 5200


def add_timer_files(store: Path, file_size: int) -> int:
    """Timer files as the timer would have left them at the crash: one unit per rmq_sys_wheel_timer/0 entry the
    queue holds (the timer enqueues from the queue), cursors at its end. Returns the number of units."""
    qdir = store / "consumequeue" / "rmq_sys_wheel_timer" / "0"
    w = Writer(file_size)
    n = 0
    for f in sorted(qdir.iterdir()) if qdir.is_dir() else ():
        for phy, size, _ in struct.iter_unpack(">qiq", f.read_bytes()):
            if size <= 0:
                break
            w.enqueue(1_795_000_000_000, 3_600_000 + n % 7 * 1000, phy, size)
            n += 1
    (store / "timerlog").mkdir()
    w.save(store, 1_795_000_000_000, n)
    return n


@pytest.mark.parametrize("case", ["v5-unclean-11", "v5-unclean-torn-11", "v5-controller-unclean-11",
                                  "v5-controller-unclean-cqahead-11"])
def test_no_false_alarm_on_golden_v5_recoveries(spark, golden, tmp_path, case):
    """A kill -9 crash image cuts nothing the timer references: with timer files added (one unit per timer
    queue entry, as the timer leaves them), recover --dry-run plans no timer warning."""
    store = tmp_path / case
    shutil.copytree(GOLDEN / case, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    units = add_timer_files(store, 4096)
    conf = tmp_path / "broker.conf"
    conf.write_text((GOLDEN / case / "broker.conf").read_text() + "\nmappedFileSizeTimerLog=4096\n")
    plan_file = tmp_path / "plan.json"
    assert recover("--store", str(store), "--broker-config", str(conf), "--dry-run", "--json", "--plan",
                   str(plan_file)) == 0
    plan = json.loads(plan_file.read_text())
    assert plan["timer"]["stale_units"] == 0 and (plan["timer"]["units_read"] > 0) == (units > 0)
    assert not [w for w in plan["warnings"] if w.startswith("timer:")]
    assert (units > 0) == case.startswith("v5-unclean")


def test_dry_run_shows_the_repair_and_writes_nothing(spark, kit_store, tmp_path):
    before = {p: p.read_bytes() for p in kit_store.rglob("*") if p.is_file() and "timer" in str(p)}
    plan_file = tmp_path / "plan.json"
    assert recover("--store", str(kit_store), "--broker-config", str(kit_conf(tmp_path)), "--dry-run",
                   "--repair-timer", "--json", "--plan", str(plan_file)) == 0
    r = json.loads(plan_file.read_text())["timer"]["repair"]
    assert r["cut_timer_log_at"] == 5200 and r["units_removed"] == 30 and r["wheel_slots_cleared"] == 1
    assert r["timer_log_files_rewritten"] == {"00000000000000000000": {"bytes_kept": 5200}}
    assert r["timercheck_after"]["last_timer_queue_offset"] == 100
    assert {p: p.read_bytes() for p in before} == before


def test_repair_timer_refuses_a_store_without_timer_files(spark, golden, tmp_path):
    from jobs.pipeline.runtime.failure import JobError

    with pytest.raises(JobError, match="--repair-timer: the store has no timer files"):
        recover("--store", str(GOLDEN / "v5-unclean-11"), "--broker-config", str(GOLDEN / "v5-unclean-11" / "broker.conf"),
                "--out", str(tmp_path / "out"), "--repair-timer")
    assert not (tmp_path / "out").exists()


def test_assess_reads_a_store_and_refuses_what_it_cannot_repair(tmp_path):
    from jobs.pipeline.io.fs import location
    from jobs.pipeline.recover.timer import assess

    w = written(6, 400, [0, 1], set())
    w.save(tmp_path, 0, 6)
    facts = rules.RecoveryFacts(commit_end=300, timer_queue_max=3, timer_queue_cut=True, last_record_ms=None)
    conf = {"mappedFileSizeTimerLog": "400"}
    out = assess(location(str(tmp_path)), settings_from_mapping(conf).settings, facts, repair=True)
    assert out.tail.stale == 3 and out.repair.cut == w.appended[3][0] and out.changes
    off = settings_from_mapping({**conf, "timerWheelEnable": "false"}).settings
    quiet = assess(location(str(tmp_path)), off, facts, repair=False)
    assert quiet.warnings == [] and quiet.tail is None and "timerWheelEnable=false" in quiet.note
    with pytest.raises(RecoveryError, match="timerWheelEnable=false"):
        assess(location(str(tmp_path)), off, facts, repair=True)
    (tmp_path / "timerlog" / "notes.txt").write_text("x")
    with pytest.raises(RecoveryError, match="timerlog/notes.txt is not a timer-log file"):
        assess(location(str(tmp_path)), settings_from_mapping(conf).settings, facts, repair=True)
    assert assess(location(str(tmp_path / "none")), settings_from_mapping(conf).settings, facts, repair=False) is None


def test_dledger_mode_copies_timer_files_unchecked_and_refuses_the_repair(spark, golden, tmp_path):
    """The timer check covers plain commit logs: a DLedger-mode store's timer files are copied, said so."""
    from jobs.pipeline.runtime.failure import JobError
    from tests.conftest import restored_copy

    store = restored_copy("dledger-unclean-11", tmp_path / "store")
    written(3, 400, [0], set()).save(store, 0, 3)
    conf = tmp_path / "broker.conf"
    conf.write_text((GOLDEN / "dledger-unclean-11" / "broker.conf").read_text() + "\nmappedFileSizeTimerLog=400\n")
    plan_file = tmp_path / "plan.json"
    assert recover("--store", str(store), "--broker-config", str(conf), "--dry-run", "--json", "--plan",
                   str(plan_file)) == 0
    assert [w for w in json.loads(plan_file.read_text())["warnings"] if w.startswith("timer:")] == [
        "timer: the 5.x timer store (timerlog/, timerwheel, config/timercheck) is copied unchecked: the timer check "
        "and --repair-timer cover plain commit logs only"]
    with pytest.raises(JobError, match="--repair-timer: .* is a DLedger-mode store"):
        recover("--store", str(store), "--broker-config", str(conf), "--dry-run", "--repair-timer")
