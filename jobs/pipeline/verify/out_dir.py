"""`verify --files OUT`: a reput output's consume queues and index files (a rebuild's, a recover or convert OUT's)
checked against the store's commit log instead of the store's own files, up to what OUT was built to; the log past
that (the broker went on writing) is counted apart as not built yet. The weekly check of last night's OUT itself:
`rebuild --since` carries whatever OUT1 held into every later night (docs/nightly.md)."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from storage_format.settings import BrokerSettings

from ..io.fs import Location, location
from ..runtime.failure import JobError
from ..store.built_to import REPORT_NAMES, BuiltTo, tail_difference
from ..store.segments import list_segments

FLAG = "--files"


def add_files_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(FLAG, metavar="OUT",
                   help="check the consume queues and index files of OUT (a rebuild, recover --out or convert output) "
                        "against the store's commit log, up to what OUT was built to, instead of the store's own")


@dataclass(frozen=True)
class OutDir:
    """The OUT whose files a verify checks, and where it was built to (the commit log past it is not built yet)."""

    dir: Location
    report: Location
    built_to: int

    def to_dict(self) -> dict:
        return {"out": self.dir.uri, "report": self.report.uri, "built_to": self.built_to}


def out_dir(args: argparse.Namespace, store: Location, settings: BrokerSettings) -> OutDir | None:
    """--files OUT read and checked against the store (None without it): its run report's built_to, whose bytes the
    store must still hold (else OUT is another store's, or the store was recovered since)."""
    if not getattr(args, "files", None):
        return None
    if args.since:
        raise JobError(f"{FLAG} and --since go separately: {FLAG} reads all of OUT's files (the weekly full check)")
    out = location(args.files)
    if not out.is_dir():
        raise JobError(f"{FLAG} {out.uri}: no such directory")
    report = next((out.child(n) for n in REPORT_NAMES.values() if out.child(n).exists()), None)
    if report is None:
        raise JobError(f"{FLAG} {out.uri}: no reput run report in it ({', '.join(sorted(REPORT_NAMES.values()))}): "
                       f"not a published reput output")
    try:
        body = json.loads(report.read_bytes())
        if isinstance(body, dict) and body.get("built_to") is None and body.get("built_to_not_continuable"):
            raise JobError(f"{FLAG} {out.uri}: its report ({report.name}) says OUT cannot be checked against the "
                           f"log as built to an offset: {body['built_to_not_continuable']}; verify it as a store "
                           f"(`reput verify --store {out.uri}`)")
        at = BuiltTo.from_dict(body["built_to"])
    except (ValueError, KeyError, TypeError) as exc:
        raise JobError(f"{report.uri}: no usable built_to ({exc.__class__.__name__}: {exc}; a dry run's, a damaged or "
                       f"an older reput's report): cannot say which part of the commit log OUT covers") from None
    differs = tail_difference(list_segments(store, settings), at)
    if differs is not None:
        raise JobError(f"{FLAG} {out.uri}: the store no longer holds what OUT was built from: {differs} (the store "
                       f"was recovered or replaced since, or OUT is another store's)")
    return OutDir(out, report, at.offset)
