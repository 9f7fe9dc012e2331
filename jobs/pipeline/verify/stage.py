"""verify's comparison stage as one job of the engine: the queue checks (consume-queue files, or a RocksDB database's
units), the index seed's in-memory check and the index files' checks, each task run by its type. One job, so that
a long task (one index file of 420 MB is one task) runs beside the queue checks instead of after them."""
from __future__ import annotations

from .cq import CqCheckTask, check_cq
from .findings import Findings
from .index_files import IndexCheckTask, check_index
from .index_seed import SeedInMemory, equal_in_memory
from .rocksdb_units import RocksCheckResult, RocksCheckTask, check_rocks

StageTask = CqCheckTask | RocksCheckTask | SeedInMemory | IndexCheckTask


def check_stage_task(item: StageTask) -> Findings | RocksCheckResult | tuple[bool, int]:
    """Run one task of the stage: its findings (a RocksDB task's result; the seed's (equal, size))."""
    if isinstance(item, SeedInMemory):
        return equal_in_memory(item)
    if isinstance(item, IndexCheckTask):
        return check_index(item)
    if isinstance(item, RocksCheckTask):
        return check_rocks(item)
    return check_cq(item)
