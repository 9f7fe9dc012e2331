"""Fields of records at known positions, compiled: storeTimestamp, which sits after the born host (4 or 16 bytes by
sysFlag). RocksDB consume-queue units carry it, so verify and rebuild of a RocksDB store read it for every record:
numpy's form (a 48-byte head gathered per record, then a second gather) costs ~0.35 s per million records from a
mapped segment, this loop ~0.04 s. Reference: storage_format.record_columns.RecordColumns.store_timestamp, tested
equal in tests/test_record_fields.py.
"""
from __future__ import annotations

from .jit import njit
from .kernel_bytes import i32, i64

SYS_FLAG_AT = 36  # totalSize .. physicalOffset: 4+4+4+4+4+8+8 bytes
BORN_HOST_AT = 48  # after sysFlag and bornTimestamp
BORNHOST_V6 = 1 << 4  # MessageSysFlag.BORNHOST_V6_FLAG: a 16-byte born host instead of 4
STORE_TS_END_V6 = BORN_HOST_AT + 16 + 4 + 8  # the furthest byte the read can reach past a record's start


@njit()
def store_timestamps_at(a, positions, out):
    """out[i] = the storeTimestamp of the record starting at a[positions[i]]; returns the index of the first
    position whose field lies past the buffer's end (nothing read there), or -1 when all were read."""
    n = a.shape[0]
    for i in range(positions.shape[0]):
        p = positions[i]
        if p < 0 or p + SYS_FLAG_AT + 4 > n:
            return i
        at = p + BORN_HOST_AT + (16 if i32(a, p + SYS_FLAG_AT) & BORNHOST_V6 else 4) + 4
        if at + 8 > n:
            return i
        out[i] = i64(a, at)
    return -1
