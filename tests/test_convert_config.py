"""The broker config convert writes into OUT and `convert --check-config` (issue 37 item 1): every path leads to
OUT, DLedger is off, the store's file sizes are stated, and a config that leads elsewhere is refused by key."""
from __future__ import annotations

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
    from jobs.pipeline.store.dledger_report import member_choice

    assert member_choice(_section(1, "surviving", 2092)) == []
    choice, left = member_choice(_section(3, "checkpoint", 2092))
    assert "a group of 3 members" in choice and "index 3595, term 2" in choice and "committedIndex 1503" in choice
    assert "the 2092 entries past the saved committedIndex are left out" in left and "surviving" in left
    assert "are kept" in member_choice(_section(3, "surviving", 2092))[1]
    assert "convert the same log" in member_choice(_section(3, "checkpoint", 0))[1]
