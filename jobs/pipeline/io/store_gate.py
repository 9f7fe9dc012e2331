"""Every job's first look at a store: refuse what reput does not implement (storage_format.store_layout), by
name, before any Spark work; and where the commit log lives (a single storePathCommitLog is honoured)."""
from __future__ import annotations

import sys

from storage_format import dledger
from storage_format.commitlog import parse_segment_name
from storage_format.errors import SettingsError
from storage_format.settings import BrokerSettings, config_disagreement, infer_file_sizes
from storage_format.store_layout import StoreListing, check_store, commitlog_path, discover_dledger

from .fs import Location, location

LAYOUT_DIRS = ("batchconsumequeue", "consumequeue_ext")


def list_store(store: Location) -> StoreListing:
    """The names the layout checks need (a missing store lists as empty)."""
    if not store.is_dir():
        return StoreListing(frozenset())
    root = frozenset(i.base_name + ("/" if i.type.name == "Directory" else "") for i in store.list())
    cq = store.child("consumequeue")
    cq_files = frozenset(i.base_name for i in cq.list() if i.type.name == "File") if "consumequeue/" in root else frozenset()
    non_empty = frozenset(f"{d}/" for d in LAYOUT_DIRS if f"{d}/" in root and store.child(d).list())
    homes = frozenset(n for n in root if n.startswith(dledger.DIR_PREFIX) and n.endswith("/")
                      and store.child(n.rstrip("/")).child(dledger.DATA_DIR).is_dir())
    return StoreListing(root, cq_files, non_empty, homes)


CQ_FILES_SAMPLED = 16  # consume-queue files looked at to infer their size (all are pre-allocated full size)


def store_settings(store: Location, settings: BrokerSettings, config_given: bool) -> BrokerSettings:
    """Every job's first step, before Spark starts: raise UnsupportedStoreError (exit 2) when the settings or
    the files show a feature reput does not implement; without a broker config, take the file sizes from
    the files on disk (a note on stderr says so), and DLedger mode from a single dledger-<id>/data/."""
    listing = list_store(store)
    if not config_given:
        found = discover_dledger(settings, listing)
        if found is not settings:
            print(f"reput: note: no broker config: DLedger mode (enableDLegerCommitLog=true, dLegerSelfId="
                  f"{found.d_leger_self_id}) from {dledger.home_dir(found.d_leger_self_id)}/data/", file=sys.stderr)
        settings = found
    check_store(settings, listing)
    cq_files = _cq_files(store.child("consumequeue"))
    if config_given:
        odd = config_disagreement(settings, cq_files, _index_files(store.child("index")))
        if odd is not None:
            raise SettingsError(f"the broker config does not fit the store: {odd}")
        return settings
    data = dledger_data_dir(store, settings)
    sizes = _segment_sizes(commitlog_dir(store, settings)) + (_segment_sizes(data) if data is not None else [])
    settings, notes = infer_file_sizes(settings, sizes, [n for _, n in cq_files])
    for note in notes:
        print(f"reput: note: {note}", file=sys.stderr)
    return settings


def _segment_sizes(commitlog: Location) -> list[int]:
    """Sizes of the commit-log segments (20-digit names)."""
    if not commitlog.is_dir():
        return []
    return [i.size for i in commitlog.list() if i.type.name == "File" and parse_segment_name(i.base_name) is not None]


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


def commitlog_dir(store: Location, settings: BrokerSettings) -> Location:
    """<store>/commitlog, or the single storePathCommitLog the broker config names."""
    path = commitlog_path(settings)
    return location(path) if path else store.child("commitlog")
