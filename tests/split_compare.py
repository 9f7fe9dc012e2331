"""The compiled split decoder and the numpy reference run on the same splits of a store: equal summaries and work
files split by split, and what the kernel took (the test_split_kernel and DLedger-store tests share it)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa

from jobs.pipeline.io.fs import location
from jobs.pipeline.io.workdir import cq_file, keys_file, queues_file, read_cq, read_keys, read_queue_table
from jobs.pipeline.scan.result import DECODER_KERNEL, DECODER_NO_START, DECODER_REFERENCE, DECODER_SPARSE, SplitTask
from jobs.pipeline.scan.decode import decode_split, multi_dispatch_rules
from jobs.pipeline.store.segments import list_segments
from storage_format.kernels.split_decode import decode_fast
from storage_format.multi_dispatch import MultiDispatchRules
from storage_format.queue_table import QueueTable
from storage_format.scan_plan import plan_splits
from storage_format.settings import BrokerSettings


def summary_fields(summary) -> dict:
    """The summary's fields but which decoder made it and its time (the two decoders must agree on all the rest)."""
    fields = {k: v for k, v in vars(summary).items() if k not in ("decoder", "fallback", "seconds")}
    fields["error"] = None if summary.error is None else str(summary.error)
    return fields


def work_files(work: Path, index: int) -> tuple[pa.Table | None, pa.Table | None, QueueTable | None]:
    """The consume-queue, keys and queue-table work files a decode task wrote for split `index` (None: not written)."""
    loc = location(str(work))
    cq = read_cq(loc, index) if cq_file(loc, index).exists() else None
    keys = read_keys(loc, index) if keys_file(loc, index).exists() else None
    queues = read_queue_table(loc, index) if queues_file(loc, index).exists() else None
    return cq, keys, queues


KERNEL_RECORDS = "records decoded by the kernel"
LMQ_ROWS = "consume-queue rows in %LMQ% queues"
REFUSED = "splits refused (both decoders name the same error)"


def compare_store(store: Path, settings: BrokerSettings, split_size: int, tmp: Path, check_crc: bool = False,
                  rules: MultiDispatchRules | None = None, with_cq: bool = True) -> Counter:
    """Decode every split both ways (body CRCs checked with check_crc, as recovery's validating scan does);
    assert equal summaries and work files; returns how many splits each
    decoder took when the kernel was asked, with the fallback reasons (the decoder the summary names is
    checked against an independent call of the kernel: the kernel ran when it says so), and under
    KERNEL_RECORDS how many records the kernel decoded itself, under LMQ_ROWS the rows in %LMQ% queues
    (multi-dispatch entries) of the splits the kernel decoded."""
    segments = list_segments(location(str(store)), settings)
    lmq = rules if rules is not None else multi_dispatch_rules(location(str(store)), settings, None)
    taken: Counter = Counter()
    data: dict[str, bytes] = {}
    for sp in plan_splits(segments, split_size):
        got = {}
        for kernel in (True, False):
            work = tmp / f"{'k' if kernel else 'r'}-{split_size}"
            task = SplitTask(split=sp, settings=settings, work=location(str(work)), kernel=kernel, check_crc=check_crc,
                             lmq=lmq, with_cq=with_cq)
            summary = decode_split(task)
            got[kernel] = (summary_fields(summary), *work_files(work, sp.index))
            if kernel and summary.error is None:
                taken[summary.decoder] += 1
                queues = got[kernel][3]  # the task wrote its queue table to the work directory
                taken[LMQ_ROWS] += sum(rows for (topic, _), rows in zip(queues.keys(), queues.cq_rows.tolist())
                                       if topic.startswith("%LMQ%") and summary.decoder == DECODER_KERNEL)
                if summary.fallback:
                    taken["fallback: " + summary.fallback] += 1
            elif kernel:
                taken[REFUSED] += 1
            else:
                assert summary.decoder in (DECODER_REFERENCE, DECODER_SPARSE) and not summary.fallback
            if summary.decoder == DECODER_NO_START:
                assert summary.records == 0 and not summary.fallback
        assert got[True][0] == got[False][0], f"summary of split {sp.index} ({sp.segment.path} {sp.start})"
        for what, k_table, r_table in zip(("cq", "keys", "queues"), got[True][1:], got[False][1:]):
            assert (k_table is None) == (r_table is None), what
            assert k_table is None or (k_table == r_table if what == "queues" else k_table.equals(r_table)), \
                f"{what} file of split {sp.index}"
        if sp.segment.path not in data:
            data = {sp.segment.path: Path(sp.segment.path).read_bytes()}
        records = kernel_takes(sp, data[sp.segment.path], settings, lmq, check_crc)
        if records is not None and got[True][0]["error"] is None:
            taken["kernel (independent call)"] += 1
            taken[KERNEL_RECORDS] += records
    assert taken[DECODER_KERNEL] == taken["kernel (independent call)"], taken
    return taken


def kernel_takes(sp, data: bytes, settings: BrokerSettings, lmq, check_crc: bool = False) -> int | None:
    """Records the kernel decodes in this split (None: it leaves the split to the reference)."""
    fast = decode_fast(data, sp.segment.start, sp.start, sp.stop, sp.segment.size, path=sp.segment.path,
                       find_start=not sp.at_segment_start, dated=(-62135596800000, 253402300799999),
                       delay_levels_ms=BrokerSettings().delay_levels_ms, header=sp.segment.header,
                       check_crc=check_crc, multi_dispatch=lmq,
                       multi_dispatch_configured=settings.enable_multi_dispatch is not None)
    return None if isinstance(fast, str) else fast.records
