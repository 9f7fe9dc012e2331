"""`config/timercheck` (TimerCheckpoint): mapped as one 4096-byte page; 7 big-endian longs, the rest zero. A
shorter file reads as zeros past its end (the mapping extends it), a missing file as all zeros."""
from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, fields, replace

TIMERCHECK_SIZE = 4096  # DefaultMappedFile.OS_PAGE_SIZE
_LONGS = struct.Struct(">7q")
CURSOR_BYTES = 32  # the four cursors; the data version follows


@dataclass(frozen=True, kw_only=True)
class TimerCheck:
    """The timer's cursors: read time (ms), timer-log flush position, the enqueue cursor in the
    rmq_sys_wheel_timer queue (and the master's), and the data version."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    version_timestamp: int = 0
    version_counter: int = 0

    def to_dict(self) -> dict:
        """Field name -> value."""
        return asdict(self)

    def lowered(self, **fields: int) -> "TimerCheck":
        """A copy with the given fields set."""
        return replace(self, **fields)


def parse_timercheck(data: bytes) -> TimerCheck:
    """The fields as the broker reads them: bytes past the file's end read as zero."""
    values = _LONGS.unpack(data[:_LONGS.size].ljust(_LONGS.size, b"\0"))
    return TimerCheck(**{f.name: v for f, v in zip(fields(TimerCheck), values)})


def timercheck_bytes(tc: TimerCheck, base: bytes | None = None) -> bytes:
    """The 4096-byte file; bytes after the 7 longs come from `base` (the previous file) or are zero."""
    out = bytearray((base or b"")[:TIMERCHECK_SIZE].ljust(TIMERCHECK_SIZE, b"\0"))
    _LONGS.pack_into(out, 0, *asdict(tc).values())
    return bytes(out)
