"""What verify can find: the one registry of finding kinds (name, where it applies, severity, order in a
file, meaning), and the collector the verify tasks fill.

The verify stage may only report kinds registered here (Findings.add refuses others), the report orders
details by the kind's scope, the exit status follows the kinds' severity, and docs/jobs.md's findings table
is this registry rendered by `docs_table` (tests/test_verify.py checks that they agree).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

DETAILS_PER_KIND = 20  # detailed findings kept per file and kind (counts are always complete)

ARTIFACTS = ("commitlog", "consumequeue", "index", "dledger_index", "timer")  # timer: the 5.x timer store (docs/timer.md)
# Where in a file a kind of finding sits; report details of one file follow this order.
SCOPES = ("file", "header", "slot", "entry", "stale", "chain", "lookup")
SEVERITIES = {"error": "exit status 1"}  # severity -> what it does to verify's exit status
ERROR = "error"  # the store differs from what the commit log implies


@dataclass(frozen=True)
class FindingKind:
    """One kind of finding: its name, the artifacts it applies to, its severity and scope, what it means."""

    name: str
    artifacts: tuple[str, ...]
    scope: str
    meaning: str
    severity: str = ERROR

    @property
    def rank(self) -> int:
        """Position of the kind's scope in a file's details."""
        return SCOPES.index(self.scope)


CQ, IDX, BOTH = ("consumequeue",), ("index",), ("consumequeue", "index")
ALL = BOTH + ("dledger_index",)  # dledger_index: dledger-<id>/index/, one 32-byte unit per DLedger entry
KINDS: dict[str, FindingKind] = {k.name: k for k in (
    FindingKind("invalid_tail", ("commitlog",), "file",
                "records follow the first invalid record; the broker's dispatch never reaches them"),
    FindingKind("negative_queue_id", ("commitlog",), "entry",
                "a valid record whose queueId is negative, which no broker assigns (a damaged record, or not written "
                "by a broker); the broker's dispatch still files it under consumequeue/<topic>/<queueId>/"),
    FindingKind("out_of_step_queue_offset", ("commitlog",), "entry",
                "a valid record whose queueOffset is not its queue's next offset (a damaged record): the broker's "
                "consume queue skips it or appends it at the next offset, and its later entries follow from there"),
    FindingKind("bad_body_crc", ("commitlog",), "entry",
                "a valid record of a DLedger store whose body CRC fails: DLedger never checks it and serves it, but a "
                "plain broker's recovery (checkCRCOnRecover) cuts its log there, so it stops a conversion"),
    FindingKind("missing_file", ALL, "file", "a file the commit log implies is not in the store"),
    FindingKind("extra_file", BOTH, "file", "a file in the store that the commit log implies none for"),
    FindingKind("wrong_size", ALL, "file",
                "the file is not mappedFileSizeConsumeQueue / the index file size / 160 MiB (DLedger index) long"),
    FindingKind("out_of_order", IDX, "file",
                "an index file whose name sorts elsewhere than its content (header offsets) belongs"),
    FindingKind("unexpected_file", ALL, "file",
                "something the broker would not have written: a queue directory it does not read back under its "
                "own name, a file name that is no offset or time, a directory where a file belongs"),
    FindingKind("header_differs", IDX, "header", "an index header field differs (expected vs found)"),
    FindingKind("slot_differs", IDX, "slot", "a hash slot holds another entry position"),
    FindingKind("missing_entry", ALL, "entry", "zeros where an entry belongs"),
    FindingKind("entry_differs", ALL, "entry",
                "an entry's fields differ: phyOffset / size / tagsCode, or keyHash / phyOffset / timeDiff / "
                "prevIndex, or a DLedger index unit's magic / pos / size / index / term"),
    FindingKind("extra_entry", ALL, "entry", "an entry past the queue's logical end or the index count that "
                                             "the broker would still read, or a DLedger index unit past the last "
                                             "entry in the data files"),
    FindingKind("stale_bytes", BOTH, "stale", "non-zero bytes past where the broker stops reading"),
    FindingKind("broken_chain", IDX, "chain",
                "a slot chain that points outside the used entries, loops, merges or holds a key of another slot"),
    FindingKind("key_not_found", IDX, "lookup", "an entry a broker lookup by its key cannot reach"),
    FindingKind("offset_record_differs", CQ, "header",
                "a RocksDB consume queue's `offset` record differs from what the commit log implies: a queue's "
                "\"max\" (its last unit's phyOffset and queueOffset), a \"max\" of a queue without units, or a "
                "dispatch checkpoint (CHECKPOINT_TOPIC) past the end of the last record with a unit"),
    FindingKind("malformed_key", CQ, "entry",
                "a RocksDB consume queue's key or value that is not what RocketMQ 5.3.3 writes (column family and "
                "key named)"),
    FindingKind("malformed_timer_file", ("timer",), "file",
                "a 5.x timer file the broker refuses or misreads: a timerwheel that is not 38,707,200 bytes, a short "
                "or missing timercheck, a timer-log file of another size, unloadable timermetrics"),
    FindingKind("timer_cursor_ahead", ("timer",), "header",
                "timercheck's rmq_sys_wheel_timer queue offsets are past that queue's end (brokers before 5.3.2 "
                "never deliver the timer messages written there next)"),
    FindingKind("wheel_slot_past_end", ("timer",), "slot",
                "a timerwheel slot points at or past the timer log's valid end"),
    FindingKind("stale_timer_unit", ("timer",), "entry",
                "a timer-log unit names a commit-log record past the commit log's valid end: once the log regrows "
                "there the broker's timer is stuck or delivers early and twice (docs/timer.md)"),
)}


def kind(name: str) -> FindingKind:
    """The registered kind of this name; an unregistered name is a programming error."""
    if name not in KINDS:
        raise ValueError(f"finding kind {name!r} is not registered in jobs/pipeline/verify/findings.py")
    return KINDS[name]


def exit_status_fails(counts: dict[str, int]) -> bool:
    """Whether findings counted as {"artifact.kind": n} make verify exit 1 (a kind of severity error)."""
    return any(n and kind(key.split(".", 1)[1]).severity == ERROR for key, n in counts.items())


def docs_table() -> str:
    """docs/jobs.md's table of finding kinds, rendered from the registry."""
    rows = ["| kind | in | severity | meaning |", "| --- | --- | --- | --- |"]
    for k in KINDS.values():
        severity = f"{k.severity} ({SEVERITIES[k.severity]})"
        rows.append(f"| `{k.name}` | {', '.join(k.artifacts)} | {severity} | {k.meaning} |")
    return "\n".join(rows)


@dataclass(kw_only=True)
class Findings:
    """Counts per (artifact, kind) and the first DETAILS_PER_KIND details per file and kind."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_path: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))  # (path, kind)
    details: list[dict] = field(default_factory=list)
    files_checked: int = 0
    # What a running broker has not dispatched yet (the tail in flight): counted apart, never a finding.
    in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # What the broker keeps of the commit log's expired head (units, files pointing below its min offset): counted
    # apart, never a finding (storage_format.clean_service says what its clean service deletes and keeps).
    expired: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # verify --since: what lies before the offset the check starts at, checked by the earlier verify; counted apart.
    earlier: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # What a 4.x broker's starts indexed again (the keys of the log's last indexed record when it lies at or after the
    # consume queues' end, verify.restart): `index.starts`, `index.entries`, `index.files`; counted apart, never a
    # finding.
    restarts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, artifact: str, kind_name: str, path: str, count: int = 1, **detail) -> None:
        """Count `count` findings of a registered kind; keep the detail while the file's quota lasts."""
        if artifact not in kind(kind_name).artifacts:
            raise ValueError(f"finding kind {kind_name!r} is not registered for {artifact}")
        self.counts[f"{artifact}.{kind_name}"] += count
        if self.by_path[(path, kind_name)] < DETAILS_PER_KIND:
            self.details.append({"artifact": artifact, "kind": kind_name, "path": path, **detail})
        self.by_path[(path, kind_name)] += count

    def add_in_flight(self, artifact: str, kind_name: str, count: int = 1) -> None:
        """Count a difference that only says a running broker has not dispatched the tail yet."""
        self.in_flight[f"{artifact}.{kind(kind_name).name}"] += count

    def add_expired(self, artifact: str, what: str, count: int = 1) -> None:
        """Count what only says the commit log's head expired (e.g. `units`, `files`); zero counts are not kept."""
        if count:
            self.expired[f"{artifact}.{what}"] += count

    def add_earlier(self, artifact: str, what: str, count: int = 1) -> None:
        """Count what the earlier verify checked (verify --since: before the offset this one starts at)."""
        if count:
            self.earlier[f"{artifact}.{what}"] += count

    def add_restart(self, artifact: str, what: str, count: int = 1) -> None:
        """Count what the broker's restart re-index wrote (verify.restart); zero counts are not kept."""
        if count:
            self.restarts[f"{artifact}.{what}"] += count

    def move_to_in_flight(self, artifact: str, path: str) -> None:
        """Every finding of one file is in flight (the file a running broker is writing)."""
        for (p, kind_name), n in list(self.by_path.items()):
            if p == path:
                self.counts[f"{artifact}.{kind_name}"] -= n
                self.in_flight[f"{artifact}.{kind_name}"] += n
                del self.by_path[(p, kind_name)]
        self.counts = defaultdict(int, {k: v for k, v in self.counts.items() if v})
        self.details = [d for d in self.details if d["path"] != path]

    def set_apart(self, artifact: str) -> dict[str, int]:
        """Take every finding of one artifact out of the counts, paths and details (a rule the caller applies found
        them to be the broker's own doing, which it counts apart); returns the counts taken."""
        taken = {k: n for k, n in self.counts.items() if k.startswith(f"{artifact}.") and n}
        paths = {d["path"] for d in self.details if d["artifact"] == artifact}
        self.counts = defaultdict(int, {k: v for k, v in self.counts.items() if k not in taken and v})
        self.by_path = defaultdict(int, {k: v for k, v in self.by_path.items() if k[0] not in paths})
        self.details = [d for d in self.details if d["artifact"] != artifact]
        return taken

    def merge(self, other: "Findings") -> None:
        """Add another task's findings (details keep their own per-file quota)."""
        for k, v in other.counts.items():
            self.counts[k] += v
        for k, v in other.in_flight.items():
            self.in_flight[k] += v
        for k, v in other.expired.items():
            self.expired[k] += v
        for k, v in other.earlier.items():
            self.earlier[k] += v
        for k, v in other.restarts.items():
            self.restarts[k] += v
        for k, v in other.by_path.items():
            self.by_path[k] += v
        self.details.extend(other.details)
        self.files_checked += other.files_checked

    def per_file(self) -> dict[str, dict[str, int]]:
        """Complete finding counts per file (path relative to the store) and kind."""
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for (path, kind_name), n in sorted(self.by_path.items()):
            out[path][kind_name] = n
        return dict(out)

    def total(self) -> int:
        """Number of findings of every kind."""
        return sum(self.counts.values())

    def fails(self) -> bool:
        """Whether these findings make verify exit 1."""
        return exit_status_fails(self.counts)


def detail_order(d: dict) -> tuple:
    """File by file (consume queues first); in a file, by the kind's scope, then entries in order."""
    where = d.get("entry", d.get("position"))
    return (d["artifact"] != "consumequeue", d["path"], kind(d["kind"]).rank, -1 if where is None else where)
