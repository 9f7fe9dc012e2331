"""The earlier OUT a `rebuild --since` continues: its run report read and checked before any Spark work, so that
a wrong OUT1 (another store's, a store recovered or replaced since, a partial or damaged one, a newer reput's) is
one line and exit 2 with nothing written."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from storage_format.markers import ABORT, CHECKPOINT
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings, property_name

from ..io import out_files
from ..io.fs import Location
from ..io.live_broker import broker_lock
from ..runtime.cli import JobError
from ..store.built_to import REPORT_NAMES, REPORT_VERSION, BuiltTo, checkpoint_digest, tail_difference
from ..store.segments import segments_from

REPORT_NAME = REPORT_NAMES["rebuild"]  # the report --since writes (and --in-place writes into OUT1)
# settings that decide which units and keys the broker writes where: OUT1's and tonight's must agree
SHAPING_SETTINGS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue", "max_hash_slot_num",
                    "max_index_num", "message_index_enable", "enable_multi_dispatch", "enable_lmq",
                    "enable_dleger_commit_log", "d_leger_self_id", "enable_controller_mode",
                    "all_ack_in_sync_state_set", "duplication_enable", "read_uncommitted", "broker_role")
DLEDGER_ONLY = ("d_leger_self_id",)  # compared only where either side is in DLedger mode (a convert's OUT is not)


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


def check_directory(out: Location) -> None:
    """OUT1 must be a directory (the earlier rebuild's OUT)."""
    if not out.is_dir():
        raise _fail(out, "no such directory (the earlier rebuild's OUT)")


def read_report(out: Location) -> dict:
    """OUT1's run report as a dict: a rebuild's, else a recover's or a convert's (a one-line error naming the file,
    and the byte offset where it is no JSON)."""
    try:
        check_directory(out)
        for name in REPORT_NAMES.values():
            loc = out.child(name)
            if loc.exists():
                return parse_report(loc, loc.read_bytes())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _fail(out, f"cannot read its run report: {exc}") from None
    raise _fail(out, f"no {REPORT_NAME}: not a published reput output (an unfinished run, or another directory; a "
                     f"recover or convert OUT holds {REPORT_NAMES['recover']} or {REPORT_NAMES['convert']})")


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
    differ = [k for k in SHAPING_SETTINGS if k in then and then[k] != now.get(k) and (dledger or k not in DLEDGER_ONLY)]
    if differ:
        named = ", ".join(f"{property_name(k)} {then[k]!r} then, {now.get(k)!r} now" for k in differ)
        raise fail(f"{what} with other settings ({named}): --since needs the broker config it had")


def check_report(out: Location, report: dict, settings: BrokerSettings) -> BuiltTo:
    """What OUT1's report must say for --since to build on it; returns where it was built to."""
    check_version(report, lambda why: _fail(out, why), "rebuild in full")
    if report.get("job") not in REPORT_NAMES or report.get("dry_run"):
        raise _fail(out, f"made by reput {report.get('job')!r}{' --dry-run' if report.get('dry_run') else ''}: "
                         f"--since continues the OUT of a rebuild, a recover --out or a convert (run one full "
                         f"rebuild first)")
    if report.get("built_to_not_continuable"):
        raise _fail(out, f"its {report['job']} report says it cannot be continued: "
                         f"{report['built_to_not_continuable']}; run one full rebuild (later nights continue that)")
    for flag in ("only", "topics"):
        if report.get(flag):
            raise _fail(out, f"a partial rebuild (--{flag} {report[flag]}): --since continues a full one")
    if "built_to" not in report:
        raise _fail(out, f"its report has no built_to (made by a reput {report['job']} older than --since): run one "
                         f"full rebuild")
    if report["built_to"] is None:
        raise _fail(out, "built from a commit log without records: nothing to continue, run a full rebuild")
    try:
        built = BuiltTo.from_dict(report["built_to"])
    except (ValueError, TypeError) as exc:
        raise _fail(out, f"damaged report: {exc}") from None
    check_settings(report, settings, lambda why: _fail(out, why), "built")
    return built


def check_as_written(out: Location, report: dict) -> None:
    """A recover or convert OUT is a store a broker may have been started on since: its consume queues and index
    then moved on past what the report says they were built to. Refused when a broker runs on it, left its abort
    file, or rewrote its checkpoint (the broker writes it as it dispatches and at shutdown)."""
    if report["job"] == "rebuild":
        return
    lock = broker_lock(out)
    if lock.running:
        raise _fail(out, f"a broker is running on it ({lock.describe()}): its files move on past what reput wrote; "
                         f"--since continues a {report['job']} OUT as reput left it (keep a copy of OUT before "
                         f"starting a broker on it)")
    if out.child(ABORT).exists() or checkpoint_digest(out) != report.get("checkpoint_sha256"):
        what = ("its abort file" if out.child(ABORT).exists()
                else f"{out.child(CHECKPOINT).uri} differs from the one reput wrote")
        raise _fail(out, f"a broker opened it since reput's {report['job']} wrote it ({what}): its consume queues "
                         f"and index moved on past its report's built_to; --since continues a {report['job']} OUT as "
                         f"reput left it (keep a copy of OUT before starting a broker on it), or run a full rebuild")


def check_unchanged(out: Location) -> None:
    """OUT1's consume queues and index exactly the files reput published (io.out_files), before anything is read
    from them: a file removed, added, resized or written since is refused by name (a full rebuild is the way out)."""
    was = out_files.recorded(out)
    if was is None:
        raise _fail(out, f"it holds no {out_files.FILES_NAME}, the record of the files reput published (an output of "
                         f"a reput before it): what it holds cannot be proven unchanged; run a full rebuild once")
    found = out_files.differences(was, out_files.current(out))
    if found:
        raise _fail(out, f"its files are not as reput published them, {out_files.summary(found)}; continuing it would "
                         f"carry that into every later night: remove what reput did not write, or run a full rebuild "
                         f"(without --since)")


def previous_output(out: Location, settings: BrokerSettings, segments: list[Segment]) -> PreviousOutput:
    """OUT1 read and checked against the store: the bytes it was built from must still be there."""
    report = read_report(out)
    built = check_report(out, report, settings)
    check_as_written(out, report)
    check_unchanged(out)
    differs = tail_difference(segments, built)
    if differs is not None:
        raise _fail(out, f"the store no longer holds what it was built from: {differs} (the store was recovered or "
                         f"replaced since, or OUT1 is another store's): run a full rebuild")
    return PreviousOutput(out, report, built, segments)
