"""Materialise a recovery plan: the files recovery rewrites, creates and deletes, written into a
directory (a full OUT store, or the in-place staging area) by the driver (a local directory) or Spark tasks.

Rendered files: consume-queue files with re-dispatched units (crash-time bytes + units; on a local
filesystem the crash-time file copied and only the span of written units written over it), the index
file recovery appends to, new index files (or a whole rebuilt index with --full-index), the
checkpoint and, for 5.x, `abort.bak`. Everything else in OUT is a verbatim copy of the store: on a local
filesystem made by a background thread (io.background_copy) that starts before Spark does, elsewhere by
Spark tasks.
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np

from storage_format import recovery
from storage_format.checkpoint import checkpoint_bytes
from storage_format.commitlog import segment_name
from storage_format.consume_queue import file_name
from storage_format.index_file import SLOT_DTYPE, IndexState, empty_file_index_count
from storage_format.index_build import append_to_index_file, index_file_chunks
from storage_format.markers import ABORT, ABORT_BAK, CHECKPOINT, LOCK, markers_after_clean_start

from storage_format.scan_plan import Segment
from storage_format.segment_names import parse_segment_name
from storage_format.settings import BrokerSettings

from ..io.background_copy import BackgroundCopy, CopyItem
from ..io.commit_marker import MARKER
from ..io.copy import COPY_LINK, COPY_STREAM_FALLBACK, copy_file
from ..io.fs import Location, pwrite_all
from ..io.paths import is_local
from .inputs import QueueDir
from .plan import RecoveryPlan
from .gather import RecoveryStart, ValidatedLog
from ..runtime.faults import hold_at
from ..runtime.tasks import run_tasks

T = TypeVar("T")
COPY_TASK_BYTES = 512 << 20
# our own staging/journal/report entries and an object-storage write marker are never copied
OWN_PREFIXES = (".reput", "reput-recover", MARKER)
HANDLED_ROOT = {"commitlog", "consumequeue", "index", ABORT, ABORT_BAK, CHECKPOINT, LOCK}


@dataclass(kw_only=True)
class RecoveryOutput:
    """Store-relative paths recovery renders, deletes, and (for OUT) copies verbatim."""

    render_cq: list[tuple[str, recovery.QueueState, QueueDir | None, int]] = field(default_factory=list)
    render_bytes: dict[str, bytes] = field(default_factory=dict)
    # files given as their bytes up to the last non-zero part and their size: the zeros after are a sparse
    # tail where the filesystem has them (the same bytes read back, none written: new and empty index files)
    render_zero_tailed: dict[str, tuple[tuple[bytes, ...] | Future, int]] = field(default_factory=dict)
    full_index: bool = False
    deleted: list[str] = field(default_factory=list)
    copies: list[CopyItem] = field(default_factory=list)  # made as write_output says: linked, holes kept
    sealed: set[str] = field(default_factory=set)  # copies that are sealed commit-log segments (may be linked)
    # copies whose all-zero blocks stay holes: the last kept segment, which the broker writes next, when the
    # broker does not preallocate (warmMapedFileEnable off: it leaves that segment sparse past its writes itself)
    zero_holes: set[str] = field(default_factory=set)
    copied: dict = field(default_factory=dict)  # filled by write_output: how the copies were made
    early: dict = field(default_factory=dict)  # filled by write_output: what a background copy made while planning
    dirs: tuple[str, ...] = ("commitlog", "consumequeue", "index")  # made in OUT even when empty

    @property
    def rendered(self) -> list[str]:
        """Store-relative paths of every file recovery writes."""
        return [r for r, *_ in self.render_cq] + list(self.render_bytes) + list(self.render_zero_tailed)


def warm_index_kernels() -> threading.Thread:
    """Load the index kernels (numba, from its on-disk cache) in a thread while the job starts and validates:
    the driver renders the index files recovery creates, and the first use costs about half a second. An error
    here is left to that first use (which raises it)."""
    def warm() -> None:
        try:
            import numpy as np

            from storage_format.kernels import index_chain

            key_hash, phy, ts = np.zeros(1, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64)
            for column in (key_hash, phy, ts):  # read-only, as the kernels are called (index_build.read_only)
                column.flags.writeable = False
            index_chain.newest_by_hash(key_hash, 3, np.zeros(3, SLOT_DTYPE), 1)
            index_chain.entry_bytes(key_hash, phy, ts, 3, np.zeros(3, SLOT_DTYPE), 1, 0, 0, 2**31 - 1)
        except Exception:  # the first real use raises it
            pass
    thread = threading.Thread(target=warm, name="reput-warm-index-kernels", daemon=True)
    thread.start()
    return thread


def plan_output(plan: RecoveryPlan, with_copies: bool, handled: tuple[str, ...] = ()) -> RecoveryOutput:
    """What to write and delete for this plan; `with_copies` also lists every unchanged file (OUT mode).
    `handled`: further root entries the caller renders and copies itself (the DLedger member directory)."""
    out = RecoveryOutput()
    # commit log: segments past P go; the rest is never modified
    gone = set(plan.segments_deleted)
    out.deleted += [f"commitlog/{segment_name(s)}" for s in sorted(gone)]
    if with_copies:
        for c in segment_copies(plan.segments, gone, plan.settings):
            out.copies.append(CopyItem(c.rel, c.src, c.size))
            if c.link:
                out.sealed.add(c.rel)
            if c.zero_holes:
                out.zero_holes.add(c.rel)
    _queue_output(plan, out, with_copies)
    _index_output(plan, out, with_copies)
    _marker_output(plan, out, with_copies)
    if with_copies:
        out.copies += _other_root_files(plan.store, handled)
    return out


def segment_copies(segments: list[Segment], deleted: set[int], settings: BrokerSettings) -> list[CopyItem]:
    """The kept commit-log segments as OUT's copies; `link` marks the sealed ones (every kept plain segment but
    the last, which holds the recovery point the broker appends at: those --link-sealed-segments may link);
    `zero_holes` the last one when the broker does not preallocate (warmMapedFileEnable off)."""
    kept = [s for s in segments if s.start not in deleted]
    return [CopyItem(f"commitlog/{segment_name(s.start)}", s.path, s.size, link=i < len(kept) - 1 and not s.header,
                     zero_holes=(i == len(kept) - 1 and not s.header and not settings.warm_maped_file_enable))
            for i, s in enumerate(kept)]


def _as_made(items: list[CopyItem], link_sealed: bool) -> list[CopyItem]:
    """segment_copies as they are made: linked only with --link-sealed-segments."""
    return [CopyItem(c.rel, c.src, c.size, link=c.link and link_sealed, zero_holes=c.zero_holes) for c in items]


def unchanged_segment_copies(first: RecoveryStart, settings: BrokerSettings, link_sealed: bool) -> list[CopyItem]:
    """The segments before the recovery's start segment: known before any scan, never read nor changed by the
    recovery (the truncation point lies at or after the start), so OUT's copies of them can start at once."""
    return _as_made([c for c, s in zip(segment_copies(first.segments, set(), settings), first.segments)
                     if s.start < first.start.offset], link_sealed)


def queue_file_copies(store: Location) -> list[CopyItem]:
    """Every consume-queue file of a local store as a verbatim copy into OUT, listed before any scan: most stay
    unchanged, a rewritten one is its crash-time bytes with the re-dispatched span written over them once the copy
    is made (write_output), and those recovery deletes are removed again by `BackgroundCopy.finish`. None where
    the listing fails or finds what the broker would not load as it is (the plan's own listing names it)."""
    root = store.child("consumequeue")
    out: list[CopyItem] = []
    try:
        for topic in sorted(os.scandir(root.path), key=lambda e: e.name):
            if not topic.is_dir(follow_symlinks=False):
                continue
            for queue in sorted(os.scandir(topic.path), key=lambda e: e.name):
                if not queue.is_dir(follow_symlinks=False):
                    continue
                qdir = root.child(topic.name, queue.name)
                for f in sorted(os.scandir(queue.path), key=lambda e: e.name):
                    if not f.is_file(follow_symlinks=False) or parse_segment_name(f.name) is None:
                        return []
                    out.append(CopyItem(f"consumequeue/{topic.name}/{queue.name}/{f.name}", f"{qdir.uri}/{f.name}",
                                        f.stat(follow_symlinks=False).st_size))
    except OSError:
        return []
    return out


def likely_segment_copies(first: RecoveryStart, settings: BrokerSettings, link_sealed: bool) -> list[CopyItem]:
    """Every segment as OUT's copies are made when the truncation point lies in the last segment (a crash tears
    the log's end): known before any scan, so the segments the validating scan reads are copied while it runs
    instead of after it (with much dispatch lag the last segment's copy was the job's tail). Where validation
    finds P earlier, `BackgroundCopy.finish` removes the copies of deleted segments and makes again the one whose
    flags differ (the new last kept segment)."""
    return _as_made(segment_copies(first.segments, set(), settings), link_sealed)


def kept_segment_copies(log: ValidatedLog, link_sealed: bool) -> list[CopyItem]:
    """Every segment the recovery keeps, once validation has found the truncation point P."""
    gone = set(recovery.segments_to_delete([s.start for s in log.segments], log.truncation.offset))
    return _as_made(segment_copies(log.segments, gone, log.settings), link_sealed)


def _queue_output(plan: RecoveryPlan, out: RecoveryOutput, with_copies: bool) -> None:
    """Consume-queue files to render (units written), delete, and (OUT) copy unchanged."""
    rewritten, created, deleted = plan.cq_changes()
    out.deleted += deleted
    for key, st in sorted(plan.states.items()):
        q = plan.queue_dirs.get(key)
        for f in st.changed_files():
            out.render_cq.append((plan.cq_rel(key, f), st, q if f not in st.created else None, f))
    if with_copies:
        skip = set(rewritten) | set(created) | set(deleted)
        for key, q in sorted(plan.queue_dirs.items()):
            for start, size in q.files:
                rel = plan.cq_rel(key, start)
                if rel not in skip:
                    out.copies.append(CopyItem(rel, q.file_uri(start), size))


def _index_output(plan: RecoveryPlan, out: RecoveryOutput, with_copies: bool) -> None:
    """Index files to delete, the kept file recovery appends to, new files (or the full rebuild)."""
    idx, settings = plan.index, plan.settings
    out.deleted += [f"index/{f.name}" for f in idx.deleted]
    if idx.resume is None:
        out.full_index = True
        return
    appended = idx.resume.appended
    for f in idx.kept:
        if appended is not None and f.name == appended.appends_to:
            data = bytearray(Location(idx.uris[f.name]).read_bytes())
            data.extend(bytes(settings.index_file_size - len(data)))  # a 0-byte file maps as zeros
            k = appended.all_keys()
            put = append_to_index_file(data, k.key_hash, k.phy, k.store_ts, settings.max_hash_slot_num,
                                       settings.max_index_num)
            if put != len(k):
                raise recovery.RecoveryError(f"index/{f.name}: {len(k) - put} keys did not fit the file")
            out.render_bytes[f"index/{f.name}"] = bytes(data)
        elif f.empty_on_disk:
            out.render_zero_tailed[f"index/{f.name}"] = ((), settings.index_file_size)
        elif with_copies:
            out.copies.append(CopyItem(f"index/{f.name}", idx.uris[f.name], settings.index_file_size))
    for name, t in zip(idx.new_names, idx.resume.new_files):
        out.render_zero_tailed[f"index/{name}"] = (_soon(new_index_file, t.all_keys(), settings, t.inherited,
                                                         plan.generation.generation),
                                                   settings.index_file_size)


def _soon(fn: Callable[..., T], *args) -> Future:
    """fn(*args) in a thread from now on (the index kernels run without the GIL: a new index file is rendered
    while the driver writes the consume-queue files); write_output takes the result."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reput-index-render")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


def new_index_file(k, settings, inherited: IndexState, generation: int) -> tuple[bytes, ...]:
    """A new index file's bytes up to its last entry (index_build.build_index_file without the zero tail)."""
    return tuple(index_file_chunks(lambda: [(k.key_hash, k.phy, k.store_ts)], settings.max_hash_slot_num,
                                   settings.max_index_num, inherited, zero_tail=False,
                                   empty_count=empty_file_index_count(generation)))


def _marker_output(plan: RecoveryPlan, out: RecoveryOutput, with_copies: bool) -> None:
    """The checkpoint and the marker files a clean start and shutdown leave (abort goes, lock, 5.x abort.bak)."""
    g = plan.generation.generation
    if plan.checkpoint_changes or with_copies:
        out.render_bytes[CHECKPOINT] = checkpoint_bytes(plan.checkpoint_after, g, plan.markers.checkpoint_raw)
    if plan.abnormal:
        out.deleted.append(ABORT)
        for name, data in markers_after_clean_start(g, plan.markers.abort).items():
            if name == LOCK and not with_copies and plan.store.child(LOCK).exists():
                continue  # in place the lock file stays as it is
            out.render_bytes[name] = data
    elif with_copies:
        out.render_bytes[LOCK] = markers_after_clean_start(g, None)[LOCK]
        if plan.markers.abort_bak is not None:
            out.render_bytes[ABORT_BAK] = plan.markers.abort_bak


def _other_root_files(store: Location, handled: tuple[str, ...] = ()) -> list[CopyItem]:
    """Everything else in the store root (config/, compaction/, timer files, ...) is copied verbatim."""
    prefix = store.path.rstrip("/") + "/"
    out = []
    for info in store.list():
        name = info.base_name
        if name in HANDLED_ROOT or name in handled or name.startswith(OWN_PREFIXES):
            continue
        loc = store.child(name)
        if info.type.name == "Directory":
            out += [CopyItem(rel := i.path[len(prefix):], store.child(rel).uri, i.size) for i in loc.walk_files()]
        elif info.type.name == "File":
            out.append(CopyItem(name, loc.uri, info.size))
    return out


# ---------------------------------------------------------------------------------------------
# writing (Spark tasks for bulk work)


@dataclass(frozen=True)
class CopyTask:
    """Files one Spark task copies verbatim."""
    items: tuple[tuple[str, str, bool, bool], ...]  # (source URI, destination URI, hard-link it, zero holes)


def copy_task_files(task: CopyTask) -> list[tuple[str, int, str | None]]:
    """Copy files verbatim (runs in a Spark task), each by the fastest safe means (io.copy): (method, bytes,
    why it fell back) per file."""
    return [copy_file(Location(src), Location(dst), link, holes) for src, dst, link, holes in task.items]


def copy_counts(results: list[tuple[str, int, str | None]]) -> dict:
    """The run report's `copies`: files and bytes per method, and why local copies fell back to streaming."""
    out: dict = {}
    for method, n, why in results:
        c = out.setdefault(method, {"files": 0, "bytes": 0})
        c["files"] += 1
        c["bytes"] += n
        if why:
            c.setdefault("reasons", [])
            if why not in c["reasons"]:
                c["reasons"].append(why)
    return out


def copy_notices(copied: dict) -> list[str]:
    """What stderr names about the copies: a non-default hard link, a fallback to a slower copy."""
    lines = []
    if COPY_LINK in copied:
        c = copied[COPY_LINK]
        lines.append(f"--link-sealed-segments: {c['files']} sealed commit-log segments ({c['bytes']} bytes) are "
                     f"hard links to the input store's files, not copies (the broker never writes them again; "
                     f"a write through either name shows in both stores)")
    if COPY_STREAM_FALLBACK in copied:
        c = copied[COPY_STREAM_FALLBACK]
        lines.append(f"{c['files']} files ({c['bytes']} bytes) copied byte by byte, the slower path: "
                     f"{'; '.join(c.get('reasons', []))}")
    return lines


@dataclass(frozen=True)
class CqRenderTask:
    """Consume-queue files one Spark task renders."""
    items: tuple[tuple[str, recovery.QueueState, str | None, int], ...]  # rel, state, queue dir URI, file start
    dest: Location
    copied: bool = False  # the kept files' crash-time bytes are in `dest` already (the background copy made them)


def _render_cq(task: CqRenderTask) -> int:
    """Write rewritten / created consume-queue files (in the driver for a local OUT, else in a Spark task). A
    kept file on a local filesystem is copied (io.copy; or was, `copied`) and only its span of written units
    rendered over the copy (render_span); elsewhere, and for created files, the whole file is rendered."""
    for rel, st, qdir, start in task.items:
        dst = task.dest.child(rel)
        src = Location(f"{qdir}/{file_name(start)}") if qdir is not None else None
        if src is not None and is_local(src) and is_local(dst):
            if not task.copied:
                copy_file(src, dst)
            at, units = recovery.render_span(st, start, src.read_range)
            _write_at(dst.path, units.tobytes(), at)
            continue

        def read(s: int, qdir=qdir) -> bytes:
            """Crash-time bytes of one file of this queue."""
            return Location(f"{qdir}/{file_name(s)}").read_bytes()
        units = recovery.render_units(st, start, read)
        dst.write_with_zero_tail([used_units(units)], units.nbytes)
    return len(task.items)


def _write_at(path: str, data: bytes, at: int) -> None:
    """Write `data` over a local file's bytes from `at` (the file keeps its size)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        pwrite_all(fd, data, at)
    finally:
        os.close(fd)


def used_units(units: np.ndarray) -> memoryview:
    """A rendered consume-queue file's bytes through its last unit holding a non-zero byte: the zeros after
    are left to write_with_zero_tail (a sparse tail, as the broker's own mapped files have; the same bytes)."""
    raw = units.view(np.uint8).reshape(len(units), -1)
    used = np.flatnonzero(raw.any(axis=1))
    return memoryview(raw[:used[-1] + 1 if len(used) else 0].reshape(-1))


def write_output(sc, plan: RecoveryPlan, out: RecoveryOutput, dest: Location, quiet: bool,
                 tz=None, link_sealed: bool = False, background: BackgroundCopy | None = None) -> list[str]:
    """Write every rendered file (and, for OUT, every copy) under `dest`; returns the index file names
    a --full-index rebuild created. `link_sealed`: hard-link the sealed commit-log segments (out.sealed)
    instead of copying them (the caller checked link_refusal). `background`: the copies go to this thread
    (started while the job planned) instead of Spark tasks, and are waited for here. How the copies were
    made: out.copied (and out.early: what the thread had made before writing began)."""
    dest.makedirs()
    for d in out.dirs:
        if out.copies:
            dest.child(d).makedirs()
    wanted = [CopyItem(c.rel, c.src, c.size, link=link_sealed and c.rel in out.sealed,
                       zero_holes=c.rel in out.zero_holes) for c in out.copies]
    # with the background thread a kept consume-queue file's crash-time bytes are one of its copies (queued
    # before the scan: queue_file_copies), and only its span is written once the copies are made
    patched = background is not None
    if patched:
        wanted += [CopyItem(rel, q.file_uri(start), dict(q.files)[start]) for rel, _, q, start in out.render_cq
                   if q is not None]
        background.add(wanted)  # copied while the files below are rendered
    stop = threading.Event()  # set when the job stops (an error, an interrupt): the index writer writes no more
    index_written = _soon(_write_zero_tailed, out.render_zero_tailed, dest, stop)  # beside the CQ renders
    try:
        if not patched:
            _write_queues(sc, out, dest, quiet, copied=False)
        for rel, data in out.render_bytes.items():
            dest.child(rel).write_bytes(data)
        index_written.result()  # its error raised here
    except BaseException:
        stop.set()
        wait([index_written])  # nothing is written into `dest` once the caller removes it
        raise
    if background is not None:
        finished = background.finish(wanted)  # before the queues: finish removes what it made and is not wanted
        out.copied, out.early = copy_counts(finished.results), finished.to_dict()
        _write_queues(sc, out, dest, quiet, copied=True)
    elif out.copies:
        done = run_tasks(sc, copy_tasks(out.copies, dest, out.sealed if link_sealed else set(), out.zero_holes),
                         copy_task_files, "copy",
                         total_bytes=sum(c.size for c in out.copies), quiet=quiet)
        out.copied = copy_counts([r for rs in done for r in rs])
    if out.full_index:
        return _rebuild_index(sc, plan, dest.child("index"), quiet, tz)
    return []


def _write_zero_tailed(files: dict[str, tuple[tuple[bytes, ...] | Future, int]], dest: Location,
                       stop: threading.Event) -> None:
    """The new and empty index files under `dest`: each up to its last entry, the zeros after left sparse (run in
    a thread beside the consume-queue renders, whose writes release the GIL); none once `stop` is set."""
    for rel, (chunks, size) in files.items():
        if isinstance(chunks, Future):
            chunks = chunks.result()
        hold_at("in-index-write", stop)
        if stop.is_set():
            return
        dest.child(rel).write_with_zero_tail(chunks, size)


def _write_queues(sc, out: RecoveryOutput, dest: Location, quiet: bool, copied: bool) -> None:
    """The consume-queue files recovery writes, grouped by queue: created ones whole; kept ones (`copied`: their
    crash-time bytes already copied into `dest`) as a copy with their span of written units over it."""
    if not out.render_cq:
        return
    groups: dict[tuple[str, int], list] = {}
    for rel, st, q, start in out.render_cq:
        groups.setdefault((st.load.topic, st.load.queue_id), []).append((rel, st, q.uri if q else None, start))
    queues = [v for _, v in sorted(groups.items())]
    if is_local(dest):  # kept files copied in the kernel and patched: no Spark task (nor the re-dispatched
        _render_cq(_cq_tasks(queues, dest, 1, copied)[0])  # entries pickled into one through the JVM) is worth it
    else:
        run_tasks(sc, _cq_tasks(queues, dest, sc.default_parallelism, copied), _render_cq, "consume queues",
                  quiet=quiet)


def _cq_tasks(queues: list[list], dest: Location, slots: int, copied: bool = False) -> list[CqRenderTask]:
    """The queues' files to render dealt round-robin into at most `slots` tasks (the cluster's default
    parallelism): a Spark task per queue costs a round trip each, tens of ms, more than rendering a queue."""
    n = max(1, min(len(queues), slots))
    return [CqRenderTask(tuple(item for q in queues[i::n] for item in q), dest, copied) for i in range(n)]


def copy_tasks(copies: list[CopyItem], dest: Location, link: set[str],
                zero_holes: set[str] = frozenset()) -> list[CopyTask]:
    """Copies packed into tasks of about COPY_TASK_BYTES; the files in `link` are hard-linked, those in
    `zero_holes` keep their all-zero blocks as holes."""
    tasks, cur, size = [], [], 0
    for c in copies:
        cur.append((c.src, dest.child(c.rel).uri, c.rel in link, c.rel in zero_holes))
        size += c.size
        if size >= COPY_TASK_BYTES:
            tasks.append(CopyTask(tuple(cur)))
            cur, size = [], 0
    if cur:
        tasks.append(CopyTask(tuple(cur)))
    return tasks


def _rebuild_index(sc, plan: RecoveryPlan, index_dir: Location, quiet: bool, tz) -> list[str]:
    """--full-index: the rebuild stage's index files from the valid commit log, named like a rebuild."""
    from ..outputs.build import build_files, name_index_files, one_stream_note, pending_name, plan_index, share_index_tasks

    scan, work = plan.index.full_rebuild_scan, plan.index.full_rebuild_work
    index_dir.makedirs()
    tasks = plan_index(scan, plan.settings, work, index_dir, empty_file_index_count(plan.generation.generation))
    note = one_stream_note(tasks)
    if note:
        print(f"reput recover: note: {note}", file=sys.stderr)
    tasks = share_index_tasks(tasks, sc.default_parallelism)  # a large file in shares, as the rebuild builds it
    firsts = [f for _, done, _ in run_tasks(sc, tasks, build_files, "index files", quiet=quiet) for f in done]
    names = name_index_files(scan, firsts, tz)
    for no, name in sorted(names.items()):
        index_dir.child(pending_name(no)).move_to(index_dir.child(name))
    return [names[no] for no in sorted(names)]
