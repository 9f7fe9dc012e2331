"""The bench's bookkeeping (no timing here): which processes count as Python workers, and how the
rate-against-store-size comparison reduces its runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.memory import WORKER_MARKS, _is_python
from bench.scale import ScaleRuns, ScaleStore, table


def test_the_driver_jvm_naming_the_daemon_module_is_no_worker() -> None:
    """The JVM's arguments name the daemon module (spark.python.daemon.module=...) but it is no worker: its heap is
    not a worker's peak; Python daemons and workers still count."""
    jvm = b"\0".join([b"/usr/lib/jvm/java-17-openjdk-amd64/bin/java", b"-cp", b"/x/jars/*",
                      b"spark.python.daemon.module=jobs.pipeline.runtime.worker_daemon", b"pyspark-shell"])
    worker = b"\0".join([b"/work/main/.venv/bin/python3.11", b"-m", b"jobs.pipeline.runtime.worker_daemon", b"--warm"])
    daemon = b"\0".join([b"python", b"-m", b"pyspark.daemon"])
    assert any(m in jvm for m in WORKER_MARKS) and not _is_python(jvm)
    assert _is_python(worker) and _is_python(daemon)


def test_scale_ratio_is_the_median_rate_of_the_largest_over_the_smallest() -> None:
    """Medians per store (not the fastest run), largest store over smallest, whatever order stores came in."""
    small, large = ScaleStore(Path("s"), 4_000_000, 1), ScaleStore(Path("l"), 16_000_000, 4)
    runs = ScaleRuns([small, large], {
        4_000_000: [{"seconds": s, "decode_s": 1.0, "build_s": 0.5, "peak_worker_mib": 400.0, "other_load_cores": 0.0}
                    for s in (1.0, 2.0, 4.0)],
        16_000_000: [{"seconds": s, "decode_s": 3.0, "build_s": 2.0, "peak_worker_mib": 410.0, "other_load_cores": 0.1}
                     for s in (4.0, 8.0, 5.0)]})
    assert runs.median_rate(4_000_000) == 2_000_000 and runs.median_rate(16_000_000) == 3_200_000
    assert runs.ratio() == 1.6
    text = table(runs)
    assert "median 2.00 M msg/s (runs 4.00 2.00 1.00)" in text and "1.60" in text
    assert runs.to_dict()["ratio_largest_over_smallest"] == 1.6


def test_cpu_of_a_process_that_left_the_tree_is_not_subtracted() -> None:
    """A process gone between two readings (a JVM orphaned when its driver exits) takes its CPU along:
    each process present at the end counts what it added, never a negative share (no more "other load" than the
    machine has cores); a reused pid with another start time is new."""
    from bench.cpu import _used_since
    before = {(10, 1): 5.0, (11, 1): 30.0, (12, 7): 2.0}
    after = {(10, 1): 6.5, (12, 9): 0.25, (13, 3): 1.0}
    assert _used_since(before, after) == 1.5 + 0.25 + 1.0


def test_progress_lines_give_the_run_count_and_an_eta_once_a_run_has_finished(capsys, monkeypatch) -> None:
    """Before the first run: no ETA (nothing to average); after 2 of 10 runs in 30 s: 8 more at 15 s each."""
    import bench.report as report
    monkeypatch.setattr(report.time, "monotonic", lambda: 130.0)
    report.progress("scale (4,000,000 messages)", 0, 10, 130.0)
    report.progress("side by side (broker)", 2, 10, 100.0)
    assert capsys.readouterr().out.splitlines() == [
        "[bench] scale (4,000,000 messages): run 1/10, 0s so far",
        "[bench] side by side (broker): run 3/10, 30s so far, ETA 120s"]


def _reopen_events(appended: int = 0) -> tuple[list[tuple[float, dict]], float, float]:
    """The kit's `reopen` events as they arrive (times in epoch seconds), shaped like a real run's: JVM up 1.2 s
    after launch, load 8.793 s, start() 0.453 s, leader after 0.7 s, caught up 8.4 s after start() was called,
    the kit's quiet polls 1.5 s, shutdown() 1.3 s, exit 0.2 s."""
    launched = 1_000.0
    start_begin = launched + 1.2 + 8.793
    size = 2_370_705_595
    state = {"role": "LEADER", "ledgerBeginIndex": 0, "ledgerEndIndex": 3_999_999, "committedIndex": 3_999_999,
             "writePos": size + appended}
    events = [
        (start_begin + 0.46, {"event": "store_open", "dledger": True, "load_ms": 8793, "start_ms": 453,
                              "now": round((start_begin + 0.453) * 1e3),
                              "dledger_after_load": {"role": "CANDIDATE", "committedIndex": -1, "writePos": size}}),
        (start_begin + 0.71, {"event": "role_change", "term": 0, "role": "LEADER",
                              "at": round((start_begin + 0.7) * 1e3)}),
        (start_begin + 8.41, {"event": "changed_to_master", "at": round((start_begin + 8.4) * 1e3)}),
        (start_begin + 8.43, {"event": "leader_ready", "at": round((start_begin + 8.42) * 1e3), "dledger": state}),
        (start_begin + 9.9, {"event": "settled", "maxPhy": size + appended, "appended_bytes": size, "dledger": state}),
        (start_begin + 11.2, {"event": "shutdown", "clean": True}),
    ]
    return events, launched, start_begin + 11.4


def test_reopen_events_give_figures_timed_like_rebuild_timer() -> None:
    """load = the kit's load_ms; dispatch from start() to changed_to_master; flush = shutdown() less its 1 s
    sleep; the kit's quiet-poll window (settled - changed_to_master) is taken out of the whole process."""
    from bench.dledger_broker import reopen_figures
    events, launched, exited = _reopen_events()
    f = reopen_figures(events, launched, exited)
    assert f["jvm_start_s"] == 1.2 and f["load_s"] == 8.793 and f["dispatch_s"] == 8.4
    assert f["leader_elected_s"] == 0.7 and f["settle_wait_s"] == 1.5 and f["shutdown_s"] == 1.3
    assert f["flush_s"] == 0.3 and f["end_to_end_s"] == 17.493 and f["exit_s"] == 0.2
    assert f["process_wall_raw_s"] == 21.393 and f["process_wall_s"] == 19.893
    assert f["entries"] == 4_000_000 and f["max_phy_offset"] == 2_370_705_595


def test_reopen_that_appended_or_never_settled_is_an_error_not_a_figure() -> None:
    """A record appended during reopen (a due delay message delivered) would make the broker's output another
    store's; a missing event or the kit's settle timeout leaves nothing to time: each is a named error."""
    from bench.broker import BrokerRunError
    from bench.dledger_broker import reopen_figures
    events, launched, exited = _reopen_events(appended=412)
    with pytest.raises(BrokerRunError, match="wrote 412 bytes"):
        reopen_figures(events, launched, exited)
    events, launched, exited = _reopen_events()
    with pytest.raises(BrokerRunError, match="no 'changed_to_master' event"):
        reopen_figures([e for e in events if e[1]["event"] != "changed_to_master"], launched, exited)
    with pytest.raises(BrokerRunError, match="timed out"):
        reopen_figures(events + [(exited, {"event": "settle_timeout"})], launched, exited)


def test_only_the_kits_json_events_are_read_from_its_output() -> None:
    from bench.dledger_broker import parse_event_line
    assert parse_event_line(b'{"event":"shutdown","clean":true}\n') == {"event": "shutdown", "clean": True}
    assert parse_event_line(b"SLF4J: Class path contains multiple bindings\n") is None
    assert parse_event_line('{"truncated":') is None and parse_event_line('{"no_event": 1}') is None


def test_dledger_side_by_side_table_gives_medians_both_ratios_and_what_was_compared() -> None:
    """reput / broker on medians (whole process; after start-up against load + dispatch + flush), DLedger over
    plain rebuild on medians and as the median of the per-round ratios."""
    from bench.dledger_broker import DledgerSideBySide, table
    broker_runs = [{"jvm_start_s": 0.5, "load_s": 8.0 + d, "dispatch_s": 8.0, "flush_s": 0.2, "end_to_end_s": 16.2 + d,
                    "process_wall_s": 20.0 + d, "settle_wait_s": 1.5, "other_load_cores": 0.5} for d in (0, 2, 4)]
    reput = [{"decode_s": 1.0, "build_s": 1.0, "total_s": t, "process_wall_s": t + 4.0, "other_load_cores": 0.1}
             for t in (3.0, 2.0, 6.0)]
    plain = [{"decode_s": 1.0, "build_s": 1.0, "total_s": t, "process_wall_s": t + 4.0, "other_load_cores": 1.0}
             for t in (2.0, 2.0, 5.0)]
    s = DledgerSideBySide(broker_runs, reput, plain, True, {"consume_queue_files": 64, "index_files": 1})
    ratios = s.ratios()
    assert ratios["reput_over_broker_whole_process"] == round(7.0 / 22.0, 3)
    assert ratios["reput_after_start_up_over_broker_load_dispatch_flush"] == round(3.0 / 18.2, 3)
    assert ratios["dledger_over_plain_after_start_up"] == 1.5
    assert ratios["dledger_over_plain_after_start_up_median_of_pairs"] == 1.2  # 1.5, 1.0, 1.2
    text = table(s)
    assert "outputs byte-identical: 64 consume-queue files, 1 index file(s)" in text
    assert "other load 0.10-1.00 cores" in text and "3 interleaved rounds" in text
    assert "reput_over_broker_whole_process" in text and "0.32" in text
    assert s.to_dict()["broker_median_s"]["settle_wait_s"] == 1.5


def test_kit_classpath_resolves_entries_written_relative_to_the_builds_parent(tmp_path) -> None:
    """build.sh writes `build-dledger/classes` relative to where it ran; the bench runs elsewhere."""
    from bench.broker import kit_classpath
    build = tmp_path / "build-dledger"
    (build / "classes").mkdir(parents=True)
    (build / "classpath.txt").write_text("build-dledger/classes:/usr/share/java/gson.jar\n")
    assert kit_classpath(build) == f"{build / 'classes'}:/usr/share/java/gson.jar"


def test_dledger_broker_comparison_needs_the_dledger_store(capsys) -> None:
    from bench.__main__ import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--dledger-broker-build", "/x"])
    assert e.value.code == 2 and "needs --dledger" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--dledger", "--broker-build", "/x"])
    assert "use --dledger-broker-build" in capsys.readouterr().err
    assert parse_args(["--dledger", "--dledger-broker-build", "/x"]).dledger_broker_build.name == "x"


def test_the_brokers_work_store_holds_copies_of_the_data_files_only(tmp_path) -> None:
    """No DLedger index, checkpoint or anything else goes along (the broker rebuilds them), and the files are
    copies: the broker writing to its data files must not reach the bench store."""
    from bench.broker import BrokerRunError
    from bench.dledger_broker import data_only_copy
    store = tmp_path / "store"
    for rel, data in (("dledger-n0/data/00000000000000000000", b"\1" * 64), ("dledger-n0/index/00000000000000000000",
                      b"\2" * 32), ("dledger-n0/checkpoint", b"committedIndex=3\n"), ("consumequeue/T/0/0", b"\3"),
                      ("broker.conf", b"enableDLegerCommitLog=true\n")):
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_bytes(data)
    work = data_only_copy(store, tmp_path / "work")
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == [
        "dledger-n0/data/00000000000000000000"]
    copy = work / "dledger-n0/data/00000000000000000000"
    original = store / "dledger-n0/data/00000000000000000000"
    assert copy.read_bytes() == b"\1" * 64 and copy.stat().st_ino != original.stat().st_ino
    (store / "dledger-n1/data").mkdir(parents=True)
    with pytest.raises(BrokerRunError, match="found 2"):
        data_only_copy(store, tmp_path / "work")


@pytest.mark.parametrize("broker_cq", [b"cq", b"cQ"])
def test_dledger_rounds_alternate_and_the_first_rounds_outputs_are_compared(tmp_path, monkeypatch,
                                                                             broker_cq: bytes) -> None:
    """Round 1: reput DLedger, reput plain, broker; round 2 the reverse. The first round's consume queues and
    index files (by content in name order: the broker names them by its clock) decide `identical`."""
    import bench.dledger_broker as db
    calls = []

    def write(root: Path, index_name: str) -> None:
        (root / "consumequeue/T/0").mkdir(parents=True, exist_ok=True)
        (root / "consumequeue/T/0/00000000000000000000").write_bytes(broker_cq if "broker" in root.name else b"cq")
        (root / "index").mkdir(exist_ok=True)
        (root / "index" / index_name).write_bytes(b"ix")

    def broker(build, store, work):
        calls.append("broker")
        write(work, "20261125230038399")
        (work / "checkpoint").write_bytes(b"not compared")
        return {"end_to_end_s": 10.0, "process_wall_s": 12.0}

    def reput(store, out, master, split_size):
        calls.append(store.name)
        write(out, "20260101000000000")
        return {"total_s": 2.0, "process_wall_s": 6.0}

    monkeypatch.setattr(db, "run_dledger_broker", broker)
    monkeypatch.setattr(db, "run_reput", reput)
    monkeypatch.setattr(db, "warm_page_cache", lambda store: 0.0)
    s = db.side_by_side(Path("b"), tmp_path / "dl", tmp_path / "plain", tmp_path, 2, "local[2]", 1 << 27)
    assert calls == ["dl", "plain", "broker", "broker", "plain", "dl"]
    assert s.identical is (broker_cq == b"cq")
    assert s.compared["consume_queue_files"] == 1 and s.compared["index_files"] == 1
    assert s.ratios()["reput_over_broker_whole_process"] == 0.5
    assert not any((tmp_path / d).exists() for d in ("dledger-broker-store", "dledger-reput-out", "plain-reput-out"))


def test_convert_pairs_alternate_and_give_the_ratio_of_the_medians(tmp_path, monkeypatch, capsys) -> None:
    """bench.convert_pairs: the order alternates, each run is a whole process of its job, the table gives the
    medians, the ratio of the medians, each pair's ratio and issue 21's target."""
    from bench import convert_pairs

    order = []
    walls = {"convert": iter([9.0, 6.0, 7.5]), "rebuild": iter([3.0, 4.0, 5.0])}

    probes = iter([2.0, 1.0, 3.0])

    def fake_run(job, store, out, master, split_size):
        order.append(job)
        figures = {"total_s": 1.0, "process_wall_s": next(walls[job]), "other_load_cores": 0.5}
        return {**figures, "write_s": 1.5, "new_log_bytes": 4_000_000_000} if job == "convert" else figures

    monkeypatch.setattr(convert_pairs, "run_job", fake_run)
    monkeypatch.setattr(convert_pairs, "warm_page_cache", lambda store: 0.0)
    monkeypatch.setattr(convert_pairs.disk, "direct_write_gbps", lambda root: next(probes))
    runs = convert_pairs.side_by_side(tmp_path, tmp_path, 3, "local[2]", 1 << 27)
    assert order == ["convert", "rebuild", "rebuild", "convert", "convert", "rebuild"]
    s = convert_pairs.summary(runs)
    assert s["median_process_wall_s"] == {"convert": 7.5, "rebuild": 4.0} and s["ratio"] == 1.875
    assert s["pair_ratios"] == [3.0, 1.5, 1.5] and s["target"] == 1.5
    assert s["disk_bound"] == {"disk_gbps_median": 2.0, "disk_gbps_range": [1.0, 3.0], "new_log_bytes": 4_000_000_000,
                               "device_s": 2.0, "write_job_s_median": 1.5}
    text = convert_pairs.table(runs)
    assert "convert / rebuild: 1.875 (pairs: 3.0, 1.5, 1.5); issue 21's target <= 1.5" in text
    assert "took 2.0 GB/s (probed before each convert: 1.0-3.0); convert's new commit log, 4.00 GB, needs 2.0 s" in text


def test_the_disk_probe_writes_with_o_direct_and_leaves_nothing(tmp_path, monkeypatch) -> None:
    """bench.disk: a rate where the filesystem takes O_DIRECT (its files removed), None where it refuses it (the
    segment writers then write through the page cache, which is no measure of the device)."""
    import errno
    import os

    from bench import disk

    real_open = os.open

    def refuse(path, flags, mode=0o777):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    with monkeypatch.context() as m:
        m.setattr(os, "open", refuse)
        assert disk.direct_write_gbps(tmp_path, total=32 << 20) is None and not list(tmp_path.iterdir())
    rate = disk.direct_write_gbps(tmp_path, total=32 << 20)
    if rate is None:
        pytest.skip(f"{tmp_path} refuses O_DIRECT (tmpfs): the rate cannot be probed there")
    assert rate > 0 and not list(tmp_path.iterdir())


def test_lmq_decode_stage_refuses_a_store_that_is_not_the_plain_twin(capsys) -> None:
    """Stage lmq-decode compares the plain bench store with its LMQ twin: an LMQ or DLedger bench store is refused."""
    from bench.__main__ import parse_args

    for flags in (["--lmq-share", "0.2"], ["--dledger"]):
        with pytest.raises(SystemExit):
            parse_args(["--stages", "lmq-decode", *flags])
        assert "stage lmq-decode compares the plain bench store" in capsys.readouterr().err


def test_lmq_decode_rounds_alternate_and_the_ratio_is_per_message_against_the_target(tmp_path, spark) -> None:
    """Interleaved rounds on two small generated stores: the plain one's rows are its messages, the LMQ twin's
    more (its multi-dispatch entries), no split left to the reference, and the table states the ratio of the
    medians against the 1.5 target."""
    from bench import lmq_decode
    from storegen.synth import StoreSpec, write_bench_store

    spec = StoreSpec(messages=3000, segment_size=1 << 20)
    plain, lmq = tmp_path / "plain", tmp_path / "lmq"
    write_bench_store(plain, spec, progress=False)
    write_bench_store(lmq, StoreSpec(messages=3000, segment_size=1 << 20, lmq_share=0.5, lmq_queues=50),
                      progress=False)
    runs = lmq_decode.side_by_side(spark, plain, lmq, tmp_path, 2, 1 << 20, 3000, 50)
    assert [len(runs.runs[k]) for k in ("plain", "lmq")] == [2, 2]
    assert {r["cq_rows"] for r in runs.runs["plain"]} == {3000}
    assert min(r["cq_rows"] for r in runs.runs["lmq"]) > 3000 + 3000 * 0.5 * 0.9  # 1-3 names each
    assert all(r["fallback_splits"] == 0 and r["records"] == 3000 for k in runs.runs for r in runs.runs[k])
    text = lmq_decode.table(runs)
    assert f"LMQ / plain per message: {runs.ratio():.2f} (target <= 1.5: " in text
    assert not (tmp_path / "decode-work").exists()
    fake = lmq_decode.DecodeRuns(10, 5, {"plain": [{"seconds": s, "cq_rows": 10, "fallback_splits": 0,
                                                    "other_load": 0.0} for s in (1.0, 2.0, 3.0)],
                                         "lmq": [{"seconds": s, "cq_rows": 15, "fallback_splits": 1,
                                                  "other_load": 0.0} for s in (3.0, 4.0, 9.0)]})
    assert fake.ratio() == 2.0
    assert "2.00 (target <= 1.5: NOT met)" in lmq_decode.table(fake) and "3 split decodes fell back" in lmq_decode.table(fake)


def test_the_scale_out_model_keeps_what_is_outside_the_tasks_and_spreads_the_tasks() -> None:
    """bench.scaleout.predict: a stage's time outside its tasks stays, its tasks' time is divided by the cores but
    not below the longest task; start-up and the job's rest stay. speedups() puts the medians, the measured ratio
    and the model's side by side."""
    from bench.scaleout import ScaleOutRuns, predict, speedups

    one = {"decode_s": 5.0, "decode_task_s": 4.0, "longest_decode_task_s": 1.0, "build_s": 3.0,
           "consumequeue_task_s": 1.0, "index_task_s": 1.5, "longest_consumequeue_task_s": 0.2,
           "longest_index_task_s": 1.5, "total_s": 9.0, "wall_s": 12.0}
    got = predict(one, one["wall_s"], 2)
    assert got["decode"] == 1.0 + 2.0  # 1 s outside + 4 s of tasks over 2 cores
    assert got["build"] == 0.5 + 1.5  # the index task (1.5 s) is longer than 2.5 / 2
    assert got["job"] == 3.0 + 2.0 + 1.0 and got["process"] == 6.0 + 3.0
    two = {**one, "decode_s": 3.5, "build_s": 2.5, "total_s": 7.0, "wall_s": 10.0}
    runs = ScaleOutRuns("s", 10, {1: [one, one, one], 2: [two, two, two]})
    s = speedups(runs)
    assert s["decode"] == {"1_core_s": 5.0, "2_cores_s": 3.5, "measured": round(5 / 3.5, 2), "model": round(5 / 3, 2)}
    assert s["process"]["model"] == round(12 / 9, 2) and s["job"]["measured"] == round(9 / 7, 2)
    assert "| decode | 5.00 s | 3.50 s | 1.43x | 1.67x |" in __import__("bench.scaleout").scaleout.table(runs)


def test_the_scale_stage_reads_its_stores_and_weighs_the_largest_against_the_smallest(tmp_path) -> None:
    """bench.scale_jobs: --scale-stores parsed (a bad entry named), one whole-process rebuild measured with a
    peak per kind of process and its records checked, and the table's ratios against the issue's targets."""
    from bench.__main__ import parse_args
    from bench.scale_jobs import ScaleJobRuns, ScaleStore, parse_stores, run_job, table
    from storegen.synth import StoreSpec, write_bench_store

    assert parse_stores("16000000:100:120, 4000000:8:8") == [(4000000, 8, 8), (16000000, 100, 120)]
    with pytest.raises(SystemExit):
        parse_args(["--stages", "scale", "--scale-stores", "4000000:8"])
    store = tmp_path / "store"
    write_bench_store(store, StoreSpec(messages=2000, segment_size=1 << 20), progress=False)
    run = run_job("rebuild", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                              str(tmp_path / "out"), "--engine", "spark"])
    assert run["records"] == 2000 and run["total_s"] > 0 and run["wall_s"] > run["total_s"]
    assert run["driver_peak_mib"] > 20 and run["jvm_peak_mib"] > 50, run
    assert run["jvm_fds"] > run["driver_fds"] > 0, run
    small, large = ScaleStore(tmp_path, None, 10, 64), ScaleStore(tmp_path, None, 40, 12000)
    runs = ScaleJobRuns([small, large])
    for store_, total, peak in ((small, 1.0, 100), (large, 5.0, 160)):
        runs.add(store_, "rebuild", {"wall_s": total + 3, "total_s": total, "records": store_.records,
                                      "driver_peak_mib": peak, "jvm_peak_mib": 300, "worker_peak_mib": 200})
    assert runs.ratios("rebuild") == {"rate": 0.8, "driver": 1.6, "jvm": 1.0, "worker": 1.0}
    text = table(runs)
    assert "| 4e-05 M / 12,000 queues | rebuild | 8.0 s | 5.0 s | 0.00 M/s | 160 MB | 300 MB | 200 MB |" in text
    assert "rebuild: largest / smallest store it ran on: rate 0.80x (target >= 0.8), peaks driver 1.60x" in text
    assert "OUTSIDE the targets" in text


def test_the_many_queue_check_agrees_with_the_brokers_queues_and_names_what_breaks_a_rule(tmp_path) -> None:
    """bench.lmq_check reads a queue against the commit log with its own struct reading: RocketMQ 4.9.8's own
    consume queues (an LMQ store: multi-dispatch names %LMQ% and %RETRY% queues) pass; a unit of the wrong size,
    a unit pointing at another queue's record and a blank unit before the last are each named. --scale-lmq's
    MESSAGES:QUEUES is parsed, a bad one refused."""
    import shutil
    import struct

    from bench.__main__ import parse_args
    from bench.lmq_check import CommitLog, SampleCheck, check_queue
    from bench.lmq_scale import parse
    from tests.conftest import GOLDEN

    store = tmp_path / "lmq"
    shutil.copytree(GOLDEN / "lmq-clean-small-11", store)
    log, found = CommitLog(store), SampleCheck()
    for topic in sorted((store / "consumequeue").iterdir()):
        for queue in sorted(topic.iterdir()):
            check_queue(log, topic.name, int(queue.name), queue, found)
    assert found.queues == 29 and found.units == 7305 and found.problems == []
    lmq = store / "consumequeue" / "%LMQ%dev-0001" / "0"
    path = next(lmq.iterdir())
    data = bytearray(path.read_bytes())
    offset, size, tags = struct.unpack_from(">qiq", data, 20)
    struct.pack_into(">qiq", data, 20, offset, size + 1, tags)  # unit 1: the wrong size
    struct.pack_into(">qiq", data, 40, *struct.unpack_from(">qiq", data, 0))  # unit 2: unit 0's record
    struct.pack_into(">qiq", data, 60, 0, 0, 0)  # unit 3: blank, units after it
    path.write_bytes(bytes(data))
    found = SampleCheck()
    check_queue(log, "%LMQ%dev-0001", 0, lmq, found)
    log.close()
    where = "consumequeue/%LMQ%dev-0001/0"
    assert [p.split(":")[0] for p in found.problems] == [f"{where}@1", f"{where}@2", where], found.problems
    assert "blank" in found.problems[2] and "size" in found.problems[0]
    assert parse("16000000:100000") == (16_000_000, 100_000)
    with pytest.raises(SystemExit):
        parse_args(["--stages", "scale", "--scale-lmq", "16000000"])
