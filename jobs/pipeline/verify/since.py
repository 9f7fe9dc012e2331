"""`verify --since REPORT`: the earlier verify a check of the new part builds on. Its report (`--report` of an earlier
verify) must be a consistent verify of the whole store (both artifacts), of a version this reput reads, with the
same settings, and the store must still hold the bytes it was checked up to (`store.built_to`): then this verify
decodes from the segment holding that end, and what lies before it counts as checked earlier, not as findings. When
the store's head has expired past that end (a missed week), nothing of the earlier check is left: a full verify."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io.fs import Location, location
from ..runtime.cli import JobError
from ..since.previous import check_settings, check_version, parse_report
from ..store.built_to import BuiltTo, built_to, tail_difference


def add_since_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="REPORT",
                   help="check only what the commit log gained since an earlier consistent verify: its JSON report "
                        "(--report FILE of that run); what lies before its end counts as checked (docs/nightly.md)")


@dataclass(frozen=True)
class EarlierVerify:
    """The earlier verify's report and where this one starts (None: its end expired, a full check), with the store's
    segments as listed for the check (the pointers into the whole log use them: listed once)."""

    report: Location
    built: BuiltTo
    from_offset: int | None
    segments: tuple[Segment, ...] = ()

    def to_dict(self) -> dict:
        return {"report": self.report.uri, "built_to_before": self.built.offset, "checked_from": self.from_offset}


def _fail(loc: Location, why: str) -> JobError:
    return JobError(f"--since {loc.uri}: {why}")


def earlier_verify(arg: str, settings: BrokerSettings, segments: list[Segment], only: str | None) -> EarlierVerify:
    """The earlier verify's report read and checked against the store (one line and exit 2 when it cannot be built on)."""
    loc = location(arg)
    try:
        raw = loc.read_bytes()
    except FileNotFoundError:
        raise _fail(loc, "no such file (the JSON report of an earlier verify: its --report FILE)") from None
    except (IsADirectoryError, OSError) as exc:
        raise _fail(loc, f"cannot read it: {exc.strerror or exc}") from None
    report = parse_report(loc, raw)
    fail = lambda why: _fail(loc, why)  # noqa: E731
    check_version(report, fail, "run a full verify")
    if report.get("job") != "verify":
        raise fail(f"a report of reput {report.get('job')!r}, not of verify: --since takes an earlier verify's report")
    checked = report.get("checked") if isinstance(report.get("checked"), dict) else {}
    if not checked.get("consumequeue") or not (checked.get("index") or checked.get("index_disabled_by_config")):
        raise fail("a partial verify (--only): --since builds on a verify of both consume queues and index")
    if only is not None:
        raise JobError(f"--since and --only {only}: --since checks what the earlier verify checked; drop --only")
    if report.get("status") != "consistent" or report.get("findings_total"):
        raise fail(f"that verify found {report.get('findings_total')} findings: --since builds on a consistent one "
                   f"(repair the store, then run a full verify)")
    if not report.get("built_to"):
        raise fail("its report has no built_to (a reput older than verify --since, or a log without records): run a "
                   "full verify")
    try:
        built = BuiltTo.from_dict(report["built_to"])
    except (ValueError, TypeError) as exc:
        raise fail(f"damaged report: {exc}") from None
    check_settings(report, settings, fail, "checked")
    if segments and segments[0].start >= built.offset:  # its end expired: nothing of the earlier check is left
        return EarlierVerify(loc, built, None, tuple(segments))
    differs = tail_difference(segments, built)
    if differs is not None:
        raise fail(f"the store no longer holds what that verify checked: {differs} (recovered or replaced since, or "
                   f"another store's report): run a full verify")
    return EarlierVerify(loc, built, built.offset, tuple(segments))


def checked_to(segments: list[Segment], end: int | None, in_flight_from: int | None) -> dict | None:
    """What this verify checked up to, for a later --since: the end of the last record dispatched, or where a running
    broker's tail in flight begins."""
    if end is None:
        return None
    built = built_to(segments, min(end, in_flight_from) if in_flight_from is not None else end)
    return built.to_dict() if built is not None else None
