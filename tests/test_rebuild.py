"""jobs.rebuild: byte-exact consume queues and index files, and its documented edge behaviour."""
from __future__ import annotations

import shutil

import pytest

from jobs.pipeline.runtime.failure import JobError
from tests.conftest import GOLDEN, case_params, expected_scan, golden_cases, manifest
from tests.rebuild_helpers import (consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes,
                                   index_hashes, report, run_rebuild)

FLOORS = pytest.mark.floors  # a byte-exact rebuild per golden case: make test-floors runs it at the dependency floors

# Every store the broker wrote from a clean dispatch (not crashed inputs, not recovered outputs: recovery
# indexes one record twice and leaves stale entries, which a rebuild does not reproduce). A store the broker
# reopened after keeping `abort` (manifest `recovered_from`) is a recovered output too: see REOPENED.
CASES = [c for c in golden_cases() if "unclean" not in c and "recovered_from" not in manifest(c)]
REOPENED = [c for c in golden_cases() if "unclean" not in c and "recovered_from" in manifest(c)]
CONTROLLER = [c for c in CASES if manifest(c).get("controller")]


@FLOORS
@pytest.mark.parametrize("case", case_params(CASES))
def test_rebuild_is_byte_exact(case, spark, tmp_path, capsys):
    """Every consume-queue file has the golden path and sha256; index files equal in name order."""
    out = tmp_path / "out"
    # Small stores: split mid-segment to exercise stitching; medium ones: one task per segment.
    assert run_rebuild(case, out, "--split-size", "65536" if "medium" not in case else "0") == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes(case)
    assert index_hashes(out) == golden_index_hashes(case)
    names = sorted(p.name for p in (out / "index").iterdir())
    assert len(names) == len(set(names)) and all(len(n) == 17 and n.isdigit() for n in names)
    assert report(out)["message_records"] == expected_scan(case)["message_records"]
    assert not list(tmp_path.glob(".out.reput-*")), "staging directory left behind"
    # The compiled decoder took every split holding records (LMQ stores too: multi-dispatch records included),
    # and said so.
    decoders = report(out)["decoders"]
    if case in CONTROLLER:  # the splits holding or after the stored confirm offset: the reference's
        assert set(decoders["fallbacks"]) <= {"dispatch limit inside the split"}, decoders
    else:
        assert decoders["splits"]["kernel"] > 0 and decoders["fallback_splits"] == 0 and "reference" not in decoders["splits"], decoders
        assert "compiled decoder left" not in capsys.readouterr().err


def test_kernel_fallback_is_counted_and_noted(spark, tmp_path, capsys):
    """A split the compiled decoder leaves to the numpy reference (a torn last record) is counted per reason
    in the run report and named in one `reput: note:` line."""
    out = tmp_path / "out"
    assert run_rebuild("unclean-torn-11", out, "--accept-invalid-tail") == 0
    decoders = report(out)["decoders"]
    assert decoders["fallback_splits"] == 1 and decoders["splits"]["reference"] == 1, decoders
    notes = [line for line in capsys.readouterr().err.splitlines() if "compiled decoder left" in line]
    assert len(notes) == 1 and notes[0].startswith("reput: note: decode: "), notes
    assert f"1 {next(iter(decoders['fallbacks']))}" in notes[0], notes


def test_queues_cut_into_many_runs_are_byte_exact(spark, tmp_path, capsys, monkeypatch):
    """A queue longer than one task's share is built as several runs of whole files, each reading only the
    split slices that reach its files: with runs of 5 files (500 entries per task instead of 4 M), every
    queue of clean-medium-11 (up to 46 files of 100 units) is cut into up to 10 runs, and the files are the
    broker's bytes."""
    import jobs.pipeline.outputs.build as build
    monkeypatch.setattr(build, "TARGET_CQ_ENTRIES_PER_TASK", 500)
    out = tmp_path / "out"
    assert run_rebuild("clean-medium-11", out, "--only", "consumequeue", "--split-size", "65536") == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes("clean-medium-11")
    assert report(out)["timings"]["build_tasks"] > 100  # about one task per run


@pytest.mark.parametrize("case", ["clean-small-11", "rebuild-headless-11", "v5-lmq-clean-small-11"])
def test_index_files_cut_into_shares_are_byte_exact(case, spark, tmp_path, capsys, monkeypatch):
    """Index files built in shares by parallel tasks (each share writing its positions' entries into the one
    file, the last the header and slot table) are the broker's bytes: here every file is its own task, cut
    into up to MAX_SHARES shares of a few keys each, across many small splits."""
    import jobs.pipeline.outputs.build as build
    import jobs.rebuild as rebuild
    monkeypatch.setattr(build, "TARGET_INDEX_ENTRIES_PER_TASK", 1)
    monkeypatch.setattr(build, "MIN_SHARE_KEYS", 2)
    monkeypatch.setattr(rebuild, "share_index_tasks", lambda tasks, cores: build.share_index_tasks(tasks, 10_000))
    out = tmp_path / "out"
    assert run_rebuild(case, out, "--only", "index", "--split-size", "65536") == 0
    assert index_hashes(out) == golden_index_hashes(case)
    assert report(out)["timings"]["index_share_tasks"] >= 2 * len(golden_index_hashes(case)) - 2


def test_only_consumequeue_and_topics(spark, tmp_path, capsys):
    """--only consumequeue writes no index; --topics limits the consume queues to those topics."""
    case = "clean-small-11"
    out = tmp_path / "cq"
    assert run_rebuild(case, out, "--only", "consumequeue", "--topics", "TopicTest,Pay-Events") == 0
    got = consume_queue_hashes(out)
    want = {k: v for k, v in golden_consume_queue_hashes(case).items()
            if k.split("/")[1] in ("TopicTest", "Pay-Events")}
    assert got == want and got
    assert not (out / "index").exists()


def test_only_index(spark, tmp_path, capsys):
    case = "v5-clean-small-11"
    out = tmp_path / "idx"
    assert run_rebuild(case, out, "--only", "index") == 0
    assert not (out / "consumequeue").exists()
    assert index_hashes(out) == golden_index_hashes(case)


def test_existing_out_is_refused_then_overwritten(spark, tmp_path, capsys):
    """An existing OUT is an error (exit 2, OUT untouched); --overwrite replaces an earlier reput output whole, and
    refuses a directory reput did not write (an operator's keep.txt stays) and an earlier output holding a file
    reput did not write (a reput report beside keep.txt does not make the directory reput's)."""
    case = "rebuild-headless-11"
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("operator data")
    with pytest.raises(SystemExit) as exc:
        from jobs.pipeline.runtime.cli import run_main
        from jobs.rebuild import main
        run_main("rebuild", main, ["--store", str(GOLDEN / case), "--out", str(out),
                                   "--broker-config", str(GOLDEN / case / "broker.conf")])
    assert exc.value.code == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "operator data"
    with pytest.raises(JobError, match="is not an earlier reput output"):
        run_rebuild(case, out, "--overwrite")
    assert (out / "keep.txt").read_text() == "operator data"
    (out / "reput-report.json").write_text("{}")  # a report beside the operator's file, no record of reput's files
    with pytest.raises(JobError, match="holds no reput-files.parquet.*beside keep.txt"):
        run_rebuild(case, out, "--overwrite")
    (out / "keep.txt").unlink()  # a report alone: nothing to lose
    assert run_rebuild(case, out, "--overwrite") == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes(case)
    (out / "keep.txt").write_text("operator data")  # inside a real earlier output
    with pytest.raises(JobError, match=r"is not as reput published it .* keep.txt \(not written by reput\)"):
        run_rebuild(case, out, "--overwrite")
    assert (out / "keep.txt").read_text() == "operator data"


def test_empty_and_missing_commitlog(spark, tmp_path, capsys):
    """An empty commitlog/ gives an empty, published output; a missing one is an error (exit 2)."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    from jobs.rebuild import main
    assert main(["--store", str(store), "--out", str(tmp_path / "o1"), "--json"]) == 0
    assert report(tmp_path / "o1")["message_records"] == 0
    assert not any((tmp_path / "o1" / "consumequeue").iterdir())
    shutil.rmtree(store / "commitlog")
    from jobs.pipeline.runtime.cli import run_main
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", main, ["--store", str(store), "--out", str(tmp_path / "o2")])
    assert exc.value.code == 2
    assert "no commitlog/ directory" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


def test_out_inside_store_is_refused(spark, tmp_path, capsys):
    from jobs.pipeline.runtime.cli import run_main
    from jobs.rebuild import main
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "rebuild-headless-11" / "commitlog", store / "commitlog")
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", main, ["--store", str(store), "--out", str(store / "rebuilt")])
    assert exc.value.code == 2
    assert not (store / "rebuilt").exists()


@FLOORS
@pytest.mark.parametrize("case", case_params(REOPENED))
def test_rebuild_of_a_reopened_store(case, spark, tmp_path, capsys):
    """A store the broker's abnormal recovery reopened: consume queues byte-exact; index files byte-exact
    for every file the recovery kept; the files it re-created (which index the boundary record a second
    time) are there in the same number."""
    out = tmp_path / "out"
    assert run_rebuild(case, out, "--split-size", "65536") == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes(case)
    kept = len(manifest(case)["oracle_self_check"]["details"]["index_files_kept"])
    got, want = index_hashes(out), golden_index_hashes(case)
    assert 0 < kept < len(want) and got[:kept] == want[:kept] and len(got) == len(want)


@pytest.mark.parametrize("case", CONTROLLER)
def test_rebuild_stops_at_the_confirm_offset(case, spark, tmp_path, capsys):
    """Controller mode with allAckInSyncStateSet: dispatch stops before the record straddling the checkpoint's
    confirmPhyOffset; the report says where and why (byte-exactness: test_rebuild_is_byte_exact)."""
    out = tmp_path / "out"
    assert run_rebuild(case, out) == 0
    c = manifest(case)["controller"]
    d = report(out)["dispatch"]
    assert d["confirm_offset"] == c["checkpoint_confirmPhyOffset"]
    assert d["first_record_not_dispatched"] == c["record_straddling_confirm"]["offset"]
    assert d["records_not_dispatched"] == c["records_beyond_confirm"]
    assert "allAckInSyncStateSet" in d["reason"]
    assert "dispatch stopped at the confirm offset" in capsys.readouterr().err


def _lmq_refusal(store, out, conf, capsys, *extra: str) -> str:
    """Run rebuild expecting exit 2 with nothing published; the one-line error."""
    from jobs.pipeline.runtime.cli import run_main
    from jobs.rebuild import main
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", main, ["--store", str(store), "--out", str(out), "--broker-config", str(conf), *extra])
    assert exc.value.code == 2 and not out.exists()
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("reput rebuild: error:")]
    assert len(errors) == 1 and "Traceback" not in err
    return errors[0]


def test_lmq_store_without_multi_dispatch_setting_is_refused(spark, tmp_path, capsys):
    """A store whose records carry multi-dispatch offsets, read with a config that leaves
    enableMultiDispatch unset: refused by name instead of silently dropping every LMQ entry."""
    case = "lmq-clean-small-11"
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join(line for line in (GOLDEN / case / "broker.conf").read_text().splitlines()
                              if not line.startswith(("enableMultiDispatch", "enableLmq"))))
    err = _lmq_refusal(GOLDEN / case, tmp_path / "out", conf, capsys)
    assert "enableMultiDispatch" in err and "INNER_MULTI_QUEUE_OFFSET" in err and "commit-log offset" in err


def test_headless_v5_lmq_store_needs_the_version(spark, tmp_path, capsys):
    """A bare 5.x LMQ commit log (no abort.bak or checkpoint to tell the version) holds offsets only 5.x
    writes: refused naming --rocketmq-version; with --rocketmq-version 5 it is byte-exact."""
    case = "v5-lmq-clean-small-11"
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / case / "commitlog", store / "commitlog")
    err = _lmq_refusal(store, tmp_path / "out", GOLDEN / case / "broker.conf", capsys)
    assert "--rocketmq-version" in err and "only RocketMQ 5.x writes" in err and "byte offset" in err
    from jobs.rebuild import main
    out = tmp_path / "out5"
    assert main(["--store", str(store), "--out", str(out), "--broker-config", str(GOLDEN / case / "broker.conf"),
                 "--rocketmq-version", "5", "--json"]) == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes(case)
