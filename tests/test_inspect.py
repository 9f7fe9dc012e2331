"""jobs.inspect: the Spark scan of every golden commit log equals the manifest's own scan."""
from __future__ import annotations

import json

import pytest

from jobs.inspect import main as inspect_main
from tests.conftest import GOLDEN, golden_cases, manifest

CASES = golden_cases()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("split_size", ["0", "100000"])
def test_inspect_matches_manifest(case, split_size, spark, capsys):
    """Counts, offsets, timestamps, scan end and records per queue equal the manifest, whether each
    segment is one task or split mid-segment (splits find their first record by physicalOffset)."""
    m = manifest(case)
    code = inspect_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--json", "--split-size", split_size])
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    scan = m["commitlog_scan"]
    for key in ("message_records", "blank_end_of_file_records", "max_physical_offset",
                "first_store_timestamp", "last_store_timestamp", "scan_end"):
        assert got[key] == scan[key], key
    assert got["records_per_topic_queue"] == m["records_per_topic_queue"]
