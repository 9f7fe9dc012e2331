"""Broker settings: a broker .properties file over the broker's defaults."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage_format.errors import SettingsError
from storage_format.settings import (BrokerSettings, load_settings, load_settings_with_warnings, parse_delay_levels,
                                     parse_properties_text)
from storage_format.java_props import decode_properties_file, java_parse_boolean, java_parse_integral, parse_properties
from storage_format.index_file import IndexLayout
from storage_format.settings import FilesShown, infer_file_sizes, settings_from_mapping, unknown_key_warning
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
    bad.write_text("maxIndexNum=lots\n")  # Integer.parseInt throws: the broker keeps its default, with a warning
    loaded = load_settings_with_warnings(bad)
    assert loaded.settings.max_index_num == BrokerSettings().max_index_num
    assert len(loaded.warnings) == 1 and "maxIndexNum" in loaded.warnings[0]


# ---------------------------------------------------------------------------------------------
# values as Java parses them (MixAll.properties2Object): what the JDK returns for each text, None = it throws


@pytest.mark.parametrize("text,bits,java", [
    ("64", 32, 64), ("64 ", 32, None), (" 64", 32, None), ("+64", 32, 64), ("-0", 32, 0), ("", 32, None),
    ("-", 32, None), ("+", 32, None), ("\u0663", 32, 3), ("\u0663\u0660", 32, 30), ("\uff11\uff12", 32, 12),
    ("\u00b2", 32, None), ("2147483647", 32, 2147483647), ("2147483648", 32, None),
    ("-2147483648", 32, -2147483648), ("0x10", 32, None), ("1_000", 32, None), ("1e3", 32, None),
    ("99999999999999", 32, None), ("99999999999999", 64, 99999999999999),
    ("9223372036854775807", 64, 9223372036854775807), ("9223372036854775808", 64, None), ("--1", 32, None),
])
def test_integer_parse_int_and_parse_long(text, bits, java):
    assert java_parse_integral(text, bits) == java


@pytest.mark.parametrize("text,java", [("true", True), ("TRUE", True), ("True", True), ("true ", False),
                                       (" true", False), ("yes", False), ("1", False), ("", False),
                                       ("false", False)])
def test_boolean_parse_boolean(text, java):
    assert java_parse_boolean(text) is java


@pytest.mark.parametrize("text,expected", [
    ("a = 1 \n", {"a": "1 "}),  # trailing blanks stay in the value
    ("key:value\n", {"key": "value"}),
    ("key  =  value\n", {"key": "value"}),
    ("key = = v\n", {"key": "= v"}),  # one separator only
    ("key\t\tvalue\n", {"key": "value"}),
    ("a\\ b=c\n", {"a b": "c"}),
    ("a=x\\\n   y\n", {"a": "xy"}),
    ("a=x\\\\\nb=1\n", {"a": "x\\", "b": "1"}),  # an escaped backslash does not continue
    ("a=x\\\n# not a comment\n", {"a": "x# not a comment"}),
    ("a=x\\\n\nb=1\n", {"a": "x", "b": "1"}),  # an empty continuation line ends it
    ("a=\\u0041\\t\\q\n", {"a": "A\tq"}),
    ("a=1\r\na=2\r", {"a": "2"}),  # CR LF and CR end lines; the last value wins
    ("\\u00e9=1\n", {"\u00e9": "1"}),
    ("  # c\n! c\n\n   c:3\nempty\n", {"c": "3", "empty": ""}),
    ("x=1\\", {"x": "1"}),  # a backslash at the end of the input
])
def test_java_properties_syntax(text, expected):
    assert parse_properties(text) == expected


def test_properties_file_is_iso_8859_1_and_a_bad_escape_is_an_error(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_bytes(b"storePathCommitLog=/d/\\u00e9\nmessageDelayLevel=1s\n")  # the escape gives a non-ASCII char
    assert load_settings(conf).store_path_commit_log == "/d/\u00e9"
    assert parse_properties(decode_properties_file("x=é".encode("utf-8")))["x"] == "Ã©"  # as Java reads UTF-8
    conf.write_text("a=\\u12G4\n")
    with pytest.raises(SettingsError, match="b.conf.*uxxxx"):
        load_settings(conf)


@pytest.mark.parametrize("line,field,value,warned", [
    ("maxHashSlotNum=64 ", "max_hash_slot_num", 5_000_000, "Integer.parseInt"),  # the example
    ("maxHashSlotNum=\\u0036\\u0034", "max_hash_slot_num", 64, None),
    ("maxHashSlotNum=\\u0663", "max_hash_slot_num", 3, None),  # Arabic-Indic three: a Java digit
    ("checkCRCOnRecover=yes", "check_crc_on_recover", False, "Boolean.parseBoolean"),
    ("checkCRCOnRecover=FALSE", "check_crc_on_recover", False, None),
    ("messageIndexEnable=true ", "message_index_enable", False, "Boolean.parseBoolean"),
    ("messageDelayLevel=  1s 2s  ", "message_delay_level", "1s 2s", None),  # strings are trimmed
    ("brokerRole=slave", "broker_role", "ASYNC_MASTER", "not a BrokerRole"),
    ("brokerRole= SLAVE ", "broker_role", "SLAVE", None),
    ("maxIndexNum=99999999999999", "max_index_num", 20_000_000, "Integer.parseInt"),
])
def test_values_as_the_broker_sets_them(tmp_path, line, field, value, warned):
    conf = tmp_path / "b.conf"
    conf.write_text(line + "\n")
    loaded = load_settings_with_warnings(conf)
    assert getattr(loaded.settings, field) == value
    assert (warned is None and not loaded.warnings) or (len(loaded.warnings) == 1 and warned in loaded.warnings[0])


def test_unknown_keys_warn_with_the_closest_broker_key():
    assert "did you mean mappedFileSizeCommitLog?" in unknown_key_warning("mapedFileSizeCommitLog")
    assert "did you mean maxIndexNum?" in unknown_key_warning("MaxIndexNum")
    assert unknown_key_warning("brokerClusterName") is None and unknown_key_warning("listenPort") is None
    assert unknown_key_warning("fooBarBaz").endswith("(the broker ignores it)")


@pytest.mark.parametrize("text,message", [
    ("1s \u00b2s", "'\u00b2' is not a decimal number for Long.parseLong"),  # superscript two: not a Java digit
    ("1s 5x", "does not end with a unit"),
    ("1s  2s", "level ''"),  # a double blank: an empty level, the broker's parse fails
])
def test_bad_delay_levels_name_the_level(text, message):
    with pytest.raises(SettingsError, match="messageDelayLevel") as exc:
        parse_delay_levels(text)
    assert message in str(exc.value)


def test_delay_levels_take_java_digits():
    assert parse_delay_levels("\u0661s 2m ") == (1000, 120_000)


@pytest.mark.parametrize("props,named", [
    ({"maxHashSlotNum": "2147483647"}, "maxHashSlotNum=2147483647"),
    ({"maxIndexNum": "107374182"}, "maxIndexNum=107374182"),
    ({"mappedFileSizeConsumeQueue": "2147483647"}, "mappedFileSizeConsumeQueue"),
])
def test_file_sizes_beyond_a_java_int_are_refused_with_the_limit(props, named):
    with pytest.raises(SettingsError, match="2147483647 bytes") as exc:
        settings_from_mapping(props)
    assert named in str(exc.value)


def test_file_sizes_inferred_from_disk_without_a_config():
    """Without a config every size comes from the files: segments and consume queues by their sizes, the index
    layout as the index files show it; index files that show none and are not of the default size are refused."""
    files = FilesShown(segments=(("s0", 262144), ("s1", 262144)), consume_queues=(("q", 2000),),
                       index_files=(("i", 5416),), index_layout=IndexLayout(64, 256), timer_logs=(("t", 4096),))
    s, notes = infer_file_sizes(BrokerSettings(), files)
    assert (s.mapped_file_size_commitlog, s.consume_queue_file_size, s.max_hash_slot_num, s.max_index_num,
            s.mapped_file_size_timer_log) == (262144, 2000, 64, 256, 4096) and len(notes) == 5
    assert "maxIndexNum=256 taken from the index files' headers and entries on disk" in notes[3]
    s, notes = infer_file_sizes(BrokerSettings(), FilesShown(segments=(("a", 262144), ("b", 1024))))
    assert s == BrokerSettings() and not notes  # unequal sizes: nothing inferred (the scan names the odd file)
    with pytest.raises(SettingsError, match=r"i: 5416 bytes\) show neither maxHashSlotNum nor maxIndexNum"):
        infer_file_sizes(BrokerSettings(), FilesShown(index_files=(("i", 5416),)))
    default = BrokerSettings().index_file_size  # empty default-size files: the default is all they can be
    assert infer_file_sizes(BrokerSettings(), FilesShown(index_files=(("i", default),))) == (BrokerSettings(), [])


def test_golden_broker_confs_load_without_warnings(golden):
    for conf in sorted(golden.glob("*/broker.conf")):
        assert load_settings_with_warnings(conf).warnings == (), conf


@pytest.mark.parametrize("line,named", [
    ("maxHashSlotNum=2147483647", "maxHashSlotNum=2147483647"),
    ("messageDelayLevel=1s \u00b2s", "Long.parseLong"),
])
def test_bad_settings_exit_2_in_one_line_before_any_work(tmp_path, capsys, line, named):
    from jobs.pipeline.runtime.cli import run_main
    from jobs.rebuild import main as rebuild_main

    conf = tmp_path / "b.conf"
    conf.write_text((GOLDEN / "v5-clean-small-11" / "broker.conf").read_text() + line + "\n", encoding="latin-1")
    with pytest.raises(SystemExit) as exc:
        run_main("rebuild", rebuild_main, ["--store", str(GOLDEN / "v5-clean-small-11"), "--broker-config",
                                           str(conf), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and named in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "out").exists()


def test_rebuild_without_a_config_takes_file_sizes_from_disk(spark, tmp_path, capsys):
    """No --broker-config: segment and consume-queue file sizes come from the files, the index layout from the index
    files' headers and entries (not the default's one 420,000,040-byte file), each with a note; consume queues and
    index files equal the broker's."""
    from jobs.rebuild import main as rebuild_main
    from tests.rebuild_helpers import (consume_queue_hashes, golden_consume_queue_hashes, golden_index_hashes,
                                       index_hashes)

    out = tmp_path / "out"
    assert rebuild_main(["--store", str(GOLDEN / "v5-clean-small-11"), "--out", str(out), "--json"]) == 0
    assert consume_queue_hashes(out) == golden_consume_queue_hashes("v5-clean-small-11")
    assert index_hashes(out) == golden_index_hashes("v5-clean-small-11")
    err = capsys.readouterr().err
    assert "mappedFileSizeCommitLog=262144 taken from the commit-log segment sizes" in err
    assert "mappedFileSizeConsumeQueue=2000 taken from the consume-queue file sizes" in err
    assert "maxHashSlotNum=64 taken from the index files' headers and entries" in err
    assert "maxIndexNum=256 taken from the index files' headers and entries" in err


def test_without_a_config_index_files_that_show_no_layout_are_refused(no_spark, tmp_path, capsys):
    """No --broker-config and index files without an entry to tell maxHashSlotNum and maxIndexNum by, not of the
    default size: refused in one line before anything is read (the default would build files of another layout)."""
    from tests.conftest import restored_copy
    from tests.helpers import run_job_lines

    store = restored_copy("clean-small-11", tmp_path / "store")
    (store / "broker.conf").unlink()
    for f in (store / "index").iterdir():
        f.write_bytes(bytes(f.stat().st_size))  # every file zeros: no header, no entry
    code, err = run_job_lines("rebuild", ["--store", str(store), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err) == 1 and "show neither maxHashSlotNum nor maxIndexNum" in err[0] \
        and "pass the store's broker config (--broker-config)" in err[0], err
    assert not (tmp_path / "out").exists()
