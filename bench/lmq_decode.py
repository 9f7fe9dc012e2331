"""LMQ decode per message against the plain store's (issue 23 item 3): the rebuild's decode stage (walk,
validate, decode, consume-queue rows and index keys into work files) over the plain bench store and over
the LMQ store of the same messages (--lmq-compare-share of them naming 1-3 of --lmq-compare-queues %LMQ%
queues), in interleaved rounds in the bench's session, each after its store was read into the page cache.
An LMQ message dispatches to more queues (1.2-1.6x the rows): the target is at most 1.5x the plain store's
time per message, whole stage, what an operator waits for."""
from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.pipeline.io.fs import location
from jobs.pipeline.runtime.tasks import SparkRunner
from jobs.pipeline.scan.decode import scan_store
from storage_format.settings import load_settings

from .cpu import CpuWatch
from .report import progress
from .stages import warm_page_cache

TARGET = 1.5  # LMQ seconds per message over the plain store's, at most


@dataclass
class DecodeRuns:
    """Every decode-stage run per store (seconds, consume-queue rows, other load), and their messages."""

    messages: int
    queues: int
    runs: dict[str, list[dict]] = field(default_factory=lambda: {"plain": [], "lmq": []})

    def median(self, kind: str) -> float | None:
        runs = self.runs[kind]
        return statistics.median(r["seconds"] for r in runs) if runs else None

    def ratio(self) -> float | None:
        plain, lmq = self.median("plain"), self.median("lmq")
        return round(lmq / plain, 3) if plain and lmq else None

    def to_dict(self) -> dict:
        return {"messages": self.messages, "lmq_queues": self.queues, "runs": self.runs,
                "median_s": {k: self.median(k) for k in self.runs}, "ratio_lmq_over_plain": self.ratio(),
                "target": TARGET}


def _decode(spark, store: Path, work: Path, split_size: int) -> dict:
    """One decode stage as jobs.rebuild runs it (consume-queue rows and keys into work files), timed."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    settings = load_settings(store / "broker.conf")
    with CpuWatch() as cpu:
        t0 = time.monotonic()
        scan = scan_store(SparkRunner(spark.sparkContext), location(str(store)), settings, work=location(str(work)),
                          with_cq=True, with_keys=True, split_size=split_size, quiet=True)
        seconds = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": round(seconds, 4), "records": scan.message_records,
            "cq_rows": sum(s.cq_rows for s in scan.accepted),
            "fallback_splits": scan.decoders()["fallback_splits"],
            "other_load": cpu.share.to_dict()["other_processes_cores"]}


def side_by_side(spark, plain: Path, lmq: Path, root: Path, rounds: int, split_size: int,
                 messages: int, queues: int) -> DecodeRuns:
    """`rounds` interleaved rounds (which store goes first alternates), after one untimed run of each."""
    result, work = DecodeRuns(messages, queues), root / "decode-work"
    stores = {"plain": plain, "lmq": lmq}
    for kind, store in stores.items():
        warm_page_cache(store)
        _decode(spark, store, work, split_size)
    started = time.monotonic()
    for i in range(rounds):
        progress("LMQ decode against plain", i, rounds, started)
        for kind in (("plain", "lmq") if i % 2 == 0 else ("lmq", "plain")):
            warm_page_cache(stores[kind])
            result.runs[kind].append(_decode(spark, stores[kind], work, split_size))
    return result


def table(r: DecodeRuns) -> str:
    """The comparison: per store the median stage time and per-message cost, and the ratio against TARGET."""
    lines = [f"LMQ decode against the plain store's, per message (issue 23 item 3): {r.messages:,} messages each, "
             f"LMQ store naming {r.queues:,} %LMQ% queues; rebuild's decode stage, medians of "
             f"{len(r.runs['plain'])} interleaved rounds",
             f"  {'store':<8}{'seconds':>9}{'us/message':>12}{'CQ rows':>12}{'other load':>12}"]
    for kind in ("plain", "lmq"):
        med, runs = r.median(kind), r.runs[kind]
        if med is None:
            continue
        load = statistics.median(x["other_load"] for x in runs if x["other_load"] is not None) if runs else None
        lines.append(f"  {kind:<8}{med:>9.3f}{med / r.messages * 1e6:>12.3f}{runs[-1]['cq_rows']:>12,}"
                     f"{'' if load is None else f'{load:.2f}':>12}")
    fallbacks = sum(x["fallback_splits"] for runs in r.runs.values() for x in runs)
    if fallbacks:
        lines.append(f"  note: {fallbacks} split decodes fell back to the numpy reference decoder")
    ratio = r.ratio()
    if ratio is not None:
        lines.append(f"  LMQ / plain per message: {ratio:.2f} (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")
    return "\n".join(lines)
