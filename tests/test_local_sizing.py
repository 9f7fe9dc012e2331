"""The local engine's worker count in a container (issue 52 item 4): the cgroup's CPU quota and memory limit read
from a fake cgroup tree (v1 and v2, a container's view and the host's, limits on an ancestor, missing and garbled
files), the count as the smallest of CPU affinity, quota and REPUT_LOCAL_WORKERS, lowered to what the memory limit
holds or refused in one line when not even one worker fits; and a job run inside a fake cgroup saying so."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.pipeline.runtime import cgroup
from jobs.pipeline.runtime.cgroup import CgroupLimits, Limit, read_limits
from jobs.pipeline.runtime.engine import EngineChoice, all_cores
from jobs.pipeline.runtime.failure import JobError
from jobs.pipeline.runtime.local_sizing import (BY_AFFINITY, BY_MASTER, BY_MEMORY, BY_QUOTA, BY_SETTING, DRIVER_BYTES,
                                                MIB, WORKERS_ENV, largest_split, local_sizing, size_workers,
                                                worker_bytes)
from storage_format.settings import BrokerSettings
from tests.conftest import GOLDEN
from tests.helpers import run_job

GIB = 1 << 30
V1_UNLIMITED = "9223372036854771712"
DEFAULTS = BrokerSettings()
SPLIT = 128 * MIB
PER_WORKER = worker_bytes(SPLIT, DEFAULTS.max_message_size)


def fake_tree(root: Path, proc_cgroup: str, mountinfo: list[str], files: dict[str, str]) -> Path:
    """A root with /proc/self/cgroup, /proc/self/mountinfo and the given cgroup files (path: text) under it."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(proc_cgroup)
    (root / "proc/self/mountinfo").write_text("".join(line + "\n" for line in mountinfo))
    for path, text in files.items():
        f = root / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text + "\n")
    return root


def v2_tree(root: Path, files: dict[str, str], own: str = "/", mount_root: str = "/") -> Path:
    """cgroup v2: one cgroup2 mount at /sys/fs/cgroup (a pod's container sees its own cgroup as "/")."""
    mounts = ["22 28 0:25 / /proc rw,nosuid - proc proc rw",
              f"30 28 0:26 {mount_root} /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw"]
    (root / "sys/fs/cgroup" / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return fake_tree(root, f"0::{own}\n", mounts, files)


def v1_tree(root: Path, files: dict[str, str], own: str = "/", mount_root: str = "/") -> Path:
    """cgroup v1: cpu,cpuacct and memory hierarchies mounted apart, plus systemd's named one and v2's line."""
    mounts = [f"33 25 0:29 {mount_root} /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct",
              f"34 25 0:30 {mount_root} /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory",
              f"35 25 0:31 {mount_root} /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd"]
    for d in ("cpu,cpuacct", "memory"):
        (root / "sys/fs/cgroup" / d / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    lines = f"12:memory:{own}\n4:cpu,cpuacct:{own}\n1:name=systemd:{own}\n0::{own}\n"
    return fake_tree(root, lines, mounts, files)


# --- reading the cgroup ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cpu_max, cpus", [("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1),
                                           ("6400000 100000", 64), ("max 100000", None), ("garbage", None)])
def test_v2_cpu_quota_is_rounded_up_as_the_jvm_does(tmp_path, cpu_max, cpus):
    limits = read_limits(v2_tree(tmp_path, {"/sys/fs/cgroup/cpu.max": cpu_max}))
    assert (limits.cpus.value if limits.cpus else None) == cpus
    if cpus:
        assert limits.cpus.source() == f"/sys/fs/cgroup/cpu.max: {cpu_max}"


@pytest.mark.parametrize("memory_max, limit", [("1073741824", GIB), ("max", None), ("", None)])
def test_v2_memory_max(tmp_path, memory_max, limit):
    limits = read_limits(v2_tree(tmp_path, {"/sys/fs/cgroup/memory.max": memory_max}))
    assert (limits.memory.value if limits.memory else None) == limit
    assert limits.cpus is None  # no cpu.max: no quota


def test_v1_quota_period_and_limit_in_a_containers_view(tmp_path):
    """Docker on v1: /proc/self/cgroup names /docker/<id> and the mounts' root is that cgroup, so the limits are
    the mount point's own files (the JVM's rule)."""
    own = "/docker/0123abcd"
    root = v1_tree(tmp_path, {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "250000",
                              "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
                              "/sys/fs/cgroup/memory/memory.limit_in_bytes": str(3 * GIB)}, own, mount_root=own)
    limits = read_limits(root)
    assert limits.cpus == Limit(3, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "250000 (cpu.cfs_period_us 100000)")
    assert limits.memory == Limit(3 * GIB, "/sys/fs/cgroup/memory/memory.limit_in_bytes", str(3 * GIB))


def test_v1_no_quota_and_unlimited_memory_are_no_limit(tmp_path):
    root = v1_tree(tmp_path, {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1",
                              "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
                              "/sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED})
    assert read_limits(root) == CgroupLimits()


def test_v1_hierarchical_memory_limit_when_the_cgroup_sets_none(tmp_path):
    """A nested v1 cgroup without a limit of its own, under a parent this process cannot see: memory.stat's
    hierarchical_memory_limit (what the JVM reads then)."""
    root = v1_tree(tmp_path, {"/sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
                              "/sys/fs/cgroup/memory/memory.stat": f"cache 0\nhierarchical_memory_limit {2 * GIB}\n"})
    assert read_limits(root).memory.value == 2 * GIB


def test_the_host_view_walks_up_to_the_pods_limit(tmp_path):
    """v2 seen from the host (no cgroup namespace): the process's cgroup is a path below the mount; the pod's limits
    sit on an ancestor of the container's cgroup, and the smallest of the cgroup and its ancestors binds."""
    own = "/kubepods.slice/pod1.slice/ctr.scope"
    root = v2_tree(tmp_path, {f"/sys/fs/cgroup{own}/cpu.max": "max 100000",
                              f"/sys/fs/cgroup{own}/memory.max": "max",
                              "/sys/fs/cgroup/kubepods.slice/pod1.slice/cpu.max": "200000 100000",
                              "/sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max": str(GIB),
                              "/sys/fs/cgroup/kubepods.slice/memory.max": str(8 * GIB)}, own)
    limits = read_limits(root)
    assert limits.cpus.value == 2 and limits.cpus.path == "/sys/fs/cgroup/kubepods.slice/pod1.slice/cpu.max"
    assert limits.memory.value == GIB


def test_a_mount_of_part_of_the_hierarchy_holding_the_cgroup_below_it(tmp_path):
    """The mount's root is an ancestor of the process's cgroup: the cgroup's directory is the part of its path
    below that root, under the mount point."""
    own = "/kubepods/pod1/ctr"
    root = v2_tree(tmp_path, {"/sys/fs/cgroup/ctr/memory.max": str(GIB), "/sys/fs/cgroup/memory.max": "max"},
                   own="/ctr", mount_root="/kubepods/pod1")
    (root / "proc/self/cgroup").write_text(f"0::{own}\n")
    assert read_limits(root).memory.value == GIB


def test_a_cgroup_not_under_its_mount_reads_the_mount_point(tmp_path):
    """/proc/self/cgroup names a path the mount does not show (a container without a cgroup namespace): the mount
    point's files, as newer JVMs read them."""
    root = v2_tree(tmp_path, {"/sys/fs/cgroup/cpu.max": "100000 100000"})
    (root / "proc/self/cgroup").write_text("0::/system.slice/elsewhere.scope\n")
    assert read_limits(root).cpus.value == 1


def test_a_cgroup_outside_the_namespace_reads_the_mount_point_not_above_it(tmp_path):
    """A process in a cgroup outside its cgroup namespace sees a path climbing with "..": never read outside the
    mount (the tree has a limit there that must not count)."""
    root = v2_tree(tmp_path, {"/sys/fs/cgroup/memory.max": str(2 * GIB), "/sys/fs/other/memory.max": str(GIB)})
    (root / "proc/self/cgroup").write_text("0::/../other\n")
    assert read_limits(root).memory.value == 2 * GIB


def test_hybrid_v1_memory_with_the_cpu_quota_on_v2(tmp_path):
    """systemd's hybrid layout: memory on a v1 hierarchy, the cpu controller only on the unified (v2) mount."""
    mounts = ["34 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
              "36 25 0:32 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate"]
    root = fake_tree(tmp_path, "5:memory:/job\n0::/job\n", mounts,
                     {"/sys/fs/cgroup/memory/job/memory.limit_in_bytes": str(GIB),
                      "/sys/fs/cgroup/unified/job/cpu.max": "300000 100000"})
    limits = read_limits(root)
    assert (limits.cpus.value, limits.memory.value) == (3, GIB)


def test_an_escaped_mount_point(tmp_path):
    mounts = [r"30 28 0:26 / /sys/fs/my\040cgroup rw - cgroup2 cgroup2 rw"]
    root = fake_tree(tmp_path, "0::/\n", mounts, {"/sys/fs/my cgroup/memory.max": str(GIB)})
    assert read_limits(root).memory.value == GIB


@pytest.mark.parametrize("damage", ["no proc", "no mountinfo", "no cgroup mount", "file is a directory",
                                    "garbled proc", "binary"])
def test_a_missing_or_unreadable_cgroup_is_no_limit(tmp_path, damage):
    """Never a failure: whatever cannot be read limits nothing."""
    root = v2_tree(tmp_path, {"/sys/fs/cgroup/cpu.max": "100000 100000"})
    if damage == "no proc":
        (root / "proc/self/cgroup").unlink()
    elif damage == "no mountinfo":
        (root / "proc/self/mountinfo").unlink()
    elif damage == "no cgroup mount":
        (root / "proc/self/mountinfo").write_text("22 28 0:25 / /proc rw - proc proc rw\nnonsense\n")
    elif damage == "file is a directory":
        (root / "sys/fs/cgroup/cpu.max").unlink()
        (root / "sys/fs/cgroup/cpu.max").mkdir()
    elif damage == "garbled proc":
        (root / "proc/self/cgroup").write_text("::::\nnot a line\n")
    else:
        (root / "proc/self/cgroup").write_bytes(b"\xff\xfe\x00")
    assert read_limits(root) == CgroupLimits()
    assert read_limits(tmp_path / "nothing here") == CgroupLimits()


# --- the count ------------------------------------------------------------------------------------------------


def limits(cpus: int | None = None, memory: int | None = None) -> CgroupLimits:
    return CgroupLimits(Limit(cpus, "/sys/fs/cgroup/cpu.max", f"{cpus}00000 100000") if cpus else None,
                        Limit(memory, "/sys/fs/cgroup/memory.max", str(memory)) if memory else None)


def sized(cpus: int, lim: CgroupLimits, setting: int | None = None, master: str = "local[*]",
          split_size: int = SPLIT, total: int | None = None):
    return size_workers(cpus, master, all_cores(master), lim, setting, split_size, DEFAULTS, total)


def test_a_two_cpu_pod_on_a_64_core_node_runs_two_workers():
    """The issue's case: affinity 64, cpu.max 2 CPUs: 2 workers, as Spark's local[*] would run; the engine note
    says why."""
    s = sized(64, limits(cpus=2))
    assert (s.workers, s.limited_by) == (2, BY_QUOTA)
    choice = EngineChoice("local", "auto", "auto: master local[*], not under spark-submit", s.workers, s)
    assert choice.line() == ("engine local, 2 worker processes (auto: master local[*], not under spark-submit; "
                             "2 of 64 CPUs: the cgroup CPU quota, /sys/fs/cgroup/cpu.max: 200000 100000)")
    report = choice.to_dict()
    assert report["workers"] == 2 and report["sizing"]["cpu_quota"] == 2
    assert report["sizing"]["cpu_quota_from"] == "/sys/fs/cgroup/cpu.max: 200000 100000"
    assert json.loads(json.dumps(report)) == report


@pytest.mark.parametrize("cpus, quota, setting, master, workers, by", [
    (8, None, None, "local[*]", 8, BY_AFFINITY),
    (8, 16, None, "local[*]", 8, BY_AFFINITY),  # a quota above the CPUs: the CPUs
    (8, 3, 2, "local[*]", 2, BY_SETTING),
    (8, 3, 5, "local[*]", 3, BY_QUOTA),  # the setting caps, never raises
    (4, 2, None, "local[4]", 4, BY_MASTER),  # local[N] is taken as given (Spark's local[4] ignores the quota too)
    (4, 2, 3, "local[4]", 3, BY_SETTING),
])
def test_the_smallest_of_affinity_quota_and_setting(cpus, quota, setting, master, workers, by):
    s = sized(cpus, limits(cpus=quota), setting, master)
    assert (s.workers, s.limited_by, s.wanted) == (workers, by, workers)
    assert (s.why() == "") == (by in (BY_AFFINITY, BY_MASTER))


def test_the_memory_limit_lowers_the_count_and_says_so():
    """Room for the driver and 3 workers of the estimate, not 8: 3, with a warning naming the limit and what to
    change; a limit that holds all of them changes nothing."""
    room = DRIVER_BYTES + 3 * PER_WORKER + PER_WORKER // 2
    s = sized(8, limits(memory=room))
    assert (s.workers, s.wanted, s.limited_by) == (3, 8, BY_MEMORY)
    assert s.warning().startswith("the local engine runs 3 worker processes instead of 8: the cgroup memory limit of ")
    assert "--split-size" in s.warning() and "resources.limits.memory" in s.warning()
    assert s.why().startswith("3 of 8 CPUs: the cgroup memory limit, /sys/fs/cgroup/memory.max: ")
    roomy = sized(8, limits(memory=DRIVER_BYTES + 8 * PER_WORKER))
    assert (roomy.workers, roomy.limited_by, roomy.warning()) == (8, BY_AFFINITY, None)
    quota_first = sized(8, limits(cpus=2, memory=room))  # the quota lowers it first; the memory holds 2
    assert (quota_first.workers, quota_first.limited_by) == (2, BY_QUOTA)


def test_a_limit_that_cannot_hold_one_worker_is_refused_naming_the_split_size_that_fits():
    limit = DRIVER_BYTES + PER_WORKER // 2
    with pytest.raises(JobError) as refused:
        sized(2, limits(memory=limit))
    line = str(refused.value)
    assert "\n" not in line and line.startswith("the local engine needs about ")
    assert "more than the cgroup memory limit of " in line and "/sys/fs/cgroup/memory.max" in line
    fits = int(line.split("lower --split-size to ")[1].split("m or less")[0])
    assert sized(2, limits(memory=limit), split_size=fits * MIB).workers == 1  # the advice holds
    with pytest.raises(JobError):
        sized(2, limits(memory=limit), split_size=(fits + 1) * MIB)
    need = -(-(DRIVER_BYTES + PER_WORKER) // MIB)
    assert line.endswith(f"to at least {need} MiB")


def test_no_split_size_fits_below_the_driver():
    with pytest.raises(JobError) as refused:
        sized(2, limits(memory=DRIVER_BYTES))
    assert "--split-size" not in str(refused.value) and "raise the container's memory limit" in str(refused.value)


def test_the_split_a_worker_holds():
    """A split is at most --split-size and a segment (0: a whole segment), and a short log's splits are cut finer
    for the workers as the scan cuts them: a nightly --since of 400 MB on 2 workers holds 50 MB splits."""
    seg = DEFAULTS.mapped_file_size_commitlog
    assert largest_split(SPLIT, seg, None, 2) == SPLIT
    assert largest_split(0, seg, None, 2) == seg
    assert largest_split(SPLIT, 64 * MIB, None, 2) == 64 * MIB
    assert largest_split(SPLIT, seg, 400 * MIB, 2) == 50 * MIB
    assert largest_split(SPLIT, seg, 100 * GIB, 2) == SPLIT
    small = DRIVER_BYTES + 2 * worker_bytes(50 * MIB, DEFAULTS.max_message_size)
    assert sized(2, limits(memory=small), total=400 * MIB).workers == 2  # known: the nightly's splits fit
    assert sized(2, limits(memory=small)).workers == 1  # unknown: --split-size's 128 MiB


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_a_bad_worker_setting_is_refused_by_name(monkeypatch, tmp_path, value):
    monkeypatch.setattr(cgroup, "ROOT", tmp_path)
    monkeypatch.setenv(WORKERS_ENV, value)
    with pytest.raises(JobError, match=f"^{WORKERS_ENV}={value!r} is not a number of worker processes"):
        local_sizing(4, "local[*]", True, SPLIT)
    monkeypatch.setenv(WORKERS_ENV, " 3 ")
    assert local_sizing(4, "local[*]", True, SPLIT).workers == 3


def test_local_sizing_reads_the_process_cgroup_under_root(monkeypatch, tmp_path):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr(cgroup, "ROOT", v2_tree(tmp_path, {"/sys/fs/cgroup/cpu.max": "100000 100000"}))
    s = local_sizing(64, "local[*]", True, SPLIT)
    assert (s.workers, s.limited_by) == (1, BY_QUOTA)


# --- a job inside a fake cgroup -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_sized_store(tmp_path_factory) -> Path:
    """A small store of the broker's default sizes (1 GiB segments, sparse past their data): the job's sizing reads
    the store's settings, and a 128 MiB split needs segments of at least that."""
    from storegen.synth import StoreSpec, write_bench_store

    from jobs.rebuild import main as rebuild_main

    root = tmp_path_factory.mktemp("sized")
    store = root / "store"
    write_bench_store(store, StoreSpec(messages=2000, max_hash_slot_num=64, max_index_num=4000))
    assert rebuild_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                         str(root / "out"), "--quiet", "--engine", "local"]) == 0
    for part in ("consumequeue", "index"):  # a store verify finds consistent: the sizing is what the tests look at
        (root / "out" / part).rename(store / part)
    return store


def _verify(store: Path, tmp_path: Path, capfd, *extra: str) -> tuple[int, str, str]:
    return run_job("verify", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--json",
                              "--engine", "local", "--work-dir", str(tmp_path / "work"), *extra], capfd)


def test_a_job_in_a_two_cpu_quota_runs_two_workers_and_reports_why(default_sized_store, monkeypatch, tmp_path, capfd):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr(cgroup, "ROOT", v2_tree(tmp_path / "root", {"/sys/fs/cgroup/cpu.max": "100000 100000",
                                                                    "/sys/fs/cgroup/memory.max": str(8 * GIB)}))
    code, out, err = _verify(default_sized_store, tmp_path, capfd, "--master", "local[*]")
    engine = json.loads(out)["engine"]
    assert code == 0 and engine["workers"] == 1, err
    assert engine["sizing"]["limited_by"] == BY_QUOTA and engine["sizing"]["memory_limit"] == 8 * GIB
    assert "1 worker processes (--engine local, master local[*]; 1 of " in err
    assert ": the cgroup CPU quota, /sys/fs/cgroup/cpu.max: 100000 100000)" in err


def test_a_job_whose_memory_limit_holds_fewer_workers_runs_fewer_and_warns_even_quiet(default_sized_store, monkeypatch, tmp_path, capfd):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    room = DRIVER_BYTES + 2 * PER_WORKER + MIB
    monkeypatch.setattr(cgroup, "ROOT", v2_tree(tmp_path / "root", {"/sys/fs/cgroup/memory.max": str(room)}))
    code, out, err = _verify(default_sized_store, tmp_path, capfd, "--master", "local[4]", "--quiet")
    engine = json.loads(out)["engine"]
    assert code == 0 and (engine["workers"], engine["sizing"]["limited_by"]) == (2, BY_MEMORY), err
    assert [line for line in err.splitlines() if "note: environment" not in line] == [
        f"reput verify: warning: {engine_warning(engine)}"]  # --quiet: no engine note, the warning still


def engine_warning(engine: dict) -> str:
    s = engine["sizing"]
    return (f"the local engine runs 2 worker processes instead of 4: the cgroup memory limit of "
            f"{s['memory_limit'] / MIB:,.0f} MiB ({s['memory_limit_from']}) holds its driver "
            f"(~{DRIVER_BYTES // MIB} MiB) and 2 workers of ~{PER_WORKER // MIB} MiB (128 MiB splits); raise "
            f"the container's memory limit (a pod's resources.limits.memory, docker --memory, systemd MemoryMax=) "
            f"or lower --split-size for more")


def test_a_job_whose_memory_limit_holds_no_worker_is_refused_in_one_line(default_sized_store, monkeypatch, tmp_path, capfd):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr(cgroup, "ROOT", v2_tree(tmp_path / "root", {"/sys/fs/cgroup/memory.max": str(512 * MIB)}))
    code, out, err = _verify(default_sized_store, tmp_path, capfd, "--master", "local[2]")
    assert code == 2 and out == "" and "Traceback" not in err
    lines = [line for line in err.splitlines() if "note: environment" not in line]
    assert len(lines) == 1 and lines[0].startswith(
        "reput verify: error: the local engine needs about 648 MiB (its driver ~320 MiB, one worker ~328 MiB for "
        "128 MiB splits), more than the cgroup memory limit of 512 MiB (/sys/fs/cgroup/memory.max: 536870912): "
        "lower --split-size to 60m or less, or raise"), err
    assert lines[0].endswith("raise the container's memory limit (a pod's resources.limits.memory, docker --memory, "
                             "systemd MemoryMax=) to at least 648 MiB")
    code, out, err = _verify(default_sized_store, tmp_path, capfd, "--master", "local[2]", "--split-size", "60m")
    assert code == 0 and json.loads(out)["engine"]["workers"] == 1, err


def test_a_job_with_the_worker_setting_names_it(default_sized_store, monkeypatch, tmp_path, capfd):
    """REPUT_LOCAL_WORKERS is a setting like the others: named on stderr with its effect, in the report's
    environment, and as what decided the count."""
    monkeypatch.setenv(WORKERS_ENV, "1")
    monkeypatch.setattr(cgroup, "ROOT", tmp_path / "no cgroup")
    code, out, err = _verify(default_sized_store, tmp_path, capfd, "--master", "local[2]")
    report = json.loads(out)
    assert code == 0 and report["engine"]["workers"] == 1 and report["environment"][WORKERS_ENV] == "1", err
    assert report["engine"]["sizing"]["limited_by"] == BY_SETTING
    assert f"reput verify: note: environment: {WORKERS_ENV}='1' (the local engine's worker processes at most" in err
    assert f"1 of 2 CPUs: {WORKERS_ENV}=1)" in err


def test_job_runner_sizes_by_the_stores_settings_and_split_size(monkeypatch, tmp_path, capsys):
    """job_runner hands the sizing --split-size, the store's settings and the log's size: `--split-size 0` on a store
    of 64 MiB segments holds 64 MiB splits, not the broker's default 1 GiB; the choice carries the sizing."""
    import argparse

    from jobs.pipeline.runtime import engine

    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr(cgroup, "ROOT", v2_tree(tmp_path, {"/sys/fs/cgroup/memory.max": str(64 * GIB)}))
    args = argparse.Namespace(master="local[2]", engine="local", quiet=False, split_size=0)
    small = BrokerSettings(mapped_file_size_commitlog=64 * MIB)
    runner, choice = engine.job_runner(args, "verify", None, small)
    assert runner.default_parallelism == choice.workers == 2
    assert choice.sizing.split_bytes == 64 * MIB and choice.sizing.memory.value == 64 * GIB
    assert choice.sizing.worker_bytes == worker_bytes(64 * MIB, small.max_message_size)
    _, choice = engine.job_runner(args, "verify")
    assert choice.sizing.split_bytes == DEFAULTS.mapped_file_size_commitlog  # no settings: the broker's defaults
    assert "reput verify: note: engine local, 2 worker processes (--engine local, master local[2])" in (
        capsys.readouterr().err)
