"""convert's write job: the new commit-log segments, an upgraded store's plain segments copied, the consume-queue and
index build tasks and, when the segment writers check the body CRCs, the audit of the plain segments' records, all
in one job of the engine (the segment writes are bound by the disk, the builds and audits by the CPU: together they
overlap); then config/ copied. The body-CRC findings of the segment writers and the audit tasks are merged here
into scan.crc_audit's answer, as its own audit of the same records would list them."""
from __future__ import annotations

import bisect
import dataclasses
import sys
from dataclasses import dataclass

from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..outputs.build import CqTask, IndexShare, IndexTask, build_files
from ..runtime import env
from ..runtime.tasks import run_tasks
from ..scan import crc_audit
from ..scan.crc_audit import BadCrc, CrcAudit, audit_split
from ..scan.decode import KERNEL_ENV
from ..scan.result import ScanResult, SplitTask
from .msgid_map import MAP_DIR
from .plan import ConvertPlan
from .segments import SegmentTask, SegmentWritten, write_segment

DIRECT_IO_ENV = "REPUT_CONVERT_DIRECT_IO"  # "0": segments written through the page cache


@dataclass(frozen=True)
class SplitAudited:
    """A plain segment's split audited in the write job: its failing records and the first LISTED_PER_SPLIT."""

    count: int
    listed: tuple[BadCrc, ...]


@dataclass(frozen=True)
class WriteJob:
    """What the write job did: the segments written, the plain segments copied (source, destination, size), the
    build tasks' raw results (in the builds' order) and, when the writers checked body CRCs, the audit."""

    written: list[SegmentWritten]
    copies: list[tuple[str, str, int]]
    build_results: list[tuple]
    audit: CrcAudit | None


def crc_splits(scan: ScanResult) -> tuple[int, ...]:
    """The commit-log start of every split of the scan (ascending): where scan.crc_audit's listing is counted."""
    return tuple(sorted(sp.segment.start + sp.start for sp in scan.splits))


def plain_audits(scan: ScanResult, settings: BrokerSettings) -> list[SplitTask]:
    """scan.crc_audit's tasks for the accepted splits of plain segments (an upgraded store's part below the DLedger
    data), which are copied, not hopped: their records' body CRCs are checked by these."""
    kernel = env.value(KERNEL_ENV) != "0"
    return [SplitTask(split=scan.splits[s.index], settings=settings, check_crc=True, with_cq=False, with_keys=False,
                      exact_start=s.first_offset - scan.splits[s.index].segment.start, kernel=kernel)
            for s in scan.accepted if s.records and s.first_offset is not None
            and not scan.splits[s.index].segment.header]


def write_all(sc, store: Location, plan: ConvertPlan, staging, builds: list, quiet: bool,
              check: tuple[int, ...] | None, audits: list[SplitTask]) -> WriteJob:
    """The new segments (their records' body CRCs checked when `check`, the scan's split starts, is given), the
    plain segments copied, `builds` and `audits` in one job of the engine, and config/ copied."""
    log_dir, map_dir = staging.dir.child("commitlog"), staging.dir.child(MAP_DIR)
    log_dir.makedirs()
    map_dir.makedirs()
    direct_io = env.value(DIRECT_IO_ENV) != "0"
    tasks = [dataclasses.replace(t, direct_io=direct_io, crc_splits=check)
             for t in plan.segment_tasks(log_dir.uri, map_dir.uri)]
    copies = [(s.path, log_dir.child(Location(s.path).name).uri, s.size) for s in plan.plain_segments]
    # the disk first (the job is bound by it: the largest segment starts at once), then the index files or their
    # shares and the audits beside it, then the other segments by size; the short tasks last
    index_builds = [b for b in builds if not isinstance(b, CqTask)]
    tasks.sort(key=lambda t: -t.count)
    items = [*tasks[:1], *index_builds, *audits, *tasks[1:], *copies, *[b for b in builds if isinstance(b, CqTask)]]
    label = "write commit-log segments" + (" + consume queues + index files" if builds else "")
    results = run_tasks(sc, items, out_task, label, quiet=quiet)
    copy_tree(store.child("config"), staging.dir.child("config"))
    written = [r for r in results if isinstance(r, SegmentWritten)]
    audited = [r for r in results if isinstance(r, SplitAudited)]
    return WriteJob(written=written, copies=copies, build_results=[r for r in results if isinstance(r, tuple)],
                    audit=merged_audit(audited, written, check) if check is not None else None)


def merged_audit(audited: list[SplitAudited], written: list[SegmentWritten], starts: tuple[int, ...]) -> CrcAudit:
    """scan.crc_audit's answer from the write job: every failing record counted, the first LISTED_PER_SPLIT of each
    split listed in log order (a split whose records two segment writers copied is listed once)."""
    listed = [b for a in audited for b in a.listed] + [b for w in written for b in w.bad_crc_listed]
    kept: list[BadCrc] = []
    per_split: dict[int, int] = {}
    for b in sorted(listed, key=lambda b: b.offset):
        split = bisect.bisect_right(starts, b.offset) - 1
        if per_split.get(split, 0) < crc_audit.LISTED_PER_SPLIT:
            per_split[split] = per_split.get(split, 0) + 1
            kept.append(b)
    return CrcAudit(sum(a.count for a in audited) + sum(w.bad_crc for w in written), tuple(kept))


def out_task(item):
    """One task of the write job: a new segment, a plain segment copied, a consume-queue or index build task (rows
    read with their new offsets), or a plain segment's split audited."""
    if isinstance(item, SegmentTask):
        return write_segment(item)
    if isinstance(item, (CqTask, IndexTask, IndexShare)):
        return build_files(item)
    if isinstance(item, SplitTask):
        count, listed = audit_split(item)
        return SplitAudited(count, tuple(listed))
    return copy_file(item)


def write_modes(written: list[SegmentWritten]) -> dict:
    """How the segments were written (O_DIRECT or buffered, io.direct) and why not directly; a note on stderr
    when any fell back to buffered writing."""
    modes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for w in written:
        modes[w.write_mode] = modes.get(w.write_mode, 0) + 1
        if w.fallback:
            reasons[w.fallback] = reasons.get(w.fallback, 0) + 1
    if reasons:
        print(f"reput convert: note: {sum(reasons.values())} of {len(written)} segments written through the page "
              f"cache instead of O_DIRECT: " + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())),
              file=sys.stderr)
    return {"modes": dict(sorted(modes.items())), "direct_io_fallbacks": dict(sorted(reasons.items()))}


def copy_file(item: tuple[str, str, int]) -> int:
    """Copy a plain segment unchanged (a Spark task), in 64 MiB pieces."""
    src, dst, size = item
    loc = Location(src)
    step = 64 << 20
    Location(dst).write_with_zero_tail((loc.read_range(at, min(step, size - at)) for at in range(0, size, step)), size)
    return size


def copy_tree(src: Location, dst: Location) -> None:
    """config/ (topics, subscription groups, consumer and delay offsets: keyed by queue offsets) copied."""
    if not src.is_dir():
        return
    prefix = src.path.rstrip("/") + "/"
    for info in src.walk_files():
        dst.child(*info.path[len(prefix):].split("/")).write_bytes(Location(src.uri.rstrip("/") + "/" +
                                                                            info.path[len(prefix):]).read_bytes())
