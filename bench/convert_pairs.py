"""convert against rebuild as whole processes, interleaved in one run (issue 21: convert's whole process takes no
more than 1.5x reput's rebuild of the same DLedger store): `python -m jobs.convert` and `python -m jobs.rebuild`
of the bench store, alternating which goes first, the page cache warmed before each, the other load on the
machine measured per run; the medians and the ratio of the medians, and each pair's ratio; and each run's CPU
seconds (user + system of the job's process and the worker processes it waited for: the local engine's, not a
Spark JVM's), the steadier figure when other work shares the machine. Before each convert run the disk's O_DIRECT
write rate is probed (bench.disk): convert's write job cannot end before the device has taken its new commit log,
a bound the table prints beside the job's time.
"""
from __future__ import annotations

import resource
import shutil
import statistics
import time
from pathlib import Path

from . import broker, disk
from .report import progress
from .stages import warm_page_cache

TARGET = 1.5  # issue 21: convert whole process / rebuild whole process
WHOLE = ("process_wall_s", "process_cpu_s")  # the whole process's figures (the others are the report's timings)


def run_job(job: str, store: Path, out: Path, master: str, split_size: int) -> dict:
    """One timed `python -m jobs.<job>` whole process of the store into `out` (broker.run_job, quiet), with its CPU
    seconds (`process_cpu_s`), `out` removed afterwards."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        figures = broker.run_job(job, store, out, master, split_size, ("--quiet",))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures["process_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)
    return figures


def side_by_side(store: Path, root: Path, pairs: int, master: str, split_size: int) -> dict[str, list[dict]]:
    """`pairs` interleaved runs of both jobs (convert first on even pairs), with progress lines."""
    runs: dict[str, list[dict]] = {"convert": [], "rebuild": []}
    started = time.monotonic()
    for i in range(pairs):
        for j, job in enumerate(("convert", "rebuild") if i % 2 == 0 else ("rebuild", "convert")):
            progress(f"convert/rebuild whole processes ({job})", 2 * i + j, 2 * pairs, started)
            gbps = disk.direct_write_gbps(root) if job == "convert" else None  # untimed, as the warming
            warm_page_cache(store)
            runs[job].append(run_job(job, store, root / f"pairs-{job}", master, split_size))
            if gbps is not None:
                runs[job][-1]["disk_gbps"] = gbps
    return runs


def summary(runs: dict[str, list[dict]]) -> dict:
    """Medians, the ratio of the medians and each pair's ratio (the JSON form), of wall time and of CPU seconds."""
    med = {job: round(statistics.median(r["process_wall_s"] for r in rs), 3) for job, rs in runs.items() if rs}
    pairs = [round(c["process_wall_s"] / r["process_wall_s"], 3) for c, r in zip(runs["convert"], runs["rebuild"])]
    ratio = round(med["convert"] / med["rebuild"], 3) if len(med) == 2 else None
    cpu = {job: round(statistics.median(r.get("process_cpu_s", 0.0) for r in rs), 2) for job, rs in runs.items() if rs}
    cpu_ratio = round(cpu["convert"] / cpu["rebuild"], 3) if len(cpu) == 2 and cpu["rebuild"] else None
    return {"median_process_wall_s": med, "ratio": ratio, "pair_ratios": pairs, "target": TARGET,
            "median_process_cpu_s": cpu, "cpu_ratio": cpu_ratio, "disk_bound": disk_bound(runs.get("convert", [])),
            "runs": runs}


def disk_bound(converts: list[dict]) -> dict | None:
    """What the disk allows convert's write job (None without probes): the median probed O_DIRECT rate, the new
    commit log's bytes, the seconds the device needs for them at that rate, and the write job's median."""
    rated = [r for r in converts if r.get("disk_gbps") and r.get("new_log_bytes") and "write_s" in r]
    if not rated:
        return None
    gbps = statistics.median(r["disk_gbps"] for r in rated)
    log_bytes = statistics.median(r["new_log_bytes"] for r in rated)
    return {"disk_gbps_median": gbps, "disk_gbps_range": [min(r["disk_gbps"] for r in rated),
                                                          max(r["disk_gbps"] for r in rated)],
            "new_log_bytes": log_bytes, "device_s": round(log_bytes / gbps / 1e9, 2),
            "write_job_s_median": round(statistics.median(r["write_s"] for r in rated), 2)}


def table(runs: dict[str, list[dict]]) -> str:
    """The printed comparison."""
    s = summary(runs)
    load = [r["other_load_cores"] for rs in runs.values() for r in rs if r.get("other_load_cores") is not None]
    lines = [f"convert against rebuild, whole processes ({len(runs['convert'])} interleaved pairs, medians; other "
             f"load {min(load, default=0):.1f}-{max(load, default=0):.1f} cores)"]
    for job in ("convert", "rebuild"):
        steps = {k: round(statistics.median(r[k] for r in runs[job]), 2) for k in runs[job][0]
                 if k.endswith("_s") and k not in WHOLE and all(k in r for r in runs[job])}
        lines.append(f"  jobs.{job:8s} {s['median_process_wall_s'][job]:7.2f} s, "
                     f"{s['median_process_cpu_s'][job]:.2f} CPU s   {steps}")
    lines.append(f"  convert / rebuild: {s['ratio']} (pairs: {', '.join(map(str, s['pair_ratios']))}); "
                 f"issue 21's target <= {TARGET}; CPU seconds: {s['cpu_ratio']} (the job's process and the local "
                 f"engine's workers; a Spark JVM's are not counted)")
    bound = s["disk_bound"]
    if bound is not None:
        low, high = bound["disk_gbps_range"]
        lines.append(f"  the disk: O_DIRECT writes of {disk.STREAMS} streams took {bound['disk_gbps_median']} GB/s "
                     f"(probed before each convert: {low}-{high}); convert's new commit log, "
                     f"{bound['new_log_bytes'] / 1e9:.2f} GB, needs {bound['device_s']} s of the device, its write job "
                     f"took {bound['write_job_s_median']} s; rebuild's files go through the page cache (no wait for "
                     f"the device)")
    return "\n".join(lines)
