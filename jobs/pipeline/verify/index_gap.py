"""The broker's own index loss, named (issue 37 item 8): after its DLedger recovery the broker deletes the index
file newer than the checkpoint and resumes indexing at the recovery point, so the keyed records between the last
kept file's last entry and the new file's first are in no index file. verify's index findings on such a store
(one byte-identical to the broker's recovery) are that loss, and it says so instead of a bare INCONSISTENT."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..io.fs import Location
from ..io.workdir import read_keys
from ..scan.result import ScanResult
from .findings import Findings
from .index_files import read_header

INDEX_NAME_DIGITS = 17


@dataclass(frozen=True, kw_only=True)
class IndexGap:
    """Keyed records that no index file covers: after `before`'s last entry, before `after`'s first."""

    before: str  # index file names
    after: str
    start: int  # commit-log offsets: endPhyOffset of `before`, beginPhyOffset of `after` (both exclusive)
    end: int
    keys: int  # index keys of the records strictly between

    def describe(self, findings: int, recovery: str = "DLedger recovery") -> str:
        """The line verify prints under its counts (`recovery`: the broker's recovery that lost them)."""
        return (f"these {findings} index findings are the broker's own index loss after its {recovery}: the "
                f"{self.keys} keys of the records between commit-log offsets {self.start} and {self.end} (after "
                f"index/{self.before}'s last entry, before index/{self.after}'s first) are in no index file, as the "
                f"broker's recovery leaves them; `reput recover --full-index` on the stopped broker's store indexes "
                f"them again")

    def to_dict(self) -> dict:
        return asdict(self)


def find_index_gap(index_dir: Location, scan: ScanResult, work: Location) -> IndexGap | None:
    """The first pair of adjacent index files (name order) with keyed records strictly between the first's last
    entry and the second's first (headers only; the keys counted from the splits that overlap the gap). A file shorter
    than its header (a wrong_size finding) bounds no gap."""
    names = sorted(i.base_name for i in index_dir.list() if i.type.name == "File"
                   and len(i.base_name) == INDEX_NAME_DIGITS and i.base_name.isdigit())
    headers = [read_header(index_dir.child(n)) for n in names]
    for (a, ha), (b, hb) in zip(zip(names, headers), zip(names[1:], headers[1:])):
        if ha is None or hb is None:
            continue
        if ha.index_count > 1 and hb.index_count > 1 and hb.begin_phy_offset > ha.end_phy_offset:
            keys = _keys_between(scan, work, ha.end_phy_offset, hb.begin_phy_offset)
            if keys:
                return IndexGap(before=a, after=b, start=ha.end_phy_offset, end=hb.begin_phy_offset, keys=keys)
    return None


def _keys_between(scan: ScanResult, work: Location, start: int, end: int) -> int:
    """Index keys of records at commit-log offsets strictly between start and end (only the splits there read)."""
    count = 0
    for s in scan.accepted:
        split = scan.splits[s.index]
        lo, hi = split.segment.start + split.start, split.segment.start + split.stop
        if hi <= start or lo >= end:
            continue
        phy = read_keys(work, s.index).column("phy").to_numpy()
        count += int(((phy > start) & (phy < end)).sum())
    return count


def explained_gap(found: Findings, index_dir: Location, scan: ScanResult, work: Location) -> IndexGap | None:
    """The gap, when it accounts for the index findings: one lookup that fails per key of the gap, every index
    finding in the file before the gap or later; None otherwise (the findings stay unexplained)."""
    index = {k: n for k, n in found.counts.items() if k.startswith("index.") and n}
    if not index:
        return None
    gap = find_index_gap(index_dir, scan, work)
    if gap is None or index.get("index.key_not_found", 0) != gap.keys:
        return None
    files = {path for (path, _), n in found.by_path.items() if n and path.startswith("index/")}
    if not all(path.rsplit("/", 1)[-1] >= gap.before for path in files):
        return None
    return gap
