"""The `rocketmq-commitlog` DataFrame reader against golden manifests."""
from __future__ import annotations

from jobs.pipeline.scan.source import read_commitlog
from tests.conftest import GOLDEN, manifest

CASE = "v5-clean-small-11"


def test_reader_rows_per_queue_match_manifest(spark):
    """Split mid-segment, the reader still returns every record once: counts per topic/queue and
    the v2-magic records of the long topic equal the manifest."""
    df = read_commitlog(spark, str(GOLDEN / CASE), str(GOLDEN / CASE / "broker.conf"), split_size=100_000)
    rows = df.groupBy("topic", "queue_id").count().collect()
    got: dict[str, dict[str, int]] = {}
    for r in rows:
        got.setdefault(r["topic"], {})[str(r["queue_id"])] = r["count"]
    assert got == manifest(CASE)["records_per_topic_queue"]
    long_topic = df.filter("magic_version = 2").select("topic").distinct().collect()
    assert [len(r["topic"]) > 127 for r in long_topic] == [True]


def test_reader_hosts_and_body(spark):
    """IPv6 store hosts print as [addr]:port, and bodies are returned when asked for."""
    df = read_commitlog(spark, str(GOLDEN / CASE), str(GOLDEN / CASE / "broker.conf"), include_body=True)
    hosts = {r["store_host"] for r in df.select("store_host").distinct().collect()}
    assert "192.168.0.10:10911" in hosts and any(h.startswith("[fd00::10]") for h in hosts)
    lengths = df.selectExpr("sum(length(body)) as b", "sum(body_length) as l").collect()[0]
    assert lengths["b"] == lengths["l"] > 0
