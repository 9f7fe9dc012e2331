"""Store layouts and broker features reput does not implement, detected from the settings and from the files.

An operator may pass no broker config, so each feature is looked for both ways. The checks run before any
work; each refusal is one line naming the setting or the directory found:

* DLedger commit log (`enableDLegerCommitLog`; data in `dledger-<selfId>/data/`, `commitlog/` left empty);
* RocksDB consume queues (`storeType=defaultRocksDB`, 5.2+; `consumequeue/` holds CURRENT, MANIFEST-*, *.sst);
* BatchConsumeQueue (`batchconsumequeue/`; records with the inner-batch sysFlag 0x80);
* ConsumeQueueExt (`enableConsumeQueueExt`; `consumequeue_ext/`);
* property CRCs (`enabledAppendPropCRC` changes the record bytes, `forceVerifyPropCRC` the recovery check);
* several commit-log paths (`storePathCommitLog` with ',' (MixAll.MULTI_PATH_SPLITTER), or
  `readOnlyCommitLogStorePaths`). A single `storePathCommitLog` is honoured (`commitlog_path`).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from .errors import SettingsError
from .settings import BrokerSettings

ROCKSDB_STORE_TYPE = "defaultRocksDB"
MULTI_PATH_SPLITTER = ","
INNER_BATCH_FLAG = 0x80  # MessageSysFlag.INNER_BATCH_FLAG: a BatchConsumeQueue record
ROCKSDB_FILES = ("CURRENT", "IDENTITY", "MANIFEST-*", "OPTIONS-*", "*.sst")
NOT_IMPLEMENTED = "reput does not implement it"


class UnsupportedStoreError(SettingsError):
    """The store uses a broker feature or layout reput does not implement (exit 2, named)."""


@dataclass(frozen=True)
class StoreListing:
    """What the layout checks look at: names in the store root (directories end with '/'), the plain
    files directly in consumequeue/, and the root directories that hold anything."""

    root: frozenset[str]
    consumequeue_files: frozenset[str] = frozenset()
    non_empty_dirs: frozenset[str] = frozenset()


def setting_refusal(s: BrokerSettings) -> str | None:
    """The first setting that selects a feature reput does not implement, as an operator message."""
    if s.enable_dleger_commit_log:
        return f"enableDLegerCommitLog=true: the DLedger commit log (dledger-<selfId>/data/); {NOT_IMPLEMENTED}"
    if s.store_type.lower() == ROCKSDB_STORE_TYPE.lower():
        return f"storeType={s.store_type}: RocksDB consume queues; {NOT_IMPLEMENTED}"
    if s.enable_consume_queue_ext:
        return f"enableConsumeQueueExt=true: consume-queue extension files (consumequeue_ext/); {NOT_IMPLEMENTED}"
    if s.enabled_append_prop_crc:
        return f"enabledAppendPropCRC=true: records carry a property CRC; {NOT_IMPLEMENTED}"
    if s.force_verify_prop_crc:
        return f"forceVerifyPropCRC=true: recovery verifies property CRCs; {NOT_IMPLEMENTED}"
    if s.store_path_commit_log and MULTI_PATH_SPLITTER in s.store_path_commit_log:
        return (f"storePathCommitLog={s.store_path_commit_log}: several commit-log paths (split on "
                f"'{MULTI_PATH_SPLITTER}'); {NOT_IMPLEMENTED}")
    if s.read_only_commit_log_store_paths and s.read_only_commit_log_store_paths.strip():
        return (f"readOnlyCommitLogStorePaths={s.read_only_commit_log_store_paths}: several commit-log paths; "
                f"{NOT_IMPLEMENTED}")
    return None


def layout_refusal(listing: StoreListing) -> str | None:
    """The first directory or file that shows a feature reput does not implement."""
    dledger = sorted(n for n in listing.root if n.startswith("dledger-") and n.endswith("/"))
    if dledger:
        return (f"{dledger[0]} found: a DLedger commit log (enableDLegerCommitLog); {NOT_IMPLEMENTED}")
    rocks = sorted(f for f in listing.consumequeue_files if any(fnmatch.fnmatchcase(f, p) for p in ROCKSDB_FILES))
    if rocks:
        return (f"consumequeue/{rocks[0]} found: RocksDB consume queues (storeType={ROCKSDB_STORE_TYPE}); "
                f"{NOT_IMPLEMENTED}")
    if "batchconsumequeue/" in listing.non_empty_dirs:
        return f"batchconsumequeue/ found: BatchConsumeQueue (topic attribute queue.type=BatchCQ); {NOT_IMPLEMENTED}"
    if "consumequeue_ext/" in listing.non_empty_dirs:
        return f"consumequeue_ext/ found: ConsumeQueueExt (enableConsumeQueueExt); {NOT_IMPLEMENTED}"
    return None


def check_store(s: BrokerSettings, listing: StoreListing) -> None:
    """Raise UnsupportedStoreError naming the first unsupported setting or layout found."""
    why = setting_refusal(s) or layout_refusal(listing)
    if why:
        raise UnsupportedStoreError(why)


def commitlog_path(s: BrokerSettings) -> str | None:
    """A single storePathCommitLog (the commit log outside the store root), or None for <store>/commitlog."""
    path = (s.store_path_commit_log or "").strip()
    return path or None


def inner_batch_records(sys_flag: np.ndarray) -> np.ndarray:
    """Indexes of records with the inner-batch sysFlag (BatchConsumeQueue records)."""
    return np.flatnonzero(np.asarray(sys_flag) & INNER_BATCH_FLAG)


def inner_batch_reason(offset: int) -> str:
    """Why a record with the inner-batch sysFlag is refused."""
    return (f"the record at commit-log offset {offset} has the inner-batch sysFlag 0x80: BatchConsumeQueue (topic "
            f"attribute queue.type=BatchCQ, batchconsumequeue/); {NOT_IMPLEMENTED}")
