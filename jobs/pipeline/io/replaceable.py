"""Whether a run may write OUT: absent, an empty directory (a mount point made for it, say), or with --overwrite an
earlier reput output still as reput published it.

"As published" is what OUT's record of its files says (io.out_files: every file's path, size and modification time,
written beside the run report): anything added, removed, resized or written since is refused by name, before any
work. A store a broker has opened since is named as such (its `lock` held, `abort`, `abort.bak`, `compaction/`,
`config/` persisted, the commit log written past the report's end, the checkpoint flushed): replacing it would throw
away every message it received since. An OUT without a record (a reput before it) is replaced only when it holds
nothing but run reports. reput's own in-place lock file inside OUT (`rebuild --since --in-place`) is not counted.
"""
from __future__ import annotations

import json
import os

from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT, LOCK
from storage_format.segment_names import parse_segment_name

from ..runtime.failure import JobError
from . import out_files
from .fs import Location
from .out_files import REPORT_GLOB
from .run_lock import IN_PLACE_LOCK
from .store_lock import broker_lock

# What a broker writes into a store it opens, and when: a top-level name OUT holds that reput did not leave so. The
# first four only a broker leaves (and so does a commit log written past the report's end).
BROKER_WRITES = {
    LOCK: "the broker opens and locks it at start",
    ABORT: "the broker creates it at start and deletes it at a clean shutdown",
    ABORT_BAK: "5.x keeps the previous abort there at start",
    "compaction": "5.x creates it at start",
    CHECKPOINT: "the broker flushes it as it runs and at shutdown",
    "config": "the broker persists topics, offsets and subscriptions there",
    "commitlog": "the broker appends the messages it receives",
}
BROKER_ONLY = (LOCK, ABORT, ABORT_BAK, "compaction")
NOT_COUNTED = (IN_PLACE_LOCK,)  # reput's own files an in-place run leaves inside OUT
NAMED = 5  # names shown in the refusal's one line (all are counted)
PAST_END = "past the report's end"
WAY_OUT = "choose a new --out, or remove {out} yourself if nothing in it is needed"


def check_replaceable(out: Location, overwrite: bool, unfinished_marker: str | None = None) -> None:
    """OUT may be written: absent, empty, or with --overwrite an earlier reput output (it holds a run report, or
    `unfinished_marker`: an unfinished one) that nothing has changed since it was published. Anything else is refused
    before any work, naming what is there."""
    if not out.exists():
        return
    if not out.is_dir():
        raise JobError(f"{out.uri} exists and is not a directory; choose a new --out")
    if out.writes_in_place and os.path.ismount(out.path):
        raise JobError(f"{out.uri} is a mount point: reput publishes OUT by renaming a directory built beside it into "
                       f"place, which a mount point does not allow; give a new directory inside it "
                       f"(--out {out.uri.rstrip('/')}/NAME)")
    names = [i.base_name for i in out.list()]
    if not names:
        return
    if not overwrite:
        raise JobError(f"{out.uri} already exists; choose a new --out or pass --overwrite")
    reports = [n for n in names if REPORT_GLOB.match(n)]
    if not reports and not (unfinished_marker is not None and unfinished_marker in names):
        raise JobError(f"{out.uri} is not an earlier reput output (no reput-*report.json in it; it holds "
                       f"{_shown(names)}): --overwrite replaces only what reput wrote; choose a new --out, or empty "
                       f"it yourself")
    lock = broker_lock(out)
    if lock.running:
        raise JobError(f"--overwrite refused: {lock.describe()}; --overwrite never replaces a store a broker has "
                       f"opened: choose a new --out")
    why = changed_since_published(out, names, reports)
    if why is not None:
        raise JobError(f"--overwrite refused: {why}; " + WAY_OUT.format(out=out.uri))


def changed_since_published(out: Location, names: list[str], reports: list[str]) -> str | None:
    """Why OUT (an earlier reput output holding `names`, its run reports `reports`) is no longer as reput published
    it, in a few words naming what was found; None when it is."""
    was = out_files.recorded(out, None)
    if was is None:
        others = [n for n in names if n not in reports and n not in NOT_COUNTED]
        if not others:
            return None
        return (f"{out.uri} holds no {out_files.FILES_NAME}, the record of the files reput published (an output of a "
                f"reput before it), beside {_shown(others)}: what it holds cannot be told from what was added since")
    now = out_files.current(out, None, NOT_COUNTED)
    found = out_files.differences(was, now)
    if not found:
        return None
    broker = [d for d in found if _top(d.path) in BROKER_WRITES]
    if broker:
        tops = sorted({_top(d.path) for d in broker}, key=list(BROKER_WRITES).index)
        said = [_broker_finding(out, top, [d for d in broker if _top(d.path) == top], reports) for top in tops]
        rest = len(found) - len(broker)
        more = f" (and {rest} other difference{'s' if rest != 1 else ''})" if rest else ""
        opened = any(top in BROKER_ONLY for top in tops) or any(PAST_END in part for part in said)
        lead = "a broker has opened" if opened else "files a broker writes changed in"
        return (f"{lead} {out.uri} since reput published it: {'; '.join(said)}{more}; replacing it would throw "
                f"away what the broker wrote there, every message received since included")
    return (f"{out.uri} is not as reput published it ({out_files.FILES_NAME}), {len(found)} "
            f"difference{'s' if len(found) != 1 else ''}: {_listed(found)}; --overwrite replaces only what reput wrote")


def _broker_finding(out: Location, top: str, diffs: list[out_files.Difference], reports: list[str]) -> str:
    """One broker-written part of OUT: what changed and why a broker writes it."""
    if top == "commitlog":
        end = _report_end(out, reports)
        past = _log_past(out, end) if end is not None else None
        if past is not None:
            return f"{past}, {PAST_END}: {BROKER_WRITES[top]}"
    return f"{_listed(diffs)}: {BROKER_WRITES[top]}"


def _report_end(out: Location, reports: list[str]) -> int | None:
    """Where OUT's commit log ended when reput published it, as its run report says (built_to, else
    max_physical_offset); None when no report says."""
    for name in reports:
        try:
            report = json.loads(out.child(name).read_bytes())
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict):
            continue
        built = report.get("built_to")
        end = built.get("offset") if isinstance(built, dict) else report.get("max_physical_offset")
        if isinstance(end, int):
            return end
    return None


def _log_past(out: Location, end: int) -> str | None:
    """Where OUT's commit log holds a record past `end`: the segment holding `end` has bytes there, or a segment
    starts past it with bytes at its start; None when neither."""
    log = out.child("commitlog")
    for info in log.list():
        start = parse_segment_name(info.base_name)
        size = info.size or 0
        if start is None or start + size <= end:
            continue
        at = max(end - start, 0)
        if at < size and any(bytes(log.child(info.base_name).read_range(at, 8))):
            return f"commitlog/{info.base_name} holds data at byte {at} (offset {start + at})"
    return None


def _listed(found: list[out_files.Difference]) -> str:
    """The first NAMED differences, each `path (what changed)`, and how many more."""
    return ", ".join(f"{d.path} ({d.what})" for d in found[:NAMED]) + \
        (f" and {len(found) - NAMED} more" if len(found) > NAMED else "")


def _top(path: str) -> str:
    return path.rstrip("/").split("/", 1)[0]


def _shown(names: list[str]) -> str:
    return ", ".join(sorted(names)[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")
