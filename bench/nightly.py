"""The nightly comparison (issue 33 items 3 and 4): a store grown by 1/8 since last night's rebuild OUT1. Each round
runs, as whole processes in alternating order, the full `jobs.rebuild` of the store and `jobs.rebuild --since OUT1`;
then the same for `jobs.verify` and `jobs.verify --since` last night's verify report (last night's store with OUT1's
queues and index; tonight's with the full rebuild's); per run the wall time and the report's total_s or seconds
(after start-up). Printed: the medians, their ratios (the target: --since <= 0.25x the full job after start-up), the
bytes --since decoded against the new bytes plus the segment OUT1 ended in, and whether OUT2 equals the full rebuild
byte for byte.

The store is the bench's shape with --nightly-segment-mib segments (the default 1 GiB segment is half the bench store:
"the segment OUT1 ended in" would be a third of the work; production stores hold hundreds of segments). Last night's
store is the same one cut at a record 7/8 of the way through: the segments before the cut linked (jobs only read
them), the one holding it copied with zeros after the cut, as the broker's preallocated segment holds them."""
from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from storegen.earlier import GROWN_BY, earlier_store, log_end
from storegen.synth import StoreSpec

from .compare import compare_stores
from .scale_jobs import run_job
from .stores import ensure_store

TARGET = 0.25


@dataclass
class NightlyRuns:
    """The runs of both jobs and what they read."""

    store: Path
    cut: int
    end: int
    segment_size: int
    runs: dict[str, list[dict]] = field(default_factory=dict)
    identical: bool | None = None

    def median(self, job: str, key: str) -> float:
        return statistics.median(r[key] for r in self.runs[job])

    def ratio(self, job: str = "") -> float:
        """--since over the full job after start-up (job "": rebuild, "verify_": verify)."""
        return self.median(f"{job}since", "total_s") / self.median(f"{job}full", "total_s")

    def to_dict(self) -> dict:
        return {"store": str(self.store), "cut": self.cut, "end": self.end, "segment_size": self.segment_size,
                "runs": self.runs, "since_over_full_after_startup": round(self.ratio(), 3),
                "verify_since_over_full_after_startup": round(self.ratio("verify_"), 3) if self.runs.get(
                    "verify_since") else None, "target": TARGET, "out2_equals_full_rebuild": self.identical}


def side_by_side(spec: StoreSpec, root: Path, rounds: int, split_size: int, segment_mib: int,
                 regenerate: bool) -> NightlyRuns:
    """The full rebuild and --since, `rounds` times each in alternating order, on the grown store."""
    store = ensure_store(root, dataclasses.replace(spec, segment_size=segment_mib << 20), regenerate)
    last_night = root / "nightly-last-night"
    cut = earlier_store(store, last_night, 1 - GROWN_BY, link=True)
    runs = NightlyRuns(store, cut, log_end(store), segment_mib << 20)
    conf = ["--broker-config", str(store / "broker.conf"), "--split-size", str(split_size)]
    out1, full, out2 = root / "nightly-out1", root / "nightly-full", root / "nightly-out2"
    shutil.rmtree(out1, ignore_errors=True)
    print(f"[bench] nightly: last night's rebuild of {last_night} (not timed) ...", flush=True)
    run_job("rebuild", ["--store", str(last_night), "--out", str(out1), *conf])
    for i in range(rounds):
        for job in (("full", "since") if i % 2 == 0 else ("since", "full")):
            dest = full if job == "full" else out2
            shutil.rmtree(dest, ignore_errors=True)
            time.sleep(1)
            since = ["--since", str(out1)] if job == "since" else []
            run = run_job("rebuild", ["--store", str(store), "--out", str(dest), *conf, *since])
            runs.runs.setdefault(job, []).append(run)
    same = compare_stores(full, out2, ("consumequeue", "index"))
    runs.identical = same.identical and not same.notes  # index names too
    verify_side_by_side(runs, root, last_night, out1, full, conf, rounds)
    return runs


def _linked_store(root: Path, name: str, log: Path, derived: Path) -> Path:
    """A store of `log`'s commit log and config with `derived`'s queues and index, every file hard-linked (verify only
    reads them)."""
    store = root / name
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    shutil.copytree(log / "commitlog", store / "commitlog", copy_function=os.link)
    shutil.copy(log / "broker.conf", store / "broker.conf")
    for part in ("consumequeue", "index"):
        shutil.copytree(derived / part, store / part, copy_function=os.link)
    return store


def verify_side_by_side(runs: NightlyRuns, root: Path, last_night: Path, out1: Path, full: Path, conf: list[str],
                        rounds: int) -> None:
    """Last night's verify (not timed), then tonight's full verify and verify --since its report, alternating."""
    then = _linked_store(root, "nightly-verify-then", last_night, out1)
    now = _linked_store(root, "nightly-verify-now", runs.store, full)
    report = root / "nightly-verify-then.json"
    print(f"[bench] nightly: last night's verify of {then} (not timed) ...", flush=True)
    run_job("verify", ["--store", str(then), "--report", str(report), *conf])
    for i in range(rounds):
        for job in (("full", "since") if i % 2 == 0 else ("since", "full")):
            # two directories of hard links stand for one store a night apart: said aloud (it costs a few stats)
            since = ["--since", str(report), "--since-other-store"] if job == "since" else []
            runs.runs.setdefault(f"verify_{job}", []).append(run_job("verify", ["--store", str(now), *conf, *since]))


def table(r: NightlyRuns) -> str:
    """The comparison as printed lines."""
    d = r.to_dict()
    new = r.end - r.cut
    since = r.runs["since"][-1]
    lines = [f"rebuild --since, the store grown by {GROWN_BY:.3g} ({new / 1e6:,.0f} MB new of {r.end / 1e6:,.0f} MB; "
             f"{r.segment_size >> 20} MiB segments):",
             f"  {'job':<22}{'wall s':>9}{'after start-up s':>18}",
             f"  {'full rebuild':<22}{r.median('full', 'wall_s'):>9.2f}{r.median('full', 'total_s'):>18.2f}",
             f"  {'rebuild --since OUT1':<22}{r.median('since', 'wall_s'):>9.2f}{r.median('since', 'total_s'):>18.2f}",
             f"  --since / full after start-up: {d['since_over_full_after_startup']:.3f} (target <= {TARGET})",
             f"  --since decoded {since.get('bytes_decoded', 0) / 1e6:,.0f} MB (new bytes + the segment OUT1 ended "
             f"in: <= {(new + r.segment_size) / 1e6:,.0f} MB)",
             f"  OUT2 equals the full rebuild byte for byte: {r.identical}"]
    if r.runs.get("verify_since"):
        v = r.runs["verify_since"][-1]
        lines += [f"  {'full verify':<22}{r.median('verify_full', 'wall_s'):>9.2f}"
                  f"{r.median('verify_full', 'total_s'):>18.2f}",
                  f"  {'verify --since REPORT':<22}{r.median('verify_since', 'wall_s'):>9.2f}"
                  f"{r.median('verify_since', 'total_s'):>18.2f}",
                  f"  verify --since / full after start-up: {r.ratio('verify_'):.3f} (target <= {TARGET}); decoded "
                  f"{(v.get('bytes_decoded') or 0) / 1e6:,.0f} MB"]
    return "\n".join(lines)
