"""RocketMQ's own store code for the tests: the oracle kit (../shared/oracle) built by its setup.sh into ROOT
($REPUT_ORACLE, else ~/.cache/reput-oracle, setup.sh's own default), `make oracle` (`python -m tests.oracle`) that
builds it when it is missing or older than the kit, and the broker runs the tests make with it: RocketMQ 4.9.8's
rebuild (RebuildTimer), its clean service (run_clean.sh), 5.3.3 reopening a store (V5Golden), 5.3.3 in DLedger
mode writing, crashing and recovering a store (V5DledgerGolden), and 5.3.3 with its consume queues in RocksDB
(RocksGolden: the kit's rocksdb/ build, compiled against the rocksdbjni jar of the venv's pyspark, so built once
the venv is installed).

Only the standard library here: `make oracle` runs it before the venv exists."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
KIT = Path(os.environ.get("REPUT_ORACLE_KIT", REPO.parent / "shared" / "oracle"))
STAMP = ".reput-kit-digest"  # in ROOT: the digest of the kit it was built from
# what the tests run: 4.9.8 + RebuildTimer, 5.3.3 + V5Golden, and the 4.9.8 sources run_clean.sh compiles against
NEEDED = ("build/classpath.txt", "build/classes/RebuildTimer.class", "v5build/classpath.txt",
          "v5build/classes/V5Golden.class", "src/store/src/main/java", "v5dlbuild/classpath.txt",
          "v5dlbuild/classes/V5DledgerGolden.class")
HOW = ("`make oracle` builds it (../shared/oracle/setup.sh ROOT: Debian's JDK and jars by apt-get, as root, "
       "then about 20 s of javac)")
ROCKS_BUILD = "rocksbuild"  # in ROOT: the kit's rocksdb/build.sh output (5.3.3 + RocksGolden + pyspark's rocksdbjni)
ROCKS_NEEDED = (f"{ROCKS_BUILD}/classpath.txt", f"{ROCKS_BUILD}/classes/RocksGolden.class")
ROCKS_HOW = ("`make oracle` builds it once the venv is installed (../shared/oracle/rocksdb/build.sh ROOT/v5src "
             "ROOT/rocksbuild against the venv's pyspark/jars/rocksdbjni-*.jar, about 10 s of javac)")
VENV = REPO / ".venv"
JAVA_OPENS = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
              "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED"]
DELAY_LEVELS = 18  # messageDelayLevel's levels in every golden broker.conf


def oracle_root() -> Path:
    """Where the oracle is built: $REPUT_ORACLE, else ~/.cache/reput-oracle (setup.sh's default)."""
    return Path(os.environ.get("REPUT_ORACLE") or Path.home() / ".cache" / "reput-oracle")


def kit_digest(kit: Path) -> str:
    """sha256 over every file of the kit (its path and bytes): a build from another kit is stale."""
    h = hashlib.sha256()
    for p in sorted(q for q in kit.rglob("*") if q.is_file()):
        h.update(p.relative_to(kit).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _lock(root: Path, mode: int) -> TextIO:
    """The lock beside ROOT that a build holds exclusively and a test session takes shared while it checks."""
    root.parent.mkdir(parents=True, exist_ok=True)
    f = open(root.parent / f"{root.name}.lock", "a")
    fcntl.flock(f, mode)
    return f


def _missing(root: Path) -> list[str]:
    """The NEEDED parts of a build that are not there."""
    return [n for n in NEEDED if not (root / n).exists()]


def problem(root: Path, kit: Path = KIT) -> str | None:
    """Why the broker tests cannot run on the build in `root` (one line naming the way out), or None: it is
    missing, or stale (its stamp names another kit; without a stamp, a kit file is newer than it)."""
    if not kit.is_dir():
        return f"no oracle kit at {kit} (set REPUT_ORACLE_KIT): the broker tests run RocketMQ's own store code"
    if shutil.which("java") is None:
        return f"no java on PATH: the broker tests run RocketMQ's own store code; {HOW}"
    try:
        lock = _lock(root, fcntl.LOCK_SH)  # a build under way ends first
    except OSError:
        lock = None  # a ROOT a test run cannot write beside: nothing builds there either
    try:
        missing = _missing(root)
        if missing:
            return f"no oracle build at {root} ({missing[0]} is missing; set REPUT_ORACLE for another ROOT): {HOW}"
        stamp = root / STAMP
        stale = (stamp.read_text().strip() != kit_digest(kit)) if stamp.is_file() else not _newer_than_kit(root, kit)
        if stale:
            return f"the oracle build at {root} was made from another version of {kit}: {HOW}"
        return None
    finally:
        if lock is not None:
            lock.close()


def _newer_than_kit(root: Path, kit: Path) -> bool:
    """Every file setup.sh wrote is newer than every file of the kit (a build without a stamp, made by hand)."""
    built = min((root / n).stat().st_mtime for n in NEEDED if "build/" in n)  # setup.sh's outputs, not the sources
    return all(p.stat().st_mtime < built for p in kit.rglob("*") if p.is_file())


def ensure(root: Path, kit: Path = KIT, venv: Path | None = None) -> int:
    """`make oracle`: build the oracle into `root` with the kit's setup.sh unless a build of this kit is there
    (its stamp; a build without one is taken when it is complete and newer than every kit file), under a lock;
    with `venv`, then the RocksDB kit against that venv's pyspark (ensure_rocks)."""
    root = root.resolve()
    if not (kit / "setup.sh").is_file():
        print(f"oracle: no {kit / 'setup.sh'} (the oracle kit; set REPUT_ORACLE_KIT)", file=sys.stderr)
        return 2
    with _lock(root, fcntl.LOCK_EX):
        done = _ensure_base(root, kit)
        return ensure_rocks(root, kit, venv) if done == 0 and venv is not None else done


def _ensure_base(root: Path, kit: Path) -> int:
    """ensure()'s setup.sh part, under its lock."""
    digest, stamp = kit_digest(kit), root / STAMP
    complete = not _missing(root)
    if complete and stamp.is_file() and stamp.read_text().strip() == digest:
        print(f"oracle: {root} is built from this kit")
        return 0
    if complete and not stamp.is_file() and _newer_than_kit(root, kit):
        stamp.write_text(digest + "\n")
        print(f"oracle: {root} is complete and newer than the kit: taken as built from it")
        return 0
    stamp.unlink(missing_ok=True)
    done = subprocess.run(["bash", str(kit / "setup.sh"), str(root)])
    if done.returncode != 0:
        print(f"oracle: {kit / 'setup.sh'} {root} failed (exit {done.returncode}; it installs Debian's JDK and "
              f"jars with apt-get when they are missing: run `make oracle` once as root)", file=sys.stderr)
        return done.returncode
    shutil.rmtree(root / "clean-classes", ignore_errors=True)  # run_clean.sh compiles it again, against this build
    stamp.write_text(digest + "\n")
    return 0




def venv_jar(venv: Path) -> Path | None:
    """The rocksdbjni jar of an installed venv's pyspark (its `.installed` stamp, which `make venv` touches last: a
    venv still being installed has none), or None."""
    if not (venv / ".installed").is_file():
        return None
    jars = sorted(venv.glob("lib/python*/site-packages/pyspark/jars/rocksdbjni-*.jar"))
    return jars[-1] if jars else None


def _rocks_stamp(kit: Path, jar: Path) -> str:
    """What a RocksDB kit build is stamped with: the kit's digest and the jar it was compiled against."""
    return f"{kit_digest(kit)} {jar.resolve()}"


def ensure_rocks(root: Path, kit: Path, venv: Path) -> int:
    """ensure()'s RocksDB part (under its lock, after the base build): the kit's rocksdb/build.sh into
    ROOT/rocksbuild unless a build of this kit against this venv's jar is there (its stamp). A venv not installed
    yet is one note, exit 0: `make test` runs `make oracle` again after `make venv`."""
    jar = venv_jar(venv)
    if jar is None:
        print(f"oracle: note: {venv} is not installed yet (or has no pyspark/jars/rocksdbjni-*.jar): the RocksDB kit "
              f"is built by `make oracle` once `make venv` has run", file=sys.stderr)
        return 0
    stamp, want = root / ROCKS_BUILD / STAMP, _rocks_stamp(kit, jar)
    if not _rocks_missing(root) and stamp.is_file() and stamp.read_text().strip() == want:
        print(f"oracle: {root / ROCKS_BUILD} is built from this kit and {jar.name}")
        return 0
    stamp.unlink(missing_ok=True)
    done = subprocess.run(["bash", str(kit / "rocksdb" / "build.sh"), str(root / "v5src"), str(root / ROCKS_BUILD),
                           str(jar)])
    if done.returncode != 0 or _rocks_missing(root):
        print(f"oracle: {kit / 'rocksdb' / 'build.sh'} {root / 'v5src'} {root / ROCKS_BUILD} {jar} failed "
              f"(exit {done.returncode})", file=sys.stderr)
        return done.returncode or 2
    stamp.write_text(want + "\n")
    return 0


def _rocks_missing(root: Path) -> list[str]:
    """The ROCKS_NEEDED parts of the RocksDB kit's build that are not there, and a jar its classpath names that
    is gone (a venv made again with another pyspark)."""
    missing = [n for n in ROCKS_NEEDED if not (root / n).exists()]
    if not missing:
        missing = [e for e in (root / ROCKS_NEEDED[0]).read_text().strip().split(":")
                   if e.endswith(".jar") and "rocksdbjni" in e and not Path(e).is_file()]
    return missing


def rocks_problem(root: Path, kit: Path = KIT) -> str | None:
    """problem(), and then why the RocksDB tests cannot run on ROOT/rocksbuild (missing, stale, its jar gone), one
    line naming `make oracle`, or None."""
    why = problem(root, kit)
    if why:
        return why
    lock = _lock(root, fcntl.LOCK_SH)  # problem() could take it: so can this
    try:
        missing = _rocks_missing(root)
        if missing:
            return f"no RocksDB kit build at {root / ROCKS_BUILD} ({missing[0]} is missing): {ROCKS_HOW}"
        stamp = root / ROCKS_BUILD / STAMP
        if not stamp.is_file() or stamp.read_text().split(" ")[0] != kit_digest(kit):
            return f"the RocksDB kit build at {root / ROCKS_BUILD} was made from another version of {kit}: {ROCKS_HOW}"
        return None
    finally:
        lock.close()


@dataclass(frozen=True)
class Oracle:
    """A complete oracle build and the kit it came from."""
    root: Path
    kit: Path = KIT

    def classpath(self, build: str) -> str:
        """A build's classpath.txt, relative entries made absolute (setup.sh with a relative ROOT writes them)."""
        entries = (self.root / build / "classpath.txt").read_text().strip().split(":")
        return ":".join(e if os.path.isabs(e) else str(self.root.parent / e) for e in entries)


def _java(oracle: Oracle, build: str, main: str, args: list[str], log: Path, timeout: float) -> str:
    """Run a harness class of a build (the kit's JVM settings); its stdout, or AssertionError with stderr's tail."""
    argv = ["java", "-Xms256m", "-Xmx512m", *JAVA_OPENS, "-Duser.timezone=UTC", "-Dfile.encoding=UTF-8",
            "-Dsun.jnu.encoding=UTF-8",
            "-Drocketmq.client.logUseSlf4j=true", "-cp", oracle.classpath(build), main, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, ROCKETMQ_LOG=str(log), LC_ALL="C.UTF-8"))
    if done.returncode != 0:
        raise AssertionError(f"{main} {' '.join(args)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def last_json(stdout: str) -> dict:
    """A harness's figures: the last line of its output that is a JSON object."""
    return json.loads(next(x for x in reversed(stdout.splitlines()) if x.startswith("{")))


def rebuild_timer(oracle: Oracle, store: Path, conf: Path, log: Path) -> dict:
    """RebuildTimer (RocketMQ 4.9.8's DefaultMessageStore: load = recovery, start = dispatch) on a store; its
    figures (max_phy_offset, index_files: the index files in the store's list, commitlog_appended_bytes ...)."""
    return last_json(_java(oracle, "build", "RebuildTimer", [str(store), str(conf)], log, 300))


def deliver_nothing(store: Path) -> None:
    """config/delayOffset.json with every delay level past its end: the schedule service clamps each to its
    queue's end when it starts (after the dispatch), so the broker delivers no delay message (appends nothing)
    whatever the clock says."""
    (store / "config").mkdir(parents=True, exist_ok=True)
    table = {str(level): 10**9 for level in range(1, DELAY_LEVELS + 1)}
    (store / "config" / "delayOffset.json").write_text(json.dumps({"offsetTable": table}))


def lost_index_files(figures: dict, store: Path) -> int:
    """Index files a broker run lost to a same-millisecond name: it names them by the wall-clock millisecond, and
    a second file of one name maps the first's, so its list holds more files than its directory."""
    return figures["index_files"] - sum(1 for _ in (store / "index").iterdir())


def broker_rebuild(oracle: Oracle, commitlog: Path, work: Path, conf: Path, attempts: int = 4) -> dict:
    """The broker's rebuild of a copy of `commitlog` in `work` (nothing else there but deliver_nothing's config):
    a run that lost an index file (lost_index_files) is the broker's own flake and runs again, up to `attempts`
    runs; every other difference is for the caller's comparison. The figures gain `runs`."""
    for run in range(1, attempts + 1):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(commitlog, work / "commitlog")
        deliver_nothing(work)
        figures = rebuild_timer(oracle, work, conf, work.parent / f"{work.name}.log")
        assert figures["commitlog_appended_bytes"] == 0, figures
        if lost_index_files(figures, work) == 0:
            return {**figures, "runs": run}
    raise AssertionError(f"the broker lost an index file to a same-millisecond name in {attempts} runs in a row "
                         f"({work}): its own flake, every time")


def run_clean(oracle: Oracle, pre: Path, work: Path, conf: Path, expire: int) -> list[dict]:
    """4.9.8's own clean services on a copy of store `pre` in `work` (the kit's run_clean.sh: the oldest `expire`
    segments back-dated, about 65 s); CleanHarness's phase lines."""
    done = subprocess.run(["bash", str(oracle.kit / "clean" / "run_clean.sh"), str(pre), str(work), str(conf),
                           str(expire)], capture_output=True, text=True, timeout=400,
                          env=dict(os.environ, ROOT=str(oracle.root)))
    if done.returncode != 0:
        raise AssertionError(f"run_clean.sh: exit {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]


def v5_reopen(oracle: Oracle, store: Path, conf: Path) -> list[dict]:
    """RocketMQ 5.3.3 (V5Golden reopen: load, start, wait until dispatch settles, clean shutdown) on `store`; its
    events (store_open: maxPhy_after_load, confirm_after_load ...; settled: maxPhy, appended_bytes ...)."""
    events = store.parent / f"{store.name}.events.jsonl"
    events.unlink(missing_ok=True)
    _java(oracle, "v5build", "V5Golden", ["reopen", str(store), str(conf), "11", "0", str(events)],
          store.parent / f"{store.name}.reopen.log", 120)
    return [json.loads(x) for x in events.read_text().splitlines()]


def free_port() -> int:
    """A TCP port nothing listens on right now (the DLedger RPC server of a one-member group binds it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def v5_dledger_conf(kit: Path, dest: Path) -> Path:
    """The kit's v5dledger/broker.conf with dLegerPeers on a free port (the kit's 40951 may be taken by another run)."""
    text = (kit / "v5dledger" / "broker.conf").read_text()
    dest.write_text(text.replace("127.0.0.1:40951", f"127.0.0.1:{free_port()}"))
    return dest


def v5_dledger(oracle: Oracle, mode: str, store: Path, conf: Path, seed: int = 11, n: int = 3000) -> list[dict]:
    """RocketMQ 5.3.3 in DLedger mode on the real DLedger 0.3.1.2 (the kit's V5DledgerGolden: write-clean,
    write-unclean, which ends with its own Runtime.halt(137), or reopen: abort present -> 5.3.3's abnormal DLedger
    recovery, start, election, dispatch, clean shutdown); its events."""
    events = store.parent / f"{store.name}.events.jsonl"
    events.unlink(missing_ok=True)
    home = store.parent / f"{store.name}.home"
    home.mkdir(exist_ok=True)
    argv = ["java", "-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:CICompilerCount=2", *JAVA_OPENS,
            "-Duser.timezone=UTC", f"-Duser.home={home}", "-Dsun.jnu.encoding=UTF-8", "-Dfile.encoding=UTF-8",
            "-Drocketmq.client.logUseSlf4j=true", "-cp", oracle.classpath("v5dlbuild"), "V5DledgerGolden", mode,
            str(store), str(conf), str(seed), str(n), str(events)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, ROCKETMQ_LOG=str(store.parent / f"{store.name}.{mode}.log"),
                                   LC_ALL="C.UTF-8"))
    if done.returncode != (137 if mode == "write-unclean" else 0):
        raise AssertionError(f"V5DledgerGolden {mode} {store}: exit {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(x) for x in events.read_text().splitlines()]


def rocks_golden(oracle: Oracle, mode: str, store: Path, conf: Path, seed: int = 11, n: int = 4000) -> list[dict]:
    """RocketMQ 5.3.3 with its consume queues in RocksDB (the kit's RocksGolden, its run.sh's JVM settings):
    `write-clean` or `write-unclean` (ends with its own Runtime.halt(137)) a fresh store of `n` puts, or `reopen`
    one (abnormal recovery when `abort` is there; load, start, dispatch settled, clean shutdown); its events. One
    such JVM at a time on the machine (a lock beside ROOT: xdist workers take turns); user.home and java.io.tmpdir
    (RocksDB's LOG, the extracted native library) in a private temporary directory, removed after."""
    if mode not in ("write-clean", "write-unclean", "reopen"):
        raise ValueError(f"RocksGolden mode {mode!r}")
    events = store.parent / f"{store.name}.events.jsonl"
    events.unlink(missing_ok=True)
    home = Path(tempfile.mkdtemp(prefix="reput-rocksgolden-home-"))
    argv = ["java", "-Xms256m", "-Xmx1g", "-XX:+UseSerialGC", "-XX:CICompilerCount=2", *JAVA_OPENS,
            f"-Duser.home={home}", f"-Djava.io.tmpdir={home}", "-Duser.timezone=UTC", "-Dsun.jnu.encoding=UTF-8",
            "-Dfile.encoding=UTF-8", "-Drocketmq.client.logUseSlf4j=true", "-cp", oracle.classpath(ROCKS_BUILD),
            "RocksGolden", mode, str(store), str(conf), str(seed), str(n), str(events)]
    try:
        with _lock(oracle.root.parent / f"{oracle.root.name}.rocks-run", fcntl.LOCK_EX):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                                  env=dict(os.environ, ROCKETMQ_LOG=str(store.parent / f"{store.name}.{mode}.log"),
                                           LC_ALL="C.UTF-8"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != (137 if mode == "write-unclean" else 0):
        raise AssertionError(f"RocksGolden {mode} {store}: exit {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(x) for x in events.read_text().splitlines()]


def rocks_event(events: list[dict], name: str) -> dict:
    """The last of RocksGolden's events called `name` (store_open, settled, shutdown, halt ...)."""
    return next(e for e in reversed(events) if e.get("event") == name)


def consume_queues(store: Path) -> dict[str, str]:
    """Every consume-queue file of a store: its path under consumequeue/ -> sha256."""
    root = store / "consumequeue"
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def index_files(store: Path) -> list[str]:
    """Every index file's sha256 in name order (the broker names them by its wall clock: compare by content)."""
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((store / "index").iterdir())]


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.oracle [--venv VENV]`: ensure() for oracle_root() (what `make oracle` runs: with the venv,
    whose pyspark the RocksDB kit compiles against); an OSError is one line."""
    args = sys.argv[1:] if argv is None else argv
    venv = Path(args[1]) if len(args) == 2 and args[0] == "--venv" else None
    if args and venv is None:
        print("usage: python -m tests.oracle [--venv VENV]", file=sys.stderr)
        return 2
    try:
        return ensure(oracle_root(), venv=venv.resolve() if venv else None)
    except OSError as e:
        print(f"oracle: {oracle_root()}: {e.strerror or e} ({e.filename or 'the oracle build'})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
