"""Verify, the records a 5.x DLedger broker indexes twice (issue 56): RocketMQ 5.3.3 in DLedger mode dispatches the
log again at start (after an unclean shutdown during load too, and then from the DLedger checkpoint's committedPos),
and IndexService.buildIndex skips a record only when its offset lies BELOW the last index file's endPhyOffset, which
is the last indexed record's own offset: each such dispatch puts that record's keys once more, right after
themselves (two records after a crash: the last kept file's last one, and the last one the load dispatch indexed).

The rule here: the store's key stream (its index files' entries in name order, from the first file that differs from
what the log implies) is the log's key stream with such repeats, a record's keys (those put so far) put again right
after themselves, and nothing else; the index files built from that stream equal the store's byte for byte. Then the
index findings are the broker's own doing: set apart, counted and named (`double_indexed` in the report)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.index_file import IndexHeader, IndexLayout, IndexState
from storage_format.index_build import build_index_file
from storage_format.index_keys import KeyBatch

from ..io.fs import Location
from ..recover.inputs import tail_keys
from ..scan.result import ScanResult
from .findings import Findings
from .index_files import disk_index_files

MAX_REPEATS = 64  # a start after a crash repeats two records; more is damage, not the broker
ARTIFACT = "index"


@dataclass(frozen=True)
class Repeat:
    """A record whose keys the store's index holds twice in a row: its offset and the keys put again."""

    offset: int
    keys: int


@dataclass(frozen=True)
class DoubleIndexed:
    """The broker's double-indexed records, the entries they take, and the findings they account for."""

    repeats: tuple[Repeat, ...]
    files: tuple[str, ...]  # the store's index files that hold them (and everything shifted after them)
    findings: dict[str, int]

    @property
    def entries(self) -> int:
        return sum(r.keys for r in self.repeats)

    def describe(self) -> str:
        """The line verify prints (counted apart, not findings)."""
        records = ", ".join(f"{r.offset} ({r.keys} key{'' if r.keys == 1 else 's'})" for r in self.repeats)
        return (f"double-indexed by the broker (not findings): {self.entries} index entries in "
                f"{len(self.files)} file(s) from index/{self.files[0]} on put the keys of {len(self.repeats)} "
                f"record(s) again, right after themselves: {records}; RocketMQ 5.x in DLedger mode dispatches "
                f"again at start and IndexService.buildIndex skips only records below the last file's endPhyOffset "
                f"({sum(self.findings.values())} index differences set apart)")

    def to_dict(self) -> dict:
        return {"records": [{"offset": r.offset, "keys": r.keys} for r in self.repeats], "entries": self.entries,
                "files": list(self.files), "findings_set_apart": self.findings, "message": self.describe()}


def align(expected: tuple[np.ndarray, np.ndarray], disk: tuple[np.ndarray, np.ndarray],
          max_repeats: int = MAX_REPEATS) -> tuple[list[tuple[int, int]], list[Repeat]] | None:
    """The disk stream (keyHash, phyOffset) as runs of the expected stream: where they part, the disk must go back to
    the first key of the record put last (its keys put again) and go on from there; the expected stream must be used
    up. Returns (runs [start, stop) of expected positions, the repeats), or None when the disk is anything else."""
    (eh, ep), (dh, dp) = expected, disk
    n, m = len(eh), len(dh)
    i = j = run = 0
    runs: list[tuple[int, int]] = []
    repeats: list[Repeat] = []
    while j < m:
        step = min(n - i, m - j)
        if step:
            differ = np.flatnonzero((eh[i:i + step] != dh[j:j + step]) | (ep[i:i + step] != dp[j:j + step]))
            step = int(differ[0]) if len(differ) else step
            i, j = i + step, j + step
        if j == m:
            break
        if i == 0 or len(repeats) >= max_repeats:
            return None
        k = i - 1
        while k > 0 and ep[k - 1] == ep[i - 1]:
            k -= 1
        if eh[k] != dh[j] or ep[k] != dp[j]:
            return None
        runs.append((run, i))
        repeats.append(Repeat(int(ep[i - 1]), i - k))
        run = i = k
    if i != n:
        return None
    runs.append((run, i))
    return runs, repeats


def _disk_stream(datas: list[bytes], layout: IndexLayout) -> tuple[np.ndarray, np.ndarray]:
    """(keyHash, phyOffset) of every entry of the files, in file and position order."""
    hashes, phys = [], []
    for data in datas:
        n = layout.used_positions(IndexHeader.from_bytes(data[:40]))
        e = layout.entries(data)[1:n]
        hashes.append(e["hash"].astype(np.int64))
        phys.append(e["phy"].astype(np.int64))
    return np.concatenate(hashes), np.concatenate(phys)


def built_files(keys: KeyBatch, take: np.ndarray, inherited: IndexState, layout: IndexLayout,
                count: int) -> list[bytes]:
    """The index files the broker writes from the stream `take` (positions in `keys`): full files of maxIndexNum - 1
    keys, each new one inheriting the previous end; `count` files (an empty one, inheriting, when the stream runs out
    first)."""
    h, p, ts = keys.key_hash[take], keys.phy[take], keys.store_ts[take]
    per = layout.max_entries - 1
    out = []
    for f in range(count):
        part = slice(f * per, (f + 1) * per)
        out.append(build_index_file(h[part], p[part], ts[part], layout.slots, layout.max_entries, inherited, 1))
        if len(h[part]):
            inherited = IndexState(int(ts[part][-1]), int(p[part][-1]))
    return out if len(h) <= count * per else []


def double_indexed(found: Findings, index_dir: Location, scan: ScanResult, work: Location,
                   layout: IndexLayout) -> DoubleIndexed | None:
    """The store's index differs from what the log implies only by the broker's double-indexed records: then every
    index finding is set apart (returned with the records); else None and the findings stay."""
    paths = {d["path"] for d in found.details if d["artifact"] == ARTIFACT}
    disk = disk_index_files(index_dir, Findings(), layout)
    names = [n for n, _ in disk]
    if not paths or not all(p.startswith("index/") and p[6:] in names for p in paths):
        return None
    f = min(names.index(p[6:]) for p in paths)
    datas = [index_dir.child(n).read_bytes() for n in names[f:]]
    if any(len(d) != layout.size for d in datas):
        return None
    prev = disk[f - 1][1] if f else None
    end = prev.end_phy_offset if prev is not None else 0
    keys = tail_keys(scan, work, end)
    disk_h, disk_p = _disk_stream(datas, layout)
    held = 0  # the keys of the record at `end` the previous file holds: a dispatch may put them again first
    if prev is not None:
        tail = layout.entries(index_dir.child(names[f - 1]).read_bytes())[1:layout.used_positions(prev)]
        tail = tail[tail["phy"] == end]
        held = len(tail)
        disk_h = np.concatenate([tail["hash"].astype(np.int64), disk_h])
        disk_p = np.concatenate([tail["phy"].astype(np.int64), disk_p])
    found_runs = align((keys.key_hash.astype(np.int64), keys.phy), (disk_h, disk_p))
    if found_runs is None or not found_runs[1]:
        return None
    runs, repeats = found_runs
    take = np.concatenate([np.arange(a, b) for a, b in runs])
    if not np.array_equal(take[:held], np.arange(held)):
        return None
    inherited = IndexState(prev.end_timestamp, prev.end_phy_offset) if prev is not None else IndexState()
    if built_files(keys, take[held:], inherited, layout, len(datas)) != datas:
        return None
    return DoubleIndexed(tuple(repeats), tuple(names[f:]), found.set_apart(ARTIFACT))
