"""Spark SQL column functions for RocketMQ ids, hashes and properties, over storage_format's rules.

Every function is a vectorised Arrow UDF (`pyspark.sql.functions.arrow_udf`: one call per Arrow
batch, no per-row Python), usable from the DataFrame API as imported here, or from SQL after
`udfs.register(spark)`:

    import udfs
    udfs.register(spark, settings=load_settings("broker.conf"))   # settings: the store's delay levels
    spark.sql("SELECT decode_uniq_key(uniq_key, store_timestamp).born_time FROM commitlog")
"""
from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from storage_format.settings import BrokerSettings

from .hashes import index_key_hash, index_slot, java_hash, tags_code, tags_code_function
from .msg_ids import decode_offset_msg_id, decode_uniq_key, encode_offset_msg_id
from .properties import keys_of, parse_properties

__all__ = [
    "decode_offset_msg_id", "decode_uniq_key", "encode_offset_msg_id", "functions", "index_key_hash",
    "index_slot", "java_hash", "keys_of", "parse_properties", "register", "tags_code", "tags_code_function",
]


def functions(settings: BrokerSettings | None = None) -> dict[str, Callable]:
    """SQL name -> Spark function; `tags_code` uses the delay levels of `settings` (default: broker defaults)."""
    return {
        "java_hash": java_hash,
        "tags_code": tags_code if settings is None else tags_code_function(settings.delay_levels_ms),
        "index_key_hash": index_key_hash,
        "index_slot": index_slot,
        "decode_offset_msg_id": decode_offset_msg_id,
        "encode_offset_msg_id": encode_offset_msg_id,
        "decode_uniq_key": decode_uniq_key,
        "parse_properties": parse_properties,
        "keys_of": keys_of,
    }


def register(spark: SparkSession, settings: BrokerSettings | None = None) -> list[str]:
    """Register every function as a session SQL function (tags_code with the store's messageDelayLevel
    from `settings`, default the broker's); returns the names registered."""
    registered = functions(settings)
    for name, fn in registered.items():
        spark.udf.register(name, fn)
    return list(registered)
