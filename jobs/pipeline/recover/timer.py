"""The 5.x timer store in `jobs.recover` and `jobs.verify`: read the timer files (timercheck, the last timer-log
file or two, the wheel), hand them with the recovery's facts to storage_format.recovery.timer, and render what
--repair-timer changes. Driver-side reads bounded by the timer files' sizes; no Spark."""
from __future__ import annotations

from dataclasses import dataclass

from storage_format.consume_queue import CQ_UNIT_SIZE
from storage_format.recovery import timer as timer_rules
from storage_format.recovery.queues import QueueState, load_queue
from storage_format.settings import BrokerSettings
from storage_format.timer import log as tlog
from storage_format.timer import wheel as twheel
from storage_format.timer.check import TIMERCHECK_SIZE, parse_timercheck, timercheck_bytes
from storage_format.timer.metrics import METRICS, metrics_problem

from ..io.fs import Location
from .inputs import record_store_timestamp

__all__ = ["TimerOutcome", "read_timer_files", "assess", "apply_to_output", "queue_max_on_disk"]


@dataclass(kw_only=True)
class TimerOutcome:
    """What the timer check found (and, with --repair-timer, what the repair changes) for one plan."""

    files: timer_rules.TimerFiles
    tail: timer_rules.TimerTail | None
    warnings: list[str]
    repair: timer_rules.TimerRepair | None
    precision: int
    note: str
    file_size: int = tlog.DEFAULT_FILE_SIZE
    queue_max: int | None = None  # M' the check used
    queue_cut: bool = False  # the recovery cuts rmq_sys_wheel_timer/0 (harmless unless units name cut records)

    @property
    def changes(self) -> bool:
        """True when --repair-timer changes a timer file."""
        return self.repair is not None and self.repair.changes

    def to_dict(self) -> dict:
        """The plan's "timer" part."""
        t = self.tail
        out = {"note": self.note, "timer_log_files": len(self.files.log_files),
               "timercheck": None if self.files.check_size is None else self.files.check.to_dict(),
               "timerwheel_bytes": self.files.wheel_size}
        if t is not None:
            out.update({"timer_queue_max_after": self.queue_max, "timer_queue_cut": self.queue_cut,
                        "timer_log_valid_end": t.end, "units_read": t.units, "stale_units": t.stale,
                        "stale_units_by_kind": t.stale_kinds, "first_stale_unit": t.cut, "stale_are_suffix": t.suffix,
                        "deliveries_cut": t.due_between, "wheel_slots_past_end": len(t.wheel_past_end)})
        out["warnings"] = self.warnings
        out["repair"] = None if self.repair is None else self.repair.to_dict(self.precision)
        return out


def _opt(loc: Location) -> bytes | None:
    """A small file's bytes, or None when absent."""
    return loc.read_bytes() if loc.exists() else None


def read_timer_files(store: Location) -> timer_rules.TimerFiles:
    """The timer files' sizes and timercheck (the timer log and wheel are read later, as needed)."""
    log_dir = store.child(timer_rules.TIMERLOG_DIR)
    files, stray = [], []
    if log_dir.exists():
        for info in log_dir.list():
            if info.type.name == "File" and info.base_name.isdigit():
                files.append((int(info.base_name), info.size))
            else:
                stray.append(info.base_name)
    raw = _opt(store.child(timer_rules.TIMERCHECK))
    wheel = store.child(timer_rules.TIMERWHEEL)
    problem = None
    main, bak = _opt(store.child(METRICS)), _opt(store.child(METRICS + ".bak"))
    if main is not None or bak is not None:
        problem = metrics_problem(main, bak)
    return timer_rules.TimerFiles(log_files=tuple(sorted(files)), check=parse_timercheck(raw or b""),
                            check_size=None if raw is None else len(raw),
                            wheel_size=wheel.size() if wheel.exists() else None, metrics_problem=problem,
                            stray=tuple(sorted(stray)))


def refusal(files: timer_rules.TimerFiles, settings: BrokerSettings) -> str | None:
    """Why --repair-timer cannot work on these timer files whatever the recovery decides, or None."""
    if not files.present:
        return ("--repair-timer: the store has no timer files (timerlog/, timerwheel, config/timercheck); there is "
                "nothing to repair")
    if not settings.timer_wheel_enable:
        return "--repair-timer: timerWheelEnable=false, the broker does not use the timer files; nothing to repair"
    problems = timer_rules.file_problems(files, settings.mapped_file_size_timer_log)
    if problems:
        return f"--repair-timer: {problems[0]}; the repair does not rewrite malformed timer files"
    if files.wheel_size != twheel.WHEEL_SIZE:
        return (f"--repair-timer: the store has no {timer_rules.TIMERWHEEL} (or an empty one) beside its timer log; the "
                f"repair needs the wheel the broker keeps")
    return None


def precheck(store: Location, settings: BrokerSettings) -> None:
    """--repair-timer: refuse before any Spark work what the repair cannot do."""
    why = refusal(read_timer_files(store), settings)
    if why:
        raise timer_rules.RecoveryError(why)


def _reader(store: Location):
    """Bytes of a timer-log file by start offset."""
    return lambda start: store.child(timer_rules.TIMERLOG_DIR, tlog.file_name(start)).read_bytes()


def assess(store: Location, settings: BrokerSettings, facts: timer_rules.RecoveryFacts, *, repair: bool) -> TimerOutcome | None:
    """The timer check of a recovery (None on a store without timer files); with `repair` also the repair plan
    (raises RecoveryError where it refuses)."""
    files = read_timer_files(store)
    precision = settings.timer_precision
    why = refusal(files, settings) if repair else None
    if why:
        raise timer_rules.RecoveryError(why)
    if not files.present:
        return None
    if not settings.timer_wheel_enable:
        return TimerOutcome(files=files, tail=None, warnings=[], repair=None, precision=precision,
                            note="timerWheelEnable=false: the broker does not read the timer files; copied as they are",
                            file_size=settings.mapped_file_size_timer_log, queue_max=facts.timer_queue_max,
                            queue_cut=facts.timer_queue_cut)
    size = settings.mapped_file_size_timer_log
    problems = timer_rules.file_problems(files, size)
    tail, after, wheel = None, {}, None
    if not problems:
        wheel = store.child(timer_rules.TIMERWHEEL).read_bytes() if files.wheel_size == twheel.WHEEL_SIZE else None
        tail, after = timer_rules.read_tail(files, _reader(store), size, precision, facts, whole=repair, wheel=wheel)
    warns = timer_rules.warnings(files, tail, facts, file_size=size, skip_unknown_error=settings.timer_skip_unknown_error,
                           repairing=repair)
    plan = None
    if repair:
        plan = timer_rules.plan_repair(files, tail, after, wheel, facts, file_size=size, precision=precision)
    note = ("timer files copied as they are (what the broker's own recovery works from)" if plan is None else
            "--repair-timer: " + ("the timer files need no repair" if not plan.changes else
                                  "timer log cut, wheel slots and timercheck repaired (docs/timer.md)"))
    return TimerOutcome(files=files, tail=tail, warnings=warns, repair=plan, precision=precision, note=note,
                        file_size=size, queue_max=facts.timer_queue_max, queue_cut=facts.timer_queue_cut)


def recovery_facts(plan) -> timer_rules.RecoveryFacts:
    """T, M', whether the timer queue is cut, and tau, from a recovery plan."""
    key = (timer_rules.TIMER_TOPIC, 0)
    st = plan.states.get(key)
    ld = plan.loads.get(key)
    m = None
    if st is not None:
        m = st.write_offset // CQ_UNIT_SIZE
    elif ld is not None:
        m = ld.write_offset // CQ_UNIT_SIZE
    last = max((s.last_record_offset for s in plan.scan.accepted if s.last_record_offset is not None), default=None)
    tau = record_store_timestamp(plan.segments, last) if last is not None else None
    return timer_rules.RecoveryFacts(commit_end=plan.truncation.offset, timer_queue_max=m,
                               timer_queue_cut=bool(st is not None and (st.cut or st.truncated_files)),
                               last_record_ms=tau)


def attach(plan, repair: bool) -> TimerOutcome | None:
    """Run the timer check on a recovery plan: sets plan.timer and adds its warnings to the plan's."""
    if plan.generation.generation < 5:
        if repair:
            raise timer_rules.RecoveryError("--repair-timer: a 4.x store has no timer message store")
        return None
    outcome = assess(plan.store, plan.settings, recovery_facts(plan), repair=repair)
    plan.timer = outcome
    if outcome is not None:
        plan.warnings.extend(outcome.warnings)
    return outcome


def apply_to_output(plan, output) -> None:
    """--repair-timer: the repaired timer files replace their verbatim copies (rendered), cut files go."""
    outcome = getattr(plan, "timer", None)
    if outcome is None or outcome.repair is None or not outcome.repair.changes:
        return
    r, store = outcome.repair, plan.store
    rendered: dict[str, bytes] = {}
    for start, keep in r.render_log.items():
        rendered[f"{timer_rules.TIMERLOG_DIR}/{tlog.file_name(start)}"] = timer_rules.render_log_file(_reader(store)(start), keep)
    if r.slot_edits:
        rendered[timer_rules.TIMERWHEEL] = twheel.with_slots(store.child(timer_rules.TIMERWHEEL).read_bytes(), r.slot_edits)
    if r.check_after != r.check_before or outcome.files.check_size != TIMERCHECK_SIZE:
        rendered[timer_rules.TIMERCHECK] = timercheck_bytes(r.check_after, _opt(store.child(timer_rules.TIMERCHECK)))
    deleted = [f"{timer_rules.TIMERLOG_DIR}/{tlog.file_name(s)}" for s in r.delete_log]
    gone = set(rendered) | set(deleted)
    output.copies[:] = [c for c in output.copies if c.rel not in gone]
    output.render_bytes.update(rendered)
    output.deleted.extend(deleted)


def queue_max_on_disk(store: Location, settings: BrokerSettings, commit_end: int) -> int | None:
    """rmq_sys_wheel_timer/0's max offset as the broker loads it at a normal start (ConsumeQueue.recover, then
    truncateDirtyLogicFiles at the commit log's end), or None without that queue; for verify."""
    qdir = store.child("consumequeue", timer_rules.TIMER_TOPIC, "0")
    if not qdir.exists():
        return None
    starts = [int(i.base_name) for i in qdir.list() if i.type.name == "File" and i.base_name.isdigit()
              and i.size > 0]
    read = lambda s: qdir.child(f"{s:020d}").read_bytes()  # noqa: E731
    state = QueueState.start(load_queue(timer_rules.TIMER_TOPIC, 0, starts, read, settings.consume_queue_file_size),
                             settings.consume_queue_file_size)
    state.truncate(commit_end, read)
    return state.write_offset // CQ_UNIT_SIZE


def check_at_rest(store: Location, settings: BrokerSettings, commit_end: int, generation: int) -> TimerOutcome | None:
    """verify: the timer files of a store at rest against its commit log's valid end."""
    if generation < 5:
        return None
    facts = timer_rules.RecoveryFacts(commit_end=commit_end, timer_queue_max=queue_max_on_disk(store, settings, commit_end),
                                timer_queue_cut=False, last_record_ms=None)
    return assess(store, settings, facts, repair=False)


def add_findings(outcome: TimerOutcome | None, found) -> None:
    """verify: the timer check of a store at rest as findings (jobs/pipeline/findings.py, artifact "timer")."""
    if outcome is None:
        return
    for problem in timer_rules.file_problems(outcome.files, outcome.file_size):
        found.add("timer", "malformed_timer_file", problem.split(" ")[0], detail=problem)
    t = outcome.tail
    if t is None:
        return
    if t.stale:
        first = t.first_stale_elsewhere if not t.suffix else t.cut
        holding = max((s for s, _ in outcome.files.log_files if s <= first), default=0)
        found.add("timer", "stale_timer_unit", f"{timer_rules.TIMERLOG_DIR}/{tlog.file_name(holding)}", count=t.stale,
                  position=first, detail=f"{t.stale} units name records past the commit log's valid end, the first "
                                         f"at timer-log offset {first}")
    cp = outcome.files.check
    m = outcome.queue_max
    for name, value in (("lastTimerQueueOffset", cp.last_timer_queue_offset),
                        ("masterTimerQueueOffset", cp.master_timer_queue_offset)):
        if m is not None and value > m:
            found.add("timer", "timer_cursor_ahead", timer_rules.TIMERCHECK, field=name, expected=f"<= {m}", found=value)
    if t.wheel_past_end:
        found.add("timer", "wheel_slot_past_end", timer_rules.TIMERWHEEL, count=len(t.wheel_past_end),
                  slot=t.wheel_past_end[0], detail=f"lastPos at or past the timer log's valid end {t.end}")
