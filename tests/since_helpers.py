"""Stores for `rebuild --since` tests: a golden store as it was earlier (its commit log cut after a record, the
bytes after it zeros as the broker's preallocated segment holds them, later segments not yet there), and the
clean service's deletions read independently from the golden files."""
from __future__ import annotations

import struct
from pathlib import Path

from storegen.earlier import cut_store
from tests.conftest import GOLDEN
from tests.golden_walk import records

CQ_UNIT = 20
INDEX_END_PHY_AT = 24  # header: beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset (8 bytes each)


def cut_offset(case: str, fraction: float) -> int:
    """The commit-log offset of the record `fraction` of the way through the case's records."""
    recs = records(case)
    return recs[min(len(recs) - 1, int(len(recs) * fraction))].physical_offset


def earlier_store(case: str, dest: Path, cut: int) -> Path:
    """The case's store as it stood before the record at `cut` was written (storegen.earlier.cut_store)."""
    cut_store(GOLDEN / case, dest, cut)
    return dest


def grown_in_place(case: str, store: Path) -> Path:
    """`store` (the case as it stood earlier: earlier_store) brought up to the whole case as a broker's directory grows
    (storegen.earlier.grow_in_place: the same segment files written on, the same directory), with the case's consume
    queues and index in place of its own: the store an earlier verify of `store` was made on, a night later."""
    import shutil

    from storegen.earlier import grow_in_place

    grow_in_place(store, GOLDEN / case)
    for part in ("consumequeue", "index"):
        shutil.rmtree(store / part, ignore_errors=True)
        shutil.copytree(GOLDEN / case / part, store / part)
        for p in [store / part, *(store / part).rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    return store


def queue_files_after_clean(case: str, min_offset: int) -> set[str]:
    """The case's consume-queue files the clean service keeps at `min_offset`, read from the golden files: per queue,
    oldest first, every file but the last goes while the phy of its last unit is below min_offset."""
    kept = set()
    root = GOLDEN / case / "consumequeue"
    for qdir in sorted(p for p in root.glob("*/*") if p.is_dir()):
        files = sorted(qdir.iterdir())
        i = 0
        while i < len(files) - 1:
            data = files[i].read_bytes()
            if struct.unpack_from(">q", data, len(data) - CQ_UNIT)[0] >= min_offset:
                break
            i += 1
        kept |= {f"consumequeue/{f.relative_to(root).as_posix()}" for f in files[i:]}
    return kept


def index_files_expired(case: str, min_offset: int) -> int:
    """How many of the case's index files (name order) the clean service deletes at `min_offset`, read from the
    golden headers: none unless the first file's endPhyOffset is below it, then each but the last while it is."""
    ends = [struct.unpack_from(">q", p.read_bytes()[:40], INDEX_END_PHY_AT)[0]
            for p in sorted((GOLDEN / case / "index").iterdir())]
    if not ends or ends[0] >= min_offset:
        return 0
    n = 0
    while n < len(ends) - 1 and ends[n] < min_offset:
        n += 1
    return n


def expired_copy(case: str, dest: Path, segments: int, clean: bool = True) -> int:
    """A copy of the case with its oldest `segments` segments deleted and, with `clean`, what the clean service
    deletes of its queues and index (read independently above) deleted too; returns the log's new min offset."""
    import shutil

    shutil.copytree(GOLDEN / case, dest)
    return expire(case, dest, segments, clean)


def expire(case: str, dest: Path, segments: int, clean: bool = True) -> int:
    """`dest` (the whole case: a copy, or grown in place) with its oldest `segments` segments deleted and, with
    `clean`, what the clean service deletes of its queues and index; returns the log's new min offset."""
    from storegen.earlier import expire_head

    min_offset = expire_head(dest, segments)
    if clean:
        kept = queue_files_after_clean(case, min_offset)
        for p in (dest / "consumequeue").glob("*/*/*"):
            if f"consumequeue/{p.relative_to(dest / 'consumequeue').as_posix()}" not in kept:
                p.unlink()
        for p in sorted((dest / "index").iterdir())[:index_files_expired(case, min_offset)]:
            p.unlink()
    return min_offset


def expired_units(store: Path, min_offset: int) -> int:
    """Units of records (not fillers) in the store's consume queues that point below the log's min offset."""
    n = 0
    for p in store.glob("consumequeue/*/*/*"):
        data = p.read_bytes()
        for at in range(0, len(data) - CQ_UNIT + 1, CQ_UNIT):
            phy, size = struct.unpack_from(">qi", data, at)
            n += 0 <= phy < min_offset and 0 < size < 0x7FFFFFFF
    return n


def expired_index(store: Path, min_offset: int) -> tuple[int, int]:
    """(files, entries) of the store's index below the min offset: the files before the newest one holding an entry
    below it, and that file's entries below it."""
    files = sorted((store / "index").iterdir())
    heads = [struct.unpack_from(">qqqqii", p.read_bytes()[:40]) for p in files]
    held = [i for i, h in enumerate(heads) if h[5] > 1 and h[2] < min_offset]
    if not held:
        return 0, 0
    i = held[-1]
    data, slots = files[i].read_bytes(), 64  # the golden cases' maxHashSlotNum
    entries = [struct.unpack_from(">iqii", data, 40 + slots * 4 + p * 20)[1] for p in range(1, heads[i][5])]
    return i, sum(1 for phy in entries if phy < min_offset)
