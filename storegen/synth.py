"""Synthetic benchmark stores: many plain producer messages written with the project's encoder.

The traffic looks like what a 4.9.8 broker stores for ordinary sends (KEYS, UNIQ_KEY, CLUSTER, TAGS
properties; bodies of a chosen size range; round-robin queues), with sizes, counts and the key mix set
by flags. Deterministic for a given seed, so a store can be reused between runs (see `store_matches`).
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from storage_format.record import TRAN_COMMIT, Message

from .encoder import LOCK_FILE_CONTENT, SegmentWriter, write_dledger_checkpoint, write_dledger_index
from .sample import EPOCH_MS, HALF_TOPIC, STORE_HOST_1, props

SPEC_NAME = "bench-store.json"
BORN_HOSTS = (bytes((10, 20, 30, 41)), bytes((10, 20, 30, 42)), bytes((10, 20, 30, 43)))
TAG_VALUES = ("TagA", "TagB", "TagC", "order-created", "order-paid", "order-shipped", "refund", "audit")


@dataclass(frozen=True, kw_only=True)
class StoreSpec:
    """Everything that determines a synthetic store's bytes."""

    messages: int = 4_000_000
    body_min: int = 200
    body_max: int = 500
    topics: int = 8
    queues: int = 8  # per topic
    key_mix: tuple[float, ...] = (0.3, 0.5, 0.2)  # share of messages with 0, 1, 2, ... KEYS tokens
    uniq_share: float = 1.0  # share of messages with a UNIQ_KEY
    tags_share: float = 0.8  # share of messages with TAGS
    segment_size: int = 1 << 30
    consume_queue_file_size: int = 6_000_000
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    seed: int = 7
    lmq_share: float = 0.0  # share of messages naming 1-3 %LMQ% queues (INNER_MULTI_DISPATCH), 4.x style
    lmq_queues: int = 100_000  # distinct %LMQ% queues they are drawn from
    dledger: bool = False  # a DLedger-mode store: dledger-n0/data/ entry files (one-member group), not commitlog/
    transaction_share: float = 0.0  # share of messages sent in a transaction: a half record, then its COMMIT

    def broker_conf(self) -> str:
        """The broker .properties text matching the store's sizes."""
        return (f"mappedFileSizeCommitLog={self.segment_size}\n"
                f"mappedFileSizeConsumeQueue={self.consume_queue_file_size}\n"
                f"maxHashSlotNum={self.max_hash_slot_num}\n"
                f"maxIndexNum={self.max_index_num}\n"
                "messageIndexEnable=true\n"
                + ("enableLmq=true\nenableMultiDispatch=true\n" if self.lmq_share > 0 else "")
                + (f"enableDLegerCommitLog=true\ndLegerGroup=bench\ndLegerPeers={DLEDGER_PEERS}\n"
                   f"dLegerSelfId={DLEDGER_SELF_ID}\n" if self.dledger else ""))

    def to_dict(self) -> dict:
        """JSON form (the key mix as a list)."""
        d = asdict(self)
        d["key_mix"] = list(self.key_mix)
        if not self.dledger:
            del d["dledger"]  # plain stores keep the spec (and so the stores) written before the flag existed
        if not self.transaction_share:
            del d["transaction_share"]  # likewise
        return d


def parse_key_mix(text: str) -> tuple[float, ...]:
    """`"0.3,0.5,0.2"` -> shares of messages with 0, 1, 2 KEYS tokens (normalised to sum 1)."""
    shares = [float(x) for x in text.split(",") if x.strip()]
    if not shares or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError(f"key mix must be non-negative shares, got {text!r}")
    total = sum(shares)
    return tuple(s / total for s in shares)


def store_matches(root: Path, spec: StoreSpec) -> bool:
    """True when `root` holds a complete store written from exactly this spec."""
    try:
        return json.loads((root / SPEC_NAME).read_text())["spec"] == spec.to_dict()
    except (OSError, ValueError, KeyError):
        return False


def _topic_names(n: int) -> list[str]:
    """The bench topics: BenchTopic-00, BenchTopic-01, ..."""
    return [f"BenchTopic-{i:02d}" for i in range(n)]


def _cumulative(shares: tuple[float, ...]) -> list[float]:
    """Running sums of the shares (last one exactly 1), to draw from with one random number."""
    out, acc = [], 0.0
    for s in shares:
        acc += s
        out.append(acc)
    out[-1] = 1.0
    return out


def _lmq_properties(next_offset: dict[int, int], queues: list[int]) -> list[tuple[str, str]]:
    """INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET items naming these %LMQ% queues (each at most once),
    with the next offset of each, as a 4.x broker stores them; advances the offsets."""
    names = sorted(set(queues))
    offsets = [next_offset.get(q, 0) for q in names]
    for q in names:
        next_offset[q] = next_offset.get(q, 0) + 1
    return [("INNER_MULTI_DISPATCH", ",".join(f"%LMQ%bench-{q:06d}" for q in names)),
            ("INNER_MULTI_QUEUE_OFFSET", ",".join(map(str, offsets)))]


DLEDGER_SELF_ID = "n0"
DLEDGER_PEERS = "n0-127.0.0.1:40911"


def write_bench_store(root: Path, spec: StoreSpec, progress: bool = True) -> dict:
    """Write root/commitlog, root/broker.conf, root/lock and root/bench-store.json; returns a summary.

    The per-message Python here only builds the Message and its property string; packing is the
    encoder's. A spec file is written last, so an interrupted run is never mistaken for a store.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_NAME).unlink(missing_ok=True)
    rng = random.Random(spec.seed)
    pool = rng.randbytes(1 << 20).translate(bytes(32 + b % 95 for b in range(256)))  # printable ASCII
    topics = _topic_names(spec.topics)
    key_cdf = _cumulative(spec.key_mix)
    started = time.monotonic()
    clock = EPOCH_MS
    randrange, rnd = rng.randrange, rng.random
    span = spec.body_max - spec.body_min + 1
    keys = 0
    pool_room = len(pool) - spec.body_max
    lmq_next: dict[int, int] = {}
    target = root / f"dledger-{DLEDGER_SELF_ID}" / "data" if spec.dledger else root / "commitlog"
    with SegmentWriter(target, spec.segment_size, dledger_first_index=0 if spec.dledger else None) as writer:
        for i in range(spec.messages):
            clock += i & 1  # ~2 messages per millisecond
            t = randrange(spec.topics * spec.queues)
            topic, qid = topics[t // spec.queues], t % spec.queues
            size = spec.body_min + randrange(span)
            at = randrange(pool_room)
            born = BORN_HOSTS[i % 3]
            parts = []
            r, n_keys = rnd(), 0
            while key_cdf[n_keys] < r:
                n_keys += 1
            keys += n_keys
            if n_keys:
                parts.append(("KEYS", " ".join(f"ORDER-{randrange(10_000_000)}" for _ in range(n_keys))))
            if spec.uniq_share >= 1.0 or rnd() < spec.uniq_share:
                keys += 1
                parts.append(("UNIQ_KEY", f"0A141E29{i % 3:04X}3C4D5E6F{clock % 86_400_000:08X}{i & 0xFFFF:04X}"))
            parts.append(("CLUSTER", "DefaultCluster"))
            if rnd() < spec.tags_share:
                parts.append(("TAGS", TAG_VALUES[randrange(len(TAG_VALUES))]))
            if spec.lmq_share > 0 and rnd() < spec.lmq_share:
                parts.extend(_lmq_properties(lmq_next, [randrange(spec.lmq_queues) for _ in range(1 + randrange(3))]))
            msg = Message(topic=topic, body=pool[at:at + size], queue_id=qid, born_timestamp=clock - 1,
                          born_host=born, born_port=50001, store_timestamp=clock,
                          store_host=STORE_HOST_1[0], store_port=STORE_HOST_1[1], properties=props(parts))
            if spec.transaction_share > 0 and rnd() < spec.transaction_share:
                _transaction(writer, msg, parts)
            else:
                writer.append(msg)
            if progress and i and i % 500_000 == 0:
                print(f"[bench] store: {i:,} messages written, {time.monotonic() - started:.0f}s", flush=True)
    summary = writer.summary
    if spec.dledger:
        home = root / f"dledger-{DLEDGER_SELF_ID}"
        write_dledger_index(home, bytes(writer.units), 0)
        write_dledger_checkpoint(home, writer.dledger_index - 1, writer.dledger_index - 1)
    (root / "broker.conf").write_text(spec.broker_conf())
    (root / "lock").write_bytes(LOCK_FILE_CONTENT)
    info = {"spec": spec.to_dict(), "records": summary.records, "segments": len(summary.segments),
            "data_bytes": summary.max_physical_offset - summary.first_offset, "index_keys": keys,
            "keys_per_message": round(keys / max(1, summary.records), 3),
            "write_seconds": round(time.monotonic() - started, 1)}
    (root / SPEC_NAME).write_text(json.dumps(info, indent=2))
    return info


def _transaction(writer: SegmentWriter, msg: Message, parts: list[tuple[str, str]]) -> None:
    """`msg` sent in a transaction, as the broker stores it (storegen.sample's half and end-transaction steps): the
    half record in RMQ_SYS_TRANS_HALF_TOPIC queue 0, then the COMMIT record in the real topic pointing at it (the
    op record left out: the bench needs the pairs, not the transaction check's bookkeeping)."""
    half = writer.append(Message(
        topic=HALF_TOPIC, body=msg.body, queue_id=0, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        born_port=msg.born_port, store_timestamp=msg.store_timestamp, store_host=msg.store_host,
        store_port=msg.store_port, properties=props([("REAL_TOPIC", msg.topic), ("TRAN_MSG", "true")] + parts
                                                    + [("PGROUP", "PG_Trans"), ("REAL_QID", str(msg.queue_id))])))
    msg.sys_flag |= TRAN_COMMIT
    msg.prepared_transaction_offset = half
    writer.append(msg)


def read_store_info(root: Path) -> dict:
    """The summary written with the store (spec, records, segments, bytes, keys)."""
    return json.loads((root / SPEC_NAME).read_text())
