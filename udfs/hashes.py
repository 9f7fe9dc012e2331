"""SQL functions for the broker's hashes: Java String.hashCode, consume-queue tagsCode, index key hash/slot.

Each is an Arrow UDF (one call per Arrow batch, no per-row Python) over the one implementation of the
rule in storage_format (java_hash, consume_queue, index_keys).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import IntegerType, LongType

from storage_format.consume_queue import tags_codes
from storage_format.index_file import key_slots
from storage_format.index_keys import index_key_hashes
from storage_format.java_hash import java_hash_arrow
from storage_format.settings import BrokerSettings

from .arrow_args import as_array, int64_values, valid_mask, with_nulls


@arrow_udf(IntegerType())
def java_hash(s: pa.Array) -> pa.Array:
    """Java `String.hashCode()` of a string (over UTF-16 code units, signed 32-bit); a BINARY argument
    is hashed as Java's `new String(bytes, UTF_8)`. NULL -> NULL.

    >>> spark.sql("SELECT java_hash('TagA') AS h").first().h          # 2598919
    >>> df.select(java_hash("tags"))
    """
    s = as_array(s, pa.string())
    return with_nulls(java_hash_arrow(s), valid_mask(s), pa.int32())


def tags_code_function(delay_levels_ms: tuple[int, ...]) -> Callable:
    """A `tags_code` SQL function bound to a broker's delay levels (`BrokerSettings.delay_levels_ms`)."""

    @arrow_udf(LongType())
    def tags_code(tags: pa.Array, topic: pa.Array, delay_level: pa.Array, store_timestamp: pa.Array) -> pa.Array:
        """tagsCode of the record's consume-queue entry: the Java hash of TAGS (0 when TAGS is NULL or
        empty), or for topic SCHEDULE_TOPIC_XXXX with a DELAY level > 0 the delivery time
        store_timestamp + delay of min(level, number of levels) in ms. delay_level NULL = no DELAY
        property (an int, or its text); NULL topic or store_timestamp -> NULL.

        >>> spark.sql("SELECT tags_code('TagA', 'TopicTest', NULL, 0)").first()[0]          # 2598919
        >>> spark.sql("SELECT tags_code(NULL, 'SCHEDULE_TOPIC_XXXX', 3, 1000)").first()[0]   # 11000
        >>> commitlog.select(tags_code("tags", "topic", "delay_level", "store_timestamp"))
        """
        tags = as_array(tags, pa.string())
        topic = as_array(topic, pa.string())
        store_timestamp = as_array(store_timestamp, pa.int64())
        codes = tags_codes(tags, topic, int64_values(delay_level, fill=-1), int64_values(store_timestamp),
                           delay_levels_ms)
        return with_nulls(codes, valid_mask(topic, store_timestamp), pa.int64())

    return tags_code


tags_code = tags_code_function(BrokerSettings().delay_levels_ms)


@arrow_udf(IntegerType())
def index_key_hash(topic: pa.Array, key: pa.Array) -> pa.Array:
    """keyHash the index file stores for the key `topic#key`: abs(Java hash), Integer.MIN_VALUE -> 0.
    `key` is a UNIQ_KEY or one KEYS token. Either argument NULL -> NULL.

    >>> spark.sql("SELECT index_key_hash('TopicTest', 'ORDER-1')").first()[0]           # 1111209712
    >>> commitlog.select("topic", F.explode(keys_of("keys")).alias("k")).select(index_key_hash("topic", "k"))
    """
    topic, key = as_array(topic, pa.string()), as_array(key, pa.string())
    return with_nulls(index_key_hashes(topic, key), valid_mask(topic, key), pa.int32())


@arrow_udf(IntegerType())
def index_slot(topic: pa.Array, key: pa.Array, slots: pa.Array) -> pa.Array:
    """Hash slot of `topic#key` in an index file with `slots` slots (maxHashSlotNum, default 5000000):
    index_key_hash(topic, key) % slots. NULL argument or slots <= 0 -> NULL.

    >>> spark.sql("SELECT index_slot('TopicTest', 'ORDER-1', 64)").first()[0]            # 48
    """
    topic, key, slots = as_array(topic, pa.string()), as_array(key, pa.string()), as_array(slots, pa.int64())
    count = int64_values(slots, fill=1)
    valid = valid_mask(topic, key, slots) & (count > 0)
    count = np.where(valid, count, 1)
    return with_nulls(key_slots(index_key_hashes(topic, key), count).astype(np.int32), valid, pa.int32())
