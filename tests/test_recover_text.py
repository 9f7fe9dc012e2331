"""jobs.recover's console output: a summary for people by default (every file the plan touches, byte
offsets, ISO-8601 UTC times), the unchanged JSON with --json / --plan FILE, and no Python dicts."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from storage_format.record_text import iso_utc
from jobs.pipeline.recover.text import SHOWN, plan_lines, when, resume_lines, rollback_lines
from tests.helpers import lock_held

CASE = "unclean-torn-11"


def utc(ms: int) -> str:
    """An independent ISO-8601 rendering of epoch ms (exact integer arithmetic, isoformat, Z for +00:00)."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize("ms", [1, 999, 1795324135948, 253402300799999])
def test_iso_utc_matches_datetime(ms):
    assert iso_utc(ms) == utc(ms)


def test_iso_utc_names_the_odd_values():
    assert when(0) == "0 (never set)" and when(None) == "-" and "not a date" in iso_utc(2**62)
    assert iso_utc(-1) == "1969-12-31T23:59:59.999Z"


def run_recover(capsys, *args: str) -> str:
    """jobs.recover's main in this process; returns what it printed."""
    from jobs.recover import main

    assert main(list(args)) == 0
    return capsys.readouterr().out


def assert_describes(text: str, plan: dict) -> None:
    """Every fact of the plan an operator acts on is in the text, read independently from the JSON."""
    assert plan["state"] in text and f"RocketMQ {plan['generation']}" in text
    for key in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        for side in ("before", "after"):
            assert utc(plan["checkpoint"][side][key]) in text
    t = plan["truncation"]
    assert f"valid up to offset {t['offset']} = segment {t['segment']} + byte {t['position_in_segment']}" in text
    for name in plan["commitlog"]["to_delete"]:
        assert f"remove   {name}" in text
    cq = plan["consumequeue"]
    for cut in cq["to_cut"][:SHOWN]:
        assert f"cut      {cut['file']}: keep {cut['units_kept']} units, write position byte " \
               f"{cut['units_kept'] * 20}" in text
    for name in (cq["to_rewrite"] + cq["to_create"] + cq["to_delete"])[:SHOWN]:
        assert name in text
    idx = plan["index"]
    for name in idx.get("deleted_newer_than_checkpoint", []):
        assert f"remove   index/{name}" in text
    for new in idx["to_create"]:
        assert f"create   index/{new['file'] if isinstance(new, dict) else new}" in text
    assert "{'" not in text and '{"' not in text, "no Python dict or JSON in the summary"


def test_dry_run_prints_a_summary_and_keeps_the_json(spark, golden, tmp_path, capsys):
    """Default: the summary (broker state on top); --plan FILE: the JSON; --json: the same JSON on stdout."""
    store = golden / CASE
    plan_file = tmp_path / "plan.json"
    text = run_recover(capsys, "--store", str(store), "--broker-config", str(store / "broker.conf"), "--dry-run",
                       "--plan", str(plan_file))
    plan = json.loads(plan_file.read_text())
    lines = text.splitlines()
    assert lines[0] == f"recovery plan (dry run, nothing written): {store}"
    assert f"  broker     not running ({store / 'lock'} is not locked)" in lines[:5]
    assert plan["changes"] and plan["truncation"]["reason"] == "crc_mismatch"
    assert_describes(text, plan)
    assert len(lines) < 60, "a summary, not the 160-line plan"


def test_out_prints_what_was_done(spark, golden, tmp_path, capsys):
    """--out without --json: a headline and the plan carried out, matching the report in OUT."""
    store, out = golden / CASE, tmp_path / "out"
    text = run_recover(capsys, "--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out))
    report = json.loads((out / "reput-recover-report.json").read_text())
    assert text.splitlines()[0] == f"recovered store written to {out}"
    assert_describes(text, report)


def test_dry_run_states_a_running_broker_at_the_top(tmp_path):
    """The plan's header says so while another process holds the store's lock the way a broker does."""
    from jobs.pipeline.io.fs import location
    from jobs.recover import _broker_state

    (tmp_path / "lock").write_bytes(b"")
    with lock_held(tmp_path / "lock"):
        assert _broker_state(location(str(tmp_path))).startswith(f"RUNNING: {tmp_path / 'lock'} is locked")
    assert _broker_state(location(str(tmp_path))).startswith("not running")


def test_long_lists_are_cut_and_results_are_sentences(tmp_path):
    """More than SHOWN files of a kind: the first SHOWN and a count; --resume/--rollback: one sentence."""
    plan = json.loads((Path(__file__).parent / "data" / "recover-plan.json").read_text())
    plan["consumequeue"]["to_delete"] = [f"consumequeue/T/{q}/00000000000000000000" for q in range(SHOWN + 5)]
    text = "\n".join(plan_lines(plan))
    assert "consumequeue/T/0/" in text and f"consumequeue/T/{SHOWN}/" not in text
    assert "... and 5 more to remove" in text
    plan["warnings"] = [f"queue T/{q}: a warning" for q in range(SHOWN + 1000)]  # 1,333 on v5-lmq-unclean-11
    warned = [line for line in plan_lines(plan) if line.startswith("warning: ")]
    assert len(warned) == SHOWN and "... and 1000 more warnings (the JSON plan lists every one)" in plan_lines(plan)
    assert resume_lines({"resumed": 7, "backup_dir": "/b"}, "/s") == [
        "resumed: /s recovered in place (7 file operations finished; backup in /b)"]
    assert rollback_lines({"restored": 5, "backup_dir": "/b"}, "/s") == [
        "rolled back: /s is as it was before recovery (5 file operations undone from the backup in /b)"]
