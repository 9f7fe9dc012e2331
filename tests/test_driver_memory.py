"""The driver's memory check (runtime.driver_memory): sizes read as spark.driver.memory reads them, the need
growing with queues and splits only, and a driver that would not fit refused in one line naming the setting."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.pipeline.runtime.driver_memory import (MIB, DriverMemory, check_driver_memory, driver_memory_of,
                                                 driver_need, parse_size)
from jobs.pipeline.runtime.failure import JobError
from tests.conftest import restored_copy
from tests.helpers import run_job


@given(st.integers(0, 1 << 20), st.sampled_from([("", MIB), ("m", MIB), ("MB", MIB), ("g", 1 << 30),
                                                  ("Gb", 1 << 30), ("k", 1024), ("b", 1), ("t", 1 << 40)]))
def test_sizes_read_as_spark_reads_them(n, unit) -> None:
    """A number with Spark's units (either case, with or without b); no unit means MiB (spark.driver.memory's
    bytesConf(MiB))."""
    suffix, factor = unit
    assert parse_size(f"{n}{suffix}") == n * factor


@pytest.mark.parametrize("text", ["", "4x", "1.5g", "-1g", "g"])
def test_a_size_spark_would_not_read_is_refused_naming_the_setting(text) -> None:
    with pytest.raises(JobError, match=r"spark.driver.memory .* is not a size .*REPUT_DRIVER_MEMORY"):
        driver_memory_of(text, submitted=False)


def test_spark_submit_without_driver_memory_has_sparks_default() -> None:
    assert driver_memory_of(None, submitted=True) == DriverMemory(1 << 30, "spark-submit --driver-memory")


def test_the_need_grows_with_queues_and_splits_only_and_a_driver_too_small_is_refused() -> None:
    """Twice the queues add their bytes, nothing else does; at exactly the need it fits, a byte less is refused
    with the figures and the setting to raise; no setting (the local engine) is never refused."""
    base = driver_need(0, 0)
    assert driver_need(100_000, 10) - driver_need(50_000, 10) == driver_need(50_000, 0) - base
    need = driver_need(1_000_000, 4_000)
    check_driver_memory(1_000_000, 4_000, DriverMemory(need, "REPUT_DRIVER_MEMORY"))
    check_driver_memory(10**9, 10**6, None)
    with pytest.raises(JobError) as err:
        check_driver_memory(1_000_000, 4_000, DriverMemory(need - 1, "REPUT_DRIVER_MEMORY"))
    text = str(err.value)
    assert "1,000,000 queues in 4,000 splits" in text and "spark.driver.memory" in text
    assert text.endswith("(REPUT_DRIVER_MEMORY 5g)") and "\n" not in text


def test_the_spark_engine_reads_the_setting_its_driver_runs_with(spark) -> None:
    """SparkRunner.driver_memory: spark.driver.memory of the running context (the suite's embedded session: reput's
    own launch, REPUT_DRIVER_MEMORY)."""
    from jobs.pipeline.runtime.tasks import SparkRunner

    given_ = SparkRunner(spark.sparkContext).driver_memory
    assert given_ == DriverMemory(parse_size(spark.sparkContext.getConf().get("spark.driver.memory")),
                                  "REPUT_DRIVER_MEMORY")


def test_a_rebuild_whose_driver_would_not_fit_is_refused_after_the_scan_and_writes_nothing(tmp_path, spark, capfd,
                                                                                          monkeypatch) -> None:
    """The whole job on a driver given 400 MB: one line naming the setting and its source, exit 2, no OUT and
    no staging left; the scan ran (the queues are counted), nothing was planned or written."""
    from jobs.pipeline.runtime.tasks import SparkRunner

    monkeypatch.setattr(SparkRunner, "driver_memory", property(lambda self: DriverMemory(400 * MIB,
                                                                                           "REPUT_DRIVER_MEMORY")))
    store = restored_copy("lmq-clean-small-11", tmp_path / "store")
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(tmp_path / "out"),
            "--engine", "spark"]
    code, _out, err = run_job("rebuild", argv, capfd)
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "spark.driver.memory gives it (400 MB, from REPUT_DRIVER_MEMORY)" in lines[0], err
    assert "queues in" in lines[0] and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
