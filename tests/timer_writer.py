"""An independent writer of 5.x timer stores for tests: TimerMessageStore.doEnqueue + TimerLog.append +
TimerWheel.putSlot + TimerCheckpoint.flush re-enacted from the Java source with plain struct and bytearrays
(it shares no code with storage_format.timer, so the codecs and the repair are checked against it)."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

WHEEL_SLOTS = 604800 * 2


@dataclass
class Writer:
    """A timer log of `file_size`-byte files, its wheel (sparse: slot index -> 32 bytes) and cursors."""

    file_size: int
    precision: int = 1000
    files: dict[int, bytearray] = field(default_factory=dict)
    wrote: int = 0  # absolute write position (start of the last file + its write position)
    slots: dict[int, list[int]] = field(default_factory=dict)  # index -> [time/prec, first, last, num, magic]
    appended: list[tuple[int, tuple]] = field(default_factory=list)  # (position, unit fields)

    def _last(self) -> tuple[int, bytearray]:
        """TimerLog.append's file: the last one, or a new one when full or none."""
        if not self.files or self.wrote - max(self.files) >= self.file_size:
            start = max(self.files) + self.file_size if self.files else 0
            self.files[start] = bytearray(self.file_size)
            self.wrote = start
        start = max(self.files)
        return start, self.files[start]

    def append(self, data: bytes) -> int:
        """TimerLog.append: a 16-byte filler (room, 0L, blank magic) when the unit plus a filler do not fit."""
        start, f = self._last()
        pos = self.wrote - start
        if len(data) + 16 > self.file_size - pos:
            f[pos:pos + 16] = struct.pack(">iqI", self.file_size - pos, 0, 0xCBD43194)
            self.wrote = start + self.file_size
            start, f = self._last()
            pos = 0
        f[pos:pos + len(data)] = data
        self.wrote = start + pos + len(data)
        return start + pos

    def enqueue(self, write_time: int, delay: int, offset_py: int, size_py: int, *, delete: bool = False,
                roll: bool = False, topic_hash: int = 12345) -> int:
        """doEnqueue of one message into slot write_time + delay (the delay already as doEnqueue stores it)."""
        t = write_time + delay
        idx = (t // self.precision) % WHEEL_SLOTS
        slot = self.slots.get(idx)
        live = slot is not None and slot[0] == t // self.precision
        first, last, num, magic_slot = (slot[1], slot[2], slot[3], slot[4]) if live else (-1, -1, 0, 0)
        magic = 1 | (2 if roll else 0) | (4 if delete else 0)
        unit = struct.pack(">iqiqiqiiq", 52, last, magic, write_time, delay, offset_py, size_py, topic_hash, 0)
        ret = self.append(unit)
        self.slots[idx] = [t // self.precision, ret if first == -1 else first, ret, num - 1 if delete else num + 1,
                           magic_slot]
        self.appended.append((ret, (last, magic, write_time, delay, offset_py, size_py, topic_hash)))
        return ret

    def wheel(self) -> bytes:
        """The whole 38,707,200-byte wheel."""
        out = bytearray(WHEEL_SLOTS * 32)
        for i, (t, first, last, num, magic) in self.slots.items():
            out[i * 32:(i + 1) * 32] = struct.pack(">qqqii", t, first, last, num, magic)
        return bytes(out)

    def timercheck(self, read_ms: int, queue_offset: int, flush_pos: int | None = None) -> bytes:
        """TimerCheckpoint.flush: 7 longs in a 4096-byte page."""
        pos = self.wrote if flush_pos is None else flush_pos
        return struct.pack(">7q", read_ms, pos, queue_offset, queue_offset, 0, 1700000000000, 3).ljust(4096, b"\0")

    def save(self, root: Path, read_ms: int, queue_offset: int) -> None:
        """Write timerlog/, timerwheel and config/timercheck under a store root."""
        (root / "timerlog").mkdir(parents=True, exist_ok=True)
        for start, data in self.files.items():
            (root / "timerlog" / f"{start:020d}").write_bytes(bytes(data))
        (root / "timerwheel").write_bytes(self.wheel())
        (root / "config").mkdir(exist_ok=True)
        (root / "config" / "timercheck").write_bytes(self.timercheck(read_ms, queue_offset))
