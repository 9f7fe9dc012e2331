"""`spark.read.format("rocketmq-commitlog").load(STORE)`: commit-log records as a DataFrame.

Partitioning: one partition per split, a byte range of one segment (option `splitSize`, default
128 MiB; `0` = whole segments); consecutive small splits are packed into one partition, keeping at least
`minPartitions` (default 4) partitions. A split that starts mid-segment finds its first record by the
physicalOffset rule. Performance: each partition decodes vectorised in its Python worker and yields
Arrow record batches (no per-row Python objects). Bodies are left out unless `includeBody` is true.

Rows are the valid records each split's walk reaches: a walk stops at the first invalid record of its
segment. Unlike the jobs (jobs.pipeline.scan.decode), the reader does not check chain continuity across
splits, so on a corrupt store use `splitSize=0` or the jobs for exact broker semantics.

Options: `brokerConfig` (broker .properties path, read on the driver), `splitSize`, `minPartitions`,
`includeBody`.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from storage_format.commitlog import RecordColumns
from storage_format.properties import KEYS, TAGS, UNIQ_KEY
from storage_format.scan_plan import DEFAULT_SPLIT_SIZE, Split, plan_splits
from storage_format.settings import BrokerSettings, load_settings

from ..io.fs import location
from ..store.segments import list_segments
from .result import SplitTask
from .decode import decode_split_columns, pack_splits

SCHEMA = (
    "segment STRING, physical_offset BIGINT, total_size INT, magic_version INT, body_crc INT, "
    "queue_id INT, flag INT, queue_offset BIGINT, sys_flag INT, transaction_type INT, born_timestamp BIGINT, "
    "born_host STRING, store_timestamp BIGINT, store_host STRING, reconsume_times INT, "
    "prepared_transaction_offset BIGINT, body_length INT, topic STRING, tags STRING, keys STRING, "
    "uniq_key STRING, delay_level INT, properties STRING"
)
BODY_FIELD = ", body BINARY"


@dataclass(frozen=True)
class SplitPartition(InputPartition):
    """Consecutive splits read by one task: picklable, sent to the executor that reads them."""

    splits: tuple[Split, ...]
    settings: BrokerSettings
    include_body: bool

    def __init__(self, splits: tuple[Split, ...], settings: BrokerSettings, include_body: bool) -> None:
        object.__setattr__(self, "splits", splits)
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "include_body", include_body)
        object.__setattr__(self, "value", splits[0].index)


def format_hosts(cols: RecordColumns, which: str) -> pa.Array:
    """`ip:port` strings; IPv4 formatted with Arrow kernels, IPv6 (rare) with ipaddress."""
    at = cols.pos + 48 if which == "born" else cols.store_host_at
    lens = cols.born_host_len if which == "born" else cols.store_host_len
    port = cols.born_port if which == "born" else cols.store_port
    octets = [pa.array(cols.arr[np.minimum(at + k, len(cols.arr) - 1)].astype(np.int32)).cast(pa.string())
              for k in range(4)]
    ports = pa.array(port).cast(pa.string())
    v4 = pc.binary_join_element_wise(*octets, ".")
    out = pc.binary_join_element_wise(v4, ports, ":")
    v6 = np.flatnonzero(lens == 16)
    if len(v6):
        values = out.to_pylist()
        for i in v6.tolist():
            addr = ipaddress.IPv6Address(bytes(cols.arr[at[i]:at[i] + 16]))
            values[i] = f"[{addr}]:{int(port[i])}"
        out = pa.array(values, pa.string())
    return out


def record_batch(cols: RecordColumns, segment: str, include_body: bool) -> pa.RecordBatch:
    """The reader's schema as an Arrow batch, from decoded columns."""
    n = len(cols)
    delay = cols.delay_level
    data = {
        "segment": pa.array([segment] * n, pa.string()) if n else pa.array([], pa.string()),
        "physical_offset": pa.array(cols.physical_offset, pa.int64()),
        "total_size": pa.array(cols.total_size, pa.int32()),
        "magic_version": pa.array(np.where(cols.is_v2, 2, 1).astype(np.int32)),
        "body_crc": pa.array(cols.body_crc, pa.int32()),
        "queue_id": pa.array(cols.queue_id, pa.int32()),
        "flag": pa.array(cols.flag, pa.int32()),
        "queue_offset": pa.array(cols.queue_offset, pa.int64()),
        "sys_flag": pa.array(cols.sys_flag, pa.int32()),
        "transaction_type": pa.array(cols.transaction_type.astype(np.int32)),
        "born_timestamp": pa.array(cols.born_timestamp, pa.int64()),
        "born_host": format_hosts(cols, "born"),
        "store_timestamp": pa.array(cols.store_timestamp, pa.int64()),
        "store_host": format_hosts(cols, "store"),
        "reconsume_times": pa.array(cols.reconsume_times, pa.int32()),
        "prepared_transaction_offset": pa.array(cols.prepared_transaction_offset, pa.int64()),
        "body_length": pa.array(cols.body_length, pa.int32()),
        "topic": cols.topic.cast(pa.string()),
        "tags": cols.property_string(TAGS).cast(pa.string()),
        "keys": cols.property_string(KEYS).cast(pa.string()),
        "uniq_key": cols.property_string(UNIQ_KEY).cast(pa.string()),
        "delay_level": pa.array(delay, pa.int32(), mask=delay < 0),
        "properties": cols.properties.cast(pa.string()),
    }
    if include_body:
        data["body"] = cols.body().cast(pa.binary())
    return pa.RecordBatch.from_pydict(data)


class CommitlogReader(DataSourceReader):
    """Plans splits on the driver (file listing only) and decodes them in tasks."""

    def __init__(self, store: str, settings: BrokerSettings, split_size: int, include_body: bool,
                 min_partitions: int = 4) -> None:
        self.store, self.settings = store, settings
        self.split_size, self.include_body, self.min_partitions = split_size, include_body, min_partitions

    def partitions(self) -> list[SplitPartition]:
        segments = list_segments(location(self.store), self.settings)
        tasks = [SplitTask(split=sp, settings=self.settings) for sp in plan_splits(segments, self.split_size)]
        return [SplitPartition(tuple(t.split for t in group), self.settings, self.include_body)
                for group in pack_splits(tasks, self.split_size, self.min_partitions)]

    def read(self, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
        for split in partition.splits:
            cols = decode_split_columns(SplitTask(split=split, settings=partition.settings, with_cq=False,
                                                  with_keys=False))
            if len(cols):
                yield record_batch(cols, split.segment.path.rsplit("/", 1)[-1], partition.include_body)


class CommitlogDataSource(DataSource):
    """The `rocketmq-commitlog` format: path = a broker store directory."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq-commitlog"

    def schema(self) -> str:
        return SCHEMA + (BODY_FIELD if _flag(self.options.get("includeBody")) else "")

    def reader(self, schema) -> CommitlogReader:
        opts = self.options
        settings = load_settings(opts.get("brokerConfig"))
        split = opts.get("splitSize")
        return CommitlogReader(opts["path"], settings, DEFAULT_SPLIT_SIZE if split is None else int(split),
                               _flag(opts.get("includeBody")), int(opts.get("minPartitions", 4)))


def _flag(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("rocketmq-commitlog")` available in this session."""
    spark.dataSource.register(CommitlogDataSource)


def read_commitlog(spark: SparkSession, store: str, broker_config: str | None = None,
                   split_size: int | None = None, include_body: bool = False):
    """DataFrame of a store's commit-log records (see the module docstring for the schema)."""
    register(spark)
    reader = spark.read.format("rocketmq-commitlog")
    if broker_config:
        reader = reader.option("brokerConfig", broker_config)
    if split_size is not None:
        reader = reader.option("splitSize", str(split_size))
    if include_body:
        reader = reader.option("includeBody", "true")
    return reader.load(store)
