"""The CPU and memory limits of the cgroup this process runs in (a container's, a Kubernetes pod's, a systemd
unit's), found as the JVM finds them: the process's cgroup from /proc/self/cgroup, where each controller's
hierarchy is mounted from /proc/self/mountinfo (cgroup v1: one mount per controller, `cgroup` file system; v2: one
`cgroup2` mount for all), the cgroup's directory under the mount point by the JVM's rule (`_cgroup_dir`).

CPU: v2 `cpu.max` (`max 100000`: no quota), v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (a quota of -1: none); the
CPUs a quota grants are quota / period rounded up, as the JVM's availableProcessors rounds them (150000 / 100000:
2). Memory: v2 `memory.max` (`max`: none), v1 `memory.limit_in_bytes` (a huge value, the kernel's "unlimited":
none; then v1's `hierarchical_memory_limit` in memory.stat, as the JVM reads it). The cgroup's ancestors up to
the mount point bind too (a pod's limit is on its parent of the container's cgroup): the smallest found counts.

Never fails: a file missing, unreadable or not understood is no limit there (a machine without cgroups, a
controller not mounted or not enabled). `ROOT` is where /proc and the mount points are looked up (the tests put a
fake tree under a temporary directory).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

ROOT = Path("/")
UNLIMITED_FROM = 1 << 60  # v1 says "no limit" with LONG_MAX rounded down to a page (9223372036854771712)


@dataclass(frozen=True)
class Limit:
    """One limit in effect: its value (CPUs, or bytes), the file it was read from as this process sees it, and
    that file's text (for the engine note and the run report)."""

    value: int
    path: str
    text: str

    def source(self) -> str:
        """Where the limit was read and what it said, e.g. `/sys/fs/cgroup/cpu.max: 200000 100000`."""
        return f"{self.path}: {self.text}"


@dataclass(frozen=True)
class CgroupLimits:
    """The process's cgroup CPU quota (in CPUs) and memory limit (in bytes); None where nothing limits."""

    cpus: Limit | None = None
    memory: Limit | None = None


@dataclass(frozen=True)
class _Mount:
    point: str  # where it is mounted, as this process sees it
    root: str  # the hierarchy's directory mounted there ("/" unless a container sees only its own part)
    v2: bool
    controllers: frozenset[str]  # v1: the controllers of its hierarchy (from the super options)


def read_limits(root: Path | None = None) -> CgroupLimits:
    """The limits of this process's cgroup, read under `root` (default ROOT); no limit wherever none can be read."""
    root = ROOT if root is None else root
    try:
        groups = _own_groups((root / "proc/self/cgroup").read_text())
        mounts = _mounts((root / "proc/self/mountinfo").read_text())
    except (OSError, UnicodeDecodeError):
        return CgroupLimits()
    cpu_dirs = _dirs(root, groups, mounts, "cpu")
    memory_dirs = _dirs(root, groups, mounts, "memory")
    return CgroupLimits(cpus=_smallest(_cpu_limit(root, d) for d in cpu_dirs),
                        memory=_smallest(_memory_limit(root, d) for d in memory_dirs))


def _own_groups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: cgroup path}; v2's line (`0::/path`) under the key ""."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            out[""] = path
        for c in filter(None, controllers.split(",")):
            out[c] = path
    return out


def _mounts(text: str) -> list[_Mount]:
    """The cgroup file systems of /proc/self/mountinfo (`id parent dev root point options ... - type source
    super-options`)."""
    out = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 1 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(rest[2].split(",")) if len(rest) > 2 else frozenset()
        out.append(_Mount(_unescape(fields[4]), _unescape(fields[3]), rest[0] == "cgroup2", options))
    return out


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes there (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _dirs(root: Path, groups: dict[str, str], mounts: list[_Mount], controller: str) -> list[Path]:
    """The directories whose limits bind `controller` for this process: its cgroup's, then each ancestor's up to
    the mount point (under `root`). v1 when a v1 hierarchy holding the controller is mounted and names this
    process's cgroup for it, else v2; none when neither is there."""
    v1 = next((m for m in mounts if not m.v2 and controller in m.controllers), None)
    if v1 is not None and controller in groups:
        mount, path = v1, groups[controller]
    else:
        mount = next((m for m in mounts if m.v2), None)
        if mount is None or "" not in groups:
            return []
        path = groups[""]
    top = root / mount.point.lstrip("/")
    here = _cgroup_dir(top, mount.root, path)
    dirs = [here]  # (a cgroup not under this mount as seen here has no files: its ancestors' and the mount's bind)
    while here != top and top in here.parents:
        here = here.parent
        dirs.append(here)
    return dirs


def _cgroup_dir(top: Path, mount_root: str, path: str) -> Path:
    """The JVM's rule for the cgroup's directory: the mount point plus the cgroup's path when the mount holds the
    whole hierarchy (root "/"), plus the part below the mount's root when the cgroup is inside it, else the mount
    point itself (a container's view: the mount holds just this cgroup, its root the cgroup's path; or a cgroup
    outside this process's cgroup namespace, whose path climbs with "..")."""
    if ".." in path.split("/"):
        return top
    if mount_root == "/":
        return top / path.lstrip("/")
    if path.startswith(mount_root.rstrip("/") + "/"):
        return top / path[len(mount_root.rstrip("/")):].lstrip("/")
    return top


def _visible(root: Path, d: Path, name: str) -> str:
    """A file of a directory under `root` as this process names it."""
    return "/" + str((d / name).relative_to(root))


def _read(path: Path) -> str | None:
    """A cgroup file's text, None when it cannot be read (never an error)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_limit(root: Path, d: Path) -> Limit | None:
    """The CPUs of one directory's quota, rounded up as the JVM rounds them; None without a quota."""
    text = _read(d / "cpu.max")
    if text is not None:  # v2: "<quota> <period>" or "max <period>"
        parts = text.split()
        if len(parts) != 2 or parts[0] == "max":
            return None
        quota, period, shown, name = parts[0], parts[1], text, "cpu.max"
    else:
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if quota is None or period is None:
            return None
        shown, name = f"{quota} (cpu.cfs_period_us {period})", "cpu.cfs_quota_us"
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    if q <= 0 or p <= 0:
        return None
    return Limit(math.ceil(q / p), _visible(root, d, name), shown)


def _memory_limit(root: Path, d: Path) -> Limit | None:
    """One directory's memory limit in bytes; None when it sets none."""
    for name in ("memory.max", "memory.limit_in_bytes"):
        text = _read(d / name)
        if text is None:
            continue
        found = _bytes(text)
        if found is None and name == "memory.limit_in_bytes":
            return _hierarchical(root, d)
        return Limit(found, _visible(root, d, name), text) if found is not None else None
    return None


def _hierarchical(root: Path, d: Path) -> Limit | None:
    """v1's memory.stat `hierarchical_memory_limit`: the limit of the cgroup's ancestors, where they are not
    mounted in this process's view (the JVM reads it when memory.limit_in_bytes says none)."""
    text = _read(d / "memory.stat") or ""
    m = re.search(r"^hierarchical_memory_limit (\d+)$", text, re.MULTILINE)
    found = _bytes(m.group(1)) if m else None
    if found is None:
        return None
    return Limit(found, _visible(root, d, "memory.stat"), f"hierarchical_memory_limit {m.group(1)}")


def _bytes(text: str) -> int | None:
    """A memory limit file's bytes; None for "max", the v1 "unlimited" value or anything else."""
    try:
        n = int(text)
    except ValueError:
        return None
    return n if 0 < n < UNLIMITED_FROM else None


def _smallest(limits: Iterable[Limit | None]) -> Limit | None:
    """The tightest of the limits found (None when none was)."""
    found = [x for x in limits if x is not None]
    return min(found, key=lambda x: x.value) if found else None
