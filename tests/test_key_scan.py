"""query --scan's search (jobs.pipeline.scan.key_scan) against an independent reading: the `rocketmq-commitlog`
DataFrame filtered as Spark filters it (what query --scan ran before), on golden stores of both versions, DLedger,
LMQ and a torn one, with split starts inside segments: keys, unique keys, with and without a topic, in a window."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from jobs.pipeline.io.fs import location
from jobs.pipeline.scan.key_scan import KeyScanTask, KeySearch, carrying_offsets
from jobs.pipeline.scan.result import SplitTask
from jobs.pipeline.scan.source import read_commitlog
from jobs.pipeline.store.segments import list_segments
from storage_format.record import TRAN_ROLLBACK
from storage_format.scan_plan import plan_splits
from storage_format.settings import load_settings
from tests.conftest import GOLDEN

CASES = ["clean-small-11", "v5-clean-small-11", "dledger-clean-small-11", "lmq-clean-small-11", "unclean-torn-11"]
SPLIT = 1 << 20  # splits that start inside segments


def by_dataframe(df, s: KeySearch) -> list[int]:
    """What query --scan's DataFrame filter gave."""
    df = df.filter((F.col("transaction_type") != TRAN_ROLLBACK) & F.col("store_timestamp").between(s.begin, s.end))
    if s.topic is not None:
        df = df.filter(F.col("topic") == s.topic)
    cond = (F.col("uniq_key") == s.key) if s.uniq else F.array_contains(F.split(F.col("keys"), " "), s.key)
    return sorted(r["physical_offset"] for r in df.filter(cond).select("physical_offset").collect())


def by_tasks(store: str, settings, s: KeySearch) -> list[int]:
    splits = plan_splits(list_segments(location(store), settings), SPLIT)
    return sorted(off for sp in splits for off in carrying_offsets(
        KeyScanTask(SplitTask(split=sp, settings=settings, with_cq=False, with_keys=False), s)))


def searches(rows: list) -> list[KeySearch]:
    """Key tokens and unique keys of the store (every k-th, sorted), by topic and without one, and one window."""
    tokens = sorted({(r["topic"], t) for r in rows if r["keys"] for t in r["keys"].split(" ") if t})
    uniq = sorted({r["uniq_key"] for r in rows if r["uniq_key"]})
    stamps = sorted(r["store_timestamp"] for r in rows)
    low, high = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    out = [KeySearch(key=k, uniq=False, topic=t, begin=0, end=2**63 - 1) for t, k in tokens[::max(1, len(tokens) // 8)]]
    out += [KeySearch(key=k, uniq=False, topic=None, begin=low, end=high) for _, k in tokens[1::max(1, len(tokens) // 4)]]
    out += [KeySearch(key=k, uniq=True, topic=None, begin=0, end=2**63 - 1) for k in uniq[::max(1, len(uniq) // 6)]]
    return out + [KeySearch(key="no-such-key", uniq=False, topic=None, begin=0, end=2**63 - 1)]


@pytest.mark.parametrize("case", CASES)
def test_the_search_finds_what_the_dataframe_filter_finds(spark, case):
    store, conf = str(GOLDEN / case), str(GOLDEN / case / "broker.conf")
    df = read_commitlog(spark, store, conf, SPLIT).cache()
    rows = df.select("topic", "keys", "uniq_key", "store_timestamp").collect()
    settings = load_settings(conf)
    found = 0
    for s in searches(rows):
        expected = by_dataframe(df, s)
        assert by_tasks(store, settings, s) == expected, s
        found += len(expected)
    df.unpersist()
    assert found > 10
