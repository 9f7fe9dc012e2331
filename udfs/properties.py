"""SQL functions over message properties: the broker's property map, and KEYS as the index splits it.

Arrow UDFs over storage_format.properties (`parse_properties_arrow`, `split_keys_arrow`), which hold
the one vectorised implementation of each rule.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import ArrayType, MapType, StringType

from storage_format.properties import parse_properties_arrow, split_keys_arrow

from .arrow_args import as_array


@arrow_udf(MapType(StringType(), StringType()))
def parse_properties(raw: pa.Array) -> pa.Array:
    """The broker's property map of a raw properties string (`name\\x01value\\x02`...,
    `MessageDecoder.string2messageProperties`): items need a non-empty name and value (others are
    dropped), a later duplicate name wins, a value may contain \\x01. NULL -> NULL.

    >>> raw = "TAGS\\u0001a\\u0002KEYS\\u0001k1 k2\\u0002TAGS\\u0001b\\u0002"
    >>> spark.sql(f"SELECT parse_properties('{raw}') AS p").first().p
    {'TAGS': 'b', 'KEYS': 'k1 k2'}
    >>> commitlog.select(parse_properties("properties")["WAIT"])
    """
    return parse_properties_arrow(as_array(raw, pa.string()))


@arrow_udf(ArrayType(StringType()))
def keys_of(keys: pa.Array) -> pa.Array:
    """The index keys a KEYS property value yields: `keys.split(" ")` with empty tokens dropped and
    duplicates kept, in order (the index files `topic#token` for each). NULL -> NULL.

    >>> spark.sql("SELECT keys_of(' a  b a ') AS k").first().k           # ['a', 'b', 'a']
    >>> commitlog.select(F.explode(keys_of("keys")))
    """
    return split_keys_arrow(as_array(keys, pa.string()))
