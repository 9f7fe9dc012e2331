"""docs/catalog.md "Reading the catalog from Spark": the block it shows, executed as written, reads exactly the
Delta table's current version (or an older one) after a compaction, where a plain Parquet read of the
table directory counts every record twice."""
from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from jobs.catalog import main as catalog_main
from tests.conftest import GOLDEN, REPO, manifest

pytestmark = pytest.mark.floors  # deltalake commits read from Spark: make test-floors runs it at the dependency floors

CASE = "v5-clean-small-11"  # has a topic longer than the partition directory name can hold


def catalog_block() -> str:
    """The Python block of docs/catalog.md that defines read_catalog."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "catalog.md").read_text(), flags=re.S)
    found = [b for b in blocks if "def read_catalog(" in b]
    assert len(found) == 1, "docs/catalog.md shows read_catalog once"
    return found[0]


def test_documented_read_catalog_after_compaction(spark, tmp_path, capsys):
    store, table = GOLDEN / CASE, tmp_path / "catalog"
    assert catalog_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--table", str(table),
                         "--json"]) == 0
    capsys.readouterr()
    DeltaTable(str(table)).optimize.compact()  # version 2: the same rows in fewer files, old files kept
    namespace: dict = {}
    exec(catalog_block(), namespace)  # noqa: S102 - the page's own code, as a user would paste it
    read_catalog = namespace["read_catalog"]

    df = read_catalog(spark, str(table))
    rows = df.select("topic", "queue_id", "physical_offset", "uniq_key").collect()
    want = pa.table(DeltaTable(str(table)).to_pyarrow_table()).select(["topic", "queue_id", "physical_offset", "uniq_key"])
    assert sorted(map(tuple, rows)) == sorted(zip(*(want.column(c).to_pylist() for c in want.column_names)))
    per_queue = Counter((r["topic"], str(r["queue_id"])) for r in rows)
    expect = {(t, q): n for t, qs in manifest(CASE)["records_per_topic_queue"].items() for q, n in qs.items()}
    assert per_queue == expect
    assert max(len(t) for t, _ in per_queue) > 127  # the long topic keeps its name
    assert df.columns == [f.name for f in pa.schema(DeltaTable(str(table)).schema().to_arrow())]

    assert spark.read.parquet(str(table)).count() == 2 * len(rows), "a plain directory read doubles the rows"
    assert read_catalog(spark, str(table), version=1).count() == len(rows)
    assert read_catalog(spark, str(table), version=0).count() == 0
    assert json.loads((GOLDEN / CASE / "manifest.json").read_text())["commitlog_scan"]["message_records"] == len(rows)
