"""Store layouts and broker features reput does not implement, detected from the settings and from the files.

An operator may pass no broker config, so each feature is looked for both ways. The checks run before any
work; each refusal is one line naming the setting or the directory found:

* a DLedger commit log only as reput reads it (storage_format.dledger, log_sources): one member's
  `dledger-<selfId>/data/` (several without a config to choose: refused, named), a single
  storePathDLedgerCommitLog (several, comma-separated: refused), and never `dledger-*/` beside a config
  that turns DLedger off;
* RocksDB consume queues where storage_format.cq_layout cannot read them: a database in `consumequeue_rocksdb/`
  (after 5.3.3), or a config and files that disagree on where the consume queues are (`cq_layout`, named);
* BatchConsumeQueue (`batchconsumequeue/`; records with the inner-batch sysFlag 0x80);
* ConsumeQueueExt (`enableConsumeQueueExt`; `consumequeue_ext/`);
* property CRCs (`enabledAppendPropCRC` changes the record bytes, `forceVerifyPropCRC` the recovery check);
* several commit-log paths (`storePathCommitLog` with ',' (MixAll.MULTI_PATH_SPLITTER), or
  `readOnlyCommitLogStorePaths`). A single `storePathCommitLog` is honoured (`commitlog_path`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .cq_layout import ROCKSDB_ELSEWHERE, CqFiles, CqLayout, CqLayoutError, cq_layout
from .dledger import DIR_PREFIX as DLEDGER_PREFIX
from .errors import SettingsError
from .settings import BrokerSettings

MULTI_PATH_SPLITTER = ","
INNER_BATCH_FLAG = 0x80  # MessageSysFlag.INNER_BATCH_FLAG: a BatchConsumeQueue record
NOT_IMPLEMENTED = "reput does not implement it"


class UnsupportedStoreError(SettingsError):
    """The store uses a broker feature or layout reput does not implement (exit 2, named)."""


@dataclass(frozen=True)
class StoreListing:
    """What the layout checks look at: names in the store root (directories end with '/'), the plain
    files and the directories directly in consumequeue/, the plain files in consumequeue_rocksdb/, and the root
    directories that hold anything."""

    root: frozenset[str]
    consumequeue_files: frozenset[str] = frozenset()
    non_empty_dirs: frozenset[str] = frozenset()
    dledger_data: frozenset[str] = frozenset()  # dledger-<id>/ directories that hold a data/ directory
    consumequeue_dirs: frozenset[str] = frozenset()  # topic directories (file consume queues)
    separate_db_files: frozenset[str] = frozenset()  # consumequeue_rocksdb/'s files

    def cq_files(self) -> CqFiles:
        """What storage_format.cq_layout decides the consume queues' layout from."""
        return CqFiles(tuple(sorted(self.consumequeue_files)), tuple(sorted(self.consumequeue_dirs)),
                       tuple(sorted(self.separate_db_files)))


def setting_refusal(s: BrokerSettings) -> str | None:
    """The first setting that selects a feature reput does not implement, as an operator message."""
    if s.enable_dleger_commit_log:
        if not (s.d_leger_self_id or "").strip():
            return ("enableDLegerCommitLog=true without dLegerSelfId: the broker cannot start a DLedger member "
                    "(its data is in dledger-<dLegerSelfId>/data/); set dLegerSelfId in the broker config")
        path = s.store_path_dledger_commit_log or ""
        if MULTI_PATH_SPLITTER in path:
            return (f"storePathDLedgerCommitLog={path}: several DLedger data paths (split on "
                    f"'{MULTI_PATH_SPLITTER}'); {NOT_IMPLEMENTED}")
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
    dledger = sorted(n for n in listing.root if n.startswith(DLEDGER_PREFIX) and n.endswith("/"))
    if dledger:
        return (f"{dledger[0]} found: a DLedger commit log, but the broker config does not set "
                f"enableDLegerCommitLog=true (the broker would read commitlog/ only); pass the config the broker "
                f"runs with, or none to read {dledger[0]}data/")
    if "batchconsumequeue/" in listing.non_empty_dirs:
        return f"batchconsumequeue/ found: BatchConsumeQueue (topic attribute queue.type=BatchCQ); {NOT_IMPLEMENTED}"
    if "consumequeue_ext/" in listing.non_empty_dirs:
        return f"consumequeue_ext/ found: ConsumeQueueExt (enableConsumeQueueExt); {NOT_IMPLEMENTED}"
    return None


def discover_dledger(s: BrokerSettings, listing: StoreListing) -> BrokerSettings:
    """Without a broker config: DLedger mode when the store holds one `dledger-<id>/data/` directory (its
    member id taken from the name); several are refused, named (which member's data is meant is unknown)."""
    homes = sorted(listing.dledger_data)
    if len(homes) > 1:
        found = ", ".join(h + "data/" for h in homes)
        raise UnsupportedStoreError(f"several DLedger members' data in one store ({found}): pass the broker config "
                                    f"(--broker-config) whose dLegerSelfId names the one to read")
    if not homes:
        return s
    return replace(s, enable_dleger_commit_log=True, d_leger_self_id=homes[0].rstrip("/")[len(DLEDGER_PREFIX):])


def check_store(s: BrokerSettings, listing: StoreListing) -> CqLayout:
    """Raise UnsupportedStoreError naming the first unsupported setting or layout found (cq_layout.CqLayoutError
    where the config and the files disagree on the consume queues); else the consume queues' layout."""
    if s.enable_dleger_commit_log:  # dledger-*/ is expected there
        listing = replace(listing, root=frozenset(n for n in listing.root if not n.startswith(DLEDGER_PREFIX)))
    why = setting_refusal(s) or layout_refusal(listing)
    if why:
        raise UnsupportedStoreError(why)
    try:
        layout = cq_layout(s, listing.cq_files())
    except CqLayoutError as exc:
        raise UnsupportedStoreError(str(exc)) from None
    if layout.kind == ROCKSDB_ELSEWHERE:
        found = "CURRENT" if "CURRENT" in listing.separate_db_files else sorted(listing.separate_db_files)[0]
        raise UnsupportedStoreError(f"{layout.db_dir}/{found} found: RocksDB consume queues in a directory of their "
                                    f"own (useSeparateStorePathForRocksdbCQ=true, RocketMQ after 5.3.3); reput reads "
                                    f"5.3.3's layout (the database in consumequeue/); {NOT_IMPLEMENTED}")
    return layout


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
