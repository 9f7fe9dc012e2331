"""Every job's first look at a store: refuse what reput does not implement (storage_format.store_layout), by
name, before any Spark work; and where the commit log lives (a single storePathCommitLog is honoured)."""
from __future__ import annotations

from storage_format.settings import BrokerSettings
from storage_format.store_layout import StoreListing, check_store, commitlog_path

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
    return StoreListing(root, cq_files, non_empty)


def check_store_supported(store: Location, settings: BrokerSettings) -> None:
    """Raise UnsupportedStoreError (exit 2) when the settings or the files show a feature reput does not
    implement. Every job calls this before it starts Spark."""
    check_store(settings, list_store(store))


def commitlog_dir(store: Location, settings: BrokerSettings) -> Location:
    """<store>/commitlog, or the single storePathCommitLog the broker config names."""
    path = commitlog_path(settings)
    return location(path) if path else store.child("commitlog")
