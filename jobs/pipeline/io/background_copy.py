"""Files copied verbatim into an output directory by one thread while the job still validates and plans
(os.copy_file_range releases the GIL: the kernel copies while the driver works), joined before publish.

Items are added as soon as the job knows them (`add`); `finish(wanted)` takes the final list: copies the
thread has not been given yet, or made with other flags, are made now, and copies no longer wanted are
removed (with the directories below the top level they leave empty). A failure in the thread is raised by
`finish` in the main thread (the job's one-line error); an error elsewhere or an interrupt stops the thread
between two chunks and waits for it (`cancel`) before the staging directory is removed, so that nothing is
written after it is gone.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass

from ..runtime import interrupt
from ..runtime.faults import hold_at
from .copy import CopyCancelled, copy_file
from .fs import Location


@dataclass(frozen=True)
class CopyItem:
    """One file to copy: its path under the output directory, its source URI and size, and how (io.copy)."""

    rel: str
    src: str
    size: int
    link: bool = False
    zero_holes: bool = False

    @property
    def how(self) -> tuple[str, bool, bool]:
        """What makes two requests for the same path the same copy."""
        return self.src, self.link, self.zero_holes


@dataclass(frozen=True)
class Finished:
    """What `finish` reports: every copy's (method, bytes, why it fell back); how many were made by the thread
    while the job planned (and their bytes); how long the job waited for the thread at the end."""

    results: list[tuple[str, int, str | None]]
    early_files: int
    early_bytes: int
    wait_s: float

    def to_dict(self) -> dict:
        return {"files": self.early_files, "bytes": self.early_bytes, "join_wait_s": round(self.wait_s, 3)}


class BackgroundCopy:
    """A thread that copies the items it is given, in order, into `dest` (a context manager: entering starts the
    thread; leaving with an exception cancels it and waits for it)."""

    def __init__(self, dest: Location) -> None:
        self.dest = dest
        self._items: collections.deque[CopyItem] = collections.deque()
        self._given: dict[str, CopyItem] = {}
        self._done: dict[str, tuple[CopyItem, tuple[str, int, str | None]]] = {}
        self._lock = threading.Condition()
        self._closed = False
        self._cancel = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reput-background-copy", daemon=True)

    def __enter__(self) -> "BackgroundCopy":
        interrupt.remove_on_interrupt(self, self.cancel)  # runs before the staging directory's removal
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.cancel()
        interrupt.forget(self)

    def add(self, items: list[CopyItem]) -> None:
        """Queue copies (a path already given is not queued again)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("background copy: items added after finish")
            for item in items:
                if item.rel not in self._given:
                    self._given[item.rel] = item
                    self._items.append(item)
            self._lock.notify()

    def _next(self) -> CopyItem | None:
        with self._lock:
            while not self._items and not self._closed and not self._cancel.is_set():
                self._lock.wait()
            if self._cancel.is_set() or not self._items:
                return None
            return self._items.popleft()

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            try:
                got = copy_file(Location(item.src), self.dest.child(item.rel), item.link, item.zero_holes,
                                cancel=self._cancel)
            except CopyCancelled:
                return
            except BaseException as exc:  # raised by finish() in the main thread
                self._error = exc
                self._cancel.set()
                return
            with self._lock:
                self._done[item.rel] = (item, got)
            hold_at("in-background-copy", self._cancel)

    def cancel(self) -> None:
        """Stop the thread between two chunks and wait for it (an error elsewhere, an interrupt)."""
        self._cancel.set()
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _prune(self, rel: str) -> None:
        """The directories below the top level that a removed copy leaves empty (a queue whose files recovery
        deletes) go too: OUT holds no directory the copies without the thread would not have made."""
        parts = rel.split("/")[:-1]
        while len(parts) > 1:
            try:
                os.rmdir(self.dest.child(*parts).path)
            except OSError:  # not empty (or not there): the directories above stay too
                return
            parts.pop()

    def _help(self, want: dict[str, CopyItem]) -> dict[str, tuple[CopyItem, tuple[str, int, str | None]]]:
        """The calling thread takes queued copies beside the thread until none is left (two copies at once at
        the end, where the job only waits); a queued copy no longer wanted is dropped, never made."""
        helped = {}
        while True:
            with self._lock:
                if self._cancel.is_set() or not self._items:
                    return helped
                item = self._items.popleft()
            w = want.get(item.rel)
            if w is None or w.how != item.how:
                continue
            try:
                helped[item.rel] = (item, copy_file(Location(item.src), self.dest.child(item.rel), item.link,
                                                    item.zero_holes, cancel=self._cancel))
            except CopyCancelled:  # the thread failed: finish raises its error
                return helped

    def finish(self, wanted: list[CopyItem]) -> Finished:
        """Every copy in `wanted` made under `dest`, none other: the copies still queued are made here beside
        the thread (those no longer wanted dropped), the thread's work is waited for (its error raised here),
        then what it was not given (or given with other flags) is copied here, what it made and is no longer
        wanted removed."""
        want = {w.rel: w for w in wanted}
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        t0 = time.monotonic()
        helped = self._help(want)
        self._thread.join()
        wait = time.monotonic() - t0
        if self._error is not None:
            raise self._error
        results = [got for _, got in helped.values()]
        for rel, (item, got) in self._done.items():
            if rel in want and want[rel].how == item.how:
                results.append(got)
            else:
                self.dest.child(rel).delete_tree()
                self._prune(rel)
        early = [got for rel, (item, got) in self._done.items() if rel in want and want[rel].how == item.how]
        for rel, w in want.items():
            done = self._done.get(rel) or helped.get(rel)
            if done is None or done[0].how != w.how:
                results.append(copy_file(Location(w.src), self.dest.child(rel), w.link, w.zero_holes))
        return Finished(results, len(early), sum(n for _, n, _ in early), wait)
