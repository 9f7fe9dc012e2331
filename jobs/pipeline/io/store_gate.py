"""Every job's first look at a store: refuse what reput does not implement (storage_format.store_layout), by
name, before any Spark work; and where the commit log lives (a single storePathCommitLog is honoured)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from storage_format import dledger
from storage_format.commitlog import parse_segment_name
from storage_format.errors import SettingsError
from storage_format.index_file import HEADER_SIZE, IndexHeader, IndexLayout, layouts_fitting
from storage_format.recovery.timer import TIMERLOG_DIR
from storage_format.settings import (BrokerSettings, FilesShown, SizeDifference, config_disagreement,
                                     infer_file_sizes, size_differences)
from storage_format.cq_layout import DOUBLE_WRITE, ROCKSDB, SEPARATE_DB_DIR, CqLayout, discover_cq_layout
from storage_format.store_layout import (NOT_IMPLEMENTED, StoreListing, UnsupportedStoreError, check_store,
                                         commitlog_path, discover_dledger)

from ..runtime.failure import JobError
from .fs import Location, location
from .paths import is_local, real_path, same_or_inside

LAYOUT_DIRS = ("batchconsumequeue", "consumequeue_ext")


def list_store(store: Location) -> StoreListing:
    """The names the layout checks need (a missing store lists as empty)."""
    if not store.is_dir():
        return StoreListing(frozenset())
    root = frozenset(i.base_name + ("/" if i.type.name == "Directory" else "") for i in store.list())
    cq = store.child("consumequeue").list() if "consumequeue/" in root else []
    cq_files = frozenset(i.base_name for i in cq if i.type.name == "File")
    cq_dirs = frozenset(i.base_name for i in cq if i.type.name == "Directory")
    separate = frozenset(i.base_name for i in store.child(SEPARATE_DB_DIR).list() if i.type.name == "File") \
        if f"{SEPARATE_DB_DIR}/" in root else frozenset()
    non_empty = frozenset(f"{d}/" for d in LAYOUT_DIRS if f"{d}/" in root and store.child(d).list())
    homes = frozenset(n for n in root if n.startswith(dledger.DIR_PREFIX) and n.endswith("/")
                      and store.child(n.rstrip("/")).child(dledger.DATA_DIR).is_dir())
    return StoreListing(root, cq_files, non_empty, homes, cq_dirs, separate)


# Jobs that read a store whose consume queues are a RocksDB database (storeType=defaultRocksDB), and those that
# refuse a double-write store (the database beside the file queues is more than they model).
ROCKSDB_JOBS = ("inspect", "dump", "query", "verify", "rebuild", "recover")  # rebuild: outputs.rocksdb_run
DOUBLE_WRITE_REFUSED = ("recover",)
START_MODELLED = ("recover", "verify")  # jobs that say what the broker's next start dispatches again


def store_cq_layout(store: Location, settings: BrokerSettings) -> CqLayout:
    """Where the store's consume queues are (storage_format.cq_layout), for settings that passed store_settings."""
    return check_store(settings, list_store(store))


def _gate_cq_layout(layout: CqLayout, settings: BrokerSettings, job: str) -> None:
    """Refuse a layout this job does not handle, by name; say on stderr what the layout leaves unread."""
    if job and layout.kind == ROCKSDB and job not in ROCKSDB_JOBS:
        raise UnsupportedStoreError(f"storeType={settings.store_type}: RocksDB consume queues ({layout.db_dir}/); "
                                    f"{NOT_IMPLEMENTED} for {job} yet ({', '.join(ROCKSDB_JOBS)} read such a store)")
    if job in DOUBLE_WRITE_REFUSED and layout.kind == DOUBLE_WRITE:
        raise UnsupportedStoreError(f"rocksdbCQDoubleWriteEnable=true: a RocksDB database beside the file consume "
                                    f"queues in consumequeue/; {NOT_IMPLEMENTED} for {job} yet (what the broker's "
                                    f"recovery does to that database is not modelled)")
    note = layout.not_read_note()
    if note:
        print(f"reput{' ' + job if job else ''}: note: {note}", file=sys.stderr)


CQ_FILES_SAMPLED = 16  # consume-queue files looked at to infer their size (all are pre-allocated full size)


def store_settings(store: Location, settings: BrokerSettings, config_given: bool, job: str = "") -> BrokerSettings:
    """Every job's first step, before Spark starts: raise UnsupportedStoreError (exit 2) when the settings or
    the files show a feature reput does not implement, or a consume-queue layout (storage_format.cq_layout) the job
    does not handle or the config contradicts; with a broker config, refuse it when the store's files show other
    sizes (every one in one line); without one, take the file sizes from the files on disk (a note on stderr says
    so), DLedger mode from a single dledger-<id>/data/ and a RocksDB layout from consumequeue/'s files."""
    listing = list_store(store)
    if not config_given:
        found = discover_dledger(settings, listing)
        if found is not settings:
            print(f"reput: note: no broker config: DLedger mode (enableDLegerCommitLog=true, dLegerSelfId="
                  f"{found.d_leger_self_id}) from {dledger.home_dir(found.d_leger_self_id)}/data/", file=sys.stderr)
        settings = found
        settings, note = discover_cq_layout(settings, listing.cq_files())
        if note:
            print(f"reput: note: {note}", file=sys.stderr)
    _gate_cq_layout(check_store(settings, listing), settings, job)
    if job in START_MODELLED and settings.recheck_reput_offset_from_cq:
        raise UnsupportedStoreError(f"recheckReputOffsetFromCq=true: the broker's start dispatches again from the "
                                    f"consume queues' end, not from the commit log's confirm offset; {NOT_IMPLEMENTED} "
                                    f"for {job} yet (rebuild, inspect, query, dump and convert read the log alone)")
    shown = files_shown(store, settings)
    if config_given:
        found = size_differences(settings, shown)
        if found:
            odd = config_disagreement(settings, shown, found)
            raise SettingsError(f"the broker config does not fit the store: {odd}{_log_only_hint(job, found)}")
        return settings
    settings, notes = infer_file_sizes(settings, shown)
    for note in notes:
        print(f"reput: note: {note}", file=sys.stderr)
    return settings


def _log_only_hint(job: str, found: list[SizeDifference]) -> str:
    """For a job that reads only the log, refused for the sizes of files it does not read: how to build other sizes
    on purpose (a --store holding only the commit log)."""
    if not job or job in READS_STORE_FILES or any(d.files == "commitlog" for d in found):
        return ""
    return (f" ({job} reads only the commit log: to use other sizes on purpose, give --store a directory holding "
            f"only commitlog/, e.g. a symbolic link to it)")


def files_shown(store: Location, settings: BrokerSettings) -> FilesShown:
    """What the store's files show of its size settings (settings.FilesShown): every commit-log segment and DLedger
    data file where the settings lead, a sample of the consume-queue files, the index files with the layout a few of
    them show, the timer-log files."""
    data = dledger_data_dir(store, settings)
    index = _index_files(store.child("index"))
    return FilesShown(segments=tuple(_segments(commitlog_dir(store, settings)) + (_segments(data) if data else [])),
                      consume_queues=tuple(_cq_files(store.child("consumequeue"))), index_files=tuple(index),
                      index_layout=_index_layout(index, BrokerSettings().index_layout),
                      timer_logs=tuple(_segments(store.child(TIMERLOG_DIR))))


def _segments(directory: Location) -> list[tuple[str, int]]:
    """(path, size) of the files with 20-digit names (commit-log segments, DLedger data files, timer-log files)."""
    if not directory.is_dir():
        return []
    return [(directory.child(i.base_name).uri, i.size) for i in directory.list()
            if i.type.name == "File" and parse_segment_name(i.base_name) is not None]


INDEX_FILES_SAMPLED = 3  # index files whose headers are read for the layout: the first two (full) and the last


def _index_layout(index: list[tuple[str, int]], default: IndexLayout) -> IndexLayout | None:
    """The one layout (maxHashSlotNum, maxIndexNum) the sampled index files all fit (index_file.layouts_fitting:
    first by a few small reads each; only when none fits so, the one with the most entries searched whole), else None
    (no file with an entry, or more than one layout fits)."""
    sample = index[:INDEX_FILES_SAMPLED - 1] + index[-1:] if len(index) > INDEX_FILES_SAMPLED else index
    files = []
    for uri, size in dict(sample).items():
        loc = Location(uri)
        if size >= HEADER_SIZE and not loc.not_regular():
            files.append((loc, size, IndexHeader.from_bytes(bytes(loc.read_range(0, HEADER_SIZE)))))
    for search in (False, True):
        common: set[IndexLayout] | None = None
        tried = files if not search else sorted(files, key=lambda f: -f[2].index_count)[:1]
        for loc, size, header in tried:
            fits = layouts_fitting(size, header, lambda at, n, loc=loc: loc.read_range(at, n), default, search)
            if fits:
                common = set(fits) if common is None else common & set(fits)
        if common:
            return next(iter(common)) if len(common) == 1 else None
    return None


def _cq_files(cq: Location) -> list[tuple[str, int]]:
    """(path, size) of the first few consume-queue files (topic/queueId/20-digit name)."""
    out: list[tuple[str, int]] = []
    if not cq.is_dir():
        return out
    for t in cq.list():
        if t.type.name != "Directory":
            continue
        for q in cq.child(t.base_name).list():
            if q.type.name != "Directory":
                continue
            qdir = cq.child(t.base_name).child(q.base_name)
            out += [(qdir.child(f.base_name).uri, f.size) for f in qdir.list()
                    if f.type.name == "File" and parse_segment_name(f.base_name) is not None]
            if len(out) >= CQ_FILES_SAMPLED:
                return out
    return out


def _index_files(index: Location) -> list[tuple[str, int]]:
    """(path, size) of the index files (17-digit time names; a few per day)."""
    if not index.is_dir():
        return []
    return [(index.child(f.base_name).uri, f.size) for f in index.list()
            if f.type.name == "File" and len(f.base_name) == 17 and f.base_name.isdigit()]


def dledger_home(store: Location, settings: BrokerSettings) -> Location | None:
    """dledger-<dLegerSelfId>/ under the store root (DLedger's index and checkpoint), None in plain mode."""
    if not settings.enable_dleger_commit_log:
        return None
    return store.child(dledger.home_dir(settings.d_leger_self_id or ""))


def dledger_data_dir(store: Location, settings: BrokerSettings) -> Location | None:
    """Where DLedger data files are (storePathDLedgerCommitLog, else dledger-<selfId>/data/); None in plain
    mode."""
    home = dledger_home(store, settings)
    if home is None:
        return None
    path = (settings.store_path_dledger_commit_log or "").strip()
    return location(path) if path else home.child(dledger.DATA_DIR)


def log_dir(store: Location, settings: BrokerSettings) -> Location:
    """The directory a job needs to find records in: DLedger data in DLedger mode, else the commit log."""
    data = dledger_data_dir(store, settings)
    return data if data is not None else commitlog_dir(store, settings)


# Jobs that read the store's own files beside its log (consume queues, index, checkpoint, config/): given another
# store's log, they would compare or mix the two stores' files. The others read the log alone.
READS_STORE_FILES = ("verify", "recover", "dump", "query", "convert")
STORE_ROOT_NAMES = ("consumequeue", "index", "checkpoint")  # what makes a directory a store root


@dataclass(frozen=True)
class LogPlace:
    """Where the records a job reads lie: the directory, the setting that put it outside --store (None: inside) and,
    when it is another store's log, why."""

    path: str
    setting: str | None
    another_store: str | None

    def to_dict(self) -> dict:
        return {"path": self.path, "outside_store": self.setting is not None, "set_by": self.setting,
                "another_store": self.another_store}


def log_place(store: Location, settings: BrokerSettings) -> LogPlace:
    """Where the settings lead a job for records (log_dir), and whether that is outside --store: a single
    storePathCommitLog, or storePathDLedgerCommitLog; in DLedger mode storePathCommitLog too, where the plain segments
    of an upgraded store are read. Outside, it is another store's log when the directory it lies in (for a DLedger
    member's data, <root>/dledger-<id>/data, the one above) is a store root (consumequeue/, index/ or checkpoint)
    that does not hold --store, or when --store holds a log of its own the settings lead away from. Of two places
    (DLedger mode), the one another store's, else the one outside, is returned."""
    plain = _place(store, commitlog_dir(store, settings), "storePathCommitLog", commitlog_path(settings),
                   store.child("commitlog"), dledger_data=False)
    data = dledger_data_dir(store, settings)
    if data is None:
        return plain
    home = dledger_home(store, settings).child(dledger.DATA_DIR)
    dledger_place = _place(store, data, "storePathDLedgerCommitLog", settings.store_path_dledger_commit_log, home,
                           dledger_data=True)
    places = (dledger_place, plain)
    return next((p for p in places if p.another_store is not None), None) \
        or next((p for p in places if p.setting is not None), dledger_place)


def _place(store: Location, directory: Location, setting: str, configured: str | None, own: Location,
           dledger_data: bool) -> LogPlace:
    """One log directory's place (log_place): inside --store, outside it, or another store's log."""
    if not (configured or "").strip() or _inside(directory, store):  # the store's own: a link to elsewhere included
        return LogPlace(directory.uri, None, None)
    root = directory.parent.parent if dledger_data else directory.parent  # <root>/dledger-<id>/data, or /commitlog
    other = root if not same_or_inside(store, root) and any(root.child(n).exists() for n in STORE_ROOT_NAMES) else None
    why = None
    if other is not None:
        why = f"it lies in {other.uri}, which holds a store's files (another store's log)"
    elif _segments(own) and not _inside(own, directory):
        why = f"--store holds its own log, {own.uri}, which the setting leads away from"
    return LogPlace(directory.uri, setting, why)


def _inside(child: Location, parent: Location) -> bool:
    """`child` is `parent` or below it, as named (a symbolic link inside the store is the store's) or as the
    filesystem resolves it (paths.same_or_inside)."""
    named = [os.path.abspath(x.path) if is_local(x) else real_path(x) for x in (child, parent)]
    return named[0] == named[1] or named[0].startswith(named[1].rstrip("/") + "/") or same_or_inside(child, parent)


def check_log_place(job: str, store: Location, settings: BrokerSettings) -> LogPlace:
    """A log outside --store is said on stderr (the job's report carries log_place too); one that is another store's
    is refused for the jobs that read the store's own files beside it (READS_STORE_FILES), in one line naming the
    setting and the way out."""
    place = log_place(store, settings)
    if place.setting is None:
        return place
    if place.another_store is not None and job in READS_STORE_FILES:
        raise JobError(f"{place.setting} leads to {place.path}, outside --store {store.uri}: {place.another_store}; "
                       f"{job} would read {store.uri}'s files against that log; point {place.setting} at "
                       f"{store.uri}'s own log (or remove it from the broker config), or give that store as --store")
    print(f"reput {job}: note: the log is read from {place.path} ({place.setting}), outside --store {store.uri}"
          + (f": {place.another_store}" if place.another_store else ""), file=sys.stderr)
    return place


def commitlog_dir(store: Location, settings: BrokerSettings) -> Location:
    """<store>/commitlog, or the single storePathCommitLog the broker config names."""
    path = commitlog_path(settings)
    return location(path) if path else store.child("commitlog")
