"""The benchmark's outputs: one printed table and a JSON file with every figure and the machine."""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from .stages import StageResult

# RocketMQ 4.9.8's own single-threaded rebuild of the default store, measured on a 2-core machine
# like the bench's (start to caught-up): the figure to beat.
ROCKETMQ_REFERENCE = {"name": "RocketMQ 4.9.8 rebuild (reference)", "seconds": "7.4-9.6",
                      "messages_per_s": "0.42-0.54 M", "mb_per_s": "230-300"}


def machine_info() -> dict:
    """CPU model, cores, memory, OS and library versions of this machine."""
    info: dict = {"cores": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
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
        f"machine: {machine.get('cpu', '?')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB; "
        f"load average at start {machine.get('load_average_at_start')}",
        settings_line,
        "",
        f"{'stage':<36}{'seconds':>9}{'msgs/s':>12}{'MB/s':>9}{'peak worker RSS MiB':>22}{'other load':>12}",
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
                     f"{_fmt(others, '.2f'):>12}" + (f"  {r.note}" if r.note else ""))
        timings = r.detail.get("job_timings_s")
        if timings:
            for key, label in (("decode_s", "decode, stage CQ rows + keys"),
                               ("build_s", "write CQ + index files (1 job)"),
                               ("consumequeue_task_s", "  CQ tasks (sum of task times)"),
                               ("index_task_s", "  index tasks (sum of task times)")):
                if key in timings:
                    lines.append(f"  {label:<34}{timings[key]:>9.2f}")
    ref = ROCKETMQ_REFERENCE
    lines.append(f"{ref['name']:<36}{ref['seconds']:>9}{ref['messages_per_s']:>12}{ref['mb_per_s']:>9}")
    lines.append("other load = CPU cores used by other processes on the machine during the stage "
                 "(0 on an idle machine)")
    return "\n".join(lines)


def json_report(results: list[StageResult], store_info: dict, machine: dict, config: dict) -> dict:
    """Everything the run measured, the machine and the run's settings, as one JSON object."""
    return {"machine": machine, "store": store_info, "config": config,
            "results": [r.to_dict() for r in results], "rocketmq_reference": ROCKETMQ_REFERENCE}
