"""Stage scale's many-queue store (issue 32 item 4, `--scale-lmq MESSAGES:QUEUES`): half the messages name 1-3 of
QUEUES distinct %LMQ% queues, 16-64 B bodies. Per round `jobs.rebuild` and `jobs.verify` of its output as whole
processes with the operator's defaults (wall, rate, peak memory and descriptors per kind of process); after the
first rebuild, untimed: the disk its consume queues take (allocated against apparent: LMQ files are sparse as the
broker's are) and bench.lmq_check's sample check. The broker cannot run this store (4.9.8's default
maxLmqConsumeQueueNum is 20,000, and it holds a descriptor per consume-queue file)."""
from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from storegen.synth import StoreSpec

from .lmq_check import check_sample
from .report import progress
from .scale_jobs import BODY, KINDS, run_job
from .stages import verify_view
from .stores import ensure_store

LMQ_SHARE = 0.5  # half the messages name 1-3 LMQ queues
JOBS = ("rebuild", "verify")


def parse(text: str) -> tuple[int, int]:
    """`MESSAGES:QUEUES` -> (messages, distinct LMQ queues)."""
    fields = text.split(":")
    if len(fields) != 2 or not all(f.isdigit() and int(f) > 0 for f in fields):
        raise ValueError(f"--scale-lmq: {text!r} is not MESSAGES:QUEUES (e.g. 16000000:100000)")
    return int(fields[0]), int(fields[1])


def store(text: str, spec: StoreSpec, root: Path, regenerate: bool) -> tuple[Path, int, int]:
    """The store `text` names (written first where missing, untimed), its messages and LMQ queues."""
    messages, queues = parse(text)
    shape = dataclasses.replace(spec, messages=messages, body_min=BODY[0], body_max=BODY[1], dledger=False,
                                lmq_share=LMQ_SHARE, lmq_queues=queues, transaction_share=0.0)
    return ensure_store(root, shape, regenerate), messages, queues


def disk(out: Path) -> dict:
    """Files under OUT's consumequeue/, their apparent size and the blocks they take."""
    files = apparent = allocated = 0
    for dirpath, _dirs, names in os.walk(out / "consumequeue"):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            files, apparent, allocated = files + 1, apparent + st.st_size, allocated + st.st_blocks * 512
    return {"cq_files": files, "cq_apparent_bytes": apparent, "cq_allocated_bytes": allocated}


@dataclass
class LmqRuns:
    """Every run per job, the first output's disk and the sample check."""

    path: Path
    records: int
    queues: int
    runs: dict[str, list[dict]] = field(default_factory=dict)
    disk: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)

    def medians(self, job: str) -> dict | None:
        runs = self.runs.get(job)
        if not runs:
            return None
        out = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "total_s")}
        out["rate"] = statistics.median(self.records / r["total_s"] for r in runs)
        for k in KINDS:
            out[f"{k}_peak_mib"] = max(r[f"{k}_peak_mib"] for r in runs)
            out[f"{k}_fds"] = max(r[f"{k}_fds"] for r in runs)
        return out

    def to_dict(self) -> dict:
        return {"path": str(self.path), "records": self.records, "lmq_queues": self.queues, "runs": self.runs,
                "disk": self.disk, "check": self.check}


def side_by_side(path: Path, records: int, queues: int, root: Path, rounds: int, split_size: int) -> LmqRuns:
    """`rounds` rounds of rebuild then verify; the first rebuild's output measured on disk and checked."""
    runs = LmqRuns(path, records, queues)
    out, view = root / "scale-lmq-rebuilt", root / "scale-lmq-verify-store"
    conf = ["--broker-config", str(path / "broker.conf"), "--split-size", str(split_size)]
    started = time.monotonic()
    for i in range(rounds):
        progress(f"scale LMQ ({records:,} messages, {queues:,} LMQ queues)", i, rounds, started)
        shutil.rmtree(out, ignore_errors=True)
        runs.runs.setdefault("rebuild", []).append(run_job("rebuild", ["--store", str(path), "--out", str(out),
                                                                        *conf]))
        if i == 0:
            runs.disk = disk(out)
            runs.check = check_sample(path, out, root, split_size).to_dict()
        verify_view(path, out, view)
        runs.runs.setdefault("verify", []).append(run_job("verify", ["--store", str(view), "--work-dir", str(root),
                                                                      *conf]))
        shutil.rmtree(view, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return runs


def table(runs: LmqRuns) -> str:
    """The medians per job with descriptors, the disk and the check."""
    lines = [f"Scale, many queues: {runs.records / 1e6:g} M messages, {LMQ_SHARE:g} of them naming 1-3 of "
             f"{runs.queues:,} %LMQ% queues; whole processes, medians of {len(runs.runs.get('rebuild', []))} rounds",
             "| job | wall | after start-up | rate | driver peak | JVM peak | worker peak | descriptors "
             "(driver / JVM / a worker) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for job in JOBS:
        m = runs.medians(job)
        if m is not None:
            lines.append(f"| {job} | {m['wall_s']:.1f} s | {m['total_s']:.1f} s | {m['rate'] / 1e6:.2f} M/s | "
                         + " | ".join(f"{m[f'{k}_peak_mib']} MB" if m[f"{k}_peak_mib"] else "- (none)"
                                      for k in KINDS) + " | "
                         + " / ".join(str(m[f"{k}_fds"]) if m[f"{k}_peak_mib"] else "-" for k in KINDS) + " |")
    d, c = runs.disk, runs.check
    if d:
        lines.append(f"consume queues: {d['cq_files']:,} files, {d['cq_apparent_bytes'] / 2**30:.1f} GiB apparent, "
                     f"{d['cq_allocated_bytes'] / 2**30:.2f} GiB on disk (sparse)")
    if c:
        lines.append(f"sample check: {c['queues']:,} queues, {c['units']:,} units read against the commit log, "
                     f"{c['reference_files']:,} files equal to the reference path's: "
                     + ("no problem" if not c["problems_total"] else f"{c['problems_total']} PROBLEMS: "
                        f"{'; '.join(c['problems'][:3])}"))
    return "\n".join(lines)
