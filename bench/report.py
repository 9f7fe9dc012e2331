"""The benchmark's outputs: one printed table and a JSON file with every figure and the machine."""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from .stages import StageResult


def progress(label: str, done: int, total: int, started: float) -> None:
    """A side-by-side comparison's line before run done + 1 of total: what runs, the time so far and,
    once a run has finished, an ETA from the mean run time."""
    elapsed = time.monotonic() - started
    eta = f", ETA {elapsed / done * (total - done):.0f}s" if done else ""
    print(f"[bench] {label}: run {done + 1}/{total}, {elapsed:.0f}s so far{eta}", flush=True)


def machine_info() -> dict:
    """CPU model, cores, memory, OS and library versions of this machine."""
    info: dict = {"cores": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and "cpu" not in info:
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags") and "simd" not in info:
                info["simd"] = " ".join(f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "sse4")))
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    for mod in ("pyspark", "numpy", "pyarrow"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return info


def _fmt(value: float | None, spec: str) -> str:
    """A number in a table cell, "-" for none."""
    return "-" if value is None else format(value, spec)


def table(results: list[StageResult], store_info: dict, machine: dict, settings_line: str) -> str:
    """The printed table: one row per stage, the rebuild's own breakdown, and the reference."""
    spec = store_info["spec"]
    lines = [
        f"store: {store_info['records']:,} messages, {store_info['segments']} segment(s) of "
        f"{spec['segment_size'] / 2**30:g} GiB, {store_info['data_bytes'] / 1e6:,.1f} MB of commit log "
        f"(bodies {spec['body_min']}-{spec['body_max']} B, {spec['topics']} topics x {spec['queues']} queues, "
        f"index keys/message {store_info.get('keys_per_message', '?')})",
        f"machine: {machine.get('cpu', '?')} ({machine.get('simd', '?')}), {machine.get('cores')} cores, "
        f"{machine.get('memory_gib')} GiB; "
        f"load average at start {machine.get('load_average_at_start')}",
        settings_line,
        "",
        f"{'stage':<36}{'seconds':>9}{'msgs/s':>12}{'MB/s':>9}{'peak worker RSS MiB':>22}{'other load':>12}"
        f"{'our CPU s':>11}",
    ]
    for r in results:
        mem = r.memory.max_mib if r.memory else None
        if r.seconds is None:
            lines.append(f"{r.name:<36}{'n/a':>9}{'n/a':>12}{'n/a':>9}{'n/a':>22}  {r.note}")
            continue
        mps = r.messages_per_s
        others = r.cpu.others_s / r.cpu.wall_s if r.cpu and r.cpu.wall_s else None
        mps_text = "-" if mps is None else f"{mps / 1e6:.2f} M"
        lines.append(f"{r.name:<36}{r.seconds:>9.2f}{mps_text:>12}{_fmt(r.mb_per_s, '.0f'):>9}{_fmt(mem, '.0f'):>22}"
                     f"{_fmt(others, '.2f'):>12}{_fmt(r.cpu.ours_s if r.cpu else None, '.1f'):>11}"
                     + (f"  {r.note}" if r.note else ""))
        timings = r.detail.get("job_timings_s")
        if timings:
            for key, label in (("decode_s", "decode, stage CQ rows + keys"),
                               ("build_s", "write CQ + index files (1 job)"),
                               ("consumequeue_task_s", "  CQ tasks (sum of task times)"),
                               ("index_task_s", "  index tasks (sum of task times)")):
                if key in timings:
                    lines.append(f"  {label:<34}{timings[key]:>9.2f}")
    lines.append("other load = CPU cores used by other processes on the machine during the stage "
                 "(0 on an idle machine); our CPU s = CPU seconds of this run's processes (driver, JVM, workers)")
    return "\n".join(lines)


def json_report(results: list[StageResult], store_info: dict, machine: dict, config: dict) -> dict:
    """Everything the run measured, the machine and the run's settings, as one JSON object."""
    return {"machine": machine, "store": store_info, "config": config,
            "results": [r.to_dict() for r in results]}
