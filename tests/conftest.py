"""Shared fixtures: one SparkSession for the whole suite, the golden stores, the broker's own store code, jobs
that must not start Spark (no_spark), stores a running broker holds (locked); the run leaves nothing behind."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("REPUT_GOLDEN", REPO.parent / "shared" / "golden"))  # the one definition


GOLDEN_MISSING = (f"golden stores not found at {GOLDEN} (set REPUT_GOLDEN): they are the ground truth of the "
                  "byte-exact tests, so their absence fails the suite rather than skipping it")


def golden_cases(prefixes: tuple[str, ...] = ("",), exclude: tuple[str, ...] = ()) -> list[str]:
    """Names of golden case directories that start with one of `prefixes`; fails collection when the
    golden stores are absent (an empty selection fails too: pyproject's empty_parameter_set_mark)."""
    if not GOLDEN.is_dir():
        pytest.fail(GOLDEN_MISSING, pytrace=False)
    names = sorted(p.name for p in GOLDEN.iterdir() if (p / "manifest.json").is_file())
    return [n for n in names if n.startswith(prefixes) and not any(x in n for x in exclude)]


# Golden cases today's code does not yet handle, with the issue that fixes each (xfail strict: a fix
# that makes one pass turns the suite red until its entry is removed here).
KNOWN_FAILING: dict[str, str] = {}


BROKER_MARKER = ("broker: runs RocketMQ's own store code (the oracle build, tests/oracle.py), given to every test "
                 "that takes the `oracle` fixture; `make test` builds it (`make oracle`) and runs them; a missing "
                 "build fails them, `-m 'not broker'` leaves them out")


def pytest_configure(config: pytest.Config) -> None:
    """NUMBA_BOUNDSCHECK=1 needs a cache directory of its own: numba's cache index does not record the
    setting, so the usual cache would hand back kernels compiled without bounds checks (`make test-boundscheck`).
    Registers the `broker` marker (pytest_collection_modifyitems gives it)."""
    config.addinivalue_line("markers", BROKER_MARKER)
    if os.environ.get("NUMBA_BOUNDSCHECK") == "1" and not os.environ.get("NUMBA_CACHE_DIR"):
        pytest.exit("NUMBA_BOUNDSCHECK=1 without NUMBA_CACHE_DIR: numba would load the kernels cached without "
                    "bounds checks; set NUMBA_CACHE_DIR to an empty directory (make test-boundscheck)", returncode=2)


@pytest.hookimpl(tryfirst=True)  # before -m selects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that takes the `oracle` fixture is marked `broker`."""
    for item in items:
        if "oracle" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)


def case_params(cases: list[str], passing: frozenset[str] = frozenset()) -> list:
    """`cases` as pytest params, the known-failing ones marked xfail(strict=True) with their issue;
    `passing` names known-failing cases this particular test already passes."""
    return [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILING[c]))
            if c in KNOWN_FAILING and c not in passing else c for c in cases]


def manifest(case: str) -> dict:
    return json.loads((GOLDEN / case / "manifest.json").read_text())


def restored_copy(case: str, dest: Path) -> Path:
    """A writable copy of a golden store with its DLedger index files (stored cut after their last used unit)
    back at the real length the manifest lists: sparse, instant (golden README, "Stored cut")."""
    import shutil

    shutil.copytree(GOLDEN / case, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for rel, info in manifest(case)["files"].items():
        if "/index/" in rel and rel.startswith("dledger-") and (dest / rel).stat().st_size < info["size"]:
            os.truncate(dest / rel, info["size"])
    return dest


def expected_scan(case: str) -> dict:
    """The manifest's scan of a case's whole log, in jobs.inspect's terms: `commitlog_scan` for a plain store;
    for a DLedger store its `dledger_scan` (entries, blanks listed, the write end; 'size0' = the zero header
    that ends the data) after the plain part of an upgraded store (whose own timestamps the manifest omits)."""
    m = manifest(case)
    if "dledger_scan" not in m:
        return m["commitlog_scan"]
    d, plain = m["dledger_scan"], m.get("commitlog_scan")
    out = {"message_records": d["message_records"] + (plain["message_records"] if plain else 0),
           "blank_end_of_file_records": len(d["blank_end_of_file_records"])
           + (plain["blank_end_of_file_records"] if plain else 0),
           "max_physical_offset": d["write_end"], "last_store_timestamp": d["last_store_timestamp"],
           "scan_end": ["badmagic", d["scan_end"][1], 0] if d["scan_end"][0] == "size0" else d["scan_end"]}
    if not plain:
        out["first_store_timestamp"] = d["first_store_timestamp"]
    return out


def private_temp_env(tmp: Path) -> dict[str, str]:
    """Environment that puts a job's temp files in `tmp` (short: Unix socket paths under it must stay within
    107 bytes): Spark's blockmgr-*/spark-* (SPARK_LOCAL_DIRS), the JVM's sockets and native libraries
    (java.io.tmpdir; the JVM says "Picked up JAVA_TOOL_OPTIONS" on stderr), reput's own (TMPDIR). For a job a
    test kills with SIGKILL, whose JVM never gets to delete them, and for counting what a run leaves."""
    return {"TMPDIR": str(tmp), "SPARK_LOCAL_DIRS": str(tmp), "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp}"}


def _short_temp_dir(prefix: str):
    """A directory made directly in the temp directory (a short path), removed when the fixture ends."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def short_tmp():
    """A temp directory with a short path, removed afterwards: Unix socket paths under it stay within 107 bytes,
    which pytest's tmp_path (/tmp/pytest-of-root/pytest-N/popen-gwK/<test name>0 under xdist) does not promise."""
    yield from _short_temp_dir("rt-")


@pytest.fixture
def killed_temp():
    """A short-named temp directory for the jobs a test SIGKILLs (private_temp_env), removed afterwards."""
    yield from _short_temp_dir("reput-killed-")


@pytest.fixture(scope="session")
def golden() -> Path:
    """The golden stores' root; a test that takes it fails when they are absent."""
    if not GOLDEN.is_dir():
        pytest.fail(GOLDEN_MISSING, pytrace=False)
    return GOLDEN


@pytest.fixture(scope="session")
def oracle():
    """RocketMQ's own store code (tests/oracle.py: the kit's build in $REPUT_ORACLE or ~/.cache/reput-oracle); a
    test that takes it fails, naming `make oracle`, when the build is missing or was made from another kit."""
    from tests.oracle import Oracle, oracle_root, problem

    root = oracle_root()
    why = problem(root)
    if why:
        pytest.fail(why, pytrace=False)
    return Oracle(root.resolve())


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test suite (local[2], like the CI machine)."""
    from jobs.pipeline.runtime.session import get_spark

    session = get_spark("tests", master="local[2]")
    yield session
    session.stop()


class SparkStarted(BaseException):
    """Raised by no_spark's stand-in for job_spark: run_main does not catch it, so the test fails."""


@pytest.fixture
def no_spark(monkeypatch):
    """Every job's job_spark replaced: a mistake must be answered before a session is asked for."""
    import importlib

    from jobs.__main__ import JOBS

    def refuse(*_a, **_k):
        raise SparkStarted("a SparkSession was started")
    for job in JOBS:
        for name in ("job_spark", "job_context"):
            monkeypatch.setattr(importlib.import_module(f"jobs.{job}"), name, refuse, raising=False)
    monkeypatch.setattr("jobs.pipeline.runtime.session.job_spark", refuse)
    monkeypatch.setattr("jobs.pipeline.runtime.session.job_context", refuse)


@pytest.fixture
def locked(tmp_path):
    """Returns a function: copy a golden case, hold its lock from another process as a running broker does."""
    import shutil

    from tests.helpers import hold_lock

    holders = []

    def lock(case: str) -> Path:
        store = tmp_path / case
        shutil.copytree(GOLDEN / case, store)
        holders.append(hold_lock(store / "lock"))
        return store
    yield lock
    for proc in holders:
        proc.kill()
        proc.wait()


def pid_gone(pid: int, within_s: float) -> bool:
    """Process `pid` has ended within `within_s` seconds (reaped here when it is our own child)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """What the temp directory holds before the run (tests/leftovers.py): the end compares against it."""
    from tests.leftovers import temp_entries

    session.config.stash[_BEFORE] = temp_entries()
    session.config.stash[_WORKERS_LEFT] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """An xdist worker has finished: what it found below itself is checked with the run's end (its output is lost)."""
    left = getattr(node, "workeroutput", {}).get(_LEFT_KEY)
    if left:
        node.config.stash[_WORKERS_LEFT].append(f"[{node.gateway.id}] {left}")


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """Nothing left behind: a run that leaves `reput-*` or Spark socket entries in the temp directory, or a process
    below this one, fails, naming each; the suite's own Spark JVM and its warm daemon's socket directory end with
    this process (tests/test_leftovers.py checks they are gone after a run). Under xdist (`make test`'s `-n 2`) each
    worker checks the processes below itself, and the temp directory, which the workers share, is checked once by
    the controller after they have all ended (this wrapper runs after xdist's own hook stops them)."""
    result = yield
    if exitstatus == pytest.ExitCode.INTERRUPTED or _BEFORE not in session.config.stash:
        return result
    worker = hasattr(session.config, "workerinput")
    left = _left_behind(session, check_temp=not worker)
    if worker:
        if left:
            session.config.workeroutput[_LEFT_KEY] = left.describe()
        return result
    lines = session.config.stash[_WORKERS_LEFT] + ([left.describe()] if left else [])
    if lines:
        import sys

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the run left these behind (tests/leftovers.py):\n" + "\n".join(lines)
        if reporter is not None:
            reporter.section("left behind", sep="=", red=True)
            reporter.line(text)
        else:
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result


def _left_behind(session: pytest.Session, check_temp: bool):
    """What this process leaves: processes below it but its own Spark JVM, and (check_temp) new temp entries
    other than its warm daemon's socket directory, which goes with that JVM."""
    import sys

    from tests.leftovers import left_behind

    spared: set[int] = set()
    context = sys.modules.get("pyspark") and sys.modules["pyspark"].SparkContext
    gateway = getattr(context, "_gateway", None) if context else None
    if getattr(gateway, "proc", None) is not None:
        spared.add(gateway.proc.pid)
    before = set(session.config.stash[_BEFORE])
    from jobs.pipeline.runtime.worker_daemon import WARM_ENV
    if os.environ.get(WARM_ENV):  # the suite's own warm daemon's socket: it goes with the suite's JVM, at exit
        before.add(os.path.basename(os.path.dirname(os.environ[WARM_ENV])))
    wait_s = float(os.environ.get(LEFTOVER_WAIT_ENV, "10"))  # tests/test_leftovers.py's inner run: 1 s
    return left_behind(before, os.getpid(), spared, wait_s=wait_s, check_temp=check_temp)


_BEFORE = pytest.StashKey[set]()
_WORKERS_LEFT = pytest.StashKey[list]()
_LEFT_KEY = "reput_left_behind"
LEFTOVER_WAIT_ENV = "REPUT_TEST_LEFTOVER_WAIT_S"  # how long the end waits for processes and temp entries to go
