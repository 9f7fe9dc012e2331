"""--overwrite replaces only an earlier reput output still as reput published it: never a converted store a broker
has run on, one whose lock a running broker holds, nor a user's file inside OUT.

Each case is an operator's re-run of the same command with --overwrite over a real earlier OUT (convert's, rebuild's,
recover's) after something happened to it: refused in one line naming what was found, exit 2, before any engine
starts, OUT left as it was. A faithful copy of an untouched OUT (cp -a) is replaced."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import GOLDEN
from tests.hostile import tree_digest
from tests.helpers import hold_lock, run_job_lines

SOURCES = {"convert": "dledger-clean-small-11", "rebuild": "clean-small-11", "recover": "unclean-11"}
REPORTS = {"convert": "reput-convert-report.json", "rebuild": "reput-report.json",
           "recover": "reput-recover-report.json"}


def job_args(job: str, out: Path) -> list[str]:
    """The operator's command for `job` into `out` (its golden source store and broker config)."""
    store = GOLDEN / SOURCES[job]
    return ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out), "--quiet"]


@pytest.fixture(scope="module")
def earlier(spark, tmp_path_factory) -> dict[str, Path]:
    """One real OUT per job that has --overwrite, as its run published it."""
    import importlib

    root = tmp_path_factory.mktemp("earlier")
    outs = {}
    for job in SOURCES:
        outs[job] = root / job
        assert importlib.import_module(f"jobs.{job}").main(job_args(job, outs[job]) + ["--json"]) == 0
    return outs


def copy_of(earlier: dict[str, Path], job: str, dest: Path) -> Path:
    """A faithful copy of the job's earlier OUT (cp -a: times kept, as reput's record of its files expects)."""
    shutil.copytree(earlier[job], dest, copy_function=shutil.copy2)
    return dest


def _log_end(out: Path) -> tuple[Path, int]:
    """The segment of OUT's commit log holding the report's end, and the end's byte in it."""
    report = json.loads((out / REPORTS["convert"]).read_text())
    end = report["max_physical_offset"]
    seg = max((p for p in (out / "commitlog").iterdir() if int(p.name) <= end), key=lambda p: int(p.name))
    return seg, end - int(seg.name)


def _grow_log(out: Path) -> None:
    """A broker appending a record where OUT's commit log ended (its total size and magic are enough to see)."""
    seg, at = _log_end(out)
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(">ii", 256, -626843481))


def _rewrite(path: Path, data: bytes) -> None:
    """Write a file as a broker persisting it does (new content, new modification time)."""
    path.write_bytes(data)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))


# what happens to OUT -> what the one line must name
CHANGES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "abort": (lambda o: (o / "abort").write_bytes(b""), ("a broker has opened", "abort (not written by reput)")),
    "abort.bak": (lambda o: (o / "abort.bak").write_bytes(b"4242"),
                  ("a broker has opened", "abort.bak (not written by reput): 5.x keeps the previous abort")),
    "compaction": (lambda o: (o / "compaction").mkdir() or (o / "compaction" / "position-checkpoint").write_text("{}"),
                   ("a broker has opened", "compaction/position-checkpoint (not written by reput)")),
    "lock-file": (lambda o: (o / "lock").write_bytes(b"lock"), ("a broker has opened", "lock (not written by reput)")),
    "config-persisted": (lambda o: (o / "config" / "consumerOffset.json.bak").write_text("{}"),
                         ("files a broker writes changed in", "config/consumerOffset.json.bak (not written by reput)",
                          "persists topics, offsets and subscriptions")),
    "config-changed": (lambda o: _rewrite(o / "config" / "delayOffset.json", b'{"offsetTable":{}}'),
                       ("files a broker writes changed in", "config/delayOffset.json (size 53 -> 18)")),
    "checkpoint": (lambda o: _rewrite(o / "checkpoint", (o / "checkpoint").read_bytes()),
                   ("files a broker writes changed in", "checkpoint (written since", "flushes it")),
    "log-grown": (_grow_log, ("a broker has opened", "past the report's end", "appends the messages it receives")),
    "user-file": (lambda o: (o / "notes.txt").write_text("mine"),
                  ("is not as reput published it", "notes.txt (not written by reput)")),
    "user-file-inside": (lambda o: (o / "index" / "keep.txt").write_text("mine"),
                         ("is not as reput published it", "index/keep.txt (not written by reput)")),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_convert_overwrite_refuses_a_store_a_broker_or_a_user_changed(earlier, no_spark, change, tmp_path, capsys):
    """Each thing a broker writes into a store it opens, and a user's file: named, exit 2, OUT as it was."""
    out = copy_of(earlier, "convert", tmp_path / "out")
    make, said = CHANGES[change]
    make(out)
    before = tree_digest(out)
    code, err = run_job_lines("convert", job_args("convert", out) + ["--overwrite"], capsys)
    err = [line for line in err if ": note: " not in line]
    assert code == 2 and len(err) == 1 and err[0].startswith("reput convert: error: --overwrite refused: "), err
    assert all(s in err[0] for s in said), err[0]
    assert err[0].endswith(f"choose a new --out, or remove {out} yourself if nothing in it is needed"), err[0]
    assert tree_digest(out) == before


def test_the_converted_store_after_the_switch_is_not_thrown_away(earlier, no_spark, tmp_path, capsys):
    """docs/convert.md step 5, then the migration command again: the broker ran on OUT (lock, abort.bak, compaction/,
    config persisted, checkpoint flushed, messages appended): every part is named in the one line."""
    out = copy_of(earlier, "convert", tmp_path / "out")
    for change in ("lock-file", "abort.bak", "compaction", "config-persisted", "checkpoint", "log-grown"):
        CHANGES[change][0](out)
    code, err = run_job_lines("convert", job_args("convert", out) + ["--overwrite"], capsys)
    err = [line for line in err if ": note: " not in line]
    assert code == 2 and len(err) == 1, err
    order = [": lock (", "; abort.bak (", "; compaction/", "; checkpoint (", "; config/consumerOffset.json.bak",
             "past the report's end"]
    at = [err[0].find(s) for s in order]
    assert -1 not in at and at == sorted(at), err[0]


@pytest.mark.parametrize("job", list(SOURCES))
def test_an_out_whose_lock_a_process_holds_is_refused(earlier, no_spark, job, tmp_path, capsys):
    """OUT/lock held as a running broker holds it (an fcntl lock on byte 0, by another process): refused by name
    for every job with --overwrite, as the same lock on a source store is."""
    out = copy_of(earlier, job, tmp_path / "out")
    holder = hold_lock(out / "lock")
    try:
        before = tree_digest(out)
        code, err = run_job_lines(job, job_args(job, out) + ["--overwrite"], capsys)
    finally:
        holder.kill()
        holder.wait()
    err = [line for line in err if ": note: " not in line and ": warning: " not in line]
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"reput {job}: error: --overwrite refused: {out / 'lock'} is locked by process {holder.pid}: a "
                      f"broker is running on this store; --overwrite never replaces a store a broker has opened: "
                      f"choose a new --out"), err[0]
    assert tree_digest(out) == before


@pytest.mark.parametrize("job", ["rebuild", "recover"])
def test_rebuild_and_recover_refuse_a_changed_out_too(earlier, no_spark, job, tmp_path, capsys):
    """The same rule for every job with --overwrite: a user's file, a broker's abort."""
    for change in ("user-file", "abort"):
        out = copy_of(earlier, job, tmp_path / change)
        CHANGES[change][0](out)
        code, err = run_job_lines(job, job_args(job, out) + ["--overwrite"], capsys)
        err = [line for line in err if ": note: " not in line and ": warning: " not in line]
        assert code == 2 and len(err) == 1 and all(s in err[0] for s in CHANGES[change][1]), err
        assert (out / ("notes.txt" if change == "user-file" else "abort")).exists()


def test_an_out_without_a_record_is_replaced_only_when_it_holds_nothing_else(no_spark, tmp_path, capsys):
    """An OUT of a reput before the record (a run report, no reput-files.parquet): refused when it holds anything
    beside its reports (what was added since cannot be told apart), naming it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "reput-convert-report.json").write_text("{}")
    (out / "commitlog").mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = run_job_lines("convert", job_args("convert", out) + ["--overwrite"], capsys)
    err = [line for line in err if ": note: " not in line]
    assert code == 2 and len(err) == 1 and "holds no reput-files.parquet" in err[0] \
        and "beside commitlog, notes.txt" in err[0], err


def test_an_untouched_out_and_a_faithful_copy_are_replaced(earlier, tmp_path):
    """convert --overwrite over a cp -a of its earlier OUT: replaced, and the new OUT carries its own record."""
    from jobs.convert import main as convert_main
    from jobs.pipeline.io import out_files
    from jobs.pipeline.io.fs import Location

    out = copy_of(earlier, "convert", tmp_path / "out")
    (out / "reput-convert-report.json").write_text("{}")  # a report's content is not what is checked
    assert convert_main(job_args("convert", out) + ["--overwrite", "--json"]) == 0
    was = out_files.recorded(Location(str(out)), None)
    assert {"checkpoint", "reput-broker.conf", "commitlog"} <= {p.split("/")[0] for p in was.files}
    assert not out_files.differences(was, out_files.current(Location(str(out)), None))
    assert json.loads((out / "reput-convert-report.json").read_text())["job"] == "convert"


def test_a_broker_that_opens_out_while_the_run_builds_stops_the_publish(earlier, monkeypatch, tmp_path, capsys):
    """OUT checked again just before the rename: a broker that opened it meanwhile (its abort) stops the publish,
    nothing published, OUT as the broker left it."""
    from jobs.pipeline.io import publish

    out = copy_of(earlier, "rebuild", tmp_path / "out")
    real = publish.pause_at

    def broker_starts(point: str) -> None:
        if point == "before-publish-rename":
            (out / "abort").write_bytes(b"")
        real(point)
    monkeypatch.setattr(publish, "pause_at", broker_starts)
    before = tree_digest(out)
    code, err = run_job_lines("rebuild", job_args("rebuild", out) + ["--overwrite", "--engine", "local"], capsys)
    err = [line for line in err if ": note: " not in line]
    assert code == 2 and len(err) == 1 and "abort (not written by reput)" in err[0] \
        and err[0].endswith("(found as this run was about to publish: nothing published)"), err
    assert tree_digest(out) == {**before, "abort": tree_digest(out)["abort"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
