"""Verify, index files: index files on disk are named by the broker's wall clock, so they are paired with
the expected files by aligning header sequences in name order (difflib; unpaired files become
missing/extra findings); each pair is compared streamed, and in detail (header, slots, entries, chains,
key lookups) only when it differs. The last expected file and the store's files after its pair may also hold the
broker's restart re-index (verify.restart), counted apart."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from storage_format.segment_names import java_parse_long
from storage_format.index_file import (HEADER_FIELD_OFFSETS, HEADER_SIZE, BrokenChain, IndexHeader, IndexLayout,
                                       chain_walk, is_name, is_write_full, key_slots)

from ..outputs.build import IndexFilePlan, IndexTask, KeySlice, index_file_bytes, index_file_stream
from .findings import Findings
from ..io.fs import Location
from ..io.workdir import read_keys
from .pointer import PointerCheck
from .restart import RestartRecord, RestartTail, restart_starts

INDEX_FIELDS = (("hash", "keyHash"), ("phy", "phyOffset"), ("diff", "timeDiff"), ("prev", "prevIndex"))


@dataclass(frozen=True)
class IndexCheckTask:
    """A rebuild IndexTask (only the files paired with a disk file) and the disk file of each."""

    build: IndexTask
    disk: dict[int, str]  # file number -> URI of the paired file in the store's index/
    store_index_dir: str
    pointers: PointerCheck
    restart: RestartTail | None = None  # the last expected file is this task's: check it for the restart re-index


def header_key(h: IndexHeader) -> tuple[int, int, int, int, int]:
    """What pairs an expected file with a disk file: every header field but hashSlotCount."""
    return (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.index_count)


def expected_headers(task: IndexTask) -> list[tuple[int, IndexHeader]]:
    """Headers of the task's planned files from their first and last keys (no file is built)."""
    cache: dict[int, pa.Table] = {}

    def row(sl: KeySlice, i: int) -> dict:
        if sl.split_index not in cache:
            cache[sl.split_index] = read_keys(task.work, sl.split_index)
        return cache[sl.split_index].slice(sl.lo + i, 1).to_pylist()[0]

    out = []
    for plan in task.files:
        if plan.sources:
            a, z = row(plan.sources[0], 0), row(plan.sources[-1], plan.sources[-1].hi - plan.sources[-1].lo - 1)
            n = sum(s.hi - s.lo for s in plan.sources)
            out.append((plan.file_no, IndexHeader(a["store_ts"], z["store_ts"], a["phy"], z["phy"], 0, n + 1)))
        elif plan.inherited_from is not None:
            r = row(plan.inherited_from, 0)
            ts, phy = max(r["store_ts"], 0), max(r["phy"], 0)
            out.append((plan.file_no, IndexHeader(ts, ts, phy, phy, 0, task.empty_count)))
        elif plan.inherited is not None:  # the end of the file it follows, given (a continued index)
            ts, phy = plan.inherited
            out.append((plan.file_no, IndexHeader(ts, ts, phy, phy, 0, task.empty_count)))
        else:
            out.append((plan.file_no, IndexHeader(index_count=task.empty_count)))
    return out


def read_header(loc: Location) -> IndexHeader | None:
    """The 40-byte header of an index file, or None when the file is shorter than that."""
    raw = bytes(loc.read_range(0, HEADER_SIZE))
    return IndexHeader.from_bytes(raw) if len(raw) == HEADER_SIZE else None


def header_dict(h: IndexHeader | None) -> dict | None:
    """An index header with the broker's field names (None stays None)."""
    if h is None:
        return None
    return h.broker_fields()


def report_extra_file(out: Findings, name: str, h: IndexHeader | None) -> None:
    """An index file of the store that the commit log implies none for."""
    out.add("index", "extra_file", f"index/{name}", found_header=header_dict(h),
            detail="the commit log implies no such index file"
                   + (f" ({h.as_loaded().index_count - 1} entries, phyOffsets {h.begin_phy_offset}.."
                      f"{h.end_phy_offset})" if h is not None else ""))


def report_wrong_size(out: Findings, name: str, size: int, layout: IndexLayout) -> None:
    """An index file not of the layout's size (IndexLayout.size_problem), as the broker reads it: mapped at the
    layout's size, zeros past a shorter file's end, the bytes past that size unread."""
    problem = layout.size_problem(size)
    if problem is None:
        return
    if size < HEADER_SIZE:
        cut = f"its {HEADER_SIZE}-byte header is cut off"
    elif size < layout.size:
        cut = f"entries from position {layout.whole_entries(size)} on are cut off"
    else:
        cut = "the bytes past the configured size are ignored"
    out.add("index", "wrong_size", f"index/{name}", byte_offset=min(size, layout.size), expected=layout.size,
            found=size, detail=f"{problem}; {cut}")


def align_index_files(expected: list[tuple[int, IndexHeader]], disk: list[tuple[str, IndexHeader | None]],
                      out: Findings, held: list[tuple[str, IndexHeader | None]] | None = None) -> dict[int, str]:
    """Pair expected files (creation order) with disk files (name order) by their header sequences.

    Runs of equal headers pair up; a replaced run pairs position by position; what is left over is
    reported missing or extra, except that a leftover disk file whose header equals a leftover
    expected file's is paired with it and reported out of order. `held` (a list): the leftover disk files after
    the last expected file's pair go there instead of being reported (the restart check takes them)."""
    e_keys = [header_key(h) for _, h in expected]
    d_keys = [header_key(h) if h is not None else ("unreadable", name) for name, h in disk]
    pairs: dict[int, str] = {}
    missing: list[int] = []
    extra: list[int] = []
    sm = difflib.SequenceMatcher(a=e_keys, b=d_keys, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        n = min(i2 - i1, j2 - j1) if op in ("equal", "replace") else 0
        for k in range(n):
            pairs[i1 + k] = disk[j1 + k][0]
        missing.extend(range(i1 + n, i2))
        extra.extend(range(j1 + n, j2))
    by_key = {e_keys[i]: i for i in missing}
    for j in list(extra):
        i = by_key.get(d_keys[j])
        if i is not None and i not in pairs:
            pairs[i] = disk[j][0]
            missing.remove(i)
            extra.remove(j)
            out.add("index", "out_of_order", f"index/{disk[j][0]}", file_number=expected[i][0],
                    detail=f"holds expected file #{expected[i][0]} but its name sorts at position {j}")
    for i in missing:
        no, h = expected[i]
        before = [pairs[k] for k in range(i) if k in pairs]
        out.add("index", "missing_file", f"index/(expected file #{no})", file_number=no,
                entries=h.index_count - 1, expected_header=header_dict(h),
                detail=f"no index file holds expected file #{no} ({h.index_count - 1} entries, "
                       f"phyOffsets {h.begin_phy_offset}..{h.end_phy_offset})"
                       + (f"; it belongs after index/{before[-1]}" if before else ""))
    last = {name: j for j, (name, _) in enumerate(disk)}.get(pairs.get(len(expected) - 1, ""))
    for j in extra:
        if held is not None and last is not None and j > last:
            held.append(disk[j])
            continue
        report_extra_file(out, *disk[j])
    # name order must be creation order: each file starts at or after the previous file's end
    prev = None
    for name, h in disk:
        if h is None:
            continue
        if prev is not None and (h.begin_phy_offset < prev[1].end_phy_offset
                                 or h.end_phy_offset < prev[1].end_phy_offset):
            out.add("index", "out_of_order", f"index/{name}",
                    detail=f"begins at phyOffset {h.begin_phy_offset}, before the end "
                           f"{prev[1].end_phy_offset} of index/{prev[0]} which sorts before it")
        prev = (name, h)
    return {expected[i][0]: name for i, name in pairs.items()}


def _index_entry(e: np.void) -> dict:
    """An index entry with the broker's field names."""
    return {"keyHash": int(e["hash"]), "phyOffset": int(e["phy"]), "timeDiff": int(e["diff"]),
            "prevIndex": int(e["prev"])}


def _pairs_view(h: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """(keyHash, phyOffset) pairs as one comparable value each (for np.isin)."""
    rec = np.empty(len(h), dtype=[("h", "<i8"), ("p", "<i8")])
    rec["h"], rec["p"] = h, phy
    return rec.view("V16")


def chain_findings(out: Findings, rel: str) -> Callable[[BrokenChain], None]:
    """A break index_file.chain_walk finds, as a `broken_chain` finding of the file (its slot, where it points)."""
    def add(b: BrokenChain) -> None:
        if b.slot is None:  # an entry no chain reaches
            out.add("index", "broken_chain", rel, position=b.position, byte_offset=None, reason=b.reason)
        elif b.byte_offset is not None:  # a slot pointing outside the used entries
            out.add("index", "broken_chain", rel, slot=b.slot, byte_offset=b.byte_offset, position=b.position,
                    reason=b.reason)
        else:
            out.add("index", "broken_chain", rel, slot=b.slot, position=b.position, reason=b.reason)
    return add


def compare_header_and_slots(expected: bytes, raw: bytes, layout: IndexLayout, rel: str, file_no: int,
                             out: Findings) -> tuple[IndexHeader, IndexHeader]:
    """Report header fields and slots that differ between two full-size files; returns both headers."""
    eh, dh = IndexHeader.from_bytes(expected[:HEADER_SIZE]), IndexHeader.from_bytes(raw[:HEADER_SIZE])
    for (name, at), ev, dv in zip(HEADER_FIELD_OFFSETS.items(), header_dict(eh).values(), header_dict(dh).values()):
        if ev != dv:
            out.add("index", "header_differs", rel, file_number=file_no, field=name, byte_offset=at, expected=ev,
                    found=dv)
    e_slots, d_slots = layout.slot_table(expected), layout.slot_table(raw)
    for s in np.flatnonzero(e_slots != d_slots).tolist():
        out.add("index", "slot_differs", rel, file_number=file_no, slot=s, byte_offset=layout.slot_at(s),
                expected=int(e_slots[s]), found=int(d_slots[s]))
    return eh, dh


def compare_index_file(expected: bytes, disk: bytes, rel: str, file_no: int, layout: IndexLayout,
                       pointers: PointerCheck, out: Findings) -> None:
    """Compare one index file with the bytes the commit log implies; chains and key lookups are
    checked on the disk file whenever anything differs."""
    art = "index"
    size = len(expected)  # a file of another size is a wrong_size finding of the listing (disk_index_files)
    if disk == expected:
        return
    raw = disk[:size] + bytes(max(0, size - len(disk)))
    eh, dh = compare_header_and_slots(expected, raw, layout, rel, file_no, out)
    d_slots = layout.slot_table(raw)
    e_ent, d_ent = layout.entries(expected), layout.entries(raw)
    max_entries = layout.max_entries
    differ = np.zeros(max_entries, bool)
    for key, _ in INDEX_FIELDS:
        differ |= e_ent[key] != d_ent[key]
    e_count = eh.index_count
    d_count = layout.used_positions(dh)
    d_zero = (d_ent["hash"] == 0) & (d_ent["phy"] == 0) & (d_ent["diff"] == 0) & (d_ent["prev"] == 0)
    pos = np.arange(max_entries)
    stale = differ & (pos >= e_count) & ((pos >= d_count) | (pos == 0)) & ~d_zero
    for p in np.flatnonzero(differ & ~stale).tolist():
        e, d = e_ent[p], d_ent[p]
        where = {"file_number": file_no, "position": p, "byte_offset": layout.entry_at(p)}
        if d_zero[p]:
            out.add(art, "missing_entry", rel, **where, expected=_index_entry(e), found=_index_entry(d))
        elif p >= e_count:
            out.add(art, "extra_entry", rel, **where, found=_index_entry(d),
                    points_at=pointers.classify(int(d["phy"])))
        else:
            out.add(art, "entry_differs", rel, **where, fields=[n for k, n in INDEX_FIELDS if e[k] != d[k]],
                    expected=_index_entry(e), found=_index_entry(d), points_at=pointers.classify(int(d["phy"])))
    if stale.any():
        at = np.flatnonzero(stale)
        out.add(art, "stale_bytes", rel, file_number=file_no, position=int(at[0]),
                byte_offset=layout.entry_at(int(at[0])), entries=int(len(at)),
                detail=f"{len(at)} non-zero entries at positions the header's indexCount ({dh.index_count}) "
                       f"does not cover")
    reach = chain_walk(layout, d_slots, d_ent, d_count, chain_findings(out, rel))
    d_hash = d_ent["hash"][:d_count].astype(np.int64)
    ok = np.flatnonzero((reach >= 0) & (d_hash >= 0) & (key_slots(d_hash, layout.slots) == reach))
    findable = _pairs_view(d_ent["hash"][ok], d_ent["phy"][ok])
    e_pos = np.arange(1, e_count)
    lost = e_pos[~np.isin(_pairs_view(e_ent["hash"][e_pos], e_ent["phy"][e_pos]), findable)]
    for p in lost.tolist():
        kh = int(e_ent["hash"][p])
        slot = layout.slot_of(kh)
        out.add(art, "key_not_found", rel, file_number=file_no, position=p, key_hash=kh,
                phy_offset=int(e_ent["phy"][p]), slot=slot,
                detail=f"a lookup of keyHash {kh} (slot {slot}) does not reach phyOffset {int(e_ent['phy'][p])}")


def stream_equal(chunks: Iterator[bytes], loc: Location, size: int) -> bool:
    """Does the file hold exactly these bytes? Compared chunk by chunk, so memory stays bounded."""
    if loc.size() != size:
        return False
    at = 0
    with loc.open_input() as f:
        for chunk in chunks:
            if bytes(f.read_at(len(chunk), at)) != chunk:
                return False
            at += len(chunk)
    return at == size


def check_index(task: IndexCheckTask) -> Findings:
    """Compare each paired file with the bytes the rebuild would write: streamed while they agree,
    both files in memory for the detailed comparison only when they do not. The last expected file, when it
    differs or files follow its pair, is first checked for the broker's restart re-index (check_restart_tail)."""
    out = Findings()
    b = task.build
    layout = IndexLayout(b.slots, b.max_entries)
    index_dir = Location(task.store_index_dir)
    for plan in b.files:
        name = task.disk[plan.file_no]
        loc = index_dir.child(name)
        out.files_checked += 1
        restart = task.restart if task.restart is not None and task.restart.file_no == plan.file_no else None
        if stream_equal(index_file_stream(b, plan)[0], loc, layout.size) and (restart is None or not restart.trailing):
            continue
        data, _ = index_file_bytes(b, plan)
        if restart is not None and check_restart_tail(data, loc, restart, index_dir, layout, out):
            continue
        compare_index_file(data, loc.read_bytes(), f"index/{name}", plan.file_no, layout, task.pointers, out)
    return out


def check_restart_tail(expected: bytes, disk: Location, restart: RestartTail, index_dir: Location,
                       layout: IndexLayout, out: Findings) -> bool:
    """Whether the store's file paired with the last expected file, and the unpaired files after it, are exactly the
    expected file followed by the broker's restart re-index (verify.restart: starts resume dispatch at or before the
    record, and each put its keys once more): then the starts, the entries they put and the files they opened are
    counted apart. Otherwise the files after it are reported as extra files (the caller compares the paired file as
    any other)."""
    starts = None
    if restart.record.dispatch_resumes_before():
        files = [disk.read_bytes()] + [index_dir.child(name).read_bytes() for name, _ in restart.trailing]
        starts = restart_starts(expected, files, restart.record, layout)
    if starts is None:
        for name, h in restart.trailing:
            report_extra_file(out, name, h)
        return False
    out.add_restart("index", "starts", starts)
    out.add_restart("index", "entries", starts * len(restart.record.key_hash))
    out.add_restart("index", "files", len(restart.trailing))
    out.files_checked += len(restart.trailing)
    return True


def disk_index_files(index_dir: Location, out: Findings,
                     layout: IndexLayout) -> list[tuple[str, IndexHeader | None]]:
    """Every file of index/ in name order (the broker loads them all) with its header; one not of the layout's size
    is a wrong_size finding, paired with an expected file or not."""
    files = []
    for info in index_dir.list():
        odd = index_dir.child_kind(info)
        if odd:
            out.add("index", "unexpected_file", f"index/{info.base_name}", detail=f"{odd}, not a regular file")
            continue
        if java_parse_long(info.base_name) is None:  # IndexService.load: MappedFile's Long.parseLong throws
            out.add("index", "unexpected_file", f"index/{info.base_name}",
                    detail="name is not yyyyMMddHHmmssSSS and no number: the broker skips it (IndexService.load "
                           "logs the NumberFormatException) and never deletes it")
            continue
        if not is_name(info.base_name):
            out.add("index", "unexpected_file", f"index/{info.base_name}",
                    detail="name is not yyyyMMddHHmmssSSS; the broker still loads it as an index file (in name order)")
        report_wrong_size(out, info.base_name, info.size, layout)
        files.append((info.base_name, read_header(index_dir.child(info.base_name))))
    return files


def plan_index_checks(tasks: list[IndexTask], headers: list[tuple[int, IndexHeader]], index_dir: Location,
                      disk: list[tuple[str, IndexHeader | None]], pointers: PointerCheck,
                      found: Findings, restart: RestartRecord | None = None,
                      out_built_to: int | None = None) -> list[IndexCheckTask]:
    """Pair expected and disk files (disk_index_files), report the unpaired ones, and keep the paired files' tasks.
    `restart` (verify.restart): the task of the last expected file also checks it, and the unpaired disk files after
    its pair, for the broker's restart re-index. `out_built_to` (verify --files OUT): where OUT was built to; the
    expected files past it are not paired (built_by)."""
    ordered = sorted(headers, key=lambda x: x[0])
    if out_built_to is not None and tasks:
        ordered = built_by(ordered, out_built_to, tasks[0].max_entries, found)
    held: list[tuple[str, IndexHeader | None]] | None = [] if restart is not None else None
    pairs = align_index_files(ordered, disk, found, held)
    last = ordered[-1][0] if ordered else None
    checks = []
    for t in tasks:
        files: tuple[IndexFilePlan, ...] = tuple(p for p in t.files if p.file_no in pairs)
        if files:
            tail = (RestartTail(restart, last, tuple(held or ())) if restart is not None
                    and any(p.file_no == last for p in files) else None)
            checks.append(IndexCheckTask(replace(t, files=files),
                                         {p.file_no: pairs[p.file_no] for p in files}, index_dir.uri, pointers, tail))
    return checks


def built_by(expected: list[tuple[int, IndexHeader]], built_to: int, max_entries: int,
             found: Findings) -> list[tuple[int, IndexHeader]]:
    """verify --files OUT: the expected files (creation order) OUT, built to commit-log offset `built_to`, can hold;
    those whose first key lies at or past it are not built yet (counted in flight as missing files), so that an OUT
    file is never paired with one of them. The first of those is kept when OUT may hold it without keys: opened by a
    keyless record before `built_to` after a file full before it (or as the first file)."""
    cut = next((i for i, (_, h) in enumerate(expected) if h.index_count > 1 and h.begin_phy_offset >= built_to),
               len(expected))
    if cut < len(expected):
        before = expected[cut - 1][1] if cut else None
        if before is None or is_write_full(before.index_count, max_entries) and before.end_phy_offset < built_to:
            cut += 1
    if cut < len(expected):
        found.add_in_flight("index", "missing_file", len(expected) - cut)
    return expected[:cut]


def index_in_flight(index_dir: Location, found: Findings, out: bool = False) -> None:
    """The differences of the index files still being written, moved in flight: a running broker's newest file and
    the files it may still create; verify --files OUT (`out`: its log went on past OUT's end), OUT's last file the
    log implies (the keys past OUT's end are not in it yet) and the files after it. There a file the log implies
    none for stays a finding: OUT is reput's, which writes no other."""
    names = [i.base_name for i in index_dir.list() if i.type.name == "File"]
    if out:
        names = [n for n in names if not found.by_path.get((f"index/{n}", "extra_file"))]
    paths = {f"index/{names[-1]}"} if names else set()
    paths |= {d["path"] for d in found.details if d["kind"] == "missing_file" and d["artifact"] == "index"
              and d.get("file_number", -1) >= len(names)}
    for path in paths:
        found.move_to_in_flight("index", path)
