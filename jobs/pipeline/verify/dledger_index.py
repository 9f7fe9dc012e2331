"""Verify's DLedger checks: is `dledger-<id>/index/` what the data files imply? One unit of 32 bytes per
entry at entry index x 32 (storage_format.dledger), files of 160 MiB. Each task walks one accepted DLedger
split's entries and compares their units with the index bytes; the driver checks the files' names and sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

from storage_format import dledger
from storage_format.commitlog import NeedMoreBytes, walk_entries
from storage_format.log_sources import LogFile, broker_consequence
from storage_format.scan_plan import Split
from storage_format.segment_names import parse_segment_name, segment_name

from .findings import Findings
from ..io.fs import Location
from ..scan.result import ScanResult

art = ARTIFACT = "dledger_index"  # the artifact of every finding here
READ_AHEAD = 1 << 20  # bytes read past a split's stop to finish its last entry (more when one is larger)


@dataclass(frozen=True)
class UnitCheck:
    """One accepted DLedger split to check: where its first entry is, and the index files that can be read
    (start offset -> path; files of the wrong size are reported by the driver and left out)."""

    split: Split
    first_offset: int
    index_files: dict[int, str]
    rel_dir: str  # the index directory relative to the store, for finding paths


def check_files(home: Location, rel_dir: str, scan: ScanResult, found: Findings) -> dict[int, str]:
    """The DLedger index files that can be compared (start -> path): a missing one holding units the data
    implies, or one of the wrong size, is a finding (the broker refuses to start on a wrong size)."""
    index_dir = home.child(dledger.INDEX_DIR)
    files: dict[int, str] = {}
    if index_dir.is_dir():
        listed = index_dir.list()
        starts = {parse_segment_name(info.base_name) for info in listed} - {None}
        for info in listed:
            start = parse_segment_name(info.base_name)
            odd = index_dir.child_kind(info)
            if odd or start is None:  # DLedger's MmapFileList.load takes every entry of the directory
                why = broker_consequence(LogFile(info.base_name, info.size, "", odd or ""), dledger.INDEX_FILE_SIZE,
                                         starts, "DLedger index file")
                found.add(art, "unexpected_file", f"{rel_dir}/{info.base_name}",
                          detail=(f"{odd}, not a regular file" if odd else "not a 20-digit DLedger index file")
                          + f": {why}")
                continue
            if info.size != dledger.INDEX_FILE_SIZE:
                found.add(art, "wrong_size", f"{rel_dir}/{info.base_name}",
                          byte_offset=min(info.size, dledger.INDEX_FILE_SIZE), expected=dledger.INDEX_FILE_SIZE,
                          found=info.size)
                continue
            files[start] = index_dir.child(info.base_name).uri
    entries = scan.entry_range()
    if entries is not None:
        first, last = (dledger.index_file_of(i)[0] for i in entries)
        for start in range(first, last + 1, dledger.INDEX_FILE_SIZE):
            if start not in files and not _reported(found, f"{rel_dir}/{segment_name(start)}"):
                found.add(art, "missing_file", f"{rel_dir}/{segment_name(start)}",
                          message="the data files hold entries whose units belong in this file")
    return files


def _reported(found: Findings, path: str) -> bool:
    return any(p == path for p, _ in found.by_path)


def plan_unit_checks(scan: ScanResult, index_files: dict[int, str], rel_dir: str) -> list[UnitCheck]:
    """One check per accepted split of a DLedger data file that holds entries."""
    out = []
    for s in scan.accepted:
        sp = scan.splits[s.index]
        if sp.segment.header and s.records and s.first_offset is not None:
            out.append(UnitCheck(sp, s.first_offset, index_files, rel_dir))
    return out


def check_units(task: UnitCheck) -> Findings:
    """Walk the split's entries and compare each one's unit with the DLedger index (runs in a Spark task)."""
    from ..io.fs import location

    sp, found = task.split, Findings()
    seg = sp.segment
    begin = task.first_offset - seg.start
    want = min(seg.size, sp.stop + READ_AHEAD)
    while True:
        buf = location(seg.path).read_range(begin, want - begin)
        try:
            positions, _, _ = walk_entries(buf, seg.start + begin, 0, sp.stop - begin, seg.size - begin)
            break
        except NeedMoreBytes as more:
            want = min(seg.size, begin + more.needed_end)
    if not len(positions):
        return found
    units = dledger.expected_units(buf, positions)
    first = int(units["index"][0])
    row = 0
    while row < len(units):  # the units of one index file at a time
        start, at = dledger.index_file_of(first + row)
        n = min(len(units) - row, (dledger.INDEX_FILE_SIZE - at) // dledger.INDEX_UNIT_SIZE)
        path = task.index_files.get(start)
        if path is not None:
            got = location(path).read_range(at, n * dledger.INDEX_UNIT_SIZE)
            name = f"{task.rel_dir}/{segment_name(start)}"
            for d in dledger.compare_units(units[row:row + n], got):
                where = dict(entry=first + row + d.row, byte_offset=at + d.row * dledger.INDEX_UNIT_SIZE,
                             data_file=seg.path,
                             data_offset=int(positions[row + d.row]) - dledger.ENTRY_HEADER_SIZE + begin)
                if d.missing:
                    found.add(art, "missing_entry", name, **where)
                else:
                    found.add(art, "entry_differs", name, field=d.field, expected=d.expected, found=d.found,
                              **where)
            found.files_checked += n  # units compared (the caller counts them apart from files)
        row += n
    return found


def unit_after_last(index_files: dict[int, str], rel_dir: str, last_entry: int, found: Findings) -> None:
    """The unit after the last entry's must be zeros: DLedger truncates its index with its data, so a unit
    there names an entry the data files do not hold."""
    from ..io.fs import location

    start, at = dledger.index_file_of(last_entry + 1)
    path = index_files.get(start)
    if path is None:
        return
    unit = bytes(location(path).read_range(at, dledger.INDEX_UNIT_SIZE))
    if unit.strip(b"\0"):
        found.add(art, "extra_entry", f"{rel_dir}/{segment_name(start)}", entry=last_entry + 1, byte_offset=at,
                  found=dledger.unit_fields(unit), message="a unit past the last entry in the data files")
