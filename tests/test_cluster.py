"""A real Spark standalone cluster: a master and one worker on 127.0.0.1 started from the installed pyspark,
and every Spark job submitted to it as docs/cluster.md's recipe says: `spark-submit --properties-file
conf/spark-defaults.conf` (the packed environment dist/reput-env.tar.gz shipped with --archives as the
executors' Python, the code dist/reput.zip as --py-files). Each job's result is checked against the golden
stores. Slow (one cluster for the module, a JVM per submit): runs only when selected, `pytest -m cluster`."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.loopback import cluster_env, loopback_cluster, start_master, start_worker, submit_argv, warm_executor_kernels
from jobs.pipeline.runtime.package import build_env, build_zip, env_is_stale
from tests import golden_walk
from tests.conftest import GOLDEN, REPO, manifest

pytestmark = pytest.mark.cluster

SUBMIT_TIMEOUT_S = 600
ZIP, ENV = REPO / "dist" / "reput.zip", REPO / "dist" / "reput-env.tar.gz"


@pytest.fixture(autouse=True)
def only_when_selected(request):
    """Keep the default run fast: this module runs when the marker expression asks for `cluster`."""
    expr = request.config.getoption("markexpr") or ""
    if "cluster" not in expr or "not cluster" in expr:
        pytest.skip("starts a Spark standalone cluster; run with `pytest -m cluster tests/test_cluster.py`")


@pytest.fixture(scope="module")
def shipped() -> tuple[Path, Path]:
    """dist/reput.zip, and dist/reput-env.tar.gz with ./env built again when pyproject.toml is newer
    or ./env is missing (what `make package` does; the env takes a minute or two to build); the kernels compiled
    once where the executors look for them (a second application on a worker finds them so; the first compiling
    on a cold worker is tests/test_kernel_cache.py's)."""
    import fcntl

    (REPO / "build").mkdir(exist_ok=True)
    with open(REPO / "build" / "shipped.lock", "w") as lock:  # make test-cluster's two workers: one builds the env
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_zip(ZIP)
        if env_is_stale(ENV):
            build_env(ENV, REPO / "build" / "reput-env")
        warm_executor_kernels(ZIP)
    return ZIP, ENV


@pytest.fixture(scope="module")
def cluster(shipped, tmp_path_factory):
    """Master + worker (2 cores, 2 GiB) on 127.0.0.1 for the whole module; yields (url, worker dir)."""
    with loopback_cluster(tmp_path_factory.mktemp("cluster"), cores=2) as (url, worker_dir):
        yield url, worker_dir


def submit(cluster, job: str, *args: str, ok: tuple[int, ...] = (0,), env: dict | None = None
           ) -> subprocess.CompletedProcess:
    """docs/cluster.md's recipe: spark-submit from the repository with conf/spark-defaults.conf (which ships
    dist/reput-env.tar.gz as ./env and dist/reput.zip); the driver runs this venv's Python (client mode)."""
    url, worker_dir = cluster[:2]
    before = set(worker_dir.glob("app-*"))
    done = subprocess.run(submit_argv(url, job, *args, conf={"spark.executor.memory": "1g"}),
                          cwd=REPO, env=env or cluster_env(), capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
    assert done.returncode in ok, f"{job}: exit {done.returncode}\n{done.stderr[-4000:]}\n{done.stdout[-2000:]}"
    apps = set(worker_dir.glob("app-*")) - before
    executors = [e for app in apps for e in app.iterdir() if e.is_dir()]
    assert executors, f"{job}: the worker never started an executor"
    for e in executors:  # the shipped code and environment, unpacked where the executor runs
        assert (e / "reput.zip").is_file() and (e / "env" / "bin" / "python").exists(), sorted(os.listdir(e))
    assert any("Running task" in (e / "stderr").read_text(errors="replace") for e in executors), job
    return done


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def golden_files(case: str, prefix: str) -> dict[str, str]:
    """sha256 by relative path of a golden case's files under `prefix`, from its manifest."""
    return {k: v["sha256"] for k, v in manifest(case)["files"].items() if k.startswith(prefix)}


def tree(root: Path, prefix: str) -> dict[str, str]:
    """sha256 by relative path of the files under root/prefix."""
    return {p.relative_to(root).as_posix(): sha(p) for p in sorted((root / prefix).rglob("*")) if p.is_file()}


def index_shas(case: str) -> list[str]:
    """The golden index files' sha256 in name order (names come from the broker's clock)."""
    files = manifest(case)["files"]
    return [files[k]["sha256"] for k in sorted(k for k in files if k.startswith("index/"))]


CASE = "clean-small-11"
STORE = GOLDEN / CASE
CONF_ARGS = ("--store", str(STORE), "--broker-config", str(STORE / "broker.conf"))


def test_rebuild(cluster, tmp_path):
    """Consume queues and index files built by the executors equal the broker's bytes."""
    out = tmp_path / "out"
    submit(cluster, "rebuild", *CONF_ARGS, "--out", str(out), "--json")
    assert tree(out, "consumequeue") == golden_files(CASE, "consumequeue/")
    assert [sha(p) for p in sorted((out / "index").iterdir())] == index_shas(CASE)


def test_inspect(cluster):
    done = submit(cluster, "inspect", *CONF_ARGS, "--json")
    report = json.loads(done.stdout)
    scan = manifest(CASE)["commitlog_scan"]
    assert report["message_records"] == scan["message_records"] and report["scan_end"] == scan["scan_end"]
    assert report["records_per_topic_queue"] == manifest(CASE)["records_per_topic_queue"]
    assert report["queue_tables"].startswith("driver (no --work-dir on a cluster")  # said in the report, not stderr


def test_query_scan(cluster):
    """--scan searches the commit log in Spark tasks: the records that carry the key, by the golden walk."""
    recs = golden_walk.records(CASE)
    key = "dup"
    want = sorted(r.physical_offset for r in recs if r.topic == b"TopicTest" and (r.sys_flag & 0xC) != 0xC
                  and key in r.properties.get("KEYS", "").split(" "))
    done = submit(cluster, "query", *CONF_ARGS, "--topic", "TopicTest", "--key", key, "--scan", "--json")
    assert [m["physical_offset"] for m in json.loads(done.stdout)["messages"]] == want and want


def test_catalog(cluster, tmp_path):
    """The Delta table the executors wrote holds every record once, per topic and queue as the manifest."""
    from collections import Counter

    import pyarrow as pa
    from deltalake import DeltaTable

    table = tmp_path / "catalog"
    submit(cluster, "catalog", *CONF_ARGS, "--table", str(table), "--json")
    rows = pa.table(DeltaTable(str(table)).to_pyarrow_table()).select(["topic", "queue_id"]).to_pylist()
    got = Counter((r["topic"], str(r["queue_id"])) for r in rows)
    assert got == {(t, q): n for t, qs in manifest(CASE)["records_per_topic_queue"].items() for q, n in qs.items()}


# ---------------------------------------------------------------------------------------------------------------
# A cluster that shares nothing with the driver (issue 32 item 5): the store and OUT are s3:// URIs on a local S3
# server, and the worker runs in a mount namespace of its own where the test's whole temp tree (pytest's base temp,
# which holds the driver's TMPDIR) is an empty tmpfs: whatever a task expects to find on the driver's disk, it
# does not. The executors get their own TMPDIR.


@pytest.fixture(scope="module")
def isolated(shipped, tmp_path_factory):
    """(url, worker dir, S3 server, the driver's environment) of a master and a worker in its own mount namespace."""
    from tests import s3_server

    base = tmp_path_factory.getbasetemp()
    root = tmp_path_factory.mktemp("isolated")
    driver_tmp = root / "driver-tmp"
    driver_tmp.mkdir()
    worker_dir = REPO / "build" / f"isolated-worker-{os.getpid()}"  # outside the hidden tree: the test reads it
    (worker_dir / "tmp").mkdir(parents=True, exist_ok=True)
    server = s3_server.start()
    daemons = []
    try:
        server.make_bucket(BUCKET)
        for case in (CASE, "unclean-torn-11", "dledger-clean-small-11"):
            server.upload(GOLDEN / case, f"{BUCKET}/stores/{case}")
        env = dict(cluster_env(), **server.env)
        master, url = start_master(root, env)
        daemons.append(master)
        hide = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'mount -t tmpfs reput-hidden "{base}" && exec "$0" "$@"')
        daemons.append(start_worker(url, root, dict(env, TMPDIR=str(worker_dir / "tmp")), worker_dir, 2, wrap=hide))
        yield url, worker_dir, server, dict(env, TMPDIR=str(driver_tmp))
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
        server.stop()
        shutil.rmtree(worker_dir, ignore_errors=True)


BUCKET = "isolated"


def s3(key: str) -> str:
    return f"s3://{BUCKET}/{key}"


def s3_store(case: str) -> tuple[str, ...]:
    """--store s3://... and its broker.conf, read by the driver from the golden store (a local config file)."""
    return "--store", s3(f"stores/{case}"), "--broker-config", str(GOLDEN / case / "broker.conf")


class TestSharingNothing:
    """The isolated cluster's tests, one class: make test-cluster's `--dist loadscope` runs them in one xdist worker
    while the shared cluster's run in the other (each cluster waits on JVMs more than it computes)."""

    def test_worker_cannot_see_the_drivers_disk(self, isolated, tmp_path):
        """The isolation itself: a file the test writes under its temp dir is not there for the worker's processes."""
        marker = tmp_path / "visible-to-the-driver-only"
        marker.write_text("x")
        worker = next(p for p in Path("/proc").iterdir() if p.name.isdigit()
                      and b"deploy.worker.Worker" in _cmdline(p) and str(isolated[1]).encode() in _cmdline(p))
        seen = subprocess.run(["nsenter", "-t", worker.name, "-m", "test", "-e", str(marker)])
        assert marker.exists() and seen.returncode == 1

    def test_rebuild_verify_recover_on_s3_sharing_nothing(self, isolated):
        """rebuild s3 -> s3 byte-exact; verify of the broker's own store through an s3:// work dir; recover --out s3://
        equal to RocketMQ's own recovery."""
        server, env = isolated[2], isolated[3]
        submit(isolated, "rebuild", *s3_store(CASE), "--out", s3("rebuild-out"), "--json", env=env)
        assert server.tree(f"{BUCKET}/rebuild-out/consumequeue") == {
            k[len("consumequeue/"):]: v for k, v in golden_files(CASE, "consumequeue/").items()}
        index = server.tree(f"{BUCKET}/rebuild-out/index")
        assert [index[k] for k in sorted(index)] == index_shas(CASE)
        done = submit(isolated, "verify", *s3_store(CASE), "--work-dir", s3("verify-work"), "--json", env=env)
        assert json.loads(done.stdout)["status"] == "consistent"
        submit(isolated, "recover", *s3_store("unclean-torn-11"), "--out", s3("recover-out"), "--json", env=env)
        want = "unclean-torn-11-recovered"
        for prefix in ("commitlog/", "consumequeue/"):
            assert server.tree(f"{BUCKET}/recover-out/{prefix.rstrip('/')}") == {
                k[len(prefix):]: v for k, v in golden_files(want, prefix).items()}, prefix
        index = server.tree(f"{BUCKET}/recover-out/index")
        assert [index[k] for k in sorted(index)] == index_shas(want)

    def test_convert_on_s3_sharing_nothing_equals_the_local_convert(self, isolated, tmp_path):
        """convert of a DLedger store s3 -> s3 on the isolated cluster writes what the local engine writes here."""
        from jobs.convert import main as convert_main

        server, env = isolated[2], isolated[3]
        case = "dledger-clean-small-11"
        submit(isolated, "convert", *s3_store(case), "--out", s3("convert-out"), "--json", env=env)
        local = tmp_path / "local"
        assert convert_main(["--store", str(GOLDEN / case), "--broker-config", str(GOLDEN / case / "broker.conf"), "--out",
                             str(local), "--engine", "local", "--master", "local[2]", "--quiet", "--json"]) == 0
        for part in ("commitlog", "consumequeue", "index"):
            assert server.tree(f"{BUCKET}/convert-out/{part}") == {
                k[len(part) + 1:]: v for k, v in tree(local, part).items()}, part
        assert sha(local / "checkpoint") == hashlib.sha256(server.read(f"{BUCKET}/convert-out/checkpoint")).hexdigest()


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""
