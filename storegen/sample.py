"""A small, deterministic, realistic RocketMQ store (golden "small" profile) for demos and tests.

`python -m storegen.sample OUT_DIR [--messages N] [--seed S]` writes OUT_DIR/broker.conf and
OUT_DIR/commitlog/ (+ lock). The traffic mimics what a 4.9.8 broker stores: client UNIQ_KEYs, KEYS with
runs of spaces, zlib bodies, delay levels via SCHEDULE_TOPIC_XXXX and their delivery, retry/DLQ send-back,
transaction half/commit/op records, raw PREPARED/ROLLBACK store-API records, IPv6 hosts, batches, and a
broker restart 40 days later on an IPv6 store host.

The rules it applies (the client's property string and UNIQ_KEY, delay levels as SCHEDULE_TOPIC_XXXX
queues, transaction flags, batches) are written here from the client's and broker's source on purpose,
independent of storage_format's readers: tests that decode the sample check reput against them.
"""
from __future__ import annotations

import argparse
import ipaddress
import random
import sys
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from storage_format.msg_id import encode_offset_msg_id
from storage_format.record import (FLAG_COMPRESSED, FLAG_MULTI_TAGS, PROP_NAME_VALUE_SEP, PROP_SEP, SCHEDULE_TOPIC,
                                   TRAN_COMMIT, TRAN_MASK, TRAN_PREPARED, TRAN_ROLLBACK, Message)
from storage_format.settings import DEFAULT_DELAY_LEVELS, parse_delay_levels

from .encoder import SegmentWriter, WriteSummary, host_sys_flag, write_dledger_store, write_store

DEFAULT_MESSAGES = 3000
DEFAULT_SEED = 11
SEGMENT_SIZE = 262144
BROKER_CONF = {
    "mappedFileSizeCommitLog": "262144",
    "mappedFileSizeConsumeQueue": "2000",
    "maxHashSlotNum": "64",
    "maxIndexNum": "256",
    "messageIndexEnable": "true",
    "fileReservedTime": "876000",
    "messageDelayLevel": DEFAULT_DELAY_LEVELS,
}
EPOCH_MS = 1_792_000_000_000  # 2026-10-14T17:46:40Z: first store timestamp
RESTART_JUMP_MS = 40 * 86_400_000  # the broker restarts 40 days later (long index timeDiffs)
RESTART_FRACTION = 0.85  # share of the records written before the restart
COMPRESS_OVER = 4096  # client default compressMsgBodyOverHowmuch
ZLIB_SYS_FLAG = FLAG_COMPRESSED | (0x3 << 8)  # compressed + compression type ZLIB (bits 8..10)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_TOPIC = "%RETRY%ConsumerGroupA"
DLQ_TOPIC = "%DLQ%ConsumerGroupA"
BATCH_TOPIC = "BatchTopic"
NON_ASCII_TOPIC = "主题-Ω-topic"
WEIRD_TOPIC = "%|weird_topic-%"
USER_TOPICS: dict[str, int] = {  # topic -> queue count
    "TopicTest": 4,
    "Order_Topic-01": 8,
    "Pay-Events": 3,
    NON_ASCII_TOPIC: 2,
    WEIRD_TOPIC: 1,
}
BATCH_QUEUES = 2
# Java hash of "TopicTest#mh-6nkbovf" is Integer.MIN_VALUE (found offline by a digit search over
# alphanumeric suffixes): its index keyHash is abs(MIN_VALUE) -> stays negative -> stored as 0.
MIN_VALUE_KEY = "mh-6nkbovf"
MIN_VALUE_KEY_TOPIC = "TopicTest"
MIN_VALUE_PLAIN = "polygenelubricants"  # the string itself hashes to Integer.MIN_VALUE

_BODY_ALPHABET = b'abcdefghijklmnopqrstuvwxyz0123456789 ,:"{}'
_WORDS = ["order", "payment", "created", "user", "amount", "区域", "华东", "status", "OK", "retry", "🔑"]


@dataclass(frozen=True)
class Producer:
    """A client: born host/port and the fixed part of its UNIQ_KEYs (IP + pid + class-loader hash)."""

    host: bytes
    port: int
    pid: int
    loader_hash: int
    counter_start: int

    @property
    def uniq_prefix(self) -> str:
        """Fixed hex part of this client's UNIQ_KEYs: IP bytes, 2-byte pid, 4-byte class-loader hash."""
        return (self.host + self.pid.to_bytes(2, "big") + self.loader_hash.to_bytes(4, "big")).hex().upper()


PRODUCERS = (
    Producer(ipaddress.ip_address("10.20.30.41").packed, 50001, 0x1A2B, 0x3C4D5E6F, 0),
    Producer(ipaddress.ip_address("10.20.30.42").packed, 51001, 0x0457, 0x11223344, 100),
    Producer(ipaddress.ip_address("fd00:ab:cd::17").packed, 52001, 0x2001, 0x7A6B5C4D, 200),
    Producer(ipaddress.ip_address("2001:db8::8a2e:370:7334").packed, 53001, 0x0999, 0x0BADF00D, 300),
)
STORE_HOST_1 = (ipaddress.ip_address("192.168.0.10").packed, 10911)
STORE_HOST_2 = (ipaddress.ip_address("fd00::10").packed, 10911)


def props(items: list[tuple[str, str]]) -> str:
    """4.9.8 broker property string: `name\\x01value` joined by `\\x02`, no trailing separator."""
    return PROP_SEP.join(f"{k}{PROP_NAME_VALUE_SEP}{v}" for k, v in items)


def parse_props(text: str) -> list[tuple[str, str]]:
    """Inverse of `props` for the strings this module builds (keeps order and duplicates)."""
    out = []
    for item in text.split(PROP_SEP):
        if PROP_NAME_VALUE_SEP in item:
            k, v = item.split(PROP_NAME_VALUE_SEP, 1)
            out.append((k, v))
    return out


def _month_start_ms(ts_ms: int) -> int:
    """Start of the UTC month of `ts_ms`: the base of a UNIQ_KEY time field (MessageClientIDSetter).
    Written here as the client does it, independent of storage_format.msg_id, which decodes it."""
    d = datetime.fromtimestamp(ts_ms / 1000, timezone.utc)
    return int(datetime(d.year, d.month, 1, tzinfo=timezone.utc).timestamp() * 1000)


class _Traffic:
    """Generates the message sequence; a dry SegmentWriter assigns offsets as records are "put"."""

    def __init__(self, n: int, seed: int) -> None:
        """Seeded state: one RNG, a logical clock from EPOCH_MS and a dry writer for offsets."""
        self.n = n
        self.rng = random.Random(seed)
        self.pool = bytes(self.rng.choice(_BODY_ALPHABET) for _ in range(1 << 16))
        self.delays = parse_delay_levels(DEFAULT_DELAY_LEVELS)
        self.clock = EPOCH_MS
        self.store_host = STORE_HOST_1
        self.restarted = False
        self.counters = [p.counter_start for p in PRODUCERS]
        self.writer = SegmentWriter(None, SEGMENT_SIZE)
        self.out: list[Message] = []
        self.kinds: list[str] = []  # what produced each record of `out`
        self.batch_of: list[int | None] = []  # the client batch each record of `out` belongs to
        self.pending_delay: list[tuple[int, Message]] = []  # (due ms, schedule record)
        self.pending_tx: list[tuple[int, Message]] = []  # (resolve at record count, half record)
        self.prepared: list[Message] = []
        self.batch_id = 0
        self.key_seq = 0

    # -- building blocks ----------------------------------------------------------------------

    def tick(self) -> int:
        """Advance the broker clock by 1-3 ms and return the new store timestamp."""
        self.clock += self.rng.choice((1, 1, 1, 2, 3))
        return self.clock

    def uniq_key(self, pi: int, born: int) -> str:
        """Client message id: fixed prefix + ms since month start (4 bytes) + counter (2 bytes), hex upper."""
        p = PRODUCERS[pi]
        diff = (born - _month_start_ms(born)) & 0xFFFFFFFF
        count = self.counters[pi] & 0xFFFF
        self.counters[pi] += 1
        return p.uniq_prefix + f"{diff:08X}{count:04X}"

    def body(self) -> tuple[bytes, int]:
        """A body and its extra sysFlag bits (zlib-compressed bodies above 4 KiB, like the client)."""
        r = self.rng.random()
        if r < 0.03:
            return b"", 0
        if r < 0.05:
            text = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(900, 2500))).encode()
            return zlib.compress(text, 5), ZLIB_SYS_FLAG
        if r < 0.65:
            size = self.rng.randint(10, 400)
        elif r < 0.95:
            size = self.rng.randint(400, 1200)
        else:
            size = self.rng.randint(1200, 3000)
        start = self.rng.randrange(len(self.pool) - size)
        return self.pool[start:start + size], 0

    def keys(self, topic: str) -> str:
        """A KEYS value: 1-4 tokens (ASCII, CJK, emoji, duplicates) joined by runs of 1-3 spaces."""
        rng = self.rng
        tokens = []
        for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
            self.key_seq += 1
            kind = rng.random()
            if kind < 0.35:
                tokens.append(f"ORDER-{rng.randint(1, 5000)}")
            elif kind < 0.55:
                tokens.append(f"user_{rng.randint(1, 400)}")
            elif kind < 0.65:
                tokens.append(f"订单-{rng.randint(1, 300)}")
            elif kind < 0.72:
                tokens.append(f"🔑k{rng.randint(1, 20)}")
            elif kind < 0.78:
                tokens.append("Ä-é-ß")
            elif kind < 0.81 and topic == MIN_VALUE_KEY_TOPIC:
                tokens.append(MIN_VALUE_KEY)
            elif kind < 0.83:
                tokens.append(MIN_VALUE_PLAIN)
            else:
                tokens.append(f"{rng.getrandbits(64):016x}")
        if rng.random() < 0.15:
            tokens.append(tokens[0])  # duplicate key
        out = tokens[0]
        for t in tokens[1:]:
            out += " " * rng.choice((1, 1, 1, 2, 3)) + t
        if rng.random() < 0.05:
            out = "  " + out + " "
        return out

    def tags(self) -> tuple[str | None, int]:
        """A TAGS value (or None) and the multi-tags sysFlag bit when it holds `||`."""
        r = self.rng.random()
        if r < 0.2:
            return None, 0
        if r < 0.23:
            return "TagA||TagB", FLAG_MULTI_TAGS
        if r < 0.27:
            return self.rng.choice(("标签", "tag-ü")), 0
        if r < 0.45:
            return f"T{self.rng.randint(1, 30)}", 0
        return self.rng.choice(("TagA", "TagB", "TagC")), 0

    def put(self, msg: Message, kind: str) -> Message:
        """Hand one record to the (dry) store: stamps store host/time and assigns offsets."""
        msg.store_host, msg.store_port = self.store_host
        msg.sys_flag = host_sys_flag(msg)
        self.writer.append(msg)
        self.out.append(msg)
        self.kinds.append(kind)
        self.batch_of.append(None)
        return msg

    def put_batch(self, msgs: list[Message]) -> None:
        """Hand a client batch to the store as one put (must fit one segment)."""
        self.batch_id += 1
        for m in msgs:
            m.store_host, m.store_port = self.store_host
            m.sys_flag = host_sys_flag(m)
        self.writer.append_batch(msgs)
        self.out.extend(msgs)
        self.kinds.extend("batch" for _ in msgs)
        self.batch_of.extend(self.batch_id for _ in msgs)

    def client_message(self, topic: str, queue_id: int, *, store_api: bool = False,
                       force_key: str | None = None, empty_body: bool = False) -> Message:
        """A producer's message as the send processor stores it (CLUSTER added, WAIT dropped)."""
        rng = self.rng
        pi = rng.randrange(len(PRODUCERS))
        store_ts = self.tick()
        born = store_ts - rng.randint(0, 8)
        body, body_flag = (b"", 0) if empty_body else self.body()
        tags, tag_flag = self.tags()
        items: list[tuple[str, str]] = []
        if rng.random() < 0.12:
            items.append(("traceId", f"{rng.getrandbits(60):x}"))
        keys = self.keys(topic) if rng.random() < 0.7 else None
        if force_key is not None:
            keys = force_key if keys is None else keys + " " + force_key
        if keys is not None:
            items.append(("KEYS", keys))
        if not store_api:
            items.append(("UNIQ_KEY", self.uniq_key(pi, born)))
            items.append(("CLUSTER", "DefaultCluster"))
        if tags is not None:
            items.append(("TAGS", tags))
        if rng.random() < 0.08:
            items.append(("区域", "华东-1"))
        flag = rng.choice((0,) * 30 + (1, 8, 1 << 20))
        p = PRODUCERS[pi]
        return Message(
            topic=topic, body=body, queue_id=queue_id, flag=flag, sys_flag=body_flag | tag_flag,
            born_timestamp=born, born_host=p.host, born_port=p.port, store_timestamp=store_ts,
            properties=props(items),
        )

    # -- traffic kinds --------------------------------------------------------------------------

    def normal(self, **kw) -> None:
        """A plain producer message to a random user topic and queue."""
        topic = self.rng.choice(list(USER_TOPICS))
        self.put(self.client_message(topic, self.rng.randrange(USER_TOPICS[topic]), **kw), "normal")

    def delayed(self, level: int | None = None) -> None:
        """A delay-level message: stored in SCHEDULE_TOPIC_XXXX, queue level-1, REAL_TOPIC/REAL_QID kept."""
        topic = self.rng.choice(list(USER_TOPICS))
        qid = self.rng.randrange(USER_TOPICS[topic])
        msg = self.client_message(topic, qid)
        level = level or self.rng.choice(tuple(range(1, 19)) + (1, 1, 2, 3, 20))
        level = min(level, len(self.delays))  # the broker clamps to the highest level
        items = parse_props(msg.properties)
        msg.properties = props([("REAL_TOPIC", topic)] + items + [("DELAY", str(level)), ("REAL_QID", str(qid))])
        msg.topic, msg.queue_id = SCHEDULE_TOPIC, level - 1
        self.put(msg, "delay")
        self.pending_delay.append((msg.store_timestamp + self.delays[level - 1], msg))

    def deliver_due(self) -> None:
        """ScheduleMessageService: due schedule records go back to REAL_TOPIC/REAL_QID without DELAY."""
        due = [item for item in self.pending_delay if item[0] <= self.clock]
        if not due:
            return
        self.pending_delay = [item for item in self.pending_delay if item[0] > self.clock]
        for _, src in sorted(due, key=lambda item: (item[0], item[1].physical_offset)):
            items = [(k, v) for k, v in parse_props(src.properties) if k != "DELAY"]
            real = dict(items)
            items.append(("WAIT", "false"))
            msg = Message(
                topic=real["REAL_TOPIC"], body=src.body, queue_id=int(real["REAL_QID"]), flag=src.flag,
                sys_flag=src.sys_flag, born_timestamp=src.born_timestamp, born_host=src.born_host,
                born_port=src.born_port, store_timestamp=self.tick(), reconsume_times=src.reconsume_times,
                properties=props(items),
            )
            self.put(msg, "delay_delivered")

    def send_back(self) -> None:
        """Consumer send-back: a consumed record goes to %RETRY% via level 3+times, or to %DLQ%."""
        candidates = [m for m, kind in zip(self.out[-200:], self.kinds[-200:])
                      if m.topic in USER_TOPICS and kind == "normal"]
        if not candidates:
            return self.normal()
        src = self.rng.choice(candidates)
        times = self.rng.choice((0, 0, 0, 1, 2, 16))
        items = [(k, v) for k, v in parse_props(src.properties) if k not in ("CLUSTER",)]
        head = [("ORIGIN_MESSAGE_ID", encode_offset_msg_id(src.store_host, src.store_port, src.physical_offset)),
                ("RETRY_TOPIC", src.topic)]
        common = dict(body=src.body, flag=src.flag, sys_flag=src.sys_flag, born_timestamp=src.born_timestamp,
                      born_host=src.born_host, born_port=src.born_port, reconsume_times=times + 1)
        if times >= 16:
            items = head + items + [("CLUSTER", "DefaultCluster"), ("WAIT", "false"), ("DELAY", "0")]
            self.put(Message(topic=DLQ_TOPIC, queue_id=0, store_timestamp=self.tick(),
                             properties=props(items), **common), "dlq")
            return
        level = min(3 + times, len(self.delays))
        items = ([("REAL_TOPIC", RETRY_TOPIC)] + head + items
                 + [("CLUSTER", "DefaultCluster"), ("WAIT", "false"), ("DELAY", str(level)), ("REAL_QID", "0")])
        msg = self.put(Message(topic=SCHEDULE_TOPIC, queue_id=level - 1, store_timestamp=self.tick(),
                               properties=props(items), **common), "retry_via_schedule")
        self.pending_delay.append((msg.store_timestamp + self.delays[level - 1], msg))

    def half(self) -> None:
        """Transactional send: the half message goes to RMQ_SYS_TRANS_HALF_TOPIC as NOT type."""
        topic = self.rng.choice(list(USER_TOPICS))
        qid = self.rng.randrange(USER_TOPICS[topic])
        msg = self.client_message(topic, qid)
        items = parse_props(msg.properties)
        msg.properties = props([("REAL_TOPIC", topic), ("TRAN_MSG", "true")] + items
                               + [("PGROUP", "PG_Trans"), ("WAIT", "true"), ("REAL_QID", str(qid))])
        msg.topic, msg.queue_id = HALF_TOPIC, 0
        self.put(msg, "tx_half")
        self.pending_tx.append((len(self.out) + self.rng.randint(3, 40), msg))

    def end_transactions(self, force: bool = False) -> None:
        """End-transaction processor: COMMIT record in the real topic (or nothing), then an op record."""
        ready = [item for item in self.pending_tx if force or item[0] <= len(self.out)]
        self.pending_tx = [item for item in self.pending_tx if not (force or item[0] <= len(self.out))]
        for _, half in ready:
            if self.rng.random() < 0.75:
                items = [(k, v) for k, v in parse_props(half.properties) if k != "TRAN_MSG"]
                real = dict(items)
                self.put(Message(
                    topic=real["REAL_TOPIC"], body=half.body, queue_id=int(real["REAL_QID"]), flag=half.flag,
                    sys_flag=(half.sys_flag & ~TRAN_MASK) | TRAN_COMMIT, born_timestamp=half.born_timestamp,
                    born_host=half.born_host, born_port=half.born_port, store_timestamp=self.tick(),
                    prepared_transaction_offset=half.physical_offset, properties=props(items),
                ), "tx_commit")
            host, port = self.store_host
            self.put(Message(
                topic=OP_TOPIC, body=str(half.queue_offset).encode(), queue_id=half.queue_id,
                born_timestamp=self.clock, born_host=host, born_port=port, store_timestamp=self.tick(),
                properties=props([("WAIT", "true"), ("TAGS", "d")]),
            ), "tx_op")

    def raw_transaction(self, rollback: bool | None = None) -> None:
        """Store-API records with raw PREPARED / ROLLBACK sysFlags (queueOffset 0, no queue entry)."""
        if rollback is None:
            rollback = bool(self.prepared) and self.rng.random() < 0.4
        if rollback and self.prepared:
            src = self.prepared.pop(0)
            msg = self.client_message(src.topic, src.queue_id, store_api=True)
            msg.sys_flag = (msg.sys_flag & ~TRAN_MASK) | TRAN_ROLLBACK
            msg.prepared_transaction_offset = src.physical_offset
            self.put(msg, "raw_rollback")
        else:
            msg = self.client_message("TopicTest", self.rng.randrange(USER_TOPICS["TopicTest"]), store_api=True)
            msg.sys_flag = (msg.sys_flag & ~TRAN_MASK) | TRAN_PREPARED
            self.prepared.append(self.put(msg, "raw_prepared"))

    def batch(self) -> None:
        """A client batch: every record carries its own properties then the batch's, all in one segment."""
        qid = self.rng.randrange(BATCH_QUEUES)
        pi = self.rng.randrange(len(PRODUCERS))
        store_ts = self.tick()
        born = store_ts - self.rng.randint(0, 5)
        p = PRODUCERS[pi]
        msgs = []
        for _ in range(self.rng.randint(2, 6)):
            body, flag = self.body()
            items = []
            if self.rng.random() < 0.6:
                items.append(("KEYS", self.keys(BATCH_TOPIC)))
            items.append(("UNIQ_KEY", self.uniq_key(pi, born)))
            items.append(("WAIT", "true"))
            tags, tag_flag = self.tags()
            if tags:
                items.append(("TAGS", tags))
            items += [("CLUSTER", "DefaultCluster"), ("WAIT", "true")]
            msgs.append(Message(topic=BATCH_TOPIC, body=body, queue_id=qid, sys_flag=flag | tag_flag,
                                born_timestamp=born, born_host=p.host, born_port=p.port,
                                store_timestamp=store_ts, properties=props(items)))
        self.put_batch(msgs)

    def restart(self) -> None:
        """Broker restart 40 days later on an IPv6 store host: every pending delay becomes due."""
        self.end_transactions(force=True)
        self.restarted = True
        self.clock += RESTART_JUMP_MS
        self.store_host = STORE_HOST_2
        self.deliver_due()

    # -- the whole sequence -------------------------------------------------------------------

    def showcase(self) -> None:
        """One of every special kind first, so that even a tiny sample covers them."""
        self.put(self.client_message("TopicTest", 0, force_key=MIN_VALUE_KEY), "min_value_key")
        self.put(self.client_message("Pay-Events", 1, force_key=MIN_VALUE_PLAIN, empty_body=True), "empty_body")
        self.put(self.client_message(NON_ASCII_TOPIC, 1), "non_ascii_topic")
        self.put(self.client_message(WEIRD_TOPIC, 0, store_api=True), "no_uniq_key")
        msg = self.client_message("Order_Topic-01", 3)
        text = ("order created amount 100 区域 华东 " * 300).encode()
        msg.body, msg.sys_flag = zlib.compress(text, 5), msg.sys_flag | ZLIB_SYS_FLAG
        self.put(msg, "compressed")
        msg = self.client_message("TopicTest", 2, store_api=True)
        msg.properties = props([("TAGS", ""), ("KEYS", "")])
        self.put(msg, "empty_tags_and_keys_values")
        self.delayed(level=1)
        self.half()
        self.raw_transaction(rollback=False)
        self.raw_transaction(rollback=True)
        self.batch()

    def run(self) -> "Sample":
        """Showcase first, then a weighted random mix until n records; the restart at 85 %."""
        self.showcase()
        kinds = (self.normal, self.delayed, self.half, self.raw_transaction, self.send_back, self.batch)
        weights = (70, 8, 6, 2, 4, 4)
        while len(self.out) < self.n:
            if not self.restarted and len(self.out) >= self.n * RESTART_FRACTION:
                self.restart()
            self.rng.choices(kinds, weights)[0]()
            self.deliver_due()
            self.end_transactions()
        n = self.n
        return Sample(self.out[:n], self.kinds[:n], self.batch_of[:n])


@dataclass(frozen=True)
class Sample:
    """The sample's records in commit-log order (offsets as the writer assigns them), what produced each
    one, and the client batch each belongs to (None: a single put)."""

    messages: list[Message]
    kinds: list[str]
    batches: list[int | None]

    def puts(self) -> list[Message | list[Message]]:
        """The records as the broker received them: consecutive records of one batch as one list."""
        out: list[Message | list[Message]] = []
        last = None
        for msg, batch in zip(self.messages, self.batches):
            if batch is not None and batch == last:
                out[-1].append(msg)
            elif batch is not None:
                out.append([msg])
            else:
                out.append(msg)
            last = batch
        return out


def build_sample(n: int = DEFAULT_MESSAGES, seed: int = DEFAULT_SEED) -> Sample:
    """The sample store's records, generated from `seed`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return _Traffic(n, seed).run()


def build_sample_messages(n: int = DEFAULT_MESSAGES, seed: int = DEFAULT_SEED) -> list[Message]:
    """The sample's records in commit-log order, with physical/queue offsets as the writer assigns them."""
    return build_sample(n, seed).messages


def broker_conf_text() -> str:
    """broker.conf for the sample store: the golden "small" profile in .properties syntax."""
    lines = ["# Broker settings of this reput sample store (not part of the store itself)."]
    lines += [f"{k}={v}" for k, v in BROKER_CONF.items()]
    return "\n".join(lines) + "\n"


DLEDGER_CONF = {"enableDLegerCommitLog": "true", "dLegerGroup": "broker-a", "dLegerPeers": "n0-127.0.0.1:40911",
                 "dLegerSelfId": "n0"}  # a one-member DLedger group, as the golden dledger-* cases


def write_sample_store(out_dir: str | Path, n: int = DEFAULT_MESSAGES, seed: int = DEFAULT_SEED,
                       dledger: bool = False) -> dict:
    """Write OUT/broker.conf, OUT/commitlog/ and OUT/lock; returns a summary dict. With `dledger`, the same
    records as a DLedger-mode store (OUT/dledger-n0/, one entry per message; broker.conf names the group)."""
    out = Path(out_dir)
    commitlog = out / ("dledger-n0" if dledger else "commitlog")
    if commitlog.exists() and any(commitlog.iterdir()):
        raise FileExistsError(f"{commitlog} already holds files; choose an empty directory")
    sample = build_sample(n, seed)
    messages = sample.messages
    out.mkdir(parents=True, exist_ok=True)
    conf = broker_conf_text() + ("".join(f"{k}={v}\n" for k, v in DLEDGER_CONF.items()) if dledger else "")
    (out / "broker.conf").write_text(conf, encoding="utf-8")
    if dledger:
        written: WriteSummary = write_dledger_store(out, sample.puts(), SEGMENT_SIZE).dledger
    else:
        written = write_store(out, sample.puts(), SEGMENT_SIZE)
    topics = Counter(m.topic for m in messages)
    return {
        "out_dir": str(out),
        "seed": seed,
        "records": written.records,
        "segments": written.segments,
        "blank_records": written.blank_records,
        "max_physical_offset": written.max_physical_offset,
        "first_store_timestamp": messages[0].store_timestamp if messages else None,
        "last_store_timestamp": messages[-1].store_timestamp if messages else None,
        "topics": dict(sorted(topics.items())),
        "kinds": dict(sorted(Counter(sample.kinds).items())),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: write the sample store and print a one-line summary."""
    parser = argparse.ArgumentParser(prog="python -m storegen.sample", description=__doc__)
    parser.add_argument("out_dir", metavar="OUT_DIR")
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="number of records")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--dledger", action="store_true", help="write a DLedger-mode store (enableDLegerCommitLog)")
    args = parser.parse_args(argv)
    try:
        s = write_sample_store(args.out_dir, n=args.messages, seed=args.seed, dledger=args.dledger)
    except (FileExistsError, ValueError) as exc:
        print(f"sample_store: {exc}", file=sys.stderr)
        return 2
    print(
        f"sample store {s['out_dir']}: {s['records']} records in {len(s['segments'])} commit-log segments "
        f"({s['blank_records']} BLANK), {len(s['topics'])} topics, maxPhyOffset {s['max_physical_offset']}, "
        f"seed {s['seed']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
