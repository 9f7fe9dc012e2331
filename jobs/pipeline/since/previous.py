"""The earlier OUT a `rebuild --since` continues: its run report read and checked before any Spark work, so that
a wrong OUT1 (another store's, a store recovered or replaced since, a partial or damaged one, a newer reput's) is
one line and exit 2 with nothing written."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings, property_name

from ..io.fs import Location
from ..runtime.cli import JobError
from ..store.built_to import REPORT_VERSION, BuiltTo, tail_difference
from ..store.segments import segments_from

REPORT_NAME = "reput-report.json"
# settings that decide which units and keys the broker writes where: OUT1's and tonight's must agree
SHAPING_SETTINGS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue", "max_hash_slot_num",
                    "max_index_num", "message_index_enable", "enable_multi_dispatch", "enable_lmq",
                    "enable_dleger_commit_log", "d_leger_self_id", "enable_controller_mode",
                    "all_ack_in_sync_state_set", "duplication_enable", "read_uncommitted", "broker_role")


@dataclass(frozen=True)
class PreviousOutput:
    """An earlier rebuild's OUT: where it is, its report, and the commit-log position it was built to; the store's
    segments as the check listed them (the scan and the clean service's rules read the same listing: one round
    trip on object storage, and one view of the store)."""

    out: Location
    report: dict
    built: BuiltTo
    segments: list[Segment]

    @property
    def bytes_to_decode(self) -> int:
        """The segments' bytes from the one OUT1 ended in on (what the engine under auto is chosen by)."""
        return sum(s.size for s in segments_from(self.segments, self.built.offset - 1))  # as the scan reads them

    @property
    def index_name_tz(self) -> str:
        """The time zone OUT1's index files were named in."""
        return str(self.report.get("index_name_time_zone") or "UTC")


def _fail(out: Location, why: str) -> JobError:
    return JobError(f"--since {out.uri}: {why}")


def read_report(out: Location) -> dict:
    """OUT1's run report as a dict (a one-line error naming the file, and the byte offset where it is no JSON)."""
    loc = out.child(REPORT_NAME)
    try:
        if not out.is_dir():
            raise _fail(out, "no such directory (the earlier rebuild's OUT)")
        raw = loc.read_bytes()
    except FileNotFoundError:
        raise _fail(out, f"no {REPORT_NAME}: not a published reput output (an unfinished run, or another "
                         f"directory)") from None
    except OSError as exc:
        raise _fail(out, f"cannot read {REPORT_NAME}: {exc}") from None
    return parse_report(loc, raw)


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
    differ = [k for k in SHAPING_SETTINGS if k in then and then[k] != now.get(k)]
    if differ:
        named = ", ".join(f"{property_name(k)} {then[k]!r} then, {now.get(k)!r} now" for k in differ)
        raise fail(f"{what} with other settings ({named}): --since needs the broker config it had")


def check_report(out: Location, report: dict, settings: BrokerSettings) -> BuiltTo:
    """What OUT1's report must say for --since to build on it; returns where it was built to."""
    check_version(report, lambda why: _fail(out, why), "rebuild in full")
    if report.get("job") != "rebuild":
        raise _fail(out, f"made by reput {report.get('job')!r}, not rebuild: --since continues a rebuild's OUT "
                         f"(run one full rebuild first)")
    for flag in ("only", "topics"):
        if report.get(flag):
            raise _fail(out, f"a partial rebuild (--{flag} {report[flag]}): --since continues a full one")
    if "built_to" not in report:
        raise _fail(out, "its report has no built_to (made by a reput older than --since): run one full rebuild")
    if report["built_to"] is None:
        raise _fail(out, "built from a commit log without records: nothing to continue, run a full rebuild")
    try:
        built = BuiltTo.from_dict(report["built_to"])
    except (ValueError, TypeError) as exc:
        raise _fail(out, f"damaged report: {exc}") from None
    check_settings(report, settings, lambda why: _fail(out, why), "built")
    return built


def previous_output(out: Location, settings: BrokerSettings, segments: list[Segment]) -> PreviousOutput:
    """OUT1 read and checked against the store: the bytes it was built from must still be there."""
    report = read_report(out)
    built = check_report(out, report, settings)
    differs = tail_difference(segments, built)
    if differs is not None:
        raise _fail(out, f"the store no longer holds what it was built from: {differs} (the store was recovered or "
                         f"replaced since, or OUT1 is another store's): run a full rebuild")
    return PreviousOutput(out, report, built, segments)
