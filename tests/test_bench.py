"""The bench's bookkeeping (no timing here): which processes count as Python workers, and how the
rate-against-store-size comparison reduces its runs."""
from __future__ import annotations

from pathlib import Path

from bench.memory import WORKER_MARKS, _is_python
from bench.scale import ScaleRuns, ScaleStore, table


def test_the_driver_jvm_naming_the_daemon_module_is_no_worker() -> None:
    """The JVM's arguments name the daemon module (spark.python.daemon.module=...): it matched the marks
    and its heap was reported as a worker's peak; Python daemons and workers still count."""
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
    each process present at the end counts what it added, never a negative share (which once printed
    17.53 cores of "other load" on a 2-core machine); a reused pid with another start time is new."""
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
