"""The store's record sources as the broker loads them, in offset order (storage_format.log_sources.plan_log):
commit-log segments named by their 20-digit start offset, DLedger data files, or both; each of the configured
size (no Spark: jobs.dump and jobs.query list segments too)."""
from __future__ import annotations

from storage_format.errors import ScanError
from storage_format.log_sources import LogFile, plan_log
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings
from storage_format.store_layout import commitlog_path

from ..io.fs import Location
from ..io.store_gate import commitlog_dir, dledger_data_dir


def list_segments(store: Location, settings: BrokerSettings) -> list[Segment]:
    """The store's record sources in offset order (log_sources.plan_log): commit-log segments, DLedger data
    files, or both; a file of the wrong size is an error (the broker refuses to load it too)."""
    commitlog = commitlog_dir(store, settings)
    data = dledger_data_dir(store, settings)
    if data is not None and not data.is_dir():
        raise ScanError(f"{data.uri}: no DLedger data directory (dLegerSelfId={settings.d_leger_self_id}"
                        + (", storePathDLedgerCommitLog" if settings.store_path_dledger_commit_log else "") + ")")
    if data is None and not commitlog.is_dir():
        where = "storePathCommitLog" if commitlog_path(settings) else "the store"
        raise ScanError(f"{commitlog.uri}: no commitlog directory (from {where})")
    plain = _log_files(commitlog) if commitlog.is_dir() else []
    return plan_log(plain, None if data is None else _log_files(data), settings.mapped_file_size_commitlog)


def segments_from(segments: list[Segment], offset: int) -> list[Segment]:
    """The segments a scan starting at commit-log `offset` reads: the one holding it and those after."""
    return [s for s in segments if s.start + s.size > offset]


def _log_files(loc: Location) -> list[LogFile]:
    """Every entry of a commit-log directory (log_sources refuses those the broker would not take as segments)."""
    return [LogFile(i.base_name, i.size or 0, loc.child(i.base_name).uri, loc.child_kind(i) or "") for i in loc.list()]
