"""OUT1, the earlier reput output a `rebuild --since` continues: its run report read and checked before any Spark work,
so that a wrong OUT1 (another store's, a store recovered or replaced since, a partial or damaged one, a newer reput's)
is one line and exit 2 with nothing written; and the store's bytes before OUT1's end checked against it."""
from __future__ import annotations

from dataclasses import dataclass

from storage_format.markers import ABORT, CHECKPOINT
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings

from ..io import out_files
from ..io.fs import Location
from ..io.live_broker import broker_lock
from ..runtime.cli import JobError
from ..store.built_to import REPORT_NAMES, BuiltTo, checkpoint_digest, tail_difference
from ..store.run_report import check_settings, check_version, parse_report
from ..store.segments import segments_from

REPORT_NAME = REPORT_NAMES["rebuild"]  # the report --since writes (and --in-place writes into OUT1)


@dataclass(frozen=True)
class Out1:
    """OUT1: where it is, its report, and the commit-log position it was built to; the store's segments as the check
    listed them (the scan and the clean service's rules read the same listing: one round trip on object storage, and
    one view of the store)."""

    dir: Location
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


def _fail(out1_dir: Location, why: str) -> JobError:
    return JobError(f"--since {out1_dir.uri}: {why}")


def check_directory(out1_dir: Location) -> None:
    """OUT1 must be a directory (the earlier rebuild's OUT)."""
    if not out1_dir.is_dir():
        raise _fail(out1_dir, "no such directory (the earlier rebuild's OUT)")


def read_report(out1_dir: Location) -> dict:
    """OUT1's run report as a dict: a rebuild's, else a recover's or a convert's (a one-line error naming the file,
    and the byte offset where it is no JSON)."""
    try:
        check_directory(out1_dir)
        for name in REPORT_NAMES.values():
            loc = out1_dir.child(name)
            if loc.exists():
                return parse_report(loc, loc.read_bytes())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _fail(out1_dir, f"cannot read its run report: {exc}") from None
    raise _fail(out1_dir, f"no {REPORT_NAME}: not a published reput output (an unfinished run, or another directory; "
                          f"a recover or convert OUT holds {REPORT_NAMES['recover']} or {REPORT_NAMES['convert']})")


def check_report(out1_dir: Location, report: dict, settings: BrokerSettings) -> BuiltTo:
    """What OUT1's report must say for --since to build on it; returns where it was built to."""
    check_version(report, lambda why: _fail(out1_dir, why), "rebuild in full")
    if report.get("job") not in REPORT_NAMES or report.get("dry_run"):
        raise _fail(out1_dir, f"made by reput {report.get('job')!r}{' --dry-run' if report.get('dry_run') else ''}: "
                              f"--since continues the OUT of a rebuild, a recover --out or a convert (run one full "
                              f"rebuild first)")
    if report.get("built_to_not_continuable"):
        raise _fail(out1_dir, f"its {report['job']} report says it cannot be continued: "
                              f"{report['built_to_not_continuable']}; run one full rebuild (later nights continue "
                              f"that)")
    for flag in ("only", "topics"):
        if report.get(flag):
            raise _fail(out1_dir, f"a partial rebuild (--{flag} {report[flag]}): --since continues a full one")
    if "built_to" not in report:
        raise _fail(out1_dir, f"its report has no built_to (made by a reput {report['job']} older than --since): run "
                              f"one full rebuild")
    if report["built_to"] is None:
        raise _fail(out1_dir, "built from a commit log without records: nothing to continue, run a full rebuild")
    try:
        built = BuiltTo.from_dict(report["built_to"])
    except (ValueError, TypeError) as exc:
        raise _fail(out1_dir, f"damaged report: {exc}") from None
    check_settings(report, settings, lambda why: _fail(out1_dir, why), "built")
    return built


def check_as_written(out1_dir: Location, report: dict) -> None:
    """A recover or convert OUT is a store a broker may have been started on since: its consume queues and index
    then moved on past what the report says they were built to. Refused when a broker runs on it, left its abort
    file, or rewrote its checkpoint (the broker writes it as it dispatches and at shutdown)."""
    if report["job"] == "rebuild":
        return
    lock = broker_lock(out1_dir)
    if lock.running:
        raise _fail(out1_dir, f"a broker is running on it ({lock.describe()}): its files move on past what reput "
                              f"wrote; --since continues a {report['job']} OUT as reput left it (keep a copy of OUT "
                              f"before starting a broker on it)")
    if out1_dir.child(ABORT).exists() or checkpoint_digest(out1_dir) != report.get("checkpoint_sha256"):
        what = ("its abort file" if out1_dir.child(ABORT).exists()
                else f"{out1_dir.child(CHECKPOINT).uri} differs from the one reput wrote")
        raise _fail(out1_dir, f"a broker opened it since reput's {report['job']} wrote it ({what}): its consume "
                              f"queues and index moved on past its report's built_to; --since continues a "
                              f"{report['job']} OUT as reput left it (keep a copy of OUT before starting a broker on "
                              f"it), or run a full rebuild")


def check_unchanged(out1_dir: Location) -> None:
    """OUT1's consume queues and index exactly the files reput published (io.out_files), before anything is read
    from them: a file removed, added, resized or written since is refused by name (a full rebuild is the way out)."""
    was = out_files.recorded(out1_dir)
    if was is None:
        raise _fail(out1_dir, f"it holds no {out_files.FILES_NAME}, the record of the files reput published (an "
                              f"output of a reput before it): what it holds cannot be proven unchanged; run a full "
                              f"rebuild once")
    found = out_files.differences(was, out_files.current(out1_dir))
    if found:
        raise _fail(out1_dir, f"its files are not as reput published them, {out_files.summary(found)}; continuing it "
                              f"would carry that into every later night: remove what reput did not write, or run a "
                              f"full rebuild (without --since)")


def checked_out1(out1_dir: Location, settings: BrokerSettings, segments: list[Segment]) -> Out1:
    """OUT1 read and checked against the store: the bytes it was built from must still be there."""
    report = read_report(out1_dir)
    built = check_report(out1_dir, report, settings)
    check_as_written(out1_dir, report)
    check_unchanged(out1_dir)
    if segments and segments[0].start >= built.offset > 0:  # a missed night past fileReservedTime
        first = Location(segments[0].path).name
        raise _fail(out1_dir, f"OUT1's end (commit-log offset {built.offset}, in {built.file}) has expired from the "
                              f"store: its commit log now starts at {segments[0].start} ({first}); nothing OUT1 was "
                              f"built from is left to continue: run a full rebuild")
    differs = tail_difference(segments, built)
    if differs is not None:
        raise _fail(out1_dir, f"the store no longer holds what it was built from: {differs} (the store was recovered "
                              f"or replaced since, or OUT1 is another store's): run a full rebuild")
    return Out1(out1_dir, report, built, segments)
