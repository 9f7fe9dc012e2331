"""Broker settings: a broker .properties file over the broker's defaults."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage_format.errors import SettingsError
from storage_format.settings import BrokerSettings, load_settings, parse_delay_levels, parse_properties_text
from tests.conftest import GOLDEN

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_conf_defaults_file_equals_the_broker_defaults():
    """conf/broker-defaults.properties documents exactly the defaults reput applies."""
    assert load_settings(CONF / "broker-defaults.properties") == BrokerSettings()
    assert load_settings(None) == BrokerSettings()


def test_golden_broker_conf(golden):
    s = load_settings(GOLDEN / "clean-small-11" / "broker.conf")
    assert (s.mapped_file_size_commitlog, s.consume_queue_file_size, s.max_hash_slot_num, s.max_index_num) == \
        (262144, 2000, 64, 256)
    assert s.index_file_size == 5416  # the manifest's index file size
    assert load_settings(GOLDEN / "rebuild-headless-11" / "broker.conf").max_index_num == 4096


@pytest.mark.parametrize("text,expected", [
    ("a=1\nb = 2\n", {"a": "1", "b": "2"}),
    ("# comment\n! also\n  c:3\n", {"c": "3"}),
    ("d 4\n", {"d": "4"}),
    ("e=one \\\n   two\n", {"e": "one two"}),
])
def test_properties_syntax(text, expected):
    assert parse_properties_text(text) == expected


@pytest.mark.parametrize("size,rounded", [(2000, 2000), (2001, 2020), (19, 20), (6_000_000, 6_000_000)])
def test_consume_queue_size_rounds_up_to_whole_entries(size, rounded):
    assert BrokerSettings(mapped_file_size_consume_queue=size).consume_queue_file_size == rounded


def test_delay_levels_and_bad_values(tmp_path):
    assert parse_delay_levels("1s 2m 1h 1d") == (1000, 120_000, 3_600_000, 86_400_000)
    bad = tmp_path / "bad.conf"
    bad.write_text("messageDelayLevel=1s 5x\n")
    with pytest.raises(SettingsError, match="bad.conf.*5x"):
        load_settings(bad)
    bad.write_text("maxIndexNum=lots\n")
    with pytest.raises(SettingsError, match="maxIndexNum"):
        load_settings(bad)
