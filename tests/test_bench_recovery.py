"""The bench's recovery and LMQ comparisons and its bytes-moved model, without timing anything: the byte
comparison of two stores, the kit's output, the medians and ratios, the tables, the flags, the model."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.__main__ import parse_args
from bench.broker import kit_cwd
from bench.compare import compare_stores, same_bytes
from jobs.pipeline.io.compare import union
from bench.iocount import IoCounts, parse_proc_io
from bench.iomodel import Place, StageBytes, bytes_table, estimate, model_table
from bench.recovery import RecoveryRuns, _links_hold, _sparse_last_segment, parse_kit_output, scale_lines, table


def _store(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


BASE = {"consumequeue/T/0/00000000000000000000": b"\1" * 40, "index/20261126010000000": b"ix" * 10,
        "checkpoint": b"\0" * 4096, "commitlog/00000000000000000000": b"rec" * 100}


def test_identical_stores_compare_identical_and_say_what_was_compared(tmp_path) -> None:
    a, b = _store(tmp_path / "a", BASE), _store(tmp_path / "b", BASE)
    c = compare_stores(a, b)
    assert c.identical and c.differences == {g: [] for g in ("consumequeue", "index", "checkpoint", "abort",
                                                             "commitlog")}
    assert c.summary() == "byte-identical (consumequeue 1, index 1, checkpoint 1, abort 0, commitlog 1 files)"


def test_every_group_reports_its_own_difference(tmp_path) -> None:
    """A changed consume-queue byte, a missing file, an extra abort and a checkpoint byte are each named."""
    a = _store(tmp_path / "a", BASE)
    b = _store(tmp_path / "b", {**BASE, "consumequeue/T/0/00000000000000000000": b"\1" * 39 + b"\2",
                                "consumequeue/T/1/00000000000000000000": b"x", "abort": b"",
                                "checkpoint": b"\0" * 4095 + b"\1"})
    c = compare_stores(a, b)
    assert not c.identical
    assert c.differences["consumequeue"] == ["only in reput: T/1/00000000000000000000", "T/0/00000000000000000000"]
    assert c.differences["abort"] == ["abort only in reput"] and c.differences["checkpoint"] == ["checkpoint"]
    assert c.differences["commitlog"] == [] and c.summary().startswith("DIFFER (consumequeue: only in reput")


def test_index_files_compare_by_content_in_name_order_and_names_are_a_note(tmp_path) -> None:
    """The broker names a new index file by its clock: another name with the same bytes is no difference."""
    a = _store(tmp_path / "a", {"index/20261126010000000": b"one", "index/20261126020000000": b"two"})
    b = _store(tmp_path / "b", {"index/20261126010000000": b"one", "index/20261126030000000": b"two"})
    c = compare_stores(a, b, ("index",))
    assert c.identical and "index file names differ" in c.notes[0]
    d = compare_stores(a, _store(tmp_path / "c", {"index/1": b"two", "index/2": b"one"}), ("index",))
    assert d.differences["index"] == ["20261126010000000 / 1", "20261126020000000 / 2"]


def test_sparse_files_compare_on_their_data_and_a_byte_in_a_hole_is_found(tmp_path) -> None:
    """A 6,000,000-byte consume-queue file with 20 bytes written equals the same bytes written densely;
    one nonzero byte deep in the other's hole differs."""
    sparse, dense, odd = tmp_path / "s", tmp_path / "d", tmp_path / "o"
    with open(sparse, "wb") as f:
        f.write(b"\7" * 20)
        f.truncate(6_000_000)
    dense.write_bytes(b"\7" * 20 + bytes(6_000_000 - 20))
    with open(odd, "wb") as f:
        f.write(b"\7" * 20)
        f.seek(5_000_000)
        f.write(b"\1")
        f.truncate(6_000_000)
    assert same_bytes(sparse, dense) and same_bytes(dense, sparse)
    assert not same_bytes(sparse, odd) and not same_bytes(odd, dense)
    os.link(sparse, tmp_path / "link")
    assert same_bytes(sparse, tmp_path / "link")
    assert not same_bytes(sparse, _store(tmp_path, {"short": b"\7" * 20}) / "short")


def test_range_union_merges_overlaps_and_neighbours() -> None:
    assert union([(0, 10), (20, 30)], [(5, 12), (30, 40), (50, 60)]) == [(0, 12), (20, 40), (50, 60)]
    assert union([], [(4, 8)]) == [(4, 8)] and union([], []) == []


def test_kit_output_lines_merge_and_other_lines_are_skipped() -> None:
    out = ("some log line\n{\"load_s\": 1.5, \"dispatch_s\": 0.25, \"flush_s\": 0.1, \"end_to_end_s\": 1.85, "
           "\"queues\": 64, \"name\": \"x\"}\n{\"process_wall_s\": 3.210}\n{broken\n")
    assert parse_kit_output(out) == {"load_s": 1.5, "dispatch_s": 0.25, "flush_s": 0.1, "end_to_end_s": 1.85,
                                     "queues": 64, "process_wall_s": 3.21}


def _runs() -> RecoveryRuns:
    r = RecoveryRuns(4_000_000, 2_178_705_189, {"undispatched_records": 7_704, "undispatched_bytes": 4_194_500,
                                                 "torn": {"offset": 1}})
    r.broker = [{"load_s": 2.0, "dispatch_s": 3.0, "flush_s": 1.0, "end_to_end_s": e, "process_wall_s": w,
                 "other_load_cores": 0.5} for e, w in ((6.0, 8.0), (7.0, 9.0), (5.0, 7.5))]
    r.reput = [{"validate_s": 1.0, "write_s": 2.0, "total_s": t, "process_wall_s": w, "other_load_cores": 1.25}
               for t, w in ((3.0, 6.0), (4.0, 5.0), (3.5, 7.0))]
    return r


def test_recovery_ratios_are_of_medians_whole_process_and_after_start_up() -> None:
    r = _runs()
    assert r.medians(r.broker, ("end_to_end_s", "process_wall_s")) == {"end_to_end_s": 6.0, "process_wall_s": 8.0}
    assert r.ratios() == {"whole_process": 0.75, "after_start_up": 0.583}
    text = table(r)
    assert "run as:" not in text
    r.recover_args = ("--link-sealed-segments",)
    assert "jobs.recover run as: --out --link-sealed-segments" in table(r)
    assert "7,704 records, 4.2 MB to re-dispatch, torn last record yes" in text
    assert "outputs not compared" in text and "other load 0.50-1.25 cores" in text
    assert "[8.00, 9.00, 7.50]" in text and "ratio reput/broker, whole process          0.75" in text
    assert r.to_dict()["ratios_reput_over_broker"] == {"whole_process": 0.75, "after_start_up": 0.583}


def test_a_figure_missing_from_one_run_has_no_median() -> None:
    r = _runs()
    del r.reput[1]["validate_s"]
    assert "validate_s" not in r.medians(r.reput, ("validate_s", "total_s"))


def test_scale_lines_say_whether_the_ratio_grew() -> None:
    small, large = _runs(), _runs()
    large.records = 16_000_000
    for x in large.reput:
        x["process_wall_s"] *= 1.5
    text = scale_lines(small, large)
    assert "4,000,000 -> 16,000,000 messages" in text
    assert "whole_process    0.75 -> 1.12: x1.50" in text and "after_start_up   0.58 -> 0.58: x1.00" in text


def test_crashed_store_is_reused_only_while_its_sealed_segments_are_the_bench_stores(tmp_path) -> None:
    store = _store(tmp_path / "store", {"commitlog/00": b"a", "commitlog/01": b"b"})
    crashed = tmp_path / "crash"
    (crashed / "commitlog").mkdir(parents=True)
    os.link(store / "commitlog/00", crashed / "commitlog/00")
    (crashed / "commitlog/01").write_bytes(b"b")
    assert _links_hold(crashed, store)
    (crashed / "commitlog/00").unlink()
    (crashed / "commitlog/00").write_bytes(b"a")  # a copy: the bench store was regenerated since
    assert not _links_hold(crashed, store)


def test_kit_scripts_run_where_relative_classpath_entries_resolve(tmp_path) -> None:
    build = tmp_path / "oracle" / "build-plain"
    (build / "classes").mkdir(parents=True)
    (build / "classpath.txt").write_text("build-plain/classes:/usr/share/java/gson.jar\n")
    assert kit_cwd(build) == (tmp_path / "oracle").resolve()
    (build / "classpath.txt").write_text("/abs/classes:/usr/share/java/gson.jar\n")
    assert kit_cwd(build) == build.resolve()


@pytest.mark.parametrize("argv, message", [
    (["--broker-build", "b", "--lmq-compare-queues", "20001"], "1 to 20,000"),
    (["--recovery-scale-messages", "16000000"], "needs --broker-build"),
    (["--broker-build", "b", "--recovery-scale-messages", "1000"], "more than --messages"),
    (["--broker-build", "b", "--broker-compare", "rebuild,nope"], "unknown --broker-compare"),
])
def test_comparison_flags_are_checked(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_comparison_flags_default_to_all_three_within_the_brokers_lmq_limit() -> None:
    a = parse_args(["--broker-build", "b", "--recovery-scale-messages", "16000000"])
    assert a.broker_compare == "rebuild,recovery,lmq" and a.lmq_compare_queues == 18_000
    assert a.recovery_scale_messages == 16_000_000 and "recover" in a.stages.split(",") and a.recover_args == ()
    assert parse_args(["--broker-build", "b", "--recover-args=--link-sealed-segments"]).recover_args == (
        "--link-sealed-segments",)


def test_proc_io_text_parses_and_counts_subtract() -> None:
    text = ("rchar: 1000\nwchar: 300\nsyscr: 5\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\n"
            "cancelled_write_bytes: 4096\n")
    c = parse_proc_io(text)
    assert c == IoCounts(1000, 300, 4096, 8192, 4096) and c.file_bytes_written == 8192  # gross: see the property
    assert (c - IoCounts(rchar=400)).rchar == 600 and (c + c).wchar == 600


def test_model_takes_the_larger_bound_and_says_which() -> None:
    """10 GB store measured: 20 CPU s, 2 GB read back, 5 GB written (3 GB of it output). For 500 GB at 2.5/2 GB/s on one
    device with 16 cores: CPU 1,000 CPU s / 16 + 3 = 65.5 s; I/O (500 + 100) / 2.5 + 250 / 2 + 3 = 368 s."""
    b = StageBytes("jobs.rebuild (CQ + index)", 10_000_000_000, 2_000_000_000, 6_000_000_000, 5_000_000_000, 20.0,
                   3_000_000_000)
    nvme = Place("nvme", 2.5, 2.0, 16, True, "")
    e = estimate(b, 500e9, nvme, 3.0)
    assert e.cpu_s == pytest.approx(65.5) and e.io_s == pytest.approx(368.0) and e.bound == "I/O"
    s3 = Place("s3", 4.4, 4.4, 32, False, "")
    e3 = estimate(b, 500e9, s3, 3.0)
    assert e3.io_s == pytest.approx(600e9 / 4.4e9 + 3.0) and e3.seconds == e3.io_s
    cpu_heavy = StageBytes("x", 10_000_000_000, 0, 0, 0, 2000.0)
    mapped = StageBytes("y", 10, 0, 9, 9, 1.0, output_bytes=4)  # work files mapped back: not in rchar
    assert mapped.read_back == 5
    assert estimate(cpu_heavy, 500e9, nvme, 3.0).bound == "CPU"
    text = model_table(b, 500, 3.0, (nvme,))
    assert "2.00 CPU s per GB, 0.200 bytes read back and 0.500 written" in text
    assert text.splitlines()[-1].split()[-2:] == ["368", "I/O"]
    assert "5,000" in bytes_table([b]) and "0.500" in bytes_table([b])


def test_crash_name_keeps_the_kits_default_and_names_another_lag():
    """The crash at the kit's default lag keeps the name earlier runs reuse; another lag gets its own store."""
    from bench.recovery import KIT_LAG_BYTES, crash_name
    store = Path("/x/store-4000000msg-1024mib-seed7")
    assert crash_name(store, KIT_LAG_BYTES) == "crash-store-4000000msg-1024mib-seed7"
    assert crash_name(store, 1 << 30) == "crash-store-4000000msg-1024mib-seed7-lag1024mib"


def test_crash_lag_flag_parses_sizes():
    from bench.__main__ import parse_args
    assert parse_args(["--crash-lag-bytes", "512m"]).crash_lag_bytes == 512 << 20
    assert parse_args([]).crash_lag_bytes == 4 << 20


def test_the_crashed_stores_last_segment_is_made_sparse_with_the_same_bytes(tmp_path) -> None:
    """make_crash.py's copy writes the last segment's zero tail; the bench makes it a hole again (as a killed
    broker leaves it), the bytes unchanged, the other segments and a second call untouched."""
    log = tmp_path / "commitlog"
    log.mkdir()
    sealed, last = log / "00000000000000000000", log / "00000000000004194304"
    sealed.write_bytes(b"\x01" * (4 << 20))
    data = os.urandom(100_000) + b"\0" * ((4 << 20) - 100_000)
    last.write_bytes(data)
    assert last.stat().st_blocks * 512 >= len(data)
    sealed_ino = sealed.stat().st_ino
    _sparse_last_segment(tmp_path)
    assert last.read_bytes() == data
    assert last.stat().st_blocks * 512 < 2 << 20
    assert sealed.stat().st_ino == sealed_ino
    ino = last.stat().st_ino
    _sparse_last_segment(tmp_path)
    assert last.stat().st_ino == ino


def test_round_order_rotates_who_goes_first() -> None:
    from bench.recovery import round_order
    assert [round_order(i, "out") for i in range(2)] == [("reput", "broker"), ("broker", "reput")]
    assert [round_order(i, "in-place") for i in range(2)] == [("in-place", "broker"), ("broker", "in-place")]
    assert [round_order(i, "both")[0] for i in range(3)] == ["reput", "broker", "in-place"]
    assert all(sorted(round_order(i, "both")) == ["broker", "in-place", "reput"] for i in range(3))


def test_recover_mode_and_cold_flags() -> None:
    a = parse_args(["--broker-build", "b"])
    assert a.recover_mode == "out" and a.cold is False
    a = parse_args(["--broker-build", "b", "--recover-mode", "both", "--cold"])
    assert a.recover_mode == "both" and a.cold is True
    with pytest.raises(SystemExit):
        parse_args(["--recover-mode", "sideways"])


def test_in_place_table_names_the_mode_the_cache_and_both_ratios() -> None:
    r = _runs()
    r.mode, r.cold = "both", True
    r.in_place = [{"validate_s": 0.5, "switch_s": 0.1, "total_s": t, "process_wall_s": w, "other_load_cores": 0.5}
                  for t, w in ((1.5, 4.0), (2.0, 4.5), (1.0, 3.0))]
    text = table(r)
    assert "jobs.recover --out and --in-place, cold page cache" in text
    assert "jobs.recover --in-place switch_s" in text and "jobs.recover --out total_s" in text
    assert "ratio reput --in-place/broker, whole process" in text
    assert "ratio --in-place/--out total_s" in text and "--in-place not compared" in text
    d = r.to_dict()
    assert d["recover_mode"] == "both" and d["page_cache"] == "cold"
    assert d["in_place_over_out"] == {"total_s": round(1.5 / 3.5, 3), "process_wall_s": round(4.0 / 6.0, 3)}
    assert d["ratios_in_place_over_broker"] == {"whole_process": 0.5, "after_start_up": 0.25}
    only = _runs()
    only.mode, only.reput, only.in_place = "in-place", [], r.in_place
    assert only.ratios() == {"whole_process": 0.5, "after_start_up": 0.25}
    assert "--out" not in table(only).split("\n", 3)[1]


def test_fresh_copy_is_independent_sparse_and_evict_drops_the_pages(tmp_path) -> None:
    """The in-place run's store: every file copied (no shared inode with the crashed store, holes kept); evict
    fsyncs and drops each file's pages (fincore-free check: mincore through mmap is not portable, so only that
    it runs over every file and leaves the bytes)."""
    from bench.recovery import evict, fresh_copy
    src = _store(tmp_path / "crash", BASE)
    with open(src / "commitlog" / "00000000000004194304", "wb") as f:
        f.write(b"\7" * 4096)
        f.truncate(4 << 20)
    dst = fresh_copy(src, tmp_path / "copy")
    for p in src.rglob("*"):
        if p.is_file():
            q = dst / p.relative_to(src)
            assert q.read_bytes() == p.read_bytes() and q.stat().st_ino != p.stat().st_ino
    assert (dst / "commitlog" / "00000000000004194304").stat().st_blocks * 512 < 1 << 20
    assert evict(dst) == len([p for p in src.rglob("*") if p.is_file()])
    assert (dst / "checkpoint").read_bytes() == BASE["checkpoint"]


def test_kit_prepare_links_sealed_segments_and_copies_the_rest_as_the_script_does(tmp_path) -> None:
    from bench.recovery import kit_prepare
    src = _store(tmp_path / "crash", {**BASE, "commitlog/00000000000004194304": b"last", "broker.conf": b"x=1",
                                      "config/topics.json": b"{}", "abort": b"", "lock": b"l"})
    work = kit_prepare(src, tmp_path / "work")
    assert (work / "commitlog/00000000000000000000").stat().st_ino == (src / "commitlog/00000000000000000000").stat().st_ino
    last = work / "commitlog/00000000000004194304"
    assert last.read_bytes() == b"last" and last.stat().st_ino != (src / "commitlog/00000000000004194304").stat().st_ino
    assert (work / "config/topics.json").read_bytes() == b"{}" and (work / "abort").exists()
    assert not (work / "broker.conf").exists() and not (work / "lock").exists()
    assert (work / "consumequeue/T/0/00000000000000000000").read_bytes() == BASE["consumequeue/T/0/00000000000000000000"]


def test_a_broker_run_that_does_not_end_is_stopped_with_its_children(tmp_path) -> None:
    """run_bounded kills the whole process group (the kit's script and the java it started) after the timeout
    and says so; a run that ends is returned as it is."""
    import signal
    import time

    from bench.broker import BrokerRunError
    from bench.recovery import run_bounded

    done = run_bounded(["bash", "-c", "echo '{\"process_wall_s\": 1.5}'"], timeout=30)
    assert done.returncode == 0 and parse_kit_output(done.stdout) == {"process_wall_s": 1.5}
    pid_file = tmp_path / "child.pid"
    t0 = time.monotonic()
    with pytest.raises(BrokerRunError, match="no end after 1 s"):
        run_bounded(["bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], timeout=1)
    assert time.monotonic() - t0 < 30
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the script's child outlived the timeout")
