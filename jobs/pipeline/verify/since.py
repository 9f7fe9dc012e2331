"""`verify --since REPORT`: the earlier verify a check of the new part builds on. Its report (`--report` of an earlier
verify) must be a consistent verify of the whole store (both artifacts), of a version this reput reads, with the
same settings, and the store must still hold the bytes it was checked up to (`store.built_to`) in the same files
(`store.identity`: a copy, a restored store or a slave holds the same bytes in files that verify never read; built on
only with --since-other-store, said on stderr and in the report): then this verify decodes from the segment holding
that end, and what lies before it counts as checked earlier, not as findings. When the store's head has expired past
that end (a missed week), nothing of the earlier check is left: a full verify."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io.fs import Location, location
from ..io.paths import real_path
from ..runtime.cli import JobError
from ..store.run_report import check_settings, check_version, parse_report
from ..store.built_to import BuiltTo, built_to, tail_difference
from ..store.identity import StoreIdentity, identity_difference, store_identity


OTHER_STORE_FLAG = "--since-other-store"


def add_since_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="REPORT",
                   help="check only what the commit log gained since an earlier consistent verify of this store: its "
                        "JSON report (--report FILE of that run); what lies before its end counts as checked "
                        "(docs/nightly.md)")
    p.add_argument(OTHER_STORE_FLAG, action="store_true",
                   help="with --since: build on a report made on another store whose commit log holds the same bytes "
                        "(the store moved, or a copy whose files you know that verify checked): its checked files "
                        "count as checked here without being read (said on stderr and in the report)")


@dataclass(frozen=True)
class EarlierVerify:
    """The earlier verify's report and where this one starts (None: its end expired, a full check), with the store's
    segments as listed for the check (the pointers into the whole log use them: listed once)."""

    report: Location
    built: BuiltTo
    from_offset: int | None
    segments: tuple[Segment, ...] = ()
    other_store: dict | None = None  # made on another store, built on with --since-other-store: on what, how it differs

    def to_dict(self) -> dict:
        return {"report": self.report.uri, "built_to_before": self.built.offset, "checked_from": self.from_offset,
                "other_store": self.other_store}


def _fail(loc: Location, why: str) -> JobError:
    return JobError(f"--since {loc.uri}: {why}")


def earlier_verify(arg: str, store: Location, settings: BrokerSettings, segments: list[Segment], only: str | None,
                   other_store: bool = False) -> EarlierVerify:
    """The earlier verify's report read and checked against the store (one line and exit 2 when it cannot be built on;
    a report of another store only with `other_store`)."""
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
    then, other = _made_on(report, store, segments, built, fail)
    if other is not None and not other_store:
        raise fail(f"made on another store ({other}): what that verify checked there was never read here: run a full "
                   f"verify, or pass {OTHER_STORE_FLAG} to build on it anyway (the store moved, or a copy you know it "
                   f"checked)")
    accepted = None if other is None else {"made_on": then, "differs": other}
    return EarlierVerify(loc, built, built.offset, tuple(segments), accepted)


def _made_on(report: dict, store: Location, segments: list[Segment], built: BuiltTo,
             fail: Callable[[str], JobError]) -> tuple[dict, str | None]:
    """The store the report was made on (its `store_identity`; a report from before it: its `store` path, resolved)
    and how it is not this one (None: the same)."""
    now = store_identity(store, segments, built.file)
    if "store_identity" not in report:  # a reput before store identities: its path is all it says
        then = StoreIdentity(real_path(location(str(report.get("store") or "?"))), "?", None, None, None)
    else:
        try:
            then = StoreIdentity.from_dict(report["store_identity"])
        except ValueError as exc:
            raise fail(f"damaged report: {exc}") from None
    return then.to_dict(), identity_difference(then, now)


def checked_to(segments: list[Segment], end: int | None, in_flight_from: int | None) -> dict | None:
    """What this verify checked up to, for a later --since: the end of the last record dispatched, or where a running
    broker's tail in flight begins."""
    if end is None:
        return None
    built = built_to(segments, min(end, in_flight_from) if in_flight_from is not None else end)
    return built.to_dict() if built is not None else None
