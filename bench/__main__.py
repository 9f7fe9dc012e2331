"""`python -m bench [flags]` (or `make bench`): write a synthetic store, then measure reput on it.

Measured, each as messages/s, MB/s of commit log and peak memory of the Python workers: the raw read of
the same files, decode only, `jobs.rebuild` (consume queues + index) and `jobs.verify` (when the module
exists). Writing the store is not timed (a store written from the same flags is reused); Spark session
start-up is reported on its own row. Prints one table and writes every figure as JSON. Side-by-side
comparisons, each interleaved in one run: start-up against Spark's defaults (bench.startup), the rate
against store size (bench.scale, --scale-messages), RocketMQ's own rebuild (bench.broker; of a DLedger
store, bench.dledger_broker) and, on a DLedger store, jobs.convert against jobs.rebuild as whole processes
(bench.convert_pairs, --convert-pairs).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

from jobs.pipeline.runtime.cli import _size
from storage_format.scan_plan import DEFAULT_SPLIT_SIZE
from storage_format.settings import load_settings

from . import broker, convert_pairs, dledger_broker, report, stages
from . import scale
from . import startup as startup_bench
from .cpu import CpuWatch
from storegen.synth import StoreSpec, parse_key_mix, read_store_info, store_matches, write_bench_store

DEFAULT_ROOT = Path("/tmp/reput-bench")
STAGES = ("startup", "read", "decode", "rebuild", "verify", "convert")  # convert: DLedger stores only


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
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--dledger", action="store_true",
                   help="a DLedger-mode store (dledger-n0/data/ entry files of --segment-size, one-member group)")
    g.add_argument("--regenerate", action="store_true", help="rewrite the store even if one matches the flags")
    r = p.add_argument_group("run")
    r.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    r.add_argument("--split-size", type=_size, default=DEFAULT_SPLIT_SIZE, help="bytes per decode task (default 128m)")
    r.add_argument("--stages", default=",".join(STAGES), help=f"which stages to run (default {','.join(STAGES)})")
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
    r.add_argument("--pairs", type=int, default=3,
                   help="interleaved broker/reput pairs (rounds of three with --dledger-broker-build; default 3)")
    r.add_argument("--scale-messages", type=int,
                   help="also rebuild a store of this many messages (same flags otherwise; written if missing) "
                        "interleaved with the bench store's rebuild, and print both rates and their ratio")
    r.add_argument("--scale-pairs", type=int, default=3, help="interleaved rounds for --scale-messages (default 3)")
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
    unknown = set(args.stages.split(",")) - set(STAGES)
    if unknown:
        p.error(f"unknown stages {sorted(unknown)}; choose from {STAGES}")
    return args


def spec_from(args: argparse.Namespace) -> StoreSpec:
    """The store spec the flags describe."""
    return StoreSpec(messages=args.messages, body_min=args.body_min, body_max=args.body_max, topics=args.topics,
                     queues=args.queues, key_mix=parse_key_mix(args.key_mix), uniq_share=args.uniq_share,
                     tags_share=args.tags_share, segment_size=args.segment_size,
                     consume_queue_file_size=args.cq_file_size, max_hash_slot_num=args.index_slots,
                     max_index_num=args.index_entries, seed=args.seed, lmq_share=args.lmq_share,
                     lmq_queues=args.lmq_queues, dledger=args.dledger)


def store_dir(root: Path, spec: StoreSpec) -> Path:
    """One directory per distinct store, so stores of several sizes can sit side by side."""
    lmq = f"-lmq{spec.lmq_share:g}x{spec.lmq_queues}" if spec.lmq_share > 0 else ""
    kind = "-dledger" if spec.dledger else ""
    return root / f"store-{spec.messages}msg-{spec.segment_size >> 20}mib-seed{spec.seed}{lmq}{kind}"


def _best(stage: str, store: Path, repeat: int, run) -> stages.StageResult:
    """Run a stage `repeat` times, each after warming the page cache with the store (untimed); keep the
    fastest run (every run's time goes to the JSON; worker memory is the highest over the runs)."""
    runs = []
    for i in range(repeat):
        warm = stages.warm_page_cache(store)
        print(f"[bench] {stage} (run {i + 1}/{repeat}; page cache warmed in {warm:.1f}s, not timed) ...", flush=True)
        with CpuWatch() as cpu:
            result = run()
        result.cpu = cpu.share
        runs.append(result)
        if runs[-1].seconds is None:
            return runs[-1]
    best = min(runs, key=lambda r: r.seconds)
    best.detail["all_runs_s"] = [round(r.seconds, 3) for r in runs]
    peaks = [r.memory for r in runs if r.memory and r.memory.per_process_kib]
    if best.memory is not None and peaks:
        best.memory = max(peaks, key=lambda m: m.max_mib)
    return best


def ensure_store(root: Path, spec: StoreSpec, regenerate: bool) -> Path:
    """The store the spec describes, written first (untimed) unless a matching one is there."""
    store = store_dir(root, spec)
    if regenerate or not store_matches(store, spec):
        shutil.rmtree(store, ignore_errors=True)
        print(f"[bench] writing the synthetic store {store} (not timed) ...", flush=True)
        write_bench_store(store, spec)
    return store


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
    out = args.root / "rebuilt"
    results = []
    startup_runs = None
    if "startup" in wanted:  # new processes, before the bench's own session exists
        startup_runs = startup_bench.side_by_side(args.master, args.startup_pairs)
    spark, startup = stages.spark_startup(args.master)
    results.append(startup)
    records, data_bytes = info["records"], info["data_bytes"]
    scale_runs = None
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
        if scale_stores is not None:
            scale_runs = scale.side_by_side(scale_stores, args.root / "rebuilt-scale", args.scale_pairs,
                                            args.split_size, args.master, args.scale_settle)
    finally:
        if not args.keep_output:
            shutil.rmtree(out, ignore_errors=True)
    side = None
    if args.broker_build:
        side = broker.side_by_side(args.broker_build, store, args.root, args.pairs, args.master, args.split_size)
    dledger_side = None
    if args.dledger_broker_build:
        plain = ensure_store(args.root, dataclasses.replace(spec, dledger=False), args.regenerate)
        dledger_side = dledger_broker.side_by_side(args.dledger_broker_build, store, plain, args.root, args.pairs,
                                                   args.master, args.split_size)
    convert_runs = None
    if args.dledger and {"convert", "rebuild"} <= set(wanted) and args.convert_pairs > 0:
        convert_runs = convert_pairs.side_by_side(store, args.root, args.convert_pairs, args.master, args.split_size)
    settings_line = (f"Spark {startup.detail['master']}, split size {args.split_size >> 20} MiB; "
                     f"peak worker RSS = highest VmHWM of one Python worker during the stage")
    print()
    print(report.table(results, info, machine, settings_line))
    if startup_runs is not None:
        print()
        print(startup_bench.table(startup_runs))
    if scale_runs is not None:
        print()
        print(scale.table(scale_runs))
    if side is not None:
        print()
        print(broker.table(side))
    if dledger_side is not None:
        print()
        print(dledger_broker.table(dledger_side))
    if convert_runs is not None:
        print()
        print(convert_pairs.table(convert_runs))
    json_out = args.json_out or args.root / "bench-result.json"
    config = {"master": args.master, "split_size": args.split_size, "stages": wanted, "store_dir": str(store),
              "repeat": args.repeat,
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    json_out.parent.mkdir(parents=True, exist_ok=True)
    figures = report.json_report(results, info, machine, config)
    if side is not None:
        figures["side_by_side"] = side.to_dict()
    if dledger_side is not None:
        figures["dledger_side_by_side"] = dledger_side.to_dict()
    if startup_runs is not None:
        figures["startup_side_by_side"] = startup_runs.to_dict()
    if scale_runs is not None:
        figures["rate_against_store_size"] = scale_runs.to_dict()
    if convert_runs is not None:
        figures["convert_against_rebuild"] = convert_pairs.summary(convert_runs)
    json_out.write_text(json.dumps(figures, indent=2))
    print(f"\n[bench] figures written to {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
