"""A RocketMQ 5.x RocksDB consume-queue database read read-only, through a private directory of links to its files
(the binding writes `rocksdict-config.json` and RocksDB its LOG into the directory it opens: never the store's own).
`rocksdict` (the `reput[rocksdb]` extra) is imported only here, and only when a database is opened."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from storage_format.errors import StoreFormatError
from storage_format.rocksdb_files import manifest_cut
from storage_format.rocksdb_cq import (CHECKPOINT_KEY, CTRL_2, DEFAULT_CF, OFFSET_CF, UNIT_VALUE_SIZE,
                                       RocksCqFormatError, parse_checkpoint_value, parse_unit_key, unit_values)

from ..runtime.failure import JobError
from .fs import Location
from .paths import is_local

EXTRA = "reput[rocksdb]"
# Files of the database directory never linked: the lock, RocksDB's info logs, a binding's config, and anything
# that is not a regular file (a double-write store's topic directories).
NOT_LINKED = ("LOCK", "LOG", "rocksdict-config.json", "speedict-config.json")
BATCH_UNITS = 65536
_LINK_PREFIX = "reput-rocksdb-"
_READ_AT = re.compile(r"in \S*?(\d+\.sst) offset (\d+)")  # where RocksDB's status names a block it cannot read
_FILE_IN_MESSAGE = re.compile(r"(?:[\w.-]*/)*((?:MANIFEST|OPTIONS)-\d+|CURRENT|IDENTITY|\d+\.(?:sst|log|blob))\b")


class RocksUnavailable(JobError):
    """The `reput[rocksdb]` extra is not installed: str() is the one-line error naming it."""


@dataclass(frozen=True)
class UnitBatch:
    """Consecutive `default` items: their keys and their values decoded as one UNIT_VALUE_DTYPE array; an item whose
    value is not a unit's 28 bytes is left out of both and listed in `bad_values` (key, value length)."""
    keys: list[bytes]
    values: np.ndarray
    bad_values: tuple[tuple[bytes, int], ...] = ()


def binding() -> Any:
    """The rocksdict module (imported at the first RocksDB store, read or written), or RocksUnavailable naming the
    extra."""
    try:
        import rocksdict  # noqa: PLC0415 (lazy: a store without RocksDB never needs it)
    except ImportError as exc:
        raise RocksUnavailable(f"a RocksDB consume-queue store needs the optional dependency rocksdict: "
                               f"pip install '{EXTRA}' ({exc})") from None
    return rocksdict


class CqDatabase:
    """An open consume-queue database: both column families iterated in key order (RocksDB's bytewise order)."""

    def __init__(self, path: Path, label: str, db: Any, families: list[str]) -> None:
        self.path = path
        self._label = label
        self._db = db
        self._families = families
        self._offset = db.get_column_family(OFFSET_CF)

    def column_families(self) -> list[str]:
        """The column families the database holds (5.3.3 writes exactly `default` and `offset`)."""
        return list(self._families)

    def unit_items(self, lower: bytes | None = None, upper: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """`default` (key, value) pairs in key order, keys in [lower, upper). The bounds are applied here: the
        binding's ReadOptions encodes iterator bounds in its non-raw form, which raw keys do not compare with."""
        last = lower
        for key, value in self._db.items(from_key=lower) if lower is not None else self._db.items():
            if upper is not None and key >= upper:
                return
            last = key
            yield key, value
        self._ran_out(self._db, last, lower is None and last is None)

    def unit_batches(self, lower: bytes | None = None, upper: bytes | None = None,
                     size: int = BATCH_UNITS) -> Iterator[UnitBatch]:
        """`default` items in [lower, upper) in batches of up to `size`, values decoded in one frombuffer; a value
        that is not 28 bytes is listed in the batch's `bad_values` (UnitBatch) for the caller to report."""
        items = iter(self._db.items(from_key=lower) if lower is not None else self._db.items())
        last = lower
        while True:  # unit_items' loop inlined, batches cut by islice: ~0.3 us a unit is the binding's
            keys: list[bytes] = []
            values: list[bytes] = []
            key_to, value_to = keys.append, values.append
            ended, bounded = True, False
            for key, value in islice(items, size):
                if upper is not None and key >= upper:
                    bounded = True
                    break
                key_to(key)
                value_to(value)
            else:
                ended = len(keys) < size
            if keys:
                last = keys[-1]
                yield self._batch(keys, values)
            if ended:
                if not bounded:
                    self._ran_out(self._db, last, lower is None and last is None)
                return

    @staticmethod
    def _batch(keys: list[bytes], values: list[bytes]) -> UnitBatch:
        if set(map(len, values)) == {UNIT_VALUE_SIZE}:
            return UnitBatch(keys, unit_values(b"".join(values)).copy())
        bad = tuple((k, len(v)) for k, v in zip(keys, values) if len(v) != UNIT_VALUE_SIZE)
        kept = [(k, v) for k, v in zip(keys, values) if len(v) == UNIT_VALUE_SIZE]
        return UnitBatch([k for k, _ in kept], unit_values(b"".join(v for _, v in kept)).copy(), bad)

    def unreferenced_files(self) -> list[str]:
        """The *.sst files of the directory the database does not reference (the broker's next read-write open
        deletes them; nothing here reads them): for the caller to count and name."""
        live = {str(f["name"]).lstrip("/") for f in self._db.live_files()}
        return sorted(p.name for p in self.path.glob("*.sst") if p.name not in live)

    def offset_items(self) -> Iterator[tuple[bytes, bytes]]:
        """`offset` (key, value) pairs in key order: "max"/"min" records and the checkpoint."""
        last = None
        for key, value in self._offset.items():
            last = key
            yield key, value
        self._ran_out(self._offset, last, last is None)

    def _ran_out(self, family: Any, last: bytes | None, from_first: bool) -> None:
        """An iteration ran out after `last` (None: it read nothing): RocksDB also ends one where it cannot read a
        block (a checksum mismatch, a file cut short) and says so only in its iterator's status. A fresh iterator
        stepped past `last` reads the same block: its status, or a key it still finds, is refused naming the
        file and byte offset."""
        it = family.iter()
        if from_first:
            it.seek_to_first()
        else:
            it.seek(last)
            if it.valid() and it.key() == last:
                it.next()
        try:
            it.status()
        except Exception as exc:  # the binding raises plain Exception for every RocksDB status
            text = " ".join(str(exc).split())
            found = _READ_AT.search(text)
            where, at = ((f"{self._label}/{found.group(1)}", int(found.group(2))) if found else (self._label, None))
            raise StoreFormatError(where, at, f"the RocksDB database cannot be read past here: {text}") from None
        if it.valid():
            raise StoreFormatError(self._label, None, f"the RocksDB iteration ended before key {it.key().hex()}, "
                                                      f"which the database holds")

    def offset_value(self, key: bytes) -> bytes | None:
        """One `offset` key's value (a queue's "max"/"min" record: rocksdb_cq.offset_key), None when absent."""
        value = self._offset.get(key)
        return None if value is None else bytes(value)

    def unit_topics(self) -> Iterator[bytes]:
        """The topics that have units, in key order: one seek per topic (a topic's keys are contiguous)."""
        lower: bytes | None = None
        while True:
            key = next((k for k, _ in self.unit_items(lower)), None)
            if key is None:
                return
            try:
                topic = parse_unit_key(key).topic
            except RocksCqFormatError as exc:
                raise StoreFormatError(str(self.path), None, f"column family {DEFAULT_CF}, key {key.hex()}: {exc}") \
                    from None
            yield topic
            lower = key[:5 + len(topic)] + CTRL_2  # past every key of the topic: its 0x01 separator, plus one

    def checkpoint(self) -> int | None:
        """CHECKPOINT_TOPIC's value (the end of the last dispatched record), None when the key is absent."""
        value = self._offset.get(CHECKPOINT_KEY)
        if value is None:
            return None
        try:
            return parse_checkpoint_value(bytes(value))
        except RocksCqFormatError as exc:
            raise StoreFormatError(str(self.path), None, f"column family {OFFSET_CF}, checkpoint key: {exc}") from None


def link_directory(db_dir: Path) -> Path:
    """A new private directory holding a symbolic link to each regular file of db_dir (NOT_LINKED left out)."""
    links = Path(tempfile.mkdtemp(prefix=_LINK_PREFIX))
    try:
        for entry in sorted(os.scandir(db_dir), key=lambda e: e.name):
            if entry.name in NOT_LINKED or entry.name.startswith("LOG.old") or not entry.is_file(follow_symlinks=True):
                continue
            os.symlink(os.path.abspath(entry.path), links / entry.name)
    except BaseException:
        shutil.rmtree(links, ignore_errors=True)
        raise
    return links


def _check_current(db_dir: Path, label: str) -> None:
    """CURRENT present, naming a MANIFEST that exists and is whole records: checked before RocksDB, which names
    neither well and opens a cut MANIFEST as an older view."""
    current = db_dir / "CURRENT"
    if not current.is_file():
        raise StoreFormatError(f"{label}/CURRENT", None, "missing: not a RocksDB database that can be opened")
    text = current.read_bytes()
    name = text.decode("ascii", "replace").strip()
    if not text.endswith(b"\n") or not re.fullmatch(r"MANIFEST-\d+", name):
        raise StoreFormatError(f"{label}/CURRENT", 0, f"does not name a MANIFEST file ({text[:40]!r})")
    if not (db_dir / name).is_file():
        raise StoreFormatError(f"{label}/{name}", None, "missing (named by CURRENT): the database cannot be opened")
    data = (db_dir / name).read_bytes()
    if not data:
        raise StoreFormatError(f"{label}/{name}", None, "empty (named by CURRENT): the database cannot be opened")
    cut = manifest_cut(data)
    if cut is not None:
        raise StoreFormatError(f"{label}/{name}", cut.offset, f"cut short: {cut.reason}; RocksDB would open the "
                               f"database without what the MANIFEST lost")


def _open_failure(exc: Exception, links: Path, label: str) -> StoreFormatError:
    """RocksDB's refusal to open, as one line naming the file it names (the link directory's path replaced)."""
    text = " ".join(str(exc).replace(str(links), label).split())
    found = _FILE_IN_MESSAGE.search(text)
    where = f"{label}/{found.group(1)}" if found else label
    return StoreFormatError(where, None, f"the RocksDB database cannot be opened read-only: {text}")


def _open(rocksdict: Any, links: Path, label: str) -> tuple[Any, list[str]]:
    raw = rocksdict.Options(raw_mode=True)
    try:
        families = list(rocksdict.Rdict.list_cf(str(links), raw))
    except Exception as exc:  # the binding raises plain Exception for every RocksDB status
        raise _open_failure(exc, links, label) from None
    missing = [cf for cf in (DEFAULT_CF, OFFSET_CF) if cf not in families]
    if missing:
        manifest = (links / "CURRENT").read_text(encoding="ascii", errors="replace").strip()
        raise StoreFormatError(f"{label}/{manifest}", None, f"lists the column families {', '.join(families)}, "
                               f"without {' and '.join(missing)}: not a RocketMQ consume-queue database (or a "
                               f"MANIFEST cut short)")
    extra = [cf for cf in families if cf not in (DEFAULT_CF, OFFSET_CF)]
    if extra:  # RocksDB opens a database only with all its column families; the broker names these two
        manifest = (links / "CURRENT").read_text(encoding="ascii", errors="replace").strip()
        raise StoreFormatError(f"{label}/{manifest}", None, f"lists the column families {', '.join(families)}: "
                               f"{', '.join(extra)} besides {DEFAULT_CF} and {OFFSET_CF}, which RocketMQ's "
                               f"consume-queue store opens alone, and RocksDB refuses to open a database without all "
                               f"of them (\"Column families not opened: {', '.join(extra)}\"): the broker does not "
                               f"start")
    others = {cf: rocksdict.Options(raw_mode=True) for cf in families if cf != DEFAULT_CF}
    try:
        db = rocksdict.Rdict(str(links), options=rocksdict.Options(raw_mode=True), column_families=others,
                             access_type=rocksdict.AccessType.read_only(False))
    except Exception as exc:
        raise _open_failure(exc, links, label) from None
    return db, families


def _check_referenced(db: CqDatabase, links: Path, label: str) -> None:
    """A database that references none of the directory's *.sst files reads as empty although it holds data: its
    MANIFEST does not describe this directory (cut at a record boundary, or another database's)."""
    ssts = sorted(p.name for p in db.path.glob("*.sst"))
    if ssts and len(db.unreferenced_files()) == len(ssts):
        manifest = (links / "CURRENT").read_text(encoding="ascii", errors="replace").strip()
        raise StoreFormatError(f"{label}/{manifest}", None, f"references none of the {len(ssts)} *.sst files "
                               f"beside it ({ssts[0]}, ...): the database would read as empty")


@contextmanager
def open_cq_database(db_dir: Path, store_label: str) -> Iterator[CqDatabase]:
    """db_dir's database opened read-only through a private link directory, which is removed on leaving (also on an
    error). store_label names the database directory in messages (e.g. `STORE/consumequeue`). Errors: RocksUnavailable
    (no extra), StoreFormatError (a database that cannot be opened, naming the file)."""
    rocksdict = binding()
    db_dir = Path(db_dir)
    _check_current(db_dir, store_label)
    links = link_directory(db_dir)
    try:
        db, families = _open(rocksdict, links, store_label)
        try:
            opened = CqDatabase(db_dir, store_label, db, families)
            _check_referenced(opened, links, store_label)
            yield opened
        finally:
            db.close()
    finally:
        shutil.rmtree(links, ignore_errors=True)


def open_store_database(store: Location, db_dir: str) -> AbstractContextManager[CqDatabase]:
    """open_cq_database of a store's database directory (relative to the store root, e.g. `consumequeue`), named
    by its path in messages; a store on object storage is refused by name (RocksDB reads local files only)."""
    loc = store.child(db_dir)
    if not is_local(loc):
        raise JobError(f"{loc.uri}: a RocksDB consume-queue database is read from a local (or mounted) store only; "
                       f"copy the store's {db_dir}/ to local disk")
    return open_cq_database(Path(loc.path), loc.path)
