"""What a `rebuild --since` run hands its report: every file of what it staged and the counts (SinceResult, the
report's `since` part), the scan and the timings (SinceRun), and the run report itself: a rebuild's
(outputs.rebuild_out), less the whole-store counts a --since run cannot give, with its `since` part."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from storage_format.confirm_offset import DispatchLimit
from storage_format.settings import BrokerSettings

from ..outputs.index_continuation import IndexWork
from ..outputs.rebuild_out import built_to_section, run_report
from ..scan.result import ScanResult
from ..scan.report_sections import dispatch_report
from .out1 import Out1

WHOLE_STORE = ("consumequeue_entries_per_topic_queue", "message_records", "segments", "bytes_read")


@dataclass(kw_only=True)
class SinceResult:
    """What a --since run wrote and reused: every file of OUT2 (consume-queue files by path, index names) and the
    counts the report gives."""

    cq_files: set[str] = field(default_factory=set)  # consumequeue-relative paths
    index_names: list[str] = field(default_factory=list)
    cq_written: dict[str, int] = field(default_factory=dict)  # files built from the scan: units each
    copied: dict = field(default_factory=dict)
    cq_prefixes: dict = field(default_factory=dict)  # how OUT1's units ahead of the scan's came into written files
    expired_cq: list[str] = field(default_factory=list)
    expired_index: list[str] = field(default_factory=list)
    index_keys_added: int = 0
    index_written: list[str] = field(default_factory=list)
    index_listed: list[str] = field(default_factory=list)  # OUT1's index files as listed (not what they skipped)

    def take_index(self, index: IndexWork) -> None:
        """What the index work wrote, copied and left out."""
        self.index_names = [f.name for f in index.plan.files]
        self.index_written = [f.name for f in index.plan.files
                              if f.span is not None and (f.continues is None or f.span.hi > f.span.lo)]
        self.expired_index = index.plan.expired
        self.index_keys_added = index.keys_added
        self.index_listed = sorted({f.continues for f in index.plan.files if f.continues} | set(index.plan.expired))

    @property
    def index_dropped(self) -> list[str]:
        """OUT1's index files OUT2 holds no file of that name for: the clean service's deletions, and OUT1's trailing
        empty file once named anew."""
        return sorted(set(self.index_listed) - set(self.index_names))

    def to_dict(self, out1: Out1, scan: ScanResult, min_offset: int) -> dict:
        """The report's `since` section."""
        decoded_from = scan.segments[0].start if scan.segments else out1.built.offset
        return {"out": out1.dir.uri, "built_to_before": out1.built.offset, "decoded_from": decoded_from,
                "bytes_decoded": scan.bytes_read, "bytes_reused": max(0, decoded_from - min_offset),
                "commitlog_min_offset": min_offset,
                "consumequeue_files_written": len(self.cq_written),
                "consumequeue_units_in_written_files": sum(self.cq_written.values()),
                "consumequeue_files_copied": len(self.cq_files) - len(self.cq_written),
                "index_files_written": self.index_written, "index_keys_added": self.index_keys_added,
                "expired": {"consumequeue_files": len(self.expired_cq), "index_files": self.expired_index},
                "copies": self.copied, "consumequeue_prefixes": self.cq_prefixes}


@dataclass(frozen=True)
class SinceRun:
    """What a --since run hands the report: the scan, what was written and reused, the timings."""

    scan: ScanResult
    result: SinceResult
    min_offset: int
    timings: dict


def since_report(args: argparse.Namespace, run: SinceRun, settings: BrokerSettings, limit: DispatchLimit,
                 out1: Out1) -> dict:
    """A --since run's report: a rebuild's, the whole-store counts it cannot give left out, with its `since` part;
    where it was built to stays OUT1's when no new record was dispatched."""
    report = run_report(args, run.scan, settings, dict.fromkeys(run.result.cq_files, 0), run.result.index_names,
                        run.timings)
    for whole_store in WHOLE_STORE:
        report.pop(whole_store)
    report["since"] = run.result.to_dict(out1, run.scan, run.min_offset)
    report["dispatch"] = dispatch_report("rebuild", limit, run.scan)
    new_records = run.scan.message_records and run.scan.dispatched_end(limit.offset) > out1.built.offset
    report["built_to"] = built_to_section(run.scan, limit.offset) if new_records else out1.report["built_to"]
    return report
