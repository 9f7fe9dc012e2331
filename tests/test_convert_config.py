"""The broker config convert writes into OUT and `convert --check-config` (issue 37 item 1): every path leads to
OUT, DLedger is off, the store's file sizes are stated, and a config that leads elsewhere is refused by key."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from jobs.pipeline.convert.broker_conf import _escape, config_problems, converted_config
from storage_format.java_props import parse_properties
from storage_format.settings import BrokerSettings

SOURCE = """# a DLedger broker's config, as RocketMQ's conf/dledger/broker-n0.conf sets it
brokerClusterName = RaftCluster
brokerName=RaftNode00
storePathRootDir=/data/rmq/store
storePathCommitLog=/data/rmq/store/commitlog
enableDLegerCommitLog=true
dLegerGroup=RaftNode00
dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912
dLegerSelfId=n0
mappedFileSizeConsumeQueue=2000
"""
SETTINGS = BrokerSettings(mapped_file_size_commitlog=262144, mapped_file_size_consume_queue=2000, max_hash_slot_num=64,
                          max_index_num=256)


def test_the_written_config_leads_to_out_and_keeps_the_rest():
    text = converted_config(SOURCE, "/data/rmq/store-plain", SETTINGS)
    props = parse_properties(text)
    assert props["storePathRootDir"] == "/data/rmq/store-plain"
    assert props["storePathCommitLog"] == "/data/rmq/store-plain/commitlog"
    assert props["enableDLegerCommitLog"] == "false" and not any(k.startswith("dLeger") for k in props)
    assert props["brokerName"] == "RaftNode00" and props["brokerClusterName"] == "RaftCluster"
    assert (props["mappedFileSizeCommitLog"], props["mappedFileSizeConsumeQueue"], props["maxHashSlotNum"],
            props["maxIndexNum"]) == ("262144", "2000", "64", "256")
    assert config_problems(text, "/data/rmq/store-plain") == []
    assert "# removed (DLedger mode only): dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912" in text


def test_configs_that_lead_elsewhere_are_named():
    """The documented switch that wiped the consume queues (only the root changed), DLedger left on, no root,
    another path key outside OUT."""
    out = "/data/rmq/store-plain"
    only_root = SOURCE.replace("storePathRootDir=/data/rmq/store\n", f"storePathRootDir={out}\n")
    problems = config_problems(only_root, out)
    assert any(p.startswith("storePathCommitLog=/data/rmq/store/commitlog is not") for p in problems), problems
    assert any(p.startswith("enableDLegerCommitLog=true") for p in problems)
    assert config_problems("brokerName=a\n", out)[0].startswith("storePathRootDir is not set")
    epoch = f"storePathRootDir={out}/\nstorePathEpochFile=/elsewhere/epoch\n"
    assert config_problems(epoch, out) == [f"storePathEpochFile=/elsewhere/epoch lies outside the converted store {out}"]
    assert config_problems(f"storePathRootDir={out}\nstorePathEpochFile={out}/epochFileCheckpoint\n", out) == []


@given(st.text(max_size=40))
def test_values_are_written_as_properties_read_them(value):
    """Round trip through the Properties reader (which, as Java, keeps UTF-16 code units: pairs joined here)."""
    read = parse_properties(f"k={_escape(value)}\n").get("k", "")
    assert read.encode("utf-16-be", "surrogatepass").decode("utf-16-be") == value


def _section(peers: int, reading: str, past: int | None) -> dict:
    return {"committed_reading": {"peers": peers, "reading": reading}, "entries_past_committed_index": past,
            "checkpoint": {"committedIndex": 1503}, "last_entry_index": 3595, "last_entry_term": 2}


def test_a_group_of_several_is_told_which_member_to_convert_and_what_the_reading_leaves_out():
    """convert's plan opens with the member choice for a group of several (issue 37 item 2): the longest log (term,
    then index, each member's from inspect), and what the reading in effect does with the entries past the saved
    committedIndex (the unclean golden case's 2,092 with a 3-peer config); nothing for a one-member group."""
    from jobs.pipeline.scan.report_sections import member_choice

    assert member_choice(_section(1, "surviving", 2092)) == []
    choice, left = member_choice(_section(3, "checkpoint", 2092))
    assert "a group of 3 members" in choice and "index 3595, term 2" in choice and "committedIndex 1503" in choice
    assert "the 2092 entries past the saved committedIndex are left out" in left and "surviving" in left
    assert "are kept" in member_choice(_section(3, "surviving", 2092))[1]
    assert "convert the same log" in member_choice(_section(3, "checkpoint", 0))[1]


def test_each_mode_line_is_one_setting_and_check_config_names_the_mode(no_spark, tmp_path, capsys):
    """The mode lines convert writes each become one property when uncommented (one key per line, each a property
    the broker reads); --check-config names the mode the file selects, and refuses the
    controllerAddr placeholder left as written."""
    from jobs.pipeline.convert.broker_conf import MODE_LINES, PLACEHOLDER, mode_of
    from storage_format.settings import settings_from_mapping
    from jobs.convert import main as convert_main
    from jobs.pipeline.runtime.cli import run_main
    from tests.conftest import GOLDEN

    out = str(tmp_path / "store-plain")
    text = converted_config(SOURCE, out, SETTINGS)
    assert mode_of(SETTINGS, text) == "master-slave, the master (brokerRole=ASYNC_MASTER, brokerId=0)"
    for name, keys in MODE_LINES:
        lines = text.splitlines()
        assert f"# {name}:" in lines
        chosen = "\n".join(line[1:] if line.startswith("#") and line[1:].split("=")[0] in dict(keys) else line
                           for line in lines)
        props = parse_properties(chosen)
        assert {k: props[k] for k, _ in keys} == dict(keys)
        settings = settings_from_mapping(props).settings
        assert mode_of(settings, chosen).startswith("controller mode" if "controller" in name else "master-slave")
    controller = text.replace("#enableControllerMode=true", "enableControllerMode=true") \
        .replace(f"#controllerAddr={PLACEHOLDER}", "controllerAddr=10.0.0.7:9878")
    assert mode_of(settings_from_mapping(parse_properties(controller)).settings, controller) == \
        "controller mode (enableControllerMode=true, controllerAddr=10.0.0.7:9878)"
    slave = text + "brokerId=1\nbrokerRole=SLAVE\n"
    assert mode_of(settings_from_mapping(parse_properties(slave)).settings, slave) == \
        "master-slave, a slave (brokerRole=SLAVE, brokerId=1)"
    assert config_problems(text.replace(f"#controllerAddr={PLACEHOLDER}", f"controllerAddr={PLACEHOLDER}"), out) == \
        [f"controllerAddr={PLACEHOLDER} is the placeholder convert wrote: name your controllers"]
    # the operator's check of the file: a converted golden store, its written config with controller mode chosen
    store = GOLDEN / "clean-small-11"  # a plain store with the golden sizes stands for OUT here
    conf = tmp_path / "new.conf"
    conf.write_text(converted_config((GOLDEN / "dledger-clean-small-11" / "broker.conf").read_text(), str(store),
                                     SETTINGS).replace("#enableControllerMode=true", "enableControllerMode=true")
                    .replace(f"#controllerAddr={PLACEHOLDER}", "controllerAddr=10.0.0.7:9878"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main("convert", convert_main, ["--store", str(store), "--check-config", str(conf)])
    said = capsys.readouterr()
    assert exc.value.code == 0 and said.out.strip() == (
        f"{conf} leads to the converted store {store}: root and commit log there, DLedger off, file sizes as its "
        f"files; mode: controller mode (enableControllerMode=true, controllerAddr=10.0.0.7:9878)"), said


def test_a_config_reaching_out_through_a_symbolic_link_fits(tmp_path):
    """The broker opens OUT through a link as it opens OUT itself: a config naming OUT by a linked path (or OUT named
    so and the config by its real path) fits; a path outside OUT through the link is still named."""
    (tmp_path / "real" / "plain").mkdir(parents=True)
    (tmp_path / "data").symlink_to(tmp_path / "real")
    linked, real = str(tmp_path / "data" / "plain"), str(tmp_path / "real" / "plain")
    for config_root, out in ((linked, real), (real, linked)):
        assert config_problems(converted_config(SOURCE, config_root, SETTINGS), out) == []
    epoch = f"storePathRootDir={linked}\nstorePathEpochFile={tmp_path / 'data' / 'epoch'}\n"
    assert config_problems(epoch, real) == [f"storePathEpochFile={tmp_path / 'data' / 'epoch'} lies outside the "
                                            f"converted store {real}"]


def test_check_config_answers_in_json_and_refuses_a_conversions_flags(no_spark, tmp_path, capsys):
    """--check-config with --json prints its answer as a report; a conversion's flags beside it (--out, --dry-run,
    ...) are refused by name, not ignored."""
    import json

    from jobs.convert import main as convert_main
    from jobs.pipeline.runtime.cli import run_main
    from tests.conftest import GOLDEN

    store = GOLDEN / "clean-small-11"
    conf = tmp_path / "new.conf"
    conf.write_text(converted_config((GOLDEN / "dledger-clean-small-11" / "broker.conf").read_text(), str(store),
                                     SETTINGS))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main("convert", convert_main, ["--store", str(store), "--check-config", str(conf), "--json"])
    assert exc.value.code == 0 and json.loads(capsys.readouterr().out) == {
        "job": "convert", "check_config": str(conf), "store": str(store), "fits": True,
        "mode": "master-slave, the master (brokerRole=ASYNC_MASTER, brokerId=0)"}
    with pytest.raises(SystemExit) as exc:
        run_main("convert", convert_main, ["--store", str(store), "--check-config", str(conf), "--json", "--dry-run",
                                           "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    assert exc.value.code == 2 and said.out == "" and said.err.strip() == (
        "reput convert: error: --check-config checks a config and converts nothing: drop --out, --dry-run")
