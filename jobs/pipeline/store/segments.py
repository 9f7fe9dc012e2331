"""The commit log's segments as the broker loads them: every file of the commit-log directory named by a
20-digit start offset, in offset order, each of the configured size (no Spark: jobs.dump and jobs.query
list segments too)."""
from __future__ import annotations

from storage_format.commitlog import parse_segment_name
from storage_format.errors import ScanError, StoreFormatError
from storage_format.scan_plan import Segment
from storage_format.settings import BrokerSettings
from storage_format.store_layout import commitlog_path

from ..io.fs import Location
from ..io.store_gate import commitlog_dir


def list_segments(store: Location, settings: BrokerSettings) -> list[Segment]:
    """Commit-log segments in offset order; a segment of the wrong size is an error (the broker
    refuses to load it too)."""
    commitlog = commitlog_dir(store, settings)
    if not commitlog.is_dir():
        where = "storePathCommitLog" if commitlog_path(settings) else "the store"
        raise ScanError(f"{commitlog.uri}: no commitlog directory (from {where})")
    segments = []
    for info in commitlog.list():
        start = parse_segment_name(info.base_name)
        if start is None or info.type.name != "File":
            continue
        if info.size != settings.mapped_file_size_commitlog:
            expected = settings.mapped_file_size_commitlog
            raise StoreFormatError(commitlog.child(info.base_name).uri, min(info.size, expected),
                                   f"segment is {info.size} bytes, expected {expected} (mappedFileSizeCommitLog; "
                                   f"the broker refuses to load it); pass the broker's config with --broker-config")
        segments.append(Segment(start, info.size, commitlog.child(info.base_name).uri))
    return sorted(segments, key=lambda s: s.start)
