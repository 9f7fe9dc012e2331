"""`python -m bench [flags]` (or `make bench`): write a synthetic store, then measure reput on it.

Measured, each as messages/s, MB/s of commit log and peak memory of the Python workers: the raw read of
the same files, decode only, `jobs.rebuild` (consume queues + index) and `jobs.verify` (when the module
exists). Writing the store is not timed (a store written from the same flags is reused); Spark session
start-up is reported on its own row. Prints one table and writes every figure as JSON. Side-by-side
comparisons, each interleaved in one run: start-up against Spark's defaults (bench.startup), the rate
against store size (bench.scale, --scale-messages) and RocketMQ's own rebuild (bench.broker; of a DLedger
store, bench.dledger_broker), crash recovery (bench.recovery, also on a larger store with
--recovery-scale-messages), rebuild of an LMQ store, and, on a DLedger store, jobs.convert against
jobs.rebuild as whole processes (bench.convert_pairs, --convert-pairs). The bytes moved feed the scale-out
model (bench.iomodel).
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import json
import shutil
import sys
import time
from pathlib import Path

from jobs.pipeline.runtime.cli import _size
from storage_format.scan_plan import DEFAULT_SPLIT_SIZE
from storage_format.settings import load_settings

from . import broker, convert_pairs, dledger_broker, iomodel, recovery, report, scaleout, stages
from . import lmq_decode, lmq_scale, nightly, scale, scale_jobs
from . import startup as startup_bench
from .cpu import CpuWatch
from .iocount import IoWatch
from .stores import ensure_store, store_dir
from storegen.synth import StoreSpec, parse_key_mix, read_store_info

DEFAULT_ROOT = Path("/tmp/reput-bench")
STAGES = ("startup", "read", "decode", "rebuild", "verify", "convert", "recover")
EXTRA_STAGES = ("lmq-decode", "scaleout", "scale", "nightly")  # only when named in --stages  # convert: DLedger stores only;
# recover: on the crashed store made with --broker-build
BROKER_COMPARISONS = ("rebuild", "recovery", "lmq")
LMQ_LIMIT = 20_000  # 4.9.8's default maxLmqConsumeQueueNum, and about what it can open here (one fd per CQ file)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: store flags (what to write) and run flags (how to measure)."""
    d = StoreSpec()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                   help=f"where the store, outputs and JSON go (default {DEFAULT_ROOT}; keep it out of the repo)")
    g = p.add_argument_group("synthetic store")
    g.add_argument("--messages", type=int, default=d.messages, help=f"messages (default {d.messages:,})")
    g.add_argument("--body-min", type=int, default=d.body_min, help=f"smallest body in bytes (default {d.body_min})")
    g.add_argument("--body-max", type=int, default=d.body_max, help=f"largest body in bytes (default {d.body_max})")
    g.add_argument("--topics", type=int, default=d.topics, help=f"topics (default {d.topics})")
    g.add_argument("--queues", type=int, default=d.queues, help=f"queues per topic (default {d.queues})")
    g.add_argument("--key-mix", default=",".join(str(x) for x in d.key_mix),
                   help="shares of messages with 0,1,2,... KEYS tokens (default 0.3,0.5,0.2)")
    g.add_argument("--uniq-share", type=float, default=d.uniq_share, help="share of messages with UNIQ_KEY (default 1)")
    g.add_argument("--tags-share", type=float, default=d.tags_share, help="share of messages with TAGS (default 0.8)")
    g.add_argument("--segment-size", type=_size, default=d.segment_size, help="commit-log segment size (default 1g)")
    g.add_argument("--cq-file-size", type=int, default=d.consume_queue_file_size,
                   help=f"mappedFileSizeConsumeQueue (default {d.consume_queue_file_size})")
    g.add_argument("--index-slots", type=int, default=d.max_hash_slot_num,
                   help=f"maxHashSlotNum (default {d.max_hash_slot_num})")
    g.add_argument("--index-entries", type=int, default=d.max_index_num,
                   help=f"maxIndexNum (default {d.max_index_num})")
    g.add_argument("--lmq-share", type=float, default=d.lmq_share,
                   help="share of messages naming 1-3 %%LMQ%% queues (multi-dispatch; default 0)")
    g.add_argument("--lmq-queues", type=int, default=d.lmq_queues,
                   help=f"distinct %%LMQ%% queues they name (default {d.lmq_queues:,})")
    g.add_argument("--transaction-share", type=float, default=d.transaction_share,
                   help="share of messages sent in a transaction: a half record, then its COMMIT (default 0)")
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--dledger", action="store_true",
                   help="a DLedger-mode store (dledger-n0/data/ entry files of --segment-size, one-member group)")
    g.add_argument("--regenerate", action="store_true", help="rewrite the store even if one matches the flags")
    r = p.add_argument_group("run")
    r.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    r.add_argument("--split-size", type=_size, default=DEFAULT_SPLIT_SIZE, help="bytes per decode task (default 128m)")
    r.add_argument("--stages", default=",".join(STAGES),
                   help=f"which stages to run (default {','.join(STAGES)}; also lmq-decode: the rebuild's decode "
                        f"stage on the bench store and its LMQ twin (--lmq-compare-share/--lmq-compare-queues), "
                        f"interleaved --pairs rounds, time per message compared; scaleout: jobs.rebuild submitted to a "
                        f"loopback cluster of 1 worker core and one of 2, --scaleout-rounds each, the speed-up per "
                        f"stage beside the model's; needs `make package`; scale: rebuild, verify and convert as whole "
                        f"processes on the --scale-stores, --scale-rounds rounds; nightly: rebuild --since against "
                        f"the full rebuild on a store grown by 1/8, --nightly-rounds rounds)")
    r.add_argument("--repeat", type=int, default=1,
                   help="runs per stage; the fastest is reported, all are kept in the JSON (default 1)")
    r.add_argument("--json-out", type=Path, help="JSON result file (default ROOT/bench-result.json)")
    r.add_argument("--keep-output", action="store_true", help="keep the rebuilt files (default: delete them)")
    r.add_argument("--broker-build", type=Path,
                   help="a RocketMQ 4.9.8 oracle build (../shared/oracle/build.sh OUT): also time the broker's own "
                        "rebuild and jobs.rebuild as whole processes, interleaved, and print the ratios")
    r.add_argument("--dledger-broker-build", type=Path,
                   help="with --dledger: a DLedger oracle build (../shared/oracle/dledger/build.sh ... OUT): also time "
                        "RocketMQ 4.9.8's DLedgerCommitLog rebuilding the store from its data files (the kit's "
                        "reopen), jobs.rebuild of it and of the plain store with the same messages (written if "
                        "missing), interleaved, and print the ratios")
    r.add_argument("--broker-compare", default=",".join(BROKER_COMPARISONS),
                   help="with --broker-build: which comparisons (default rebuild,recovery,lmq): rebuild of the bench "
                        "store; recovery of a crashed copy made by the kit's make_crash.py (broker: the kit's "
                        "run_broker_store.sh, reput: jobs.recover --out; outputs compared byte for byte); rebuild "
                        "of an LMQ store (the bench flags with --lmq-compare-share/--lmq-compare-queues)")
    r.add_argument("--oracle-kit", type=Path, default=recovery.DEFAULT_KIT,
                   help=f"the oracle kit (make_crash.py, run_broker_store.sh; default {recovery.DEFAULT_KIT})")
    r.add_argument("--recovery-scale-messages", type=int,
                   help="with --broker-build: also the recovery comparison on a store of this many messages (same "
                        "flags otherwise; written if missing), and whether the ratio grew")
    r.add_argument("--crash-lag-bytes", type=_size, default=recovery.KIT_LAG_BYTES,
                   help="how far the crashed store's consume queues and index lag its commit log (make_crash.py's "
                        "--lag-bytes: the broker re-dispatches that much single-threaded; default 4m, the kit's)")
    r.add_argument("--recover-args", default="",
                   help="more flags for jobs.recover in the recovery comparison and stage recover, given "
                        "with =, e.g. --recover-args=--link-sealed-segments (default none: plain --out; --out runs only)")
    r.add_argument("--recover-mode", choices=recovery.RECOVER_MODES, default=recovery.OUT,
                   help="the recovery comparison's jobs.recover: --out (default), --in-place (each run on a fresh "
                        "full copy of the crashed store, made untimed) or both, interleaved with the broker")
    r.add_argument("--cold", action="store_true",
                   help="recovery comparison with a cold page cache: every file of the store a run reads is "
                        "fsynced and evicted (POSIX_FADV_DONTNEED) before it, the broker's and reput's alike, "
                        "as after a reboot (default: every file of the store read into the cache before each run)")
    r.add_argument("--lmq-compare-share", type=float, default=0.2,
                   help="LMQ comparison: share of messages naming 1-3 %%LMQ%% queues (default 0.2)")
    r.add_argument("--lmq-compare-queues", type=int, default=18_000,
                   help=f"LMQ comparison: distinct %%LMQ%% queues (default 18,000; at most {LMQ_LIMIT:,})")
    r.add_argument("--model-store-gb", type=float, default=500.0,
                   help="store size for the printed scale-out model (default 500 GB)")
    r.add_argument("--pairs", type=int, default=3,
                   help="interleaved broker/reput pairs (rounds of three with --dledger-broker-build; default 3)")
    r.add_argument("--scale-messages", type=int,
                   help="also rebuild a store of this many messages (same flags otherwise; written if missing) "
                        "interleaved with the bench store's rebuild, and print both rates and their ratio")
    r.add_argument("--scale-pairs", type=int, default=3, help="interleaved rounds for --scale-messages (default 3)")
    r.add_argument("--scale-stores", default=scale_jobs.DEFAULT_STORES,
                   help=f"stage scale's stores, messages:topics:queues each ({scale_jobs.BODY[0]}-"
                        f"{scale_jobs.BODY[1]} B bodies; default {scale_jobs.DEFAULT_STORES}; none: only --scale-lmq)")
    r.add_argument("--scale-lmq", metavar="MESSAGES:QUEUES", help="stage scale also measures a store of QUEUES "
                   "%%LMQ%% queues (e.g. 16000000:100000; bench/lmq_scale.py)")
    r.add_argument("--scale-rounds", type=int, default=3, help="rounds of stage scale (default 3)")
    r.add_argument("--scale-convert", type=int, default=0, metavar="MESSAGES",
                   help="stage scale also converts the DLedger twins (written once, untimed) of its stores of up to "
                        "MESSAGES messages (default 0: none)")
    r.add_argument("--nightly-rounds", type=int, default=3, help="rounds of stage nightly (default 3)")
    r.add_argument("--nightly-segment-mib", type=int, default=128,
                   help="segment size of stage nightly's store (default 128 MiB; bench/nightly.py says why)")
    r.add_argument("--scaleout-rounds", type=int, default=3,
                   help="submits per core count in stage scaleout (default 3)")
    r.add_argument("--scale-settle", type=float, default=scale.SETTLE_S,
                   help=f"pause in seconds before each --scale-messages run (default {scale.SETTLE_S:g}; "
                        f"see bench/scale.py)")
    r.add_argument("--convert-pairs", type=int, default=2,
                   help="with --dledger and stages rebuild and convert: interleaved pairs of jobs.convert and "
                        "jobs.rebuild as whole processes, and their ratio (issue 21's <= 1.5; default 2, 0: off)")
    r.add_argument("--startup-pairs", type=int, default=3,
                   help="interleaved start-up pairs, reput against Spark's defaults (stage startup; default 3)")
    args = p.parse_args(argv)
    if args.dledger_broker_build and not args.dledger:
        p.error("--dledger-broker-build needs --dledger (the broker's DLedger rebuild runs on the DLedger store)")
    if args.broker_build and args.dledger:
        p.error("--broker-build times RebuildTimer on a plain store's commitlog/; on the DLedger store use "
                "--dledger-broker-build")
    args.recover_args = tuple(shlex.split(args.recover_args))
    unknown_cmp = set(args.broker_compare.split(",")) - set(BROKER_COMPARISONS)
    if unknown_cmp:
        p.error(f"unknown --broker-compare {sorted(unknown_cmp)}; choose from {BROKER_COMPARISONS}")
    if not 0 < args.lmq_compare_queues <= LMQ_LIMIT:
        p.error(f"--lmq-compare-queues {args.lmq_compare_queues:,}: 1 to {LMQ_LIMIT:,} (RocketMQ 4.9.8's default "
                f"maxLmqConsumeQueueNum; it keeps one open file per consume-queue file)")
    if not 0 < args.lmq_compare_share <= 1:
        p.error(f"--lmq-compare-share {args.lmq_compare_share}: a share in (0, 1]")
    if args.recovery_scale_messages and not args.broker_build:
        p.error("--recovery-scale-messages needs --broker-build (the broker's recovery is half the comparison)")
    if args.recovery_scale_messages is not None and args.recovery_scale_messages <= args.messages:
        p.error(f"--recovery-scale-messages {args.recovery_scale_messages:,}: more than --messages "
                f"{args.messages:,} (the larger store)")
    unknown = set(args.stages.split(",")) - set(STAGES) - set(EXTRA_STAGES)
    if unknown:
        p.error(f"unknown stages {sorted(unknown)}; choose from {STAGES + EXTRA_STAGES}")
    try:
        if args.scale_stores != "none":
            scale_jobs.parse_stores(args.scale_stores)
        if args.scale_lmq:
            lmq_scale.parse(args.scale_lmq)
    except ValueError as exc:
        p.error(str(exc))
    if "lmq-decode" in args.stages.split(",") and (args.lmq_share > 0 or args.dledger):
        p.error("stage lmq-decode compares the plain bench store with its LMQ twin (--lmq-compare-share, "
                "--lmq-compare-queues): run it without --lmq-share and --dledger")
    return args


def spec_from(args: argparse.Namespace) -> StoreSpec:
    """The store spec the flags describe."""
    return StoreSpec(messages=args.messages, body_min=args.body_min, body_max=args.body_max, topics=args.topics,
                     queues=args.queues, key_mix=parse_key_mix(args.key_mix), uniq_share=args.uniq_share,
                     tags_share=args.tags_share, segment_size=args.segment_size,
                     consume_queue_file_size=args.cq_file_size, max_hash_slot_num=args.index_slots,
                     max_index_num=args.index_entries, seed=args.seed, lmq_share=args.lmq_share,
                     lmq_queues=args.lmq_queues, dledger=args.dledger, transaction_share=args.transaction_share)


def _best(stage: str, store: Path, repeat: int, run) -> stages.StageResult:
    """Run a stage `repeat` times, each after warming the page cache with the store (untimed); keep the
    fastest run (every run's time goes to the JSON; worker memory is the highest over the runs)."""
    runs = []
    for i in range(repeat):
        warm = stages.warm_page_cache(store)
        print(f"[bench] {stage} (run {i + 1}/{repeat}; page cache warmed in {warm:.1f}s, not timed) ...", flush=True)
        with CpuWatch() as cpu, IoWatch() as io:
            result = run()
        result.cpu, result.io = cpu.share, io.counts
        runs.append(result)
        if runs[-1].seconds is None:
            return runs[-1]
    best = min(runs, key=lambda r: r.seconds)
    best.detail["all_runs_s"] = [round(r.seconds, 3) for r in runs]
    peaks = [r.memory for r in runs if r.memory and r.memory.per_process_kib]
    if best.memory is not None and peaks:
        best.memory = max(peaks, key=lambda m: m.max_mib)
    return best


def _show(*texts: str) -> None:
    """Print tables as soon as they are known (the comparisons after them take minutes)."""
    for text in texts:
        if text:
            print()
            print(text, flush=True)


def _compare(label: str, failures: list[str], wanted: bool, run, table):
    """Run one side-by-side comparison if wanted, print its table at once; a broker or job run that fails
    is named on stderr and in `failures` (the run goes on with the other comparisons) instead of a
    traceback."""
    if not wanted:
        return None
    try:
        result = run()
    except broker.BrokerRunError as e:
        failures.append(f"{label}: {e}")
        print(f"bench: {label} failed: {e}", file=sys.stderr, flush=True)
        return None
    if table is not None:
        _show(table(result))
    return result


def main(argv: list[str] | None = None) -> int:
    """Write or reuse the store, run the stages, print the table, write the JSON; returns the exit status."""
    args = parse_args(argv)
    spec = spec_from(args)
    store = ensure_store(args.root, spec, args.regenerate)
    info = read_store_info(store)
    scale_stores = None
    if args.scale_messages:
        large = ensure_store(args.root, dataclasses.replace(spec, messages=args.scale_messages), args.regenerate)
        scale_stores = [scale.ScaleStore(p, i["records"], i["data_bytes"])
                        for p, i in ((store, info), (large, read_store_info(large)))]
    print(f"[bench] store {store}: {info['records']:,} messages, {info['segments']} segment(s), "
          f"{info['data_bytes'] / 1e6:,.1f} MB (written in {info['write_seconds']} s)", flush=True)
    settings = load_settings(store / "broker.conf")
    machine = report.machine_info()
    wanted = args.stages.split(",")
    compares = set(args.broker_compare.split(",")) if args.broker_build else set()
    failures: list[str] = []
    crashed = _compare("making the crashed store", failures,
                       bool(args.broker_build) and ("recovery" in compares or "recover" in wanted),
                       lambda: recovery.crashed_store(args.oracle_kit, args.broker_build, store, args.root,
                                                      info["records"], info["data_bytes"], args.crash_lag_bytes), None)
    out = args.root / "rebuilt"
    results = []
    startup_runs = None
    if "startup" in wanted:  # new processes, before the bench's own session exists
        startup_runs = startup_bench.side_by_side(args.master, args.startup_pairs)
    spark, startup = stages.spark_startup(args.master)
    results.append(startup)
    records, data_bytes = info["records"], info["data_bytes"]
    scale_runs = None
    decode_runs = None
    scaleout_runs = None
    scale_job_runs = nightly_runs = lmq_scale_runs = None
    try:
        if "read" in wanted:
            results.append(_best("read only", store, args.repeat,
                                 lambda: stages.read_only(spark, store, settings, args.split_size, records,
                                                          data_bytes)))
        if "decode" in wanted:
            results.append(_best("decode only", store, args.repeat,
                                 lambda: stages.decode_only(spark, store, settings, args.split_size, data_bytes)))
        if "rebuild" in wanted or "verify" in wanted:
            rebuilt = _best("jobs.rebuild", store, args.repeat if "rebuild" in wanted else 1,
                            lambda: stages.rebuild(store, out, args.split_size, args.master, data_bytes))
            if "rebuild" in wanted:
                results.append(rebuilt)
        if "verify" in wanted:
            results.append(_best("jobs.verify", store, args.repeat,
                                 lambda: stages.verify(store, out, args.root, args.split_size, args.master, records,
                                                       data_bytes)))
        if "convert" in wanted and args.dledger:
            results.append(_best("jobs.convert", store, args.repeat,
                                 lambda: stages.convert(store, args.root / "converted", args.split_size, args.master,
                                                        data_bytes)))
        elif "convert" in wanted and args.stages != ",".join(STAGES):
            print("bench: note: stage convert runs on a DLedger store only (--dledger); skipped", file=sys.stderr)
        if "recover" in wanted and crashed is not None:
            results.append(_best("jobs.recover", crashed.path, args.repeat,
                                 lambda: stages.recover(crashed.path, args.root / "recovered", args.split_size,
                                                        args.master, records, data_bytes, args.recover_args)))
        elif "recover" in wanted and args.stages != ",".join(STAGES):
            print("bench: note: stage recover runs on the crashed store made with --broker-build; skipped",
                  file=sys.stderr)
        if "lmq-decode" in wanted:
            lmq_twin = ensure_store(args.root, dataclasses.replace(spec, lmq_share=args.lmq_compare_share,
                                                                   lmq_queues=args.lmq_compare_queues), args.regenerate)
            decode_runs = lmq_decode.side_by_side(spark, store, lmq_twin, args.root, args.pairs, args.split_size,
                                                  records, args.lmq_compare_queues)
            _show(lmq_decode.table(decode_runs))
        if "scale" in wanted and args.scale_lmq:
            lmq_scale_runs = lmq_scale.side_by_side(*lmq_scale.store(args.scale_lmq, spec, args.root, args.regenerate),
                                                    args.root, args.scale_rounds, args.split_size)
            _show(lmq_scale.table(lmq_scale_runs))
        if "scale" in wanted and args.scale_stores != "none":
            scale_job_runs = scale_jobs.side_by_side(scale_jobs.stores(args.scale_stores, spec, args.root,
                                                                       args.scale_convert, args.regenerate),
                                                     args.root, args.scale_rounds,
                                                     args.split_size)
            _show(scale_jobs.table(scale_job_runs))
        if "scaleout" in wanted:
            scaleout_runs = scaleout.side_by_side(store, args.root, args.scaleout_rounds, args.split_size, records)
            _show(scaleout.table(scaleout_runs))
        if "nightly" in wanted:
            nightly_runs = nightly.side_by_side(spec, args.root, args.nightly_rounds, args.split_size,
                                                args.nightly_segment_mib, args.regenerate)
            _show(nightly.table(nightly_runs))
        if scale_stores is not None:
            scale_runs = scale.side_by_side(scale_stores, args.root / "rebuilt-scale", args.scale_pairs,
                                            args.split_size, args.master, args.scale_settle)
    finally:
        if not args.keep_output:
            shutil.rmtree(out, ignore_errors=True)
    settings_line = (f"Spark {startup.detail['master']}, split size {args.split_size >> 20} MiB; "
                     f"peak worker RSS = highest VmHWM of one Python worker during the stage")
    moved = [b for r in results if (b := iomodel.stage_bytes(r, data_bytes)) is not None]
    io_text = iomodel.io_text(moved, args.model_store_gb, round(startup.seconds, 1))
    _show(report.table(results, info, machine, settings_line), io_text)  # now: the comparisons take long
    side = _compare("rebuild side by side", failures, "rebuild" in compares,
                    lambda: broker.side_by_side(args.broker_build, store, args.root, args.pairs, args.master,
                                                args.split_size), broker.table)
    recovery_runs = []
    if crashed is not None and "recovery" in compares:
        runs = _compare("recovery side by side", failures, True,
                        lambda: recovery.side_by_side(args.oracle_kit, args.broker_build, crashed, args.root,
                                                      args.pairs, args.master, args.split_size, args.recover_args,
                                                      args.recover_mode, args.cold),
                        recovery.table)
        if runs is not None:
            recovery_runs.append(runs)
        if args.recovery_scale_messages:
            def larger() -> recovery.RecoveryRuns:
                large = ensure_store(args.root, dataclasses.replace(spec, messages=args.recovery_scale_messages),
                                     args.regenerate)
                large_info = read_store_info(large)
                large_crashed = recovery.crashed_store(args.oracle_kit, args.broker_build, large, args.root,
                                                       large_info["records"], large_info["data_bytes"],
                                                       args.crash_lag_bytes)
                return recovery.side_by_side(args.oracle_kit, args.broker_build, large_crashed, args.root,
                                             args.pairs, args.master, args.split_size, args.recover_args,
                                             args.recover_mode, args.cold)
            runs = _compare("recovery side by side on the larger store", failures, True, larger, recovery.table)
            if runs is not None:
                recovery_runs.append(runs)
    lmq_store = store_dir(args.root, dataclasses.replace(spec, lmq_share=args.lmq_compare_share,
                                                         lmq_queues=args.lmq_compare_queues))
    lmq_title = (f"LMQ rebuild side by side with RocketMQ 4.9.8: {args.messages:,} messages, "
                 f"{args.lmq_compare_share:g} of them naming 1-3 of {args.lmq_compare_queues:,} %LMQ% queues;")
    lmq_side = _compare("LMQ rebuild side by side", failures, "lmq" in compares,
                        lambda: broker.side_by_side(
                            args.broker_build,
                            ensure_store(args.root, dataclasses.replace(spec, lmq_share=args.lmq_compare_share,
                                                                        lmq_queues=args.lmq_compare_queues),
                                         args.regenerate),
                            args.root, args.pairs, args.master, args.split_size, "LMQ rebuild side by side"),
                        lambda x: broker.table(x, lmq_title))
    dledger_side = None
    if args.dledger_broker_build:
        plain = ensure_store(args.root, dataclasses.replace(spec, dledger=False), args.regenerate)
        dledger_side = dledger_broker.side_by_side(args.dledger_broker_build, store, plain, args.root, args.pairs,
                                                   args.master, args.split_size)
    convert_runs = None
    if args.dledger and {"convert", "rebuild"} <= set(wanted) and args.convert_pairs > 0:
        convert_runs = convert_pairs.side_by_side(store, args.root, args.convert_pairs, args.master, args.split_size)
    print("\n[bench] all figures of this run:")
    print()
    print(report.table(results, info, machine, settings_line))
    texts = [(startup_runs, startup_bench.table), (scale_runs, scale.table), (scaleout_runs, scaleout.table),
             (scale_job_runs, scale_jobs.table), (lmq_scale_runs, lmq_scale.table), (nightly_runs, nightly.table),
             (side, broker.table), (dledger_side, dledger_broker.table),
             *[(runs, recovery.table) for runs in recovery_runs],
             (recovery_runs if len(recovery_runs) == 2 else None, lambda r: recovery.scale_lines(*r)),
             (lmq_side, lambda x: broker.table(x, lmq_title)), (decode_runs, lmq_decode.table),
             (io_text or None, str), (convert_runs, convert_pairs.table)]
    for value, text in texts:
        if value is not None:
            print()
            print(text(value))
    json_out = args.json_out or args.root / "bench-result.json"
    config = {"master": args.master, "split_size": args.split_size, "stages": wanted, "store_dir": str(store),
              "repeat": args.repeat,
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    json_out.parent.mkdir(parents=True, exist_ok=True)
    figures = report.json_report(results, info, machine, config)
    for key, runs in (("side_by_side", side), ("dledger_side_by_side", dledger_side),
                      ("startup_side_by_side", startup_runs), ("rate_against_store_size", scale_runs),
                      ("scale_out", scaleout_runs), ("scale", scale_job_runs), ("nightly", nightly_runs),
                      ("scale_lmq", lmq_scale_runs)):
        if runs is not None:
            figures[key] = runs.to_dict()
    if recovery_runs:
        figures["recovery_side_by_side"] = [r.to_dict() for r in recovery_runs]
    if lmq_side is not None:
        figures["lmq_side_by_side"] = {"store_dir": str(lmq_store), **lmq_side.to_dict()}
    if decode_runs is not None:
        figures["lmq_decode_against_plain"] = decode_runs.to_dict()
    if moved:
        figures["bytes_per_stage"] = [{**dataclasses.asdict(b)} for b in moved]
    if failures:
        figures["failed_comparisons"] = failures
    if convert_runs is not None:
        figures["convert_against_rebuild"] = convert_pairs.summary(convert_runs)
    json_out.write_text(json.dumps(figures, indent=2))
    print(f"\n[bench] figures written to {json_out}")
    for failure in failures:
        print(f"bench: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stages.stop_spark()
