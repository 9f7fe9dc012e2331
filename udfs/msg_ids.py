"""SQL functions for RocketMQ message ids: the broker's offset message id and the producer's UNIQ_KEY.

Layouts (storage_format/msg_id.py has the details and the scalar reference):
* offset message id (`MessageDecoder.createMessageId`, every 4.x/5.x broker): store host address
  (4 bytes IPv4 / 16 IPv6) + store port (4) + commit-log physical offset (8), upper-case hex:
  32 or 56 characters.
* unique key `UNIQ_KEY` (`MessageClientIDSetter.createUniqID`): client IP (4 bytes; 16 for an IPv6
  client of 4.9.x/5.x, older 4.x clients always 4) + low 16 bits of the pid (2) + class-loader hash
  code (4) + ms since the start of the month in the producer's time zone (4, unsigned) + counter (2):
  32 or 56 hex characters. Written by the remoting Java producer of 4.x and 5.x (and by a 5.x broker
  for a message that arrives without one). The gRPC clients of 5.x (rocketmq-clients) write a
  different 34-character id (version `01`, MAC address, pid, seconds since 2021, sequence):
  `decode_uniq_key` gives NULL for those, as for anything that is not 32/56 hex characters.
Decoding never fails a query: a malformed id gives a NULL struct.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from storage_format.msg_id import decode_offset_msg_ids, decode_uniq_keys, encode_offset_msg_ids

from .arrow_args import as_array, int64_values, valid_mask

OFFSET_MSG_ID_TYPE = StructType([StructField("store_host", StringType()), StructField("store_port", IntegerType()),
                                 StructField("physical_offset", LongType())])
UNIQ_KEY_TYPE = StructType([StructField("client_ip", StringType()), StructField("pid", IntegerType()),
                            StructField("classloader_hash", IntegerType()), StructField("born_time", LongType()),
                            StructField("counter", IntegerType()), StructField("born_time_offset_ms", LongType())])
DEFAULT_TZ = "UTC"


@arrow_udf(OFFSET_MSG_ID_TYPE)
def decode_offset_msg_id(msg_id: pa.Array) -> pa.Array:
    """Split an offset message id into struct(store_host, store_port, physical_offset), as
    `MessageDecoder.decodeMessageId`; lower-case hex is accepted. NULL or malformed -> NULL.

    >>> spark.sql("SELECT decode_offset_msg_id('C0A8000A00002A9F000000000001E240') AS d").first().d
    Row(store_host='192.168.0.10', store_port=10911, physical_offset=123456)
    """
    decoded = decode_offset_msg_ids(as_array(msg_id, pa.string()), on_error="null")
    children = [decoded.field("host"), decoded.field("port"), decoded.field("physical_offset")]
    return pa.StructArray.from_arrays(children, names=OFFSET_MSG_ID_TYPE.names, mask=decoded.is_null())


@arrow_udf(StringType())
def encode_offset_msg_id(host: pa.Array, port: pa.Array, physical_offset: pa.Array) -> pa.Array:
    """Offset message id of a record (`MessageDecoder.createMessageId`): host as an IPv4/IPv6 address
    text (or its 4/16 raw bytes as BINARY), port and physical offset; upper-case hex. Any NULL -> NULL;
    a host that is not an IP address fails the query.

    >>> spark.sql("SELECT encode_offset_msg_id('192.168.0.10', 10911, 123456)").first()[0]
    'C0A8000A00002A9F000000000001E240'
    """
    host = as_array(host, pa.string())
    port, physical_offset = as_array(port, pa.int32()), as_array(physical_offset, pa.int64())
    return encode_offset_msg_ids(host, pc.cast(port, pa.int64()), pc.cast(physical_offset, pa.int64()))


def _decode_one_zone(ids: pa.Array, reference: pa.Array | None, tz: str) -> pa.StructArray:
    """decode_uniq_keys with malformed keys as null rows and reference epoch ms (null -> no born time)."""
    if reference is None:
        return decode_uniq_keys(ids, None, tz, on_error="null")
    ref = pa.array(int64_values(reference), type=pa.int64(), mask=~valid_mask(reference))
    return decode_uniq_keys(ids, ref, tz, on_error="null")


@arrow_udf(UNIQ_KEY_TYPE)
def decode_uniq_key(uniq_key: pa.Array, reference: pa.Array = None, tz: pa.Array = None) -> pa.Array:
    """Split a producer UNIQ_KEY into struct(client_ip, pid, classloader_hash, born_time, counter,
    born_time_offset_ms). The key holds only the ms since the start of a month, so born_time (epoch ms)
    needs `reference`, a time a little after the key was made (epoch ms BIGINT or TIMESTAMP; the
    record's store_timestamp, or born_timestamp for a message that waited weeks, e.g. a delayed one):
    born_time = start of the reference's month + offset, or of the month before when that lands after
    the reference (`MessageClientIDSetter.getNearlyTimeFromID`, with the reference for "now").
    Without a reference (or with a NULL one) born_time is NULL: never the current time, which would
    place old keys whole months late. `tz` is the producer's time zone (default UTC; NULL -> UTC).
    NULL or malformed key -> NULL.

    >>> spark.sql("SELECT decode_uniq_key('0A141E2A03094E25154F6D3F88CD0064', 1795324080402L) AS u").first().u
    Row(client_ip='10.20.30.42', pid=777, classloader_hash=1311053135, born_time=1795324080333,
        counter=100, born_time_offset_ms=1832880333)
    >>> commitlog.select(decode_uniq_key("uniq_key", "store_timestamp").born_time)
    """
    ids = as_array(uniq_key, pa.string())
    ref = None if reference is None else as_array(reference, pa.int64())
    zones = pa.array([DEFAULT_TZ] * len(ids)) if tz is None else as_array(tz, pa.string()).fill_null(DEFAULT_TZ)
    distinct = pc.unique(zones).to_pylist()
    if len(distinct) <= 1:
        decoded = _decode_one_zone(ids, ref, distinct[0] if distinct else DEFAULT_TZ)
    else:  # one vectorised pass per distinct zone, results put back in row order
        parts, rows = [], []
        for zone in distinct:
            where = pa.array(np.flatnonzero(pc.equal(zones, zone).to_numpy(zero_copy_only=False)))
            parts.append(_decode_one_zone(ids.take(where), None if ref is None else ref.take(where), zone))
            rows.append(where.to_numpy())
        order = np.concatenate(rows)
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        decoded = pa.concat_arrays(parts).take(pa.array(back))
    names = UNIQ_KEY_TYPE.names
    return pa.StructArray.from_arrays([decoded.field(n) for n in names], names=names, mask=decoded.is_null())
