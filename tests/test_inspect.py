"""jobs.inspect: the Spark scan of every golden commit log equals the manifest's own scan."""
from __future__ import annotations

import json

import pytest

from jobs.inspect import main as inspect_main
from tests.conftest import GOLDEN, case_params, expected_scan, golden_cases, manifest

CASES = golden_cases()


@pytest.mark.parametrize("case", case_params(CASES, passing=frozenset({"dledger-unclean-11"})))
@pytest.mark.parametrize("split_size", ["0", "100000"])
def test_inspect_matches_manifest(case, split_size, spark, capsys):
    """Counts, offsets, timestamps, scan end and records per queue equal the manifest, whether each
    segment is one task or split mid-segment (splits find their first record by physicalOffset)."""
    m = manifest(case)
    code = inspect_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--json", "--split-size", split_size])
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    scan = expected_scan(case)
    for key in ("message_records", "blank_end_of_file_records", "max_physical_offset",
                "first_store_timestamp", "last_store_timestamp", "scan_end"):
        if key in scan:
            assert got[key] == scan[key], key
    assert got["records_per_topic_queue"] == m["records_per_topic_queue"]


@pytest.mark.parametrize("case", [c for c in CASES if "lmq" in c and "recovered" not in c])
def test_inspect_counts_lmq_entries_per_queue(case, spark, capsys):
    """Entries per %LMQ% queue equal the manifest's count of what the broker wrote (4.9.8 and 5.3.3 rules);
    the human summary names the LMQ queue count."""
    m = manifest(case)
    args = ["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf")]
    assert inspect_main(args + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)["lmq_entries_per_queue"]
    want = {k: v for k, v in m["lmq"]["multi_dispatch_entries_per_queue"].items() if k.startswith("%LMQ%")}
    assert {f"{t}/{q}": n for t, qs in got.items() for q, n in qs.items()} == want
    assert inspect_main(args) == 0
    assert f"LMQ queues           {len(want)} with {sum(want.values())} entries" in capsys.readouterr().out


def test_inspect_puts_the_queue_tables_under_work_dir_and_removes_them(tmp_path, spark, capsys, monkeypatch):
    """The splits' queue tables go to files under --work-dir while the scan runs (the driver folds them from
    there: its memory grows with the queues, not queues x splits) and are gone when inspect ends; the counts
    are the manifest's."""
    import jobs.inspect as inspect_job

    case = "lmq-clean-small-11"
    seen: list[str] = []
    scan_store = inspect_job.scan_store

    def watched(*args, **kwargs):
        result = scan_store(*args, **kwargs)
        seen.extend(p.name for p in (tmp_path / "w").rglob("queues-*.arrow"))
        return result

    monkeypatch.setattr(inspect_job, "scan_store", watched)
    (tmp_path / "w").mkdir()
    code = inspect_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"),
                         "--json", "--split-size", "100000", "--work-dir", str(tmp_path / "w")])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["records_per_topic_queue"] == manifest(case)["records_per_topic_queue"]
    assert len(seen) > 1 and list((tmp_path / "w").iterdir()) == []


def test_inspect_on_a_cluster_without_work_dir_says_the_tables_come_to_the_driver(capsys, monkeypatch):
    """No shared work directory on a cluster: the tables travel to the driver as before, and a note says what that
    costs and which flag avoids it."""
    from argparse import Namespace

    from jobs.inspect import _tables_dir
    from jobs.pipeline.io.fs import location

    assert _tables_dir(Namespace(master="spark://h:7077", work_dir=None), location(str(GOLDEN))) is None
    err = capsys.readouterr().err
    assert "queues x splits" in err and "--work-dir" in err
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # under spark-submit stderr joins stdout: the report says it
    assert _tables_dir(Namespace(master="spark://h:7077", work_dir=None), location(str(GOLDEN))) is None
    assert capsys.readouterr().err == ""


def test_a_scan_that_keeps_no_queue_tables_sends_only_their_facts():
    """catalog reads no per-queue figure: its decode tasks drop the split's queue table once its facts (rows, the
    smallest queue offset, negative queue ids) are noted, so the driver never holds queues x splits rows; asking
    such a scan for its tables fails loudly instead of answering with none."""
    from jobs.pipeline.io.fs import location
    from jobs.pipeline.scan.result import ScanResult, SplitTask
    from jobs.pipeline.scan.decode import decode_split
    from jobs.pipeline.store.segments import list_segments
    from storage_format.scan_plan import plan_splits
    from storage_format.settings import load_settings

    case = "clean-small-11"
    settings = load_settings(GOLDEN / case / "broker.conf")
    (sp, *_) = plan_splits(list_segments(location(str(GOLDEN / case)), settings), 0)
    kept = decode_split(SplitTask(split=sp, settings=settings))
    dropped = decode_split(SplitTask(split=sp, settings=settings, keep_queues=False))
    assert dropped.queues is None and kept.queues is not None and kept.queues.has_rows
    assert (dropped.cq_rows, dropped.min_queue_offset) == (kept.cq_rows, kept.min_queue_offset) == (
        int(kept.queues.cq_rows.sum()), int(kept.queues.min_offset[kept.queues.cq_rows > 0].min()))
    scan = ScanResult(segments=[], splits=[sp], stitched=None, summaries={0: dropped})
    with pytest.raises(RuntimeError, match="did not keep its queue tables"):
        scan.split_queues(dropped)
