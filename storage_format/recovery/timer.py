"""The 5.x timer store after a recovery: when the cut commit log leaves it broken (warnings), and the opt-in
repair (--repair-timer). Pure functions over the timer files' bytes and the recovery's facts.

TimerMessageStore.recover never compares timer-log units with the commit log (apache/rocketmq#10668): a unit
whose record lies past the recovery's truncation point T stays, and once new records grow the log back over
it, its slot retries a NumberFormatException forever (timerSkipUnknownError=false) or delivers another
message early and twice. The repair rewinds the timer files to the moment the last surviving unit was
appended: units from the first stale one on are cut, slots whose chains held them point back, the cursors
in timercheck come down to what survives. See docs/timer.md.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import RecoveryError
from ..timer import log as tlog
from ..timer import wheel as twheel
from ..timer.check import TimerCheck

TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC, queue 0
TIMERLOG_DIR = "timerlog"
TIMERWHEEL = "timerwheel"
TIMERCHECK = "config/timercheck"
SHOWN_SLOTS = 5


@dataclass(frozen=True, kw_only=True)
class TimerFiles:
    """The timer files as found: timer-log files (start, size), timercheck, the wheel's size, metrics."""

    log_files: tuple[tuple[int, int], ...]
    check: TimerCheck
    check_size: int | None  # None: no config/timercheck
    wheel_size: int | None  # None: no timerwheel
    metrics_problem: str | None = None
    stray: tuple[str, ...] = ()  # entries of timerlog/ that are no timer-log file (name not an offset)

    @property
    def present(self) -> bool:
        """True when the store holds any timer file (a store whose broker never ran the timer holds none)."""
        return bool(self.log_files) or self.check_size is not None or self.wheel_size is not None


@dataclass(frozen=True, kw_only=True)
class RecoveryFacts:
    """What the commit-log recovery decided that the timer depends on."""

    commit_end: int  # T: the commit log's valid end after recovery
    timer_queue_max: int | None  # M': rmq_sys_wheel_timer/0's max offset after recovery (None: no queue)
    timer_queue_cut: bool  # the recovery cuts entries of that queue
    last_record_ms: int | None  # tau: store time of the last valid record


@dataclass(frozen=True, kw_only=True)
class TimerTail:
    """The timer log read against T: the broker's valid end, the stale units (record past T) and where the
    stale run starts. Units are read from the broker's scan range back to the last file with a unit that is
    not stale (or from the first file, `whole`)."""

    end: int  # E: where the broker's timer recovery leaves the log
    scan_from: int
    read_from: int  # start of the first file read
    units: int  # units read
    stale: int
    cut: int | None  # C: first unit of the stale run that reaches E (None: no stale unit)
    suffix: bool  # every stale unit read lies in [C, E)
    first_stale_elsewhere: int | None  # position of a stale unit before C (when not a suffix)
    stale_slot_ms: tuple[int, int] | None  # earliest and latest slot time of the stale units
    stale_kinds: dict = field(default_factory=dict)  # normal / roll / delete counts
    due_between: int = 0  # surviving units whose slot lies in (tau, lastReadTimeMs): deliveries cut
    wheel_past_end: tuple[int, ...] = ()  # slots whose lastPos is at or past E (wheel ahead of the log)


def file_problems(files: TimerFiles, file_size: int) -> list[str]:
    """Timer files the broker refuses or misreads: a wheel of another size, a short timercheck, timer-log
    files of another size than mappedFileSizeTimerLog (a 0-byte last file is deleted at load), metrics."""
    out = []
    if files.wheel_size not in (None, 0, twheel.WHEEL_SIZE):
        out.append(f"{TIMERWHEEL} is {files.wheel_size} bytes, not {twheel.WHEEL_SIZE}: the broker's TimerWheel "
                   f"throws 'Timer wheel length != expected' and the broker does not start")
    if files.check_size is None and (files.log_files or files.wheel_size):
        out.append(f"{TIMERCHECK} is missing while timer files exist: the broker starts the timer from zero "
                   f"cursors, enqueues every timer message still in the commit log again and delivers the due "
                   f"ones again at once")
    elif files.check_size is not None and files.check_size < 32:
        out.append(f"{TIMERCHECK} is {files.check_size} bytes (the broker writes 4096): the cursors past byte "
                   f"{files.check_size} read as 0, so the timer re-enqueues and re-delivers from the queue's start")
    sizes = sorted(files.log_files)
    for i, (start, size) in enumerate(sizes):
        if size != file_size and not (size == 0 and i == len(sizes) - 1):
            out.append(f"{TIMERLOG_DIR}/{tlog.file_name(start)} is {size} bytes, not mappedFileSizeTimerLog="
                       f"{file_size}: the timer log does not load and the broker does not start")
    for name in files.stray:
        out.append(f"{TIMERLOG_DIR}/{name} is not a timer-log file (its name is no 20-digit offset): the broker's "
                   f"timer log does not load it")
    if files.metrics_problem:
        out.append(files.metrics_problem)
    return out


def loaded_files(files: TimerFiles) -> list[int]:
    """Timer-log file starts the broker maps (MappedFileQueue.doLoad drops a 0-byte last file)."""
    sizes = sorted(files.log_files)
    if sizes and sizes[-1][1] == 0:
        sizes = sizes[:-1]
    return [s for s, _ in sizes]


def read_tail(files: TimerFiles, read: Callable[[int], bytes], file_size: int, precision: int, facts: RecoveryFacts,
              *, whole: bool = False, wheel: bytes | None = None) -> tuple[TimerTail, dict[int, np.ndarray]]:
    """Read the timer log against T (see TimerTail); also returns the units at or after C by file start
    (what a repair walks). `wheel`: also find slots pointing at or past the log's end."""
    starts = loaded_files(files)
    end, scans = tlog.log_end(starts, read, files.check.last_timer_log_flush_pos, file_size)
    if not starts:
        return TimerTail(end=0, scan_from=0, read_from=0, units=0, stale=0, cut=None, suffix=True,
                         first_stale_elsewhere=None, stale_slot_ms=None), {}
    per_file, early_stale = _tail_units(end, scans, read, facts, whole)
    ordered = sorted(per_file)
    pos = np.concatenate([s + np.arange(len(per_file[s]), dtype=np.int64) * tlog.UNIT_SIZE for s in ordered]) \
        if ordered else np.zeros(0, np.int64)
    units = np.concatenate([per_file[s] for s in ordered]) if ordered else np.zeros(0, tlog.UNIT_DTYPE)
    stale = tlog.end_py(units) > facts.commit_end
    n_stale = int(stale.sum())
    cut, suffix, elsewhere = _stale_run(stale, pos)
    if early_stale is not None:
        suffix, elsewhere = False, early_stale
    times = tlog.delayed_times(units)
    past = ()
    if wheel is not None and len(wheel) == twheel.WHEEL_SIZE:
        used = twheel.used_slots(wheel)
        past = tuple(int(i) for i in used[twheel.slots(wheel)[used]["last_pos"] >= end.end])
    tail = TimerTail(end=end.end, scan_from=end.scan_from, read_from=ordered[0] if ordered else 0,
                     units=len(units), stale=n_stale, cut=cut, suffix=suffix, first_stale_elsewhere=elsewhere,
                     stale_slot_ms=(int(times[stale].min() // precision * precision),
                                    int(times[stale].max() // precision * precision)) if n_stale else None,
                     stale_kinds=_stale_kinds(units, stale), due_between=_due_between(files, facts, times, stale,
                                                                                      precision),
                     wheel_past_end=past)
    after = {s: per_file[s] for s in ordered if cut is not None and s + len(per_file[s]) * tlog.UNIT_SIZE > cut}
    return tail, after


def _tail_units(end, scans: dict, read: Callable[[int], bytes], facts: RecoveryFacts,
                whole: bool) -> tuple[dict[int, np.ndarray], int | None]:
    """The units by file start from the broker's scan range, extended back to the last file holding a unit that is
    not stale (offsetPy grows along the log within a run); with `whole`, the first stale unit in a file before
    those (never a suffix then), else None."""
    kept = list(end.files)
    first = kept.index(end.scan_from)
    per_file: dict[int, np.ndarray] = {s: scans[s].units for s in kept[first:] if s in scans}
    i = first
    while i > 0 and _all_stale(per_file.get(kept[i]), facts.commit_end):
        i -= 1
        per_file[kept[i]] = _early_file(kept[i], read, end.scan_from).units
    for s in kept[:i] if whole else ():
        bad = np.flatnonzero(tlog.end_py(_early_file(s, read, end.scan_from).units) > facts.commit_end)
        if len(bad):
            return per_file, s + int(bad[0]) * tlog.UNIT_SIZE
    return per_file, None


def _stale_run(stale: np.ndarray, pos: np.ndarray) -> tuple[int | None, bool, int | None]:
    """(where the stale run that reaches the end starts, whether every stale unit is in it, the first stale unit
    before it)."""
    if not stale.any():
        return None, True, None
    good = np.flatnonzero(~stale)
    k = int(good[-1]) + 1 if len(good) else 0  # first index of the stale run that reaches the end
    cut = int(pos[k]) if k < len(stale) else None
    before = np.flatnonzero(stale[:k])
    return (cut, False, int(pos[before[0]])) if len(before) else (cut, True, None)


def _stale_kinds(units: np.ndarray, stale: np.ndarray) -> dict[str, int]:
    """The stale units counted by kind (normal, roll, delete)."""
    if not stale.any():
        return {}
    m = units["magic"].astype(np.int64)[stale]
    return {"normal": int(((m & (tlog.MAGIC_ROLL | tlog.MAGIC_DELETE)) == 0).sum()),
            "roll": int(((m & tlog.MAGIC_ROLL) != 0).sum()), "delete": int(((m & tlog.MAGIC_DELETE) != 0).sum())}


def _due_between(files: TimerFiles, facts: RecoveryFacts, times: np.ndarray, stale: np.ndarray,
                 precision: int) -> int:
    """Units (not stale) whose slot lies between the last record and the checkpoint's read time."""
    r = files.check.last_read_time_ms
    if facts.last_record_ms is None or r <= facts.last_record_ms:
        return 0
    slot_ms = times // precision * precision
    return int(((~stale) & (slot_ms > facts.last_record_ms) & (slot_ms < r)).sum())


def _early_file(start: int, read: Callable[[int], bytes], scan_from: int) -> tlog.FileScan:
    """A file before the broker's scan range: full units then its filler (an invalid unit there is refused)."""
    scan = tlog.scan_file(read(start))
    if scan.ends_log:
        raise RecoveryError(f"{TIMERLOG_DIR}/{tlog.file_name(start)} at byte {scan.stop}: an invalid timer-log unit "
                            f"before the broker's timer recovery range (its scan starts at timer-log offset {scan_from})")
    return scan


def _all_stale(units: np.ndarray | None, commit_end: int) -> bool:
    """True when a file read has units and every one names a record past T (or has none: read further back)."""
    return units is None or not len(units) or bool((tlog.end_py(units) > commit_end).all())


def _iso(ms: int) -> str:
    """A slot time for people."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def warnings(files: TimerFiles, tail: TimerTail | None, facts: RecoveryFacts, *, file_size: int,
             skip_unknown_error: bool, repairing: bool = False) -> list[str]:
    """The plan's timer warnings: malformed files, stale units, cursors past the cut queue, cut deliveries,
    wheel slots past the log. None where nothing timer-related is cut."""
    out = [f"timer: {p}" for p in file_problems(files, file_size)]
    if tail is None:
        return out
    t = facts.commit_end
    if tail.stale:
        lo, hi = tail.stale_slot_ms
        harm = ("the dequeue of that slot retries a NumberFormatException forever and every later timer message "
                "stops (timerSkipUnknownError=false)" if not skip_unknown_error else
                "the broker drops what it cannot convert (timerSkipUnknownError=true)")
        kinds = ", ".join(f"{n} {k}" for k, n in tail.stale_kinds.items() if n)
        out.append(f"timer: the recovery cuts the commit log at offset {t}, below {tail.stale} timer-log units "
                   f"({kinds}; slots {_iso(lo)} to {_iso(hi)}) that name records past it. Once new records grow the "
                   f"log back over those offsets, {harm}, or a new message there is delivered early and again at "
                   f"its own time (apache/rocketmq#10668); records not regrown by then are dropped. "
                   + (("this run's --repair-timer cuts them" if repairing else "--repair-timer cuts them (docs/timer.md)")
                      if tail.suffix else
                      f"They are not a suffix of the timer log (a stale unit at timer-log offset "
                      f"{tail.first_stale_elsewhere} precedes surviving ones): --repair-timer refuses this log"))
    m = facts.timer_queue_max
    cp = files.check
    if m is not None and max(cp.last_timer_queue_offset, cp.master_timer_queue_offset) > m:
        out.append(f"timer: {TIMERCHECK} says the timer enqueued up to offset "
                   f"{max(cp.last_timer_queue_offset, cp.master_timer_queue_offset)} of {TIMER_TOPIC}/0, but the "
                   f"recovered queue ends at {m}: brokers before 5.3.2 never deliver the next "
                   f"{max(cp.last_timer_queue_offset, cp.master_timer_queue_offset) - m} timer messages written "
                   f"there (5.3.2+ clamps its cursor; #7480)" + ("; this run's --repair-timer lowers them" if repairing
                                                                  else ""))
    if tail.due_between:
        out.append(f"timer: {TIMERCHECK} lastReadTimeMs {_iso(cp.last_read_time_ms)} is past the last surviving "
                   f"record ({_iso(facts.last_record_ms)}): {tail.due_between} timer messages of the slots between "
                   f"were delivered after it, those deliveries are cut, and the broker will not deliver them again "
                   f"(lost)" + ("; this run's --repair-timer rewinds it" if repairing else ""))
    if tail.wheel_past_end:
        out.append(f"timer: {len(tail.wheel_past_end)} {TIMERWHEEL} slots point at or past the timer log's valid "
                   f"end {tail.end} (the wheel is ahead of the log); the broker repairs only those whose first unit "
                   f"is below the end, the others may read units of other slots later")
    return out


# ---------------------------------------------------------------------------------------------------------
# --repair-timer


@dataclass(frozen=True, kw_only=True)
class TimerRepair:
    """What --repair-timer changes: timer-log files rendered (start -> bytes kept before zeros, and a filler
    removed) or deleted, wheel slots rewritten, timercheck fields lowered, and why."""

    cut: int | None
    render_log: dict  # file start -> number of leading bytes kept (the rest of the file becomes zeros)
    delete_log: tuple[int, ...]
    slot_edits: dict  # slot index -> twheel.Slot
    slots_cleared: int
    slots_shortened: int
    units_removed: int
    check_before: TimerCheck
    check_after: TimerCheck
    read_time_rule: str

    @property
    def changes(self) -> bool:
        """True when the repair changes any timer file."""
        return bool(self.render_log or self.delete_log or self.slot_edits or self.check_after != self.check_before)

    def to_dict(self, precision: int) -> dict:
        """JSON form for the plan."""
        return {
            "cut_timer_log_at": self.cut,
            "timer_log_files_rewritten": {tlog.file_name(s): {"bytes_kept": n} for s, n in sorted(self.render_log.items())},
            "timer_log_files_deleted": [tlog.file_name(s) for s in self.delete_log],
            "units_removed": self.units_removed,
            "wheel_slots_shortened": self.slots_shortened,
            "wheel_slots_cleared": self.slots_cleared,
            "wheel_slots_shown": [{"slot": i, "time": s.time * precision, "first_pos": s.first_pos,
                                   "last_pos": s.last_pos, "num": s.num}
                                  for i, s in sorted(self.slot_edits.items())[:SHOWN_SLOTS]],
            "timercheck_before": self.check_before.to_dict(),
            "timercheck_after": self.check_after.to_dict(),
            "last_read_time_rule": self.read_time_rule,
        }


def plan_repair(files: TimerFiles, tail: TimerTail, after: dict[int, np.ndarray], wheel: bytes, facts: RecoveryFacts,
                *, file_size: int, precision: int) -> TimerRepair:
    """The deterministic repair (docs/timer.md): cut the log at C, point cut chains back, lower timercheck.
    Refuses, naming why, where the stale units are not a suffix or the files are malformed."""
    problems = file_problems(files, file_size)
    if problems:
        raise RecoveryError(f"--repair-timer: {problems[0]}; the repair does not rewrite malformed timer files")
    if len(wheel) != twheel.WHEEL_SIZE:
        raise RecoveryError(f"--repair-timer: {TIMERWHEEL} is {len(wheel)} bytes, not {twheel.WHEEL_SIZE}")
    if not tail.suffix:
        raise RecoveryError(f"--repair-timer: the stale timer-log units are not a suffix of the timer log: the unit at "
                            f"timer-log offset {tail.first_stale_elsewhere} names a record past the commit log's new "
                            f"end {facts.commit_end}, but later units survive (a timer log that went through an "
                            f"earlier truncation); cutting at the first stale unit would drop surviving timer "
                            f"messages, so nothing is repaired")
    cut = tail.cut
    stop = cut if cut is not None else tail.end
    render, delete = {}, ()
    if cut is not None:
        render, delete = _log_cut(loaded_files(files), cut, file_size)
        stop = max(s + n for s, n in render.items())  # the log's new end (before the filler C's append wrote)
    edits, cleared, shortened = _wheel_edits(wheel, stop, UnitsAfter.of(after), precision)
    cp = files.check
    m = facts.timer_queue_max
    new = cp.lowered(last_timer_log_flush_pos=min(cp.last_timer_log_flush_pos, stop))
    if m is not None:
        new = new.lowered(last_timer_queue_offset=min(cp.last_timer_queue_offset, m),
                          master_timer_queue_offset=min(cp.master_timer_queue_offset, m))
    rule = "lastReadTimeMs kept: no surviving timer message has a slot between the last surviving record and it"
    if tail.due_between and facts.last_record_ms is not None:
        back = facts.last_record_ms // precision * precision
        new = new.lowered(last_read_time_ms=min(cp.last_read_time_ms, back))
        rule = (f"lastReadTimeMs rewound to the slot of the last surviving record ({_iso(back)}): the "
                f"{tail.due_between} messages whose deliveries were cut are delivered again; deliveries of that "
                f"slot that survived come a second time (at-least-once, never lost)")
    return TimerRepair(cut=cut, render_log=render, delete_log=delete, slot_edits=edits, slots_cleared=cleared,
                       slots_shortened=shortened, units_removed=sum(
                           int(np.sum(s + np.arange(len(u)) * tlog.UNIT_SIZE >= cut)) for s, u in after.items())
                       if cut is not None else 0, check_before=cp, check_after=new, read_time_rule=rule)


def _log_cut(starts: list[int], cut: int, file_size: int) -> tuple[dict[int, int], tuple[int, ...]]:
    """Files rewritten (start -> leading bytes kept) and deleted so that the log is what it was right after
    the last surviving unit was appended: zeros from C; when C opens a file, that file goes and the filler
    the append of C wrote at the end of the file before is zeroed too."""
    holding = max(s for s in starts if s <= cut)
    later = tuple(s for s in starts if s > holding)
    if cut == holding and holding != starts[0]:
        prev = max(s for s in starts if s < holding)
        last_unit_end = prev + tlog.units_per_file(file_size) * tlog.UNIT_SIZE
        return {prev: last_unit_end - prev}, (holding,) + later
    return {holding: cut - holding}, later


@dataclass(frozen=True)
class UnitsAfter:
    """The units read at or after C as sorted columns (a chain walk looks positions up by binary search)."""

    pos: np.ndarray
    prev: np.ndarray
    time: np.ndarray
    magic: np.ndarray

    @classmethod
    def of(cls, after: dict[int, np.ndarray]) -> "UnitsAfter":
        """Columns of the units by file start."""
        starts = sorted(after)
        units = [after[s] for s in starts]
        cat = np.concatenate(units) if units else np.zeros(0, tlog.UNIT_DTYPE)
        pos = np.concatenate([s + np.arange(len(u), dtype=np.int64) * tlog.UNIT_SIZE for s, u in zip(starts, units)]) \
            if units else np.zeros(0, np.int64)
        return cls(pos, cat["prev_pos"].astype(np.int64), tlog.delayed_times(cat), cat["magic"].astype(np.int64))

    def at(self, position: int) -> int | None:
        """Row of the unit at a timer-log position, or None."""
        i = int(np.searchsorted(self.pos, position))
        return i if i < len(self.pos) and self.pos[i] == position else None


def _wheel_edits(wheel: bytes, cut: int, units: UnitsAfter, precision: int) -> tuple[dict, int, int]:
    """Slots whose chain reaches C or beyond: walk prevPos back to the first unit below C (subtracting the
    removed units from num, a delete unit counting -1); none left, or a chain that leaves the slot or points
    where no unit is: the slot is cleared."""
    used = twheel.used_slots(wheel)
    sl = twheel.slots(wheel)[used]
    hit = used[(sl["last_pos"] >= cut) | (sl["first_pos"] >= cut)]
    edits, cleared, shortened = {}, 0, 0
    for i in hit.tolist():
        s = twheel.decode_slot(wheel, i)
        pos, num, ok, steps = s.last_pos, s.num, True, 0
        while pos >= cut:
            row = units.at(pos)
            steps += 1
            if row is None or int(units.time[row]) // precision != s.time or steps > len(units.pos):
                ok = False  # no unit there, a unit of another slot, or a loop
                break
            num -= -1 if int(units.magic[row]) & tlog.MAGIC_DELETE else 1
            pos = int(units.prev[row])
        if not ok or pos < 0 or s.first_pos >= cut:
            edits[i] = twheel.EMPTY
            cleared += 1
        else:
            edits[i] = twheel.Slot(s.time, s.first_pos, pos, num, s.magic)
            shortened += 1
    return edits, cleared, shortened


def render_log_file(data: bytes, keep: int) -> bytes:
    """A timer-log file cut by the repair: its first `keep` bytes, then zeros to the same length."""
    return data[:keep] + bytes(len(data) - keep)
