"""Rate against store size: `jobs.rebuild` of the bench store and of a larger one (same flags, more
messages), interleaved in the bench's session, with each store's median rate and their ratio.

A job's rate should not fall as the store grows (the build stage holds one index file per task and
reads every split's work file: both grow with the store). Runs alternate which store goes first; each
starts with its store's page cache warmed (untimed), as every stage of the bench does, and after a
pause (`settle_s`): a run writes into the page cache, and pages freed just before (the previous run's
output and work files) are much cheaper to fill again than fresh ones where the hypervisor takes freed
memory back (virtio-balloon free page reporting, after about 2 s; this VM: 0.4-1.1 GB/s into fresh
pages, 3-5 GB/s into recycled ones). Without the pause the small store, run right after the large one
deleted 1.6 GB, gets all its pages recycled and the large store, after the small one, few.
"""
from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cpu import CpuWatch
from .report import progress
from .stages import rebuild, warm_page_cache

SETTLE_S = 5.0  # pause before each run, longer than the page-reporting delay (see the module doc)


@dataclass(frozen=True)
class ScaleStore:
    """One store of the comparison: where it is, what it holds."""

    path: Path
    records: int
    data_bytes: int


@dataclass
class ScaleRuns:
    """Every rebuild run per store (seconds, stage timings, peak worker RSS, other load)."""

    stores: list[ScaleStore]
    runs: dict[int, list[dict]] = field(default_factory=dict)
    settle_s: float = SETTLE_S

    def median_rate(self, records: int) -> float | None:
        runs = self.runs.get(records) or []
        return statistics.median(records / r["seconds"] for r in runs) if runs else None

    def ratio(self) -> float | None:
        """Median rate of the largest store over the smallest's (>= 1: no slower per message)."""
        small, large = self.median_rate(self.stores[0].records), self.median_rate(self.stores[-1].records)
        return round(large / small, 3) if small and large else None

    def to_dict(self) -> dict:
        return {"stores": [{"path": str(s.path), "records": s.records, "data_bytes": s.data_bytes}
                           for s in self.stores],
                "runs": {str(k): v for k, v in self.runs.items()},
                "median_msgs_per_s": {str(s.records): self.median_rate(s.records) for s in self.stores},
                "ratio_largest_over_smallest": self.ratio(), "settle_s": self.settle_s}


def side_by_side(stores: list[ScaleStore], out: Path, pairs: int, split_size: int, master: str,
                 settle_s: float = SETTLE_S) -> ScaleRuns:
    """`pairs` rounds, each rebuilding every store once (the order alternates), with progress and an ETA."""
    stores = sorted(stores, key=lambda s: s.records)
    result = ScaleRuns(stores, {s.records: [] for s in stores}, settle_s)
    started, total = time.monotonic(), pairs * len(stores)
    for i in range(pairs):
        for j, store in enumerate(stores if i % 2 == 0 else stores[::-1]):
            done = i * len(stores) + j
            progress(f"scale ({store.records:,} messages)", done, total, started)
            warm_page_cache(store.path)
            time.sleep(settle_s)
            with CpuWatch() as cpu:
                r = rebuild(store.path, out, split_size, master, store.data_bytes)
            timings = r.detail.get("job_timings_s") or {}
            result.runs[store.records].append({
                "seconds": round(r.seconds, 3), "decode_s": timings.get("decode_s"), "build_s": timings.get("build_s"),
                "peak_worker_mib": r.memory.max_mib if r.memory else None,
                "other_load_cores": cpu.share.to_dict()["other_processes_cores"]})
            shutil.rmtree(out, ignore_errors=True)
    return result


def table(s: ScaleRuns) -> str:
    """The printed comparison: per store every run's rate, the median, stage medians and peak memory."""
    lines = [f"rate against store size ({len(s.runs[s.stores[0].records])} interleaved rounds, jobs.rebuild in the "
             f"bench's session, from main() to its return, each after a {s.settle_s:g} s pause)"]
    for store in s.stores:
        runs = s.runs[store.records]
        rates = " ".join(f"{store.records / r['seconds'] / 1e6:.2f}" for r in runs)
        med = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "decode_s", "build_s")
               if runs and all(r.get(k) is not None for r in runs)}
        peak = max((r["peak_worker_mib"] or 0 for r in runs), default=0)
        load = [r["other_load_cores"] for r in runs if r.get("other_load_cores") is not None]
        lines.append(f"  {store.records:>12,} messages: median {s.median_rate(store.records) / 1e6:.2f} M msg/s "
                     f"(runs {rates}); median s {med.get('seconds', 0):.2f} = decode {med.get('decode_s', 0):.2f} + "
                     f"build {med.get('build_s', 0):.2f} + rest; peak worker RSS {peak:.0f} MiB; other load "
                     f"{min(load, default=0):.2f}-{max(load, default=0):.2f} cores")
    lines.append(f"  ratio of median rates, largest / smallest store: {s.ratio():.2f} (>= 1: no slower per message)")
    return "\n".join(lines)
