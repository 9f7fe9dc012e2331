"""Issue 32 item 4's checks of a rebuild of a store of many %LMQ% queues, where no broker can give the answer:
a sample of its queues rebuilt again through reput's reference path (the numpy decoder, REPUT_DECODE_KERNEL=0)
and compared byte for byte, and the sample read against the commit log with this module's own struct reading
(not storage_format's): every unit points at a whole record that names its queue at that queue offset (the
record's topic, queueId and queueOffset, or its INNER_MULTI_DISPATCH and the same position of
INNER_MULTI_QUEUE_OFFSET), and the offsets are dense (no blank unit before the queue's last). These are 4.x rules,
the ones storegen's stores follow (5.x places LMQ units where they fall, not at the offset the record names)."""
from __future__ import annotations

import mmap
import os
import random
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNIT = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
HEAD = struct.Struct(">iIiiiqqi")  # totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag
MAGICS = {0xDAA320A7: 1, 0xDAA320AB: 2}  # message magic V1 (topic length in 1 byte), V2 (in 2)
BORN_V6, STORE_V6 = 0x10, 0x20
LMQ = "%LMQ%"


@dataclass
class SampleCheck:
    """What the check found: queues and units read, the reference's files compared, every broken rule named."""

    queues: int = 0
    units: int = 0
    reference_files: int = 0
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"queues": self.queues, "units": self.units, "reference_files": self.reference_files,
                "problems": self.problems[:20], "problems_total": len(self.problems)}


def sample_queues(out: Path, lmq: int, plain_topics: int, seed: int = 32) -> tuple[list[str], list[str]]:
    """`lmq` LMQ queue directories and `plain_topics` plain topics of OUT's consumequeue/, drawn with `seed`."""
    names = sorted(os.listdir(out / "consumequeue"))
    rng = random.Random(seed)
    lmqs = [n for n in names if n.startswith(LMQ)]
    plain = [n for n in names if not n.startswith(LMQ)]
    return sorted(rng.sample(lmqs, min(lmq, len(lmqs)))), sorted(rng.sample(plain, min(plain_topics, len(plain))))


class CommitLog:
    """The store's segments mapped on demand (a record at a physical offset)."""

    def __init__(self, store: Path) -> None:
        self.starts = sorted(int(p.name) for p in (store / "commitlog").iterdir() if p.name.isdigit())
        self.dir, self._maps = store / "commitlog", {}

    def at(self, offset: int) -> tuple[mmap.mmap, int]:
        start = max(s for s in self.starts if s <= offset)
        if start not in self._maps:
            with open(self.dir / f"{start:020d}", "rb") as f:
                self._maps[start] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._maps[start], offset - start

    def close(self) -> None:
        for m in self._maps.values():
            m.close()


def read_record(buf: mmap.mmap, pos: int) -> tuple[int, int, int, str, dict[str, str]]:
    """(totalSize, queueId, queueOffset, topic, properties) of the record at `pos`."""
    size, magic, _crc, queue_id, _flag, queue_offset, _phys, sys_flag = HEAD.unpack_from(buf, pos)
    version = MAGICS[magic]
    p = pos + HEAD.size + 8 + (20 if sys_flag & BORN_V6 else 8) + 8 + (20 if sys_flag & STORE_V6 else 8) + 4 + 8
    body_len = struct.unpack_from(">i", buf, p)[0]
    p += 4 + body_len
    topic_len = buf[p] if version == 1 else struct.unpack_from(">H", buf, p)[0]
    p += version
    topic = bytes(buf[p:p + topic_len]).decode()
    p += topic_len
    props_len = struct.unpack_from(">H", buf, p)[0]
    text = bytes(buf[p + 2:p + 2 + props_len]).decode()
    props = dict(kv.split("\x01", 1) for kv in text.split("\x02") if "\x01" in kv)
    return size, queue_id, queue_offset, topic, props


def queue_units(queue_dir: Path) -> tuple[int, list[tuple[int, int, int]]]:
    """(queue offset of the first unit, units up to the last non-blank one) of a queue's files in name order."""
    files = sorted(queue_dir.iterdir(), key=lambda p: int(p.name))
    first = int(files[0].name) // UNIT.size if files else 0
    data = b"".join(f.read_bytes() for f in files)
    units = [UNIT.unpack_from(data, i) for i in range(0, len(data) - UNIT.size + 1, UNIT.size)]
    while units and units[-1] == (0, 0, 0):
        units.pop()
    return first, units


def check_queue(log: CommitLog, topic: str, queue_id: int, queue_dir: Path, found: SampleCheck) -> None:
    """Every unit of one queue against the record it points at (the rules in the module's docstring)."""
    first, units = queue_units(queue_dir)
    found.queues += 1
    found.units += len(units)
    where = f"consumequeue/{topic}/{queue_id}"
    for i, (offset, size, _tags) in enumerate(units):
        qo = first + i
        if size <= 0:
            found.problems.append(f"{where}: unit at queue offset {qo} is blank (offsets not dense)")
            continue
        buf, pos = log.at(offset)
        total, rec_qid, rec_qo, rec_topic, props = read_record(buf, pos)
        if total != size:
            found.problems.append(f"{where}@{qo}: size {size}, the record at {offset} holds {total}")
        elif (rec_topic, rec_qid, rec_qo) != (topic, queue_id, qo) and not names_it(props, topic, qo):
            found.problems.append(f"{where}@{qo}: the record at {offset} is {rec_topic}/{rec_qid}@{rec_qo} and "
                                  f"does not name the queue at that offset")


def names_it(props: dict[str, str], queue: str, queue_offset: int) -> bool:
    """The record's INNER_MULTI_DISPATCH names `queue`, and the same position of INNER_MULTI_QUEUE_OFFSET holds
    `queue_offset` (4.x multi-dispatch: any queue may be named, %LMQ% or not)."""
    names = props.get("INNER_MULTI_DISPATCH", "").split(",")
    offsets = props.get("INNER_MULTI_QUEUE_OFFSET", "").split(",")
    return queue in names and names.index(queue) < len(offsets) and offsets[names.index(queue)] == str(queue_offset)

def reference_rebuild(store: Path, topics: list[str], into: Path, split_size: int) -> None:
    """jobs.rebuild of `topics`' consume queues only, every split decoded by the numpy reference."""
    shutil.rmtree(into, ignore_errors=True)
    argv = [sys.executable, "-m", "jobs.rebuild", "--store", str(store), "--out", str(into), "--only",
            "consumequeue", "--topics", ",".join(topics), "--broker-config", str(store / "broker.conf"),
            "--split-size", str(split_size), "--quiet"]
    env = {**os.environ, "REPUT_DECODE_KERNEL": "0"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the reference rebuild exited {done.returncode}: {done.stderr.strip()[-600:]}")


def compare_reference(out: Path, reference: Path, topics: list[str], found: SampleCheck) -> None:
    """The sampled topics' files in OUT and in the reference's output: the same names, the same bytes."""
    for topic in topics:
        ours = sorted(p.relative_to(out) for p in (out / "consumequeue" / topic).rglob("*") if p.is_file())
        theirs = sorted(p.relative_to(reference) for p in (reference / "consumequeue" / topic).rglob("*")
                        if p.is_file())
        if ours != theirs:
            found.problems.append(f"consumequeue/{topic}: files {[str(p) for p in ours]} against the reference's "
                                  f"{[str(p) for p in theirs]}")
            continue
        for rel in ours:
            found.reference_files += 1
            if (out / rel).read_bytes() != (reference / rel).read_bytes():
                found.problems.append(f"{rel}: differs from the reference path's file")


def check_sample(store: Path, out: Path, work: Path, split_size: int, lmq: int = 200,
                 plain_topics: int = 2) -> SampleCheck:
    """The sample's files against the reference path, then every sampled unit against the commit log."""
    lmqs, plain = sample_queues(out, lmq, plain_topics)
    found = SampleCheck()
    reference = work / "lmq-reference"
    reference_rebuild(store, lmqs + plain, reference, split_size)
    try:
        compare_reference(out, reference, lmqs + plain, found)
    finally:
        shutil.rmtree(reference, ignore_errors=True)
    log = CommitLog(store)
    try:
        for topic in lmqs + plain:
            for queue_dir in sorted((out / "consumequeue" / topic).iterdir(), key=lambda p: int(p.name)):
                check_queue(log, topic, int(queue_dir.name), queue_dir, found)
    finally:
        log.close()
    return found
