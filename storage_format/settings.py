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
    enable_consume_queue_ext: bool = False
    force_verify_prop_crc: bool = False
    enabled_append_prop_crc: bool = False
    store_path_commit_log: str | None = None  # None: <store>/commitlog
    read_only_commit_log_store_paths: str | None = None
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
    "enableConsumeQueueExt": ("enable_consume_queue_ext", bool),
    "forceVerifyPropCRC": ("force_verify_prop_crc", bool),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", bool),
    "storePathCommitLog": ("store_path_commit_log", str),
    "readOnlyCommitLogStorePaths": ("read_only_commit_log_store_paths", str),
    "timerWheelEnable": ("timer_wheel_enable", bool),
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


def infer_file_sizes(s: BrokerSettings, segment_sizes: list[int], cq_file_sizes: list[int]) -> tuple[BrokerSettings, list[str]]:
    """Without a broker config: the commit-log segment size and the consume-queue file size the files on disk
    show (the broker pre-allocates both at full size), with a note for each value taken from them."""
    notes = []
    if segment_sizes and len(set(segment_sizes)) == 1 and segment_sizes[0] != s.mapped_file_size_commitlog:
        s = dataclasses.replace(s, mapped_file_size_commitlog=segment_sizes[0])
        notes.append(f"no broker config: mappedFileSizeCommitLog={segment_sizes[0]} taken from the commit-log "
                     f"segment sizes on disk")
    cq = [n for n in cq_file_sizes if n > 0]
    if cq and len(set(cq)) == 1 and cq[0] != s.consume_queue_file_size and cq[0] % CQ_UNIT_SIZE == 0:
        s = dataclasses.replace(s, mapped_file_size_consume_queue=cq[0])
        notes.append(f"no broker config: mappedFileSizeConsumeQueue={cq[0]} taken from the consume-queue file "
                     f"sizes on disk")
    return s, notes


def config_disagreement(s: BrokerSettings, cq_files: list[tuple[str, int]],
                        index_files: list[tuple[str, int]]) -> str | None:
    """With a broker config: why the files on disk show it is not the store's, or None. Every sampled non-empty
    consume-queue file (or every index file) has one size, not the one the config makes: the broker with this
    config fails to load those consume queues (MappedFileQueue.load: "length not matched message store config
    value") and reads those index files' slots with the wrong counts. One odd file is damage (verify's finding),
    not a config question, and so is a lone file; empty files are a crash's (the broker creates, then extends)."""
    def one_size(files: list[tuple[str, int]]) -> tuple[str, int] | None:
        sized = [(path, n) for path, n in files if n > 0]
        return sized[0] if len(sized) >= 2 and len({n for _, n in sized}) == 1 else None

    cq, ix = one_size(cq_files), one_size(index_files)
    default = BrokerSettings()
    if cq is not None and cq[1] != s.consume_queue_file_size:
        said = " (the default: the config does not set it)" if s.mapped_file_size_consume_queue == \
            default.mapped_file_size_consume_queue else ""
        return (f"mappedFileSizeConsumeQueue={s.mapped_file_size_consume_queue}{said} makes {s.consume_queue_file_size}"
                f"-byte consume-queue files, but the store's are {cq[1]} bytes ({cq[0]}): the broker with this config "
                f"fails to load them; set mappedFileSizeConsumeQueue={cq[1]} as the store's broker had it")
    if ix is not None and ix[1] != s.index_file_size:
        said = " (the defaults: the config sets neither)" if (s.max_hash_slot_num, s.max_index_num) == \
            (default.max_hash_slot_num, default.max_index_num) else ""
        return (f"maxHashSlotNum={s.max_hash_slot_num}, maxIndexNum={s.max_index_num}{said} make {s.index_file_size}"
                f"-byte index files (40 + 4 x maxHashSlotNum + 20 x maxIndexNum), but the store's are {ix[1]} bytes "
                f"({ix[0]}): the broker with this config reads their hash slots with the wrong counts; set both as "
                f"the store's broker had them")
    return None


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
