"""The timer store after a recovery, proved by RocketMQ 5.3.3's own TimerMessageStore (issue 25).

Drives the timer oracle kit (`/work/shared/oracle/timer`: TimerProbe, run.sh; Java 17 and a built copy of the
kit, see docs/timer.md) through the scenarios of its NOTES: write timer messages A (due later) and B (due
first), crash, lose the commit log from the first B record (zeroed: a power loss; or one flipped body byte:
a bad CRC in the middle), recover, reopen with the real timer store, let new records grow the log back over
B's offsets, and count what reaches TopicTest/0: on time, early, per message, and the NumberFormatException
retries of a stuck dequeue. Recover modes: `broker` (its own abnormal recovery), `reput` (recover --out) and
`repair` (recover --out --repair-timer). Also checks that recover does not warn on the crash image before
the loss (a kill -9 image). Every mode gets its own crash image, written just before, so that each reopens
at the same point of the slots' timeline (with one shared image, later modes reopen after B's slot has
passed: the timer then drops B's units before the log regrows, and the harm does not show).

    python scripts/timer_scenarios.py --kit KIT_COPY --build V5_BUILD --work /tmp/timer-scen [--only NAME]

Prints one line per run and a JSON summary (--json FILE). Runs take ~1-2 min each (waiting for slots).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = "mappedFileSizeCommitLog=4194304\nmappedFileSizeConsumeQueue=6000000\nmappedFileSizeTimerLog=1048576\n"
# B's slot (60 s after its put) comes after the reopen in every mode, also after recover --out's ~25 s, so the
# regrow always precedes it; A's slot comes after B's, inside the watch.
# TimerProbe's timer-log files are 1 MiB: 20,164 units, then the filler; B then opens the second file
UNITS_PER_1MIB_FILE = 20164
SCENARIOS = {  # name: (A count, A delay s, B count, B delay s, loss, regrow kind)
    "tail-normal": (100, 80, 30, 60, "zero", "normal"),
    "tail-timer": (100, 80, 30, 60, "zero", "timer"),
    "badcrc-normal": (100, 80, 30, 60, "crc", "normal"),
    "boundary-normal": (UNITS_PER_1MIB_FILE, 110, 30, 60, "zero", "normal"),
}
MODES = ("broker", "reput", "repair")
WARNING = "reput recover: warning: timer:"


def run(cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> str:
    """Run a command, its output to a log file; returns the output."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    log.write_text(p.stdout)
    return p.stdout


def probe(kit: Path, build: Path, logfile: Path, args: list[str], out: Path) -> str:
    """One TimerProbe run through the kit's run.sh (niced: the machine is shared)."""
    env = dict(os.environ, BUILD=str(build))
    return run(["nice", "-n", "10", str(kit / "run.sh"), str(logfile), *map(str, args)], out, env)


def lose(store: Path, offset: int, how: str) -> None:
    """The commit-log loss: zeros from the first B record to the end of the log (lost pages), or one flipped byte
    in its body (a bad CRC in the middle: the records after it stay)."""
    segs = sorted((store / "commitlog").iterdir(), key=lambda p: int(p.name))
    for seg in segs:
        start, size = int(seg.name), seg.stat().st_size
        if start + size <= offset:
            continue
        with open(seg, "r+b") as f:
            at = max(0, offset - start)
            if how == "zero":
                f.seek(at)
                f.write(bytes(size - at))
                continue
            f.seek(at + 150)  # inside the body (bytes ~92..292 of the 435-byte record): its CRC fails
            b = f.read(1)
            f.seek(at + 150)
            f.write(bytes([b[0] ^ 0xFF]))
            return


def recover(store: Path, conf: Path, extra: list[str], log: Path) -> str:
    """reput recover (the repo's code) with --out OUT or --dry-run in `extra`; returns its output."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return run(["nice", "-n", "10", sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config",
                str(conf), "--rocketmq-version", "5", *map(str, extra)], log, env, REPO)


def count(reopen_out: str, reopen_log: Path, kind_a: int) -> dict:
    """Deliveries by message, early ones, and the stuck dequeue's retries. The probe names a delivery by the
    first 4 characters of its body ("A0" .. "A9999" truncated), so A messages are counted per name against how
    many A messages carry that name: a name seen more often is a duplicate, less often a loss."""
    tags = collections.Counter(re.findall(r"^DELIVERED .* tag=(\S+) ", reopen_out, re.M))
    expect = collections.Counter(f"A{i}"[:4] for i in range(kind_a))
    seen = {t: n for t, n in tags.items() if t.startswith("A")}
    retries = reopen_log.read_text(errors="replace").count("Unknown error") if reopen_log.exists() else 0
    return {"delivered": sum(tags.values()), "early": reopen_out.count("early=true"),
            "a_delivered_once": sum(min(seen.get(t, 0), n) for t, n in expect.items()), "a_expected": kind_a,
            "a_duplicates": sum(max(0, n - expect.get(t, 0)) for t, n in seen.items()),
            "a_missing": sum(max(0, n - seen.get(t, 0)) for t, n in expect.items()),
            "b_delivered": sum(n for t, n in tags.items() if t.startswith("B")),
            "c_delivered": sum(n for t, n in tags.items() if t.startswith("C")),
            "stuck_retries": retries,
            "end": next(iter(re.findall(r"^END .*$", reopen_out, re.M)), ""),
            "recovered": next(iter(re.findall(r"^TIMER_RECOVERED .*$", reopen_out, re.M)), "")}


def write_image(name: str, kit: Path, build: Path, d: Path) -> tuple[int, int]:
    """A crash image of the scenario in d/image (the probe's write mode); returns B's offset and record size."""
    na, da, nb, db, _, _ = SCENARIOS[name]
    shutil.rmtree(d / "image", ignore_errors=True)
    out = probe(kit, build, d / "write.log", ["write", d / "image", na, da, nb, db], d / "write.out")
    b = re.search(r"^PUT kind=B off=(\d+) size=(\d+)", out, re.M)
    if not b:
        raise SystemExit(f"{name}: the probe wrote no B record (see {d / 'write.out'})")
    return int(b.group(1)), int(b.group(2))


def scenario(name: str, kit: Path, build: Path, work: Path, watch: int, modes: tuple[str, ...]) -> list[dict]:
    """Per mode, a fresh crash image (so every mode reopens at the same point of the slots' timeline), the
    loss, the recovery and the reopen; before the first loss, recover --dry-run on the kill -9 image."""
    na, _, _, _, how, kind = SCENARIOS[name]
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    conf = d / "broker.conf"
    conf.write_text(CONF)
    results = []
    for n, mode in enumerate(modes):
        off, size = write_image(name, kit, build, d)
        if n == 0:  # the image before the loss is a kill -9 image: recover must not warn about the timer
            k9 = recover(d / "image", conf, ["--dry-run"], d / "k9.out")
            results.append({"scenario": name, "mode": "kill9-dry-run", "timer_warnings": k9.count(WARNING)})
            print(json.dumps(results[-1]), flush=True)
        lose(d / "image", off, how)
        store = d / f"{mode}-store"
        shutil.rmtree(store, ignore_errors=True)
        shutil.move(d / "image", store)
        r = {"scenario": name, "mode": mode, "b_offset": off, "record_size": size}
        t0 = time.time()
        if mode != "broker":
            text = recover(store, conf, ["--out", d / f"{mode}-out"] + (["--repair-timer"] if mode == "repair" else []),
                           d / f"{mode}-recover.out")
            r["timer_warnings"] = text.count(WARNING)
            r["recover_exit_ok"] = (d / f"{mode}-out").exists()
            store = d / f"{mode}-out"
        r["recover_s"] = round(time.time() - t0, 1)
        t0 = time.time()
        reopen = probe(kit, build, d / f"{mode}-reopen.log", ["reopen", store, kind, 30, watch, size],
                       d / f"{mode}-reopen.out")
        r.update(count(reopen, d / f"{mode}-reopen.log", na), reopen_s=round(time.time() - t0, 1))
        print(json.dumps(r), flush=True)
        results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kit", required=True, type=Path, help="a built copy of the timer kit (classes/ beside run.sh)")
    p.add_argument("--build", required=True, type=Path, help="the v5 oracle build (classpath.txt)")
    p.add_argument("--work", required=True, type=Path, help="scratch directory (one subdirectory per scenario)")
    p.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run only these scenarios")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--watch", type=int, default=130, help="seconds each reopen watches deliveries (default 130)")
    p.add_argument("--json", type=Path, help="write every result here")
    args = p.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    results = []
    for name in args.only or list(SCENARIOS):
        results += scenario(name, args.kit.resolve(), args.build.resolve(), args.work.resolve(), args.watch, modes)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
