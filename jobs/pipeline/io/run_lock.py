"""One run per output: an exclusive lock file naming the run that holds it.

A run that writes OUT holds `.<OUT name>.reput-lock` beside OUT (an in-place recovery: `.reput-recover.lock`
inside the store) from its first check of OUT until it has published or failed. The lock is an flock on that
file, which the kernel drops when the process dies however it ends: a killed run's lock file is free again and
the next run takes it over. A second run while the first lives refuses at once, naming the holder from the
file's contents (job, pid, host, start time). flock exists only on local filesystems; elsewhere (HDFS) no lock
is taken, and `RunLock.acquire` says so (the caller prints it as a note).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..runtime import interrupt
from ..runtime.failure import JobError
from .fs import Location
from .paths import is_local, real_path

LOCK_MARK = ".reput-lock"
IN_PLACE_LOCK = ".reput-recover.lock"


@dataclass(frozen=True, kw_only=True)
class Holder:
    """Who holds a lock, as its file says."""

    job: str
    pid: int
    host: str
    started: str  # ISO 8601, UTC

    def describe(self) -> str:
        return f"reput {self.job} (pid {self.pid} on {self.host}, started {self.started})"


def beside(out: Path) -> Path:
    """The lock file of an output directory: beside it, so it exists before OUT does."""
    return out.parent / f".{out.name}{LOCK_MARK}"


class RunLock:
    """The exclusive lock of one output (`acquire`, `release`; also a context manager)."""

    def __init__(self, path: Path, job: str, what: str) -> None:
        self.path, self.job, self.what = path, job, what  # `what`: the output named in a refusal
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise JobError naming the run that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _holder(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise JobError(f"{self.path}: cannot lock ({exc.strerror})") from None
                who = holder.describe() if holder else "another reput run"
                raise JobError(f"{self.what} is being written by {who}; one run per output: wait for it to end "
                               f"(its lock is {self.path})") from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the file was removed by the run that held it just before: lock the new one
        holder = Holder(job=self.job, pid=os.getpid(), host=socket.gethostname(),
                        started=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder.__dict__).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then let the lock go (a run waiting for the file then locks a new one)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def held(*locks: RunLock) -> Iterator[None]:
    """Take `locks` in order and hold them for the block. After an interrupt of a job under run_main they are let
    go by interrupt.finish, once Spark has stopped writing and the clean-ups registered after them have run (a
    second run must not take over what this one's tasks still write into)."""
    taken: list[RunLock] = []
    try:
        for lock in locks:
            lock.acquire()
            taken.append(lock)
            interrupt.remove_on_interrupt(lock, lock.release)
        yield
    except BaseException as exc:
        if not interrupt.left_to_finish(exc):
            _release(taken)
        raise
    _release(taken)


def held_beside(loc: Location, job: str, flag: str) -> contextlib.AbstractContextManager:
    """The run lock beside `loc` (one whatever its spelling) held for the block by `job`, on a local filesystem
    (flock is local only); elsewhere none. `flag` names `loc` in a refusal."""
    if not is_local(loc):
        return contextlib.nullcontext()
    path = Path(real_path(loc))
    return held(RunLock(beside(path), job, f"{flag} {path}"))


def _release(locks: list[RunLock]) -> None:
    """Let `locks` go, last taken first."""
    for lock in reversed(locks):
        interrupt.forget(lock)
        lock.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _holder(fd: int) -> Holder | None:
    """The holder the lock file names (None while it is still being written, or if unreadable)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
        return Holder(job=str(data["job"]), pid=int(data["pid"]), host=str(data["host"]),
                      started=str(data["started"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
