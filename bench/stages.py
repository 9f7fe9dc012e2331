"""The measured stages: Spark start-up, raw read, decode only, jobs.rebuild, jobs.verify, jobs.recover.

Every stage runs in the bench's one SparkSession (the jobs' `get_spark` returns it), so Spark start-up
is paid once and reported on its own. Each stage is timed wall-clock from its call to its return, with
the Python workers' peak memory watched meanwhile (bench.memory).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.pipeline.io.fs import Location, location
from jobs.pipeline.scan.decode import scan_store
from jobs.pipeline.store.segments import list_segments
from jobs.pipeline.runtime.tasks import SparkRunner, run_tasks
from storage_format.scan_plan import Split, plan_splits
from storage_format.settings import BrokerSettings

from .cpu import CpuShare
from .iocount import IoCounts, dir_bytes
from .memory import WorkerMemory, WorkerPeak


@dataclass
class StageResult:
    """One row of the table: what ran, how long, on how many records/bytes, peak worker memory."""

    name: str
    seconds: float | None
    records: int | None = None
    data_bytes: int | None = None
    memory: WorkerPeak | None = None
    detail: dict = field(default_factory=dict)
    note: str = ""
    cpu: CpuShare | None = None  # set by the runner: CPU used during the stage, ours and the machine's
    io: IoCounts | None = None  # set by the runner: bytes our process tree read and wrote during the stage

    @property
    def messages_per_s(self) -> float | None:
        """Message records per second of the stage."""
        return self.records / self.seconds if self.seconds and self.records is not None else None

    @property
    def mb_per_s(self) -> float | None:
        """Megabytes (10^6) of commit-log records per second of the stage."""
        return self.data_bytes / self.seconds / 1e6 if self.seconds and self.data_bytes is not None else None

    def to_dict(self) -> dict:
        """JSON form of the row."""
        return {"stage": self.name, "seconds": None if self.seconds is None else round(self.seconds, 3),
                "records": self.records, "commitlog_bytes": self.data_bytes,
                "messages_per_s": None if self.messages_per_s is None else round(self.messages_per_s),
                "mb_per_s": None if self.mb_per_s is None else round(self.mb_per_s, 1),
                "python_worker_memory": None if self.memory is None else self.memory.to_dict(),
                "cpu": None if self.cpu is None else self.cpu.to_dict(),
                "io": None if self.io is None else self.io.to_dict(),
                "detail": self.detail, "note": self.note}


def _warm_worker(_: int) -> int:
    """Start-up work of a Python worker, done once here so no stage pays it: import the pipeline and
    run the decode path (fields, properties, Java hashes, index keys) over a few encoded records."""
    import jobs.pipeline.outputs.build  # noqa: F401
    import jobs.pipeline.scan.decode  # noqa: F401
    from storage_format.kernels.warm import warm

    warm()  # load the compiled kernels (from numba's cache)
    from storage_format.commitlog import decode_buffer
    from storage_format.consume_queue import tags_codes
    from storegen.encoder import encode_record
    from storage_format.index_keys import index_keys
    from storage_format.properties import TAGS
    from storage_format.record import Message

    records, offset = [], 0
    for i in range(64):
        msg = Message(topic="WarmUp", body=b"x" * 50, queue_id=i % 4, store_timestamp=1_700_000_000_000 + i,
                      properties=f"KEYS\x01k{i} j{i}\x02UNIQ_KEY\x01U{i:031d}\x02TAGS\x01T\x02")
        raw = encode_record(msg, offset)
        records.append(raw)
        offset += len(raw)
    cols = decode_buffer(b"".join(records) + bytes(8), 0).columns
    tags_codes(cols.property_string(TAGS), cols.topic, cols.delay_level, cols.store_timestamp, ())
    return len(index_keys(cols))


def spark_startup(master: str) -> tuple[object, StageResult]:
    """Start the session and its Python workers (one tiny job per core importing the pipeline), timed."""
    from jobs.pipeline.runtime.session import get_spark

    t0 = time.monotonic()
    spark = get_spark("bench", master)
    sc = spark.sparkContext
    sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).map(_warm_worker).collect()
    return spark, StageResult("Spark session start-up", time.monotonic() - t0,
                              detail={"master": sc.master, "default_parallelism": sc.defaultParallelism})


def stop_spark() -> None:
    """Stop the bench's session before the process ends: its JVM and accumulator server remove their Unix sockets
    (a process that just exits leaves them in the temp directory)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


READ_BLOCK = 8 << 20


def _read_split(split: Split) -> int:
    """Read a split's byte range into memory with plain reads (8 MiB blocks into one reused buffer):
    what bringing the bytes in costs, without decoding anything."""
    loc = Location(split.segment.path)
    block = bytearray(READ_BLOCK)
    done = 0
    with loc.fs.open_input_file(loc.path) as f:
        f.seek(split.start)
        while done < split.stop - split.start:
            n = f.readinto(memoryview(block)[:min(READ_BLOCK, split.stop - split.start - done)])
            if not n:
                break
            done += n
    return done


def warm_page_cache(store: Path) -> float:
    """Read every commit-log segment once (untimed by the caller's figures), so each stage starts with
    the store in the page cache, as after the store was written; returns the seconds it took."""
    t0 = time.monotonic()
    block = bytearray(READ_BLOCK)
    log_dirs = [d for d in (store / "commitlog", *sorted(store.glob("dledger-*/data"))) if d.is_dir()]
    for seg in sorted(p for d in log_dirs for p in d.iterdir()):
        with open(seg, "rb", buffering=0) as f:
            while f.readinto(block):
                pass
    return time.monotonic() - t0


def read_only(spark, store: Path, settings: BrokerSettings, split_size: int, records: int,
              data_bytes: int) -> StageResult:
    """Raw read rate of the same segment files, cut into the same splits, in Spark tasks."""
    splits = plan_splits(list_segments(location(str(store)), settings), split_size)
    with WorkerMemory() as mem:
        t0 = time.monotonic()
        read = sum(run_tasks(SparkRunner(spark.sparkContext), splits, _read_split, "read", quiet=True))
        seconds = time.monotonic() - t0
    return StageResult("read only (same splits)", seconds, records, data_bytes, mem.peak,
                       detail={"bytes_read": read, "tasks": len(splits)},
                       note="file bytes read, incl. zero tails")


def decode_only(spark, store: Path, settings: BrokerSettings, split_size: int, data_bytes: int) -> StageResult:
    """The scan stage alone: walk, validate and decode every record, per-queue counts; writes nothing."""
    with WorkerMemory() as mem:
        t0 = time.monotonic()
        scan = scan_store(SparkRunner(spark.sparkContext), location(str(store)), settings, split_size=split_size, with_cq=False,
                          with_keys=False, quiet=True)
        seconds = time.monotonic() - t0
    return StageResult("decode only", seconds, scan.message_records, data_bytes, mem.peak,
                       detail={"tasks": len(scan.splits), "scan_end": scan.end.as_list() if scan.end else None})


def _timed_job(module: str, argv: list[str]) -> tuple[int, str, float, int]:
    """Run `python -m jobs.<module>`'s main in this process (same SparkSession), timed from main() to
    its return: (exit code, stdout, seconds, peak worker RSS)."""
    main = importlib.import_module(f"jobs.{module}").main
    out = io.StringIO()
    with WorkerMemory() as mem:
        t0 = time.monotonic()
        with contextlib.redirect_stdout(out):
            code = main(argv)
        seconds = time.monotonic() - t0
    return code, out.getvalue(), seconds, mem.peak


def rebuild(store: Path, out: Path, split_size: int, master: str, data_bytes: int) -> StageResult:
    """`jobs.rebuild` (consume queues + index) into `out`, timed from main() to its return."""
    shutil.rmtree(out, ignore_errors=True)
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
            "--split-size", str(split_size), "--master", master, "--json"]
    code, stdout, seconds, peak = _timed_job("rebuild", argv)
    report = json.loads(stdout)
    detail = {"exit_code": code, "job_timings_s": report.get("timings"),
              "consumequeue_files": report.get("consumequeue_files"),
              "index_files": len(report.get("index_files") or []), "tasks_decode": report.get("splits"),
              "output_bytes": dir_bytes(out)}
    return StageResult("jobs.rebuild (CQ + index)", seconds, report.get("message_records"), data_bytes,
                       peak, detail=detail)


def convert(store: Path, out: Path, split_size: int, master: str, data_bytes: int) -> StageResult:
    """`jobs.convert` (a DLedger store as a plain store: new commit log, consume queues, index) into `out`,
    timed from main() to its return."""
    shutil.rmtree(out, ignore_errors=True)
    argv = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
            "--split-size", str(split_size), "--master", master, "--json"]
    code, stdout, seconds, peak = _timed_job("convert", argv)
    report = json.loads(stdout)
    detail = {"exit_code": code, "job_timings_s": report.get("timings"), "plan": report.get("plan"),
              "segments_written": len(report.get("segments_written") or [])}
    shutil.rmtree(out, ignore_errors=True)
    return StageResult("jobs.convert (DLedger -> plain: commit log + CQ + index)", seconds,
                       report.get("message_records"), data_bytes, peak, detail=detail)


def recover(crashed: Path, out: Path, split_size: int, master: str, records: int, data_bytes: int,
            extra: tuple[str, ...] = ()) -> StageResult:
    """`jobs.recover --out` of a crashed store (bench.recovery makes it) into `out`, timed from main() to its
    return; the output is deleted (its size is kept)."""
    shutil.rmtree(out, ignore_errors=True)
    argv = ["--store", str(crashed), "--broker-config", str(crashed / "broker.conf"), "--out", str(out),
            "--split-size", str(split_size), "--master", master, "--json", *extra]
    code, stdout, seconds, peak = _timed_job("recover", argv)
    report = json.loads(stdout)
    detail = {"exit_code": code, "job_timings_s": report.get("timings"), "output_bytes": dir_bytes(out)}
    shutil.rmtree(out, ignore_errors=True)
    return StageResult("jobs.recover --out (crashed store)", seconds, records, data_bytes, peak, detail=detail)


def verify_view(store: Path, rebuilt: Path, view: Path) -> Path:
    """A store made of `store`'s commit log (a DLedger store's data, index and checkpoint) and the consume queues
    and index files rebuilt into `rebuilt` (symlinks), for jobs.verify to check the one against the other."""
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    members = [(d.name, d) for d in sorted(store.glob("dledger-*"))]  # a DLedger store's data, index, checkpoint
    for name, target in (("commitlog", store / "commitlog"), *members, ("consumequeue", rebuilt / "consumequeue"),
                         ("index", rebuilt / "index")):
        if target.exists():
            (view / name).symlink_to(target)
    return view


def verify(store: Path, rebuilt: Path, work_root: Path, split_size: int, master: str, records: int,
           data_bytes: int) -> StageResult:
    """`jobs.verify` over a store made of the bench commit log and the rebuilt consume queues/index
    (symlinks), timed from main() to its return."""
    view = verify_view(store, rebuilt, work_root / "verify-store")
    argv = ["--store", str(view), "--broker-config", str(store / "broker.conf"), "--work-dir", str(work_root),
            "--split-size", str(split_size), "--master", master, "--json"]
    code, stdout, seconds, peak = _timed_job("verify", argv)
    try:
        report = json.loads(stdout)
    except ValueError:
        report = {}
    shutil.rmtree(view, ignore_errors=True)
    detail = {"exit_code": code, "findings": report.get("findings_total"),
              "consumequeue_files_checked": report.get("consumequeue_files_checked"),
              "index_files_checked": report.get("index_files_checked")}
    checked = (report.get("commitlog") or {}).get("message_records", records)
    note = "" if code == 0 else f"exit code {code}: the rebuilt files did not verify"
    return StageResult("jobs.verify", seconds, checked, data_bytes, peak, detail=detail, note=note)
