"""The logical commit-log record: one Python object per message, used by the encoder and tests.

The decoder does not build these (it returns Arrow columns); `record_reader.records_from_columns`
turns columns back into `Message` objects for tests and small audits.
"""
from __future__ import annotations

from dataclasses import dataclass

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194

FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
TRAN_MASK = 0xC
TRAN_NOT = 0x0
TRAN_PREPARED = 0x4
TRAN_COMMIT = 0x8
TRAN_ROLLBACK = 0xC

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here (DELAY level = queueId + 1)
# storeTimestamps that are dates (0001-01-01 .. 9999-12-31T23:59:59.999 UTC): the range a Python or
# Arrow timestamp holds, so the only ones that can name an index file or fill a timestamp column.
MIN_DATE_MS, MAX_DATE_MS = -62_135_596_800_000, 253_402_300_799_999

PROP_NAME_VALUE_SEP = "\x01"
PROP_SEP = "\x02"


@dataclass(kw_only=True)
class Message:
    """One stored message record, field for field (see ../shared/FORMAT.md).

    Hosts are raw address bytes (4 for IPv4, 16 for IPv6); the sysFlag IPv6 bits are derived
    from their length by the encoder. `properties` is the raw stored string, already in
    `name\\x01value\\x02` form, so odd encodings (empty values, duplicates) survive a round trip.
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    queue_offset: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01"
    born_port: int = 0
    store_timestamp: int = 0
    store_host: bytes = b"\x7f\x00\x00\x01"
    store_port: int = 10911
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: str = ""
    # Filled by the encoder / decoder: where the record sits in the commit log.
    physical_offset: int = -1
    body_crc: int | None = None  # None: the encoder computes it
    magic_v2: bool | None = None  # None: v2 exactly when the topic is longer than 127 chars (5.x rule)


def properties_string(items: list[tuple[str, str]] | dict[str, str]) -> str:
    """Serialise name/value pairs the way the client does: `name\\x01value\\x02` repeated."""
    pairs = items.items() if isinstance(items, dict) else items
    return "".join(f"{k}{PROP_NAME_VALUE_SEP}{v}{PROP_SEP}" for k, v in pairs)
