"""Test-only reader of the golden stores, written from FORMAT.md and independent of storage_format.

Used to check codecs against bytes the real broker wrote; it trusts nothing it checks.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tests.conftest import GOLDEN

_MAGICS = (0xDAA320A7, 0xDAA320AB)


@dataclass
class GoldenRecord:
    """The fields of one commit-log record that the id and hash tests look at."""

    physical_offset: int
    sys_flag: int
    born_timestamp: int
    store_timestamp: int
    store_host: bytes
    store_port: int
    topic: bytes
    properties: dict[str, str]


def case_dir(case: str) -> Path:
    """Directory of a golden case; a missing one fails the test (the golden stores are the ground truth)."""
    path = GOLDEN / case
    assert path.is_dir(), f"golden case missing: {path}"
    return path


def broker_conf(case: str) -> dict[str, str]:
    """The case's broker.conf as a dict (no continuation lines or escapes are used there)."""
    out = {}
    for line in (case_dir(case) / "broker.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def parse_properties(text: str | None) -> dict[str, str]:
    """The broker's properties map, written from its rules (MessageDecoder.string2messageProperties)
    as splits rather than its index walk: items between \\x02; the name runs to an item's first \\x01,
    the value is the rest (it may hold \\x01); an item is kept when both are non-empty; later names win."""
    out: dict[str, str] = {}
    for item in (text or "").split("\x02"):
        name, sep, value = item.partition("\x01")
        if name and sep and value:
            out[name] = value
    return out


def records(case: str) -> list[GoldenRecord]:
    """Every message record of a case's commit log in order (blank records and zero tails skipped)."""
    return records_in(case_dir(case))


def records_in(store: Path) -> list[GoldenRecord]:
    """Every message record of a store's commit log (STORE/commitlog) in order."""
    out = []
    segments = sorted((store / "commitlog").iterdir())
    for segment in segments:
        buf = segment.read_bytes()
        base = int(segment.name)
        pos = 0
        while pos + 8 <= len(buf):
            size, magic = struct.unpack_from(">iI", buf, pos)
            if magic not in _MAGICS:
                break  # blank record (end of segment) or the zero tail
            sys_flag, born = struct.unpack_from(">iq", buf, pos + 36)
            p = pos + 48 + (20 if sys_flag & 0x10 else 8)
            (store,) = struct.unpack_from(">q", buf, p)
            host_len = 16 if sys_flag & 0x20 else 4
            host = buf[p + 8 : p + 8 + host_len]
            (port,) = struct.unpack_from(">i", buf, p + 8 + host_len)
            p += 8 + host_len + 4 + 4 + 8
            (body_len,) = struct.unpack_from(">i", buf, p)
            p += 4 + body_len
            if magic == 0xDAA320AB:
                (topic_len,) = struct.unpack_from(">h", buf, p)
                p += 2
            else:
                topic_len = buf[p]
                p += 1
            topic = buf[p : p + topic_len]
            p += topic_len
            (props_len,) = struct.unpack_from(">h", buf, p)
            props = parse_properties(buf[p + 2 : p + 2 + props_len].decode("utf-8", "replace"))
            (physical,) = struct.unpack_from(">q", buf, pos + 28)
            assert physical == base + pos, f"{segment} at {pos}: physicalOffset {physical}"
            out.append(GoldenRecord(physical, sys_flag, born, store, host, port, topic, props))
            pos += size
    return out


def consume_queue_entries(case: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, queueId, phyOffset, size, tagsCode) of every consume-queue unit that is not zero filler."""
    out = []
    root = case_dir(case) / "consumequeue"
    for topic_dir in sorted(root.iterdir()):
        for queue_dir in sorted(topic_dir.iterdir()):
            for file in sorted(queue_dir.iterdir()):
                buf = file.read_bytes()
                for phy, size, tags in struct.iter_unpack(">qiq", buf):
                    if size == 0 and phy == 0:
                        break
                    out.append((topic_dir.name, int(queue_dir.name), phy, size, tags))
    return out


def index_entries(case: str) -> list[tuple[int, int]]:
    """(keyHash, phyOffset) of every used entry of every index file, in file-name order."""
    slots = int(broker_conf(case).get("maxHashSlotNum", 5_000_000))
    out = []
    for file in sorted((case_dir(case) / "index").iterdir()):
        buf = file.read_bytes()
        (count,) = struct.unpack_from(">i", buf, 36)
        base = 40 + slots * 4
        for position in range(1, count):
            out.append(struct.unpack_from(">iq", buf, base + position * 20))
    return out


@lru_cache(maxsize=None)
def records_by_offset(case: str) -> dict[int, GoldenRecord]:
    """The case's message records by physical offset."""
    return {r.physical_offset: r for r in records(case)}


def carries(r: GoldenRecord, topic: str | None, key: str, uniq: bool) -> bool:
    """The record carries `key`: as its UNIQ_KEY (`uniq`), else among its KEYS in `topic`."""
    if uniq:
        return r.properties.get("UNIQ_KEY") == key
    return r.topic.decode() == topic and key in r.properties.get("KEYS", "").split(" ")


def sample_keys(case: str, n: int, seed: int = 5) -> list[tuple[str, str]]:
    """`n` (topic, key) pairs drawn from the KEYS of the case's records, transaction rollbacks left out."""
    pairs = sorted({(r.topic.decode(), k) for r in records(case) if (r.sys_flag & 0xC) != 0xC
                    for k in r.properties.get("KEYS", "").split(" ") if k})
    return random.Random(seed).sample(pairs, n)
