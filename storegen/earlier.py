"""A store as it stood earlier, and a day later with its head expired: what the nightly recipe meets (`make
nightly-demo`, the bench's nightly stage). Earlier = the same commit log cut at a record, the bytes after it zeros as
the broker's preallocated segment holds them and later segments not yet there; expired = its oldest segments
deleted, as the broker's clean service deletes them after fileReservedTime.

`python -m storegen.earlier DIR` writes DIR/last-night (the sample store 7/8 of the way through) and DIR/store
(the whole sample store, its oldest segment gone); `--grow STORE` then brings a copy of last-night up to DIR/store in
place, as one broker directory grows (verify --since builds on a report of the same store only)."""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
from pathlib import Path

from .sample import write_sample_store

GROWN_BY = 1 / 8  # a day of messages, of the store OUT1 was built from
DEMO_MESSAGES = 6000


def record_boundary(segment: Path, start: int, at_least: int) -> int:
    """The commit-log offset of the first record in `segment` (starting at offset `start`) at or after
    `at_least`, or of the segment's end of data (a walk of the records' sizes)."""
    with open(segment, "rb") as f:
        pos = 0
        while True:
            f.seek(pos)
            size = int.from_bytes(f.read(4).rjust(4, b"\0"), "big", signed=True)
            if size <= 0 or start + pos >= at_least:
                return start + pos
            pos += size


def log_end(store: Path) -> int:
    """The commit-log offset after the store's last record."""
    last = max((store / "commitlog").iterdir(), key=lambda s: int(s.name))
    return record_boundary(last, int(last.name), 1 << 62)


def earlier_store(store: Path, dest: Path, share: float, link: bool = False) -> int:
    """Write `dest`: `store` as it stood when its log held `share` of its bytes (cut at the next record); the
    segments before the cut copied, or hard-linked with `link` (for stores jobs only read). Returns the cut."""
    segments = sorted((store / "commitlog").iterdir(), key=lambda s: int(s.name))
    target = int(log_end(store) * share)
    holding = max((s for s in segments if int(s.name) <= target), key=lambda s: int(s.name))
    cut = record_boundary(holding, int(holding.name), target)
    cut_store(store, dest, cut, link)
    return cut


def cut_store(store: Path, dest: Path, cut: int, link: bool = False) -> None:
    """Write `dest`: `store`'s commit log as it stood before the record at offset `cut` was written, and the files of
    its root (broker.conf, the checkpoint and marker files: they name the generation and the confirm offset); no
    consume queues, no index (a rebuild makes them)."""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "commitlog").mkdir(parents=True)
    for f in store.iterdir():
        if f.is_file() and not f.is_symlink():
            shutil.copy(f, dest / f.name)
            os.chmod(dest / f.name, 0o644)
    for seg in sorted((store / "commitlog").iterdir(), key=lambda s: int(s.name)):
        start, size, dst = int(seg.name), seg.stat().st_size, dest / "commitlog" / seg.name
        if start + size <= cut:
            os.link(seg, dst) if link else shutil.copy(seg, dst)
        elif start < cut:
            shutil.copy(seg, dst)
            os.chmod(dst, 0o644)
            with open(dst, "r+b") as f:
                f.seek(cut - start)
                f.write(bytes(size - (cut - start)))


def grow_in_place(store: Path, today: Path) -> None:
    """`store` (`today` as it stood earlier: cut_store, not linked) brought up to `today`'s commit log and root files
    the way a broker brings its own directory on: a segment both hold is written over where it differs (the broker
    writes on into its preallocated segment: it stays the same file), the segments `today` adds are copied in, those it
    no longer holds (expired) deleted. Its consume queues and index are left to the caller."""
    mine = {p.name: p for p in (store / "commitlog").iterdir()}
    theirs = {p.name: p for p in (today / "commitlog").iterdir()}
    for name, seg in sorted(theirs.items()):
        dst = store / "commitlog" / name
        if name not in mine:
            shutil.copy(seg, dst)
            os.chmod(dst, 0o644)
        elif not filecmp.cmp(seg, dst, shallow=False):
            with open(seg, "rb") as src, open(dst, "r+b") as out:
                shutil.copyfileobj(src, out, 1 << 20)
                out.truncate()
    for name in mine.keys() - theirs.keys():
        mine[name].unlink()
    for f in today.iterdir():
        if f.is_file() and not f.is_symlink():
            shutil.copyfile(f, store / f.name)


def expire_head(store: Path, segments: int = 1) -> int:
    """Delete the store's oldest `segments` segments; returns the commit log's new min offset."""
    segs = sorted((store / "commitlog").iterdir(), key=lambda s: int(s.name))
    for seg in segs[:segments]:
        seg.unlink()
    return int(segs[segments].name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m storegen.earlier", description=__doc__)
    p.add_argument("dir", type=Path)
    p.add_argument("--messages", type=int, default=DEMO_MESSAGES)
    p.add_argument("--grow", type=Path, metavar="STORE",
                   help="instead: bring STORE (a copy of DIR/last-night) up to DIR/store's commit log in place, as the "
                        "broker's own directory grows (grow_in_place)")
    args = p.parse_args(argv)
    store = args.dir / "store"
    if args.grow is not None:
        grow_in_place(args.grow, store)
        print(f"{args.grow}: its commit log is {store}'s now, written in place (oldest segment gone)")
        return 0
    if store.exists():
        print(f"storegen.earlier: {store} exists; choose an empty directory", file=sys.stderr)
        return 2
    write_sample_store(store, n=args.messages)
    cut = earlier_store(store, args.dir / "last-night", 1 - GROWN_BY)
    min_offset = expire_head(store)
    print(f"last night's store {args.dir / 'last-night'}: the log up to offset {cut}; today's {store}: "
          f"{log_end(store) - cut} bytes more, its oldest segment gone (min offset {min_offset})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
