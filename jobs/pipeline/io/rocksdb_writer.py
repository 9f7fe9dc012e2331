"""RocksDB files written with rocksdict (the `reput[rocksdb]` extra, imported only when one is written): sorted SST
files of one column family in the broker's table format, and a fresh consume-queue database made of them.

The table options are RocksDBOptionsFactory's (5.3.3): BlockBasedTable format_version 5, 32 KiB blocks, a 16-bit
bloom filter, a binary-and-hash data block index for `default`; `default` compressed with the broker's bottommost
default (zstd: ingested files land in the bottommost level), `offset` uncompressed. The database holds exactly the
column families `default` and `offset`, every key ingested from SST files (nothing in a memtable, an empty WAL), and
none of the binding's or RocksDB's own side files (`rocksdict-config.json`, the info LOG)."""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage_format.rocksdb_cq import COLUMN_FAMILIES, DEFAULT_CF, OFFSET_CF, OFFSET_KEY_FIXED

from .rocksdb_db import binding

FORMAT_VERSION = 5  # RocksDBOptionsFactory: BlockBasedTableConfig.setFormatVersion(5), both column families
BLOCK_SIZE = 32 * 1024
METADATA_BLOCK_SIZE = 4 * 1024
BLOOM_BITS = 16
DATA_BLOCK_HASH_RATIO = 0.75
BINDING_FILES = ("rocksdict-config.json",)  # what the binding writes into a database directory it opens
EMPTY_WAL_SUFFIX = ".log"


class RocksWriteError(RuntimeError):
    """RocksDB refused a write (an SST or the database): one line naming the file."""


def cf_options(rocksdict: Any, cf: str) -> Any:
    """A column family's options as RocksDBOptionsFactory sets what lands in its SST files (raw byte keys)."""
    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(FORMAT_VERSION)
    table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
    table.set_block_size(BLOCK_SIZE)
    table.set_bloom_filter(BLOOM_BITS, False)
    if cf == DEFAULT_CF:
        table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
        table.set_data_block_hash_ratio(DATA_BLOCK_HASH_RATIO)
        table.set_metadata_block_size(METADATA_BLOCK_SIZE)
        opts.set_compression_type(rocksdict.DBCompressionType.lz4())  # rocksdbCompressionType's default
        opts.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())  # bottomMostCompression...'s
    else:
        table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_search())
        opts.set_compression_type(rocksdict.DBCompressionType.none())
    opts.set_block_based_table_factory(table)
    return opts


def write_sst(path: Path, cf: str, chunks: Iterable[tuple[list[bytes], list[bytes]]]) -> int:
    """One SST file of column family `cf` holding, chunk after chunk, keys[i] -> values[i] (keys strictly ascending
    in bytewise order across the chunks, as SstFileWriter requires); the keys written. No file without keys."""
    rocksdict = binding()
    writer, written = None, 0
    try:
        for keys, values in chunks:
            if writer is None and keys:
                writer = rocksdict.SstFileWriter(options=cf_options(rocksdict, cf))
                writer.open(str(path))
            for key, value in zip(keys, values):
                writer[key] = value
            written += len(keys)
        if writer is not None:
            writer.finish()
    except Exception as exc:  # the binding raises plain Exception for every RocksDB status
        raise RocksWriteError(f"{path}: RocksDB refused the SST file: {' '.join(str(exc).split())}") from None
    return written


@dataclass(frozen=True)
class SstFile:
    """One SST file of the built database, as RocksDB lists it (live_files)."""

    name: str
    column_family: str
    level: int
    size: int
    entries: int

    def to_dict(self) -> dict:
        return {"name": self.name, "column_family": self.column_family, "level": self.level, "size": self.size,
                "entries": self.entries}


def build_database(db_dir: Path, ssts: dict[str, list[Path]], log_dir: Path) -> list[SstFile]:
    """A new database in db_dir (which must not exist) with the column families `default` and `offset`, each
    ingesting its SST files (moved in; per family their key ranges must not overlap); closed, the binding's files
    removed. RocksDB's info LOG goes to log_dir. The database's SST files, as RocksDB lists them."""
    rocksdict = binding()
    log_dir.mkdir(parents=True, exist_ok=True)
    opts = cf_options(rocksdict, DEFAULT_CF)
    opts.create_if_missing(True)
    opts.set_error_if_exists(True)
    opts.create_missing_column_families(True)
    opts.set_db_log_dir(str(log_dir))
    try:
        db = rocksdict.Rdict(str(db_dir), options=opts, column_families={OFFSET_CF: cf_options(rocksdict, OFFSET_CF)})
    except Exception as exc:
        raise RocksWriteError(f"{db_dir}: RocksDB could not create the database: {' '.join(str(exc).split())}") \
            from None
    try:
        ingest = rocksdict.IngestExternalFileOptions()
        ingest.set_move_files(True)
        for cf in COLUMN_FAMILIES:
            if ssts.get(cf):
                target = db if cf == DEFAULT_CF else db.get_column_family(cf)
                target.ingest_external_file([str(p) for p in ssts[cf]], ingest)
        files = _sst_files(db)
    except Exception as exc:
        raise RocksWriteError(f"{db_dir}: RocksDB refused to ingest the SST files: {' '.join(str(exc).split())}") \
            from None
    finally:
        db.close()
    for name in BINDING_FILES:
        (db_dir / name).unlink(missing_ok=True)
    return files


def _sst_files(db: Any) -> list[SstFile]:
    """The live SST files (the ingested files sit in the bottommost level), each with its column family told by its
    first key's shape (live_files lists every family's files and names none)."""
    out = []
    for f in db.live_files():
        key = bytes(f["start_key"])
        topic_len = int.from_bytes(key[:4], "big", signed=True) if len(key) >= 4 else -1
        cf = OFFSET_CF if len(key) == OFFSET_KEY_FIXED + topic_len else DEFAULT_CF
        out.append(SstFile(f["name"].lstrip("/"), cf, int(f["level"]), int(f["size"]), int(f["num_entries"])))
    return sorted(out, key=lambda f: f.name)


def database_files(db_dir: Path) -> dict[str, int]:
    """Every file of a database directory: name -> size."""
    return {e.name: e.stat().st_size for e in os.scandir(db_dir) if e.is_file()}
