"""Broker settings: a broker `.properties` file over the broker's defaults, as a typed object."""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path

from .broker_keys import BROKER_KEYS
from .consume_queue import CQ_UNIT_SIZE
from .errors import SettingsError
from .index_file import IndexLayout
from .timer.wheel import precision_ms
from .java_props import (INT_BITS, LONG_BITS, decode_properties_file, java_parse_boolean, java_parse_integral,
                         java_trim, parse_properties)

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, kw_only=True)
class BrokerSettings:
    """The store settings reput needs, with the broker's defaults (4.9.x and 5.x agree on these)."""

    mapped_file_size_commitlog: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    max_message_size: int = 1024 * 1024 * 4
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    file_reserved_time: int = 72
    # Controller-mode HA (5.x): dispatch and abnormal recovery stop at the confirm offset (confirm_offset.py).
    enable_controller_mode: bool = False
    all_ack_in_sync_state_set: bool = False
    duplication_enable: bool = False
    read_uncommitted: bool = False
    broker_role: str = "ASYNC_MASTER"
    # LMQ / multi-dispatch (storage_format.multi_dispatch); None = not in the config (the broker's default
    # false), told apart from an explicit false so a store written with them on is not silently read without.
    enable_multi_dispatch: bool | None = None
    enable_lmq: bool | None = None
    # DLedger commit log (storage_format.dledger, log_sources): data in dledger-<dLegerSelfId>/data/, or in
    # storePathDLedgerCommitLog; None = not in the config (4.9.8's MessageStoreConfig defaults are null).
    enable_dleger_commit_log: bool = False
    d_leger_self_id: str | None = None
    d_leger_peers: str | None = None
    d_leger_group: str | None = None
    store_path_dledger_commit_log: str | None = None
    # Features reput does not implement: store_layout.py refuses a store that uses one, by name.
    store_type: str = "default"
    rocksdb_cq_double_write_enable: bool = False  # 5.x: a RocksDB copy of the file queues (storage_format.cq_layout)
    enable_consume_queue_ext: bool = False
    force_verify_prop_crc: bool = False
    enabled_append_prop_crc: bool = False
    store_path_commit_log: str | None = None  # None: <store>/commitlog
    read_only_commit_log_store_paths: str | None = None
    # 5.x: the broker's start dispatches from the consume queues' end, not the confirm offset (store_gate refuses it
    # for the jobs that model what a start re-dispatches)
    recheck_reput_offset_from_cq: bool = False
    # 5.x timer message store (storage_format.timer): read by recover's timer check and --repair-timer
    timer_wheel_enable: bool = True
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    timer_precision_ms: int = 1000  # as configured; timer_precision is what the broker uses
    timer_skip_unknown_error: bool = False
    # The broker preallocates (zero-fills) each new segment: recover --out then keeps the zeros of the last
    # segment written, not left as holes (jobs.pipeline.recover.write).
    warm_maped_file_enable: bool = False

    @property
    def consume_queue_file_size(self) -> int:
        """The broker rounds the configured consume-queue file size up to whole 20-byte units."""
        units = -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
        return units * CQ_UNIT_SIZE

    @property
    def index_layout(self) -> IndexLayout:
        """Where the parts of this store's index files lie (maxHashSlotNum, maxIndexNum)."""
        return IndexLayout(self.max_hash_slot_num, self.max_index_num)

    @property
    def index_file_size(self) -> int:
        return self.index_layout.size

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay per level (level 1 first), parsed like ScheduleMessageService.parseDelayLevel."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def timer_precision(self) -> int:
        """timerPrecisionMs as MessageStoreConfig.setTimerPrecisionMs rounds it (100, 200, 500 or 1000)."""
        return precision_ms(self.timer_precision_ms)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# broker property name -> (field name, type)
_PROPERTY_FIELDS: dict[str, tuple[str, type]] = {
    "mappedFileSizeCommitLog": ("mapped_file_size_commitlog", int),
    "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", int),
    "maxHashSlotNum": ("max_hash_slot_num", int),
    "maxIndexNum": ("max_index_num", int),
    "messageIndexEnable": ("message_index_enable", bool),
    "messageIndexSafe": ("message_index_safe", bool),
    "checkCRCOnRecover": ("check_crc_on_recover", bool),
    "maxMessageSize": ("max_message_size", int),
    "messageDelayLevel": ("message_delay_level", str),
    "fileReservedTime": ("file_reserved_time", int),
    "enableControllerMode": ("enable_controller_mode", bool),
    "allAckInSyncStateSet": ("all_ack_in_sync_state_set", bool),
    "duplicationEnable": ("duplication_enable", bool),
    "readUnCommitted": ("read_uncommitted", bool),
    "brokerRole": ("broker_role", str),
    "enableMultiDispatch": ("enable_multi_dispatch", bool),
    "enableLmq": ("enable_lmq", bool),
    "enableDLegerCommitLog": ("enable_dleger_commit_log", bool),
    "dLegerSelfId": ("d_leger_self_id", str),
    "dLegerPeers": ("d_leger_peers", str),
    "dLegerGroup": ("d_leger_group", str),
    "storePathDLedgerCommitLog": ("store_path_dledger_commit_log", str),
    "storeType": ("store_type", str),
    "rocksdbCQDoubleWriteEnable": ("rocksdb_cq_double_write_enable", bool),
    "enableConsumeQueueExt": ("enable_consume_queue_ext", bool),
    "forceVerifyPropCRC": ("force_verify_prop_crc", bool),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", bool),
    "storePathCommitLog": ("store_path_commit_log", str),
    "readOnlyCommitLogStorePaths": ("read_only_commit_log_store_paths", str),
    "timerWheelEnable": ("timer_wheel_enable", bool),
    "recheckReputOffsetFromCq": ("recheck_reput_offset_from_cq", bool),
    "mappedFileSizeTimerLog": ("mapped_file_size_timer_log", int),
    "timerPrecisionMs": ("timer_precision_ms", int),
    "timerSkipUnknownError": ("timer_skip_unknown_error", bool),
    "warmMapedFileEnable": ("warm_maped_file_enable", bool),
}


def property_name(field_name: str) -> str:
    """The broker's property name of a BrokerSettings field (the field's own name where none is read)."""
    return next((p for p, (f, _) in _PROPERTY_FIELDS.items() if f == field_name), field_name)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """`"1s 5s 1m"` -> (1000, 5000, 60000), as ScheduleMessageService.parseDelayLevel: split on single blanks
    (trailing empty tokens dropped), a unit of s/m/h/d after a Long.parseLong number (any Unicode decimal
    digits). Anything else makes the broker's schedule service fail to load: an error here too."""
    levels = []
    tokens = text.split(" ")
    while tokens and not tokens[-1]:
        tokens.pop()  # Java's split drops trailing empty strings
    for token in tokens:
        unit, number = token[-1:], token[:-1]
        if unit not in _UNIT_MS:
            raise SettingsError(f"messageDelayLevel: level {token!r} does not end with a unit s, m, h or d "
                                f"(the broker's schedule service fails to load)")
        value = java_parse_integral(number, LONG_BITS)
        if value is None:
            raise SettingsError(f"messageDelayLevel: level {token!r}: {number!r} is not a decimal number for "
                                f"Long.parseLong (the broker's schedule service fails to load)")
        levels.append(_wrap_long(value * _UNIT_MS[unit]))
    return tuple(levels)


def _wrap_long(v: int) -> int:
    """Java long multiplication wraps around."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def parse_properties_text(text: str) -> dict[str, str]:
    """Key -> raw value as java.util.Properties loads the text (java_props)."""
    return parse_properties(text)


def _coerce(name: str, value: str, kind: type, default: object) -> tuple[object, str | None]:
    """The value the broker sets for one key (MixAll.properties2Object), and a warning when that is not
    what the text seems to say (Java ignores an unparsable number and keeps the default)."""
    if kind is bool:
        got = java_parse_boolean(value)
        if value.lower() not in ("true", "false") or value != value.strip():
            return got, f"{name}={value!r}: Boolean.parseBoolean reads it as {str(got).lower()}"
        return got, None
    if kind is int:
        got = java_parse_integral(value, INT_BITS)
        if got is None:
            return default, (f"{name}={value!r}: Integer.parseInt rejects it, so the broker ignores it and keeps "
                             f"the default {default}")
        return got, None
    text = java_trim(value)
    if name == "brokerRole" and text not in BROKER_ROLES:
        return default, f"brokerRole={value!r}: not a BrokerRole, so the broker ignores it and keeps {default}"
    return text, None


@dataclass(frozen=True)
class LoadedSettings:
    """Settings as the broker would set them, with a warning for every value it would ignore or read
    differently and every key it does not know."""

    settings: BrokerSettings
    warnings: tuple[str, ...] = ()


def unknown_key_warning(name: str) -> str | None:
    """A warning for a key no broker reads (it is ignored), with the closest known key."""
    if name in BROKER_KEYS:
        return None
    lower = {k.lower(): k for k in BROKER_KEYS}
    close = [lower[name.lower()]] if name.lower() in lower else difflib.get_close_matches(name, BROKER_KEYS, 1, 0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{name}: not a broker setting (the broker ignores it){hint}"


def settings_from_mapping(props: dict[str, str]) -> LoadedSettings:
    """Typed settings from broker property names, with warnings (see LoadedSettings)."""
    kwargs, warnings = {}, []
    defaults = BrokerSettings()
    for name, value in props.items():
        if name in _PROPERTY_FIELDS:
            field_name, kind = _PROPERTY_FIELDS[name]
            kwargs[field_name], warning = _coerce(name, value, kind, getattr(defaults, field_name))
        else:
            warning = unknown_key_warning(name)
        if warning:
            warnings.append(warning)
    settings = BrokerSettings(**kwargs)
    _validate(settings)
    return LoadedSettings(settings, tuple(warnings))


def load_settings_with_warnings(path: str | Path | None) -> LoadedSettings:
    """Settings from a broker `.properties` file (read as the broker reads it), or the broker's defaults
    when `path` is None, with the warnings."""
    if path is None:
        return LoadedSettings(BrokerSettings())
    try:
        text = decode_properties_file(Path(path).read_bytes())
    except OSError as exc:
        raise SettingsError(f"cannot read broker config {path}: {exc.strerror}") from None
    try:
        return settings_from_mapping(parse_properties(text))
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}") from None


def load_settings(path: str | Path | None) -> BrokerSettings:
    """Settings from a broker `.properties` file, or the broker's defaults when `path` is None."""
    return load_settings_with_warnings(path).settings


Files = tuple[tuple[str, int], ...]  # (path, size) of some files of one kind


@dataclass(frozen=True)
class FilesShown:
    """What a store's files show of its size settings: a sample of each kind of file, (path, size), and the index
    layout their headers and entries show (index_file.layouts_fitting; None: none, or not one)."""

    segments: Files = ()  # commit-log segments and DLedger data files: both mappedFileSizeCommitLog
    consume_queues: Files = ()
    index_files: Files = ()
    index_layout: IndexLayout | None = None
    timer_logs: Files = ()


@dataclass(frozen=True)
class SizeDifference:
    """A size setting the store's files show another value of: which files (commitlog, consumequeue, index,
    timerlog), what the config makes, what the files are, what the broker does with them, and the settings that fit
    the files (property -> value; empty: the files do not say)."""

    files: str
    text: str
    broker: str
    fits: dict[str, int]


def _one_size(files: Files, at_least: int) -> tuple[str, int] | None:
    """The first file, when at least `at_least` non-empty files are given and all have one size (empty files are
    a crash's: the broker creates a file, then extends it)."""
    sized = [(path, n) for path, n in files if n > 0]
    return sized[0] if len(sized) >= at_least and len({n for _, n in sized}) == 1 else None


def size_differences(s: BrokerSettings, shown: FilesShown, lone: bool = False) -> list[SizeDifference]:
    """Every size setting whose files on disk say the config is not the store's. Commit-log segments (and DLedger
    data files) all of one other size: the broker refuses to load them. Consume-queue files, every sampled non-empty
    one of one other size, at least two (one odd file is damage, verify's finding): the broker fails to load them
    (MappedFileQueue.load: "length not matched message store config value"). Index files whose headers and entries
    show another layout, else at least two of one other size: the broker reads their hash slots with the wrong
    counts. Timer-log files, at least two of one other size: the timer log does not load. `lone`: one file of a kind
    is enough (no config to blame: the files are all there is to go by)."""
    two = 1 if lone else 2
    default = BrokerSettings()
    unset = " (the broker's default)"
    out = []
    seg = _one_size(shown.segments, 1)
    if seg is not None and seg[1] != s.mapped_file_size_commitlog:
        said = unset if s.mapped_file_size_commitlog == default.mapped_file_size_commitlog else ""
        out.append(SizeDifference("commitlog",
                                  f"mappedFileSizeCommitLog={s.mapped_file_size_commitlog}{said}, but the store's "
                                  f"commit-log files are {seg[1]} bytes ({seg[0]})", "refuses to load its commit log",
                                  {"mappedFileSizeCommitLog": seg[1]}))
    cq = _one_size(shown.consume_queues, two)
    if cq is not None and cq[1] != s.consume_queue_file_size:
        said = unset if s.mapped_file_size_consume_queue == default.mapped_file_size_consume_queue else ""
        fits = {"mappedFileSizeConsumeQueue": cq[1]} if cq[1] % CQ_UNIT_SIZE == 0 else {}
        out.append(SizeDifference("consumequeue",
                                  f"mappedFileSizeConsumeQueue={s.mapped_file_size_consume_queue}{said} makes "
                                  f"{s.consume_queue_file_size}-byte consume-queue files, but the store's are {cq[1]} "
                                  f"bytes ({cq[0]})", "fails to load its consume queues", fits))
    ix = shown.index_layout
    sized = _one_size(shown.index_files, 1 if ix is not None else two)
    if ix is not None and ix != s.index_layout or ix is None and sized is not None and sized[1] != s.index_file_size:
        said = " (the broker's defaults)" if (s.max_hash_slot_num, s.max_index_num) == \
            (default.max_hash_slot_num, default.max_index_num) else ""
        headers = f" whose headers and entries show maxHashSlotNum={ix.slots}, maxIndexNum={ix.max_entries}" \
            if ix is not None else " (40 + 4 x maxHashSlotNum + 20 x maxIndexNum)"
        where = f" ({sized[0]})" if sized is not None else ""
        size = sized[1] if sized is not None else ix.size
        out.append(SizeDifference("index",
                                  f"maxHashSlotNum={s.max_hash_slot_num}, maxIndexNum={s.max_index_num}{said} make "
                                  f"{s.index_file_size}-byte index files, but the store's are {size} bytes{headers}"
                                  f"{where}", "reads its index files' hash slots with the wrong counts",
                                  {"maxHashSlotNum": ix.slots, "maxIndexNum": ix.max_entries} if ix is not None
                                  else {}))
    timer = _one_size(shown.timer_logs, two)
    if timer is not None and timer[1] != s.mapped_file_size_timer_log:
        said = unset if s.mapped_file_size_timer_log == default.mapped_file_size_timer_log else ""
        out.append(SizeDifference("timerlog",
                                  f"mappedFileSizeTimerLog={s.mapped_file_size_timer_log}{said}, but the store's "
                                  f"timer-log files are {timer[1]} bytes ({timer[0]})", "does not load its timer log",
                                  {"mappedFileSizeTimerLog": timer[1]}))
    return out


def config_disagreement(s: BrokerSettings, shown: FilesShown, found: list[SizeDifference] | None = None) -> str | None:
    """With a broker config: every size setting the store's files show another value of (size_differences, or
    `found`), in one line with the values that fit them; None when there is none."""
    found = size_differences(s, shown) if found is None else found
    if not found:
        return None
    fits = {k: v for d in found for k, v in d.fits.items()}
    unknown = [d for d in found if not d.fits]
    what = ", ".join(f"{k}={v}" for k, v in fits.items())
    then = f"set {what} as the store's broker had them" if fits else ""
    if unknown:
        then += (" and " if then else "") + "set maxHashSlotNum and maxIndexNum as the store's broker had them " \
                                            "(its index files do not show the two apart)"
    broker = ", ".join(d.broker for d in found)
    return f"{'; '.join(d.text for d in found)}: the broker with this config {broker}; {then}"


_SHOWN_BY = {"mappedFileSizeCommitLog": "commit-log segment sizes", "mappedFileSizeConsumeQueue":
             "consume-queue file sizes", "maxHashSlotNum": "index files' headers and entries", "maxIndexNum":
             "index files' headers and entries", "mappedFileSizeTimerLog": "timer-log file sizes"}


def infer_file_sizes(s: BrokerSettings, shown: FilesShown) -> tuple[BrokerSettings, list[str]]:
    """Without a broker config: each size setting as the store's files show it (the broker pre-allocates every file
    at full size), with a note for each value taken from them. Index files that show no layout (none with an entry
    to tell the counts by) and are not of the default size are refused (SettingsError): the default would build
    files the store's broker cannot read."""
    notes = []
    taken = {k: v for d in size_differences(s, shown, lone=True) for k, v in d.fits.items()}
    for name, value in taken.items():
        s = dataclasses.replace(s, **{_PROPERTY_FIELDS[name][0]: value})
        notes.append(f"no broker config: {name}={value} taken from the {_SHOWN_BY[name]} on disk")
    sizes = {n for _, n in shown.index_files if n > 0}
    if shown.index_layout is None and sizes and sizes != {s.index_file_size}:
        path = next(p for p, n in shown.index_files if n > 0)
        raise SettingsError(f"no broker config, and the store's index files ({path}: {min(sizes)} bytes) show neither "
                            f"maxHashSlotNum nor maxIndexNum (no file holds an entry to tell them by) and are not "
                            f"of the broker's default size {s.index_file_size}: pass the store's broker config "
                            f"(--broker-config)")
    _validate(s)
    return s, notes


INT_MAX = (1 << 31) - 1  # a Java int: the broker computes file sizes as ints and maps at most 2 GiB - 1


def _validate(s: BrokerSettings) -> None:
    """Refuse values the broker cannot run with, naming the setting and the limit."""
    if s.mapped_file_size_commitlog <= 0:
        raise SettingsError("mappedFileSizeCommitLog must be positive")
    if s.mapped_file_size_consume_queue <= 0:
        raise SettingsError("mappedFileSizeConsumeQueue must be positive")
    if s.max_hash_slot_num <= 0 or s.max_index_num <= 1:
        raise SettingsError("maxHashSlotNum must be > 0 and maxIndexNum > 1")
    if s.consume_queue_file_size > INT_MAX:
        raise SettingsError(f"mappedFileSizeConsumeQueue={s.mapped_file_size_consume_queue}: rounded up to whole "
                            f"20-byte units it exceeds the Java int limit {INT_MAX} bytes")
    if s.index_file_size > INT_MAX:
        raise SettingsError(f"maxHashSlotNum={s.max_hash_slot_num}, maxIndexNum={s.max_index_num}: the index file "
                            f"would be 40 + 4 x maxHashSlotNum + 20 x maxIndexNum = {s.index_file_size} bytes; the "
                            f"broker computes that size as a Java int and maps at most {INT_MAX} bytes")
    if s.mapped_file_size_timer_log <= 2 * 52 + 16:  # one unit, its filler, and room to tell them apart
        raise SettingsError(f"mappedFileSizeTimerLog={s.mapped_file_size_timer_log}: too small for a timer-log unit "
                            f"and its filler")
    s.delay_levels_ms  # parses or raises
