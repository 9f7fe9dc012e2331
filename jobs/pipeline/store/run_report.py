"""An earlier run's report read back before a run builds on it (`rebuild --since OUT1`, `verify --since REPORT`):
its bytes parsed (a one-line error naming the file and the byte offset where it is no JSON), its version, and the
settings that decide which units and keys go where, which must be tonight's."""
from __future__ import annotations

import json
from typing import Callable

from storage_format.settings import BrokerSettings, parse_delay_levels, property_name

from ..io.fs import Location
from ..runtime.cli import JobError
from .built_to import REPORT_VERSION

# settings that decide which units and keys the broker writes where: the earlier run's and tonight's must agree
SHAPING_SETTINGS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue", "max_hash_slot_num",
                    "max_index_num", "message_index_enable", "enable_multi_dispatch", "enable_lmq",
                    "enable_dleger_commit_log", "d_leger_self_id", "enable_controller_mode",
                    "all_ack_in_sync_state_set", "duplication_enable", "read_uncommitted", "broker_role",
                    "message_delay_level", "max_message_size")  # delay levels: schedule units' tagsCode (delivery time)
DLEDGER_ONLY = ("d_leger_self_id",)  # compared only where either side is in DLedger mode (a convert's OUT is not)
AS_READ = {"message_delay_level": parse_delay_levels}  # compared as the broker reads them (spacing aside)


def parse_report(loc: Location, raw: bytes) -> dict:
    """A run report's bytes as a dict (a one-line error naming the file and the byte offset where it is no JSON)."""
    try:
        report = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise JobError(f"{loc.uri}: byte offset {exc.start}: not UTF-8: a damaged report") from None
    except json.JSONDecodeError as exc:
        raise JobError(f"{loc.uri}: byte offset {exc.pos}: not JSON ({exc.msg}): a damaged report") from None
    if not isinstance(report, dict):
        raise JobError(f"{loc.uri}: byte offset 0: not a reput run report (a JSON object)")
    return report


def check_version(report: dict, fail: Callable[[str], JobError], full: str) -> None:
    """A report a later run builds on must be of a version this reput reads."""
    version = report.get("report_version", 1)
    if not isinstance(version, int) or version > REPORT_VERSION:
        raise fail(f"written by a newer reput (report version {version}; this reput reads up to "
                   f"{REPORT_VERSION}): {full}, or run the newer reput")


def check_settings(report: dict, settings: BrokerSettings, fail: Callable[[str], JobError], what: str) -> None:
    """The settings that decide which units and keys go where must be those the earlier run had."""
    then = report.get("settings") if isinstance(report.get("settings"), dict) else {}
    now = settings.to_dict()
    dledger = bool(then.get("enable_dleger_commit_log")) or settings.enable_dleger_commit_log
    differ = [k for k in SHAPING_SETTINGS if k in then and _read(k, then[k]) != _read(k, now.get(k))
              and (dledger or k not in DLEDGER_ONLY)]
    if differ:
        named = ", ".join(f"{property_name(k)} {then[k]!r} then, {now.get(k)!r} now" for k in differ)
        raise fail(f"{what} with other settings ({named}): --since needs the broker config it had")


def _read(key: str, value):
    """A setting's value as the broker reads it (a value it cannot read stays as written: it differs)."""
    try:
        return AS_READ[key](value) if key in AS_READ and isinstance(value, str) else value
    except ValueError:
        return value
