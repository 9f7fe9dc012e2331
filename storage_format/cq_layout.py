"""Where a store's consume queues live, decided from the files and checked against the config: file queues
(`consumequeue/<topic>/<queueId>/`), a RocksDB database in `consumequeue/` (`storeType=defaultRocksDB`, 5.2+), both
in one `consumequeue/` (`rocksdbCQDoubleWriteEnable=true` with `storeType=default`: the files are the broker's, the
database a copy it keeps beside them), or a database in `consumequeue_rocksdb/` (`useSeparateStorePathForRocksdbCQ`,
releases after 5.3.3; not implemented).

Without a broker config the files decide (`discover_cq_layout`): a database is never taken for file queues. With
one, a config that says one thing and files that say another are refused, naming the setting and the file found.
5.3.3 reads `storeType` ignoring case (MessageStoreConfig.isEnableRocksDBStore)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from .errors import SettingsError
from .rocksdb_files import is_db_file
from .settings import BrokerSettings

ROCKSDB_STORE_TYPE: Final = "defaultRocksDB"
CQ_DIR: Final = "consumequeue"
SEPARATE_DB_DIR: Final = "consumequeue_rocksdb"  # StorePathConfigHelper.getStorePathRocksDBConsumeQueue (after 5.3.3)
FILES: Final = "file"
ROCKSDB: Final = "rocksdb"
DOUBLE_WRITE: Final = "double-write"
ROCKSDB_ELSEWHERE: Final = "rocksdb-elsewhere"
NAMED: Final = 3  # files named in a message before "..."


class CqLayoutError(SettingsError):
    """The config and the files disagree on where the consume queues are (exit 2, both named)."""


@dataclass(frozen=True)
class CqFiles:
    """What the layout decision looks at: the plain files and the directories directly in consumequeue/, and the
    plain files in consumequeue_rocksdb/ (names only, sorted)."""
    cq_files: tuple[str, ...] = ()
    cq_dirs: tuple[str, ...] = ()
    separate_files: tuple[str, ...] = ()

    def db_in_cq(self) -> tuple[str, ...]:
        """consumequeue/'s files that RocksDB names a database's own (CURRENT, MANIFEST-*, *.sst, ...)."""
        return tuple(f for f in self.cq_files if is_db_file(f))

    def db_separate(self) -> tuple[str, ...]:
        return tuple(f for f in self.separate_files if is_db_file(f))


@dataclass(frozen=True)
class CqLayout:
    """The decided layout: `kind` (FILES, ROCKSDB, DOUBLE_WRITE, ROCKSDB_ELSEWHERE), the database directory
    relative to the store (None: none is read or expected), and what this layout leaves unread, store-relative: a
    double-write store's database files, a RocksDB store's leftover file-queue directories."""
    kind: str
    db_dir: str | None = None
    not_read: tuple[str, ...] = ()

    @property
    def reads_database(self) -> bool:
        """The consume queues are the database's (jobs read them through jobs.pipeline.io.rocksdb_db)."""
        return self.kind in (ROCKSDB, ROCKSDB_ELSEWHERE)

    @property
    def reads_files(self) -> bool:
        """The consume queues are the files in consumequeue/<topic>/<queueId>/ (double write included)."""
        return self.kind in (FILES, DOUBLE_WRITE)

    def to_dict(self) -> dict:
        return {"layout": self.kind, "database_dir": self.db_dir, "not_read": list(self.not_read)}

    def not_read_note(self) -> str | None:
        """One line for stderr naming what this layout leaves unread (None: nothing)."""
        if not self.not_read:
            return None
        n = len(self.not_read)
        if self.kind == DOUBLE_WRITE:
            return (f"{CQ_DIR}/ holds a RocksDB database beside the file consume queues (double write): its {n} "
                    f"files are not read (the file queues are the broker's) nor written: {_names(self.not_read)}")
        return (f"{CQ_DIR}/ holds {n} file consume-queue director{'ies' if n > 1 else 'y'} beside the RocksDB "
                f"database, not read (storeType={ROCKSDB_STORE_TYPE} reads the database): {_names(self.not_read)}")


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names[:NAMED]) + (", ..." if len(names) > NAMED else "")


def _marker(db: tuple[str, ...]) -> str:
    """The database file a message names: CURRENT where there is one."""
    return "CURRENT" if "CURRENT" in db else db[0]


def is_rocksdb_type(s: BrokerSettings) -> bool:
    """storeType selects RocksDB consume queues (compared ignoring case, as the broker does)."""
    return s.store_type.lower() == ROCKSDB_STORE_TYPE.lower()


def discover_cq_layout(s: BrokerSettings, files: CqFiles) -> tuple[BrokerSettings, str | None]:
    """Without a broker config: the settings the files show (a database alone in consumequeue/: storeType=
    defaultRocksDB; a database beside topic directories: rocksdbCQDoubleWriteEnable=true), and a note saying so."""
    db = files.db_in_cq()
    if not db:
        return s, None
    if files.cq_dirs:
        return (replace(s, rocksdb_cq_double_write_enable=True),
                f"no broker config: consumequeue/ holds file consume queues and a RocksDB database ({CQ_DIR}/{_marker(db)}): "
                f"read as double write (rocksdbCQDoubleWriteEnable=true, the files authoritative); a broker with "
                f"storeType={ROCKSDB_STORE_TYPE} reads the database instead: pass its config")
    return (replace(s, store_type=ROCKSDB_STORE_TYPE),
            f"no broker config: RocksDB consume queues (storeType={ROCKSDB_STORE_TYPE}) from {CQ_DIR}/{_marker(db)}")


def cq_layout(s: BrokerSettings, files: CqFiles) -> CqLayout:
    """The layout the settings and the files agree on; CqLayoutError naming both when they do not."""
    db, separate = files.db_in_cq(), files.db_separate()
    if separate and not db:
        return CqLayout(ROCKSDB_ELSEWHERE, SEPARATE_DB_DIR, tuple(f"{CQ_DIR}/{d}/" for d in files.cq_dirs))
    if separate:
        raise CqLayoutError(f"{SEPARATE_DB_DIR}/{_marker(separate)} and {CQ_DIR}/{_marker(db)} found: two RocksDB consume-queue "
                            f"databases (the broker refuses such a store: incompatible config)")
    if is_rocksdb_type(s):
        if not db and files.cq_dirs:
            raise CqLayoutError(f"storeType={s.store_type}, but {CQ_DIR}/ holds file consume queues "
                                f"({CQ_DIR}/{files.cq_dirs[0]}/) and no RocksDB database (no {CQ_DIR}/CURRENT): "
                                f"pass the config the broker runs with")
        return CqLayout(ROCKSDB, CQ_DIR, tuple(f"{CQ_DIR}/{d}/" for d in files.cq_dirs))
    if s.rocksdb_cq_double_write_enable:
        return CqLayout(DOUBLE_WRITE, CQ_DIR, tuple(f"{CQ_DIR}/{f}" for f in files.cq_files))
    if db:
        raise CqLayoutError(f"{CQ_DIR}/{_marker(db)} found: a RocksDB consume-queue database, but storeType={s.store_type} "
                            f"and rocksdbCQDoubleWriteEnable=false make the broker read file consume queues only "
                            f"(storeType={ROCKSDB_STORE_TYPE} or rocksdbCQDoubleWriteEnable=true write the "
                            f"database): pass the config the broker runs with")
    return CqLayout(FILES)
