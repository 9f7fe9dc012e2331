"""Broker settings: a broker `.properties` file over the broker's defaults, as a typed object."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from .consume_queue import CQ_UNIT_SIZE
from .errors import SettingsError
from .index_file import IndexLayout

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
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
    # Features reput does not implement: store_layout.py refuses a store that uses one, by name.
    enable_dleger_commit_log: bool = False
    store_type: str = "default"
    enable_consume_queue_ext: bool = False
    force_verify_prop_crc: bool = False
    enabled_append_prop_crc: bool = False
    store_path_commit_log: str | None = None  # None: <store>/commitlog
    read_only_commit_log_store_paths: str | None = None

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
    "storeType": ("store_type", str),
    "enableConsumeQueueExt": ("enable_consume_queue_ext", bool),
    "forceVerifyPropCRC": ("force_verify_prop_crc", bool),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", bool),
    "storePathCommitLog": ("store_path_commit_log", str),
    "readOnlyCommitLogStorePaths": ("read_only_commit_log_store_paths", str),
}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """`"1s 5s 1m"` -> (1000, 5000, 60000); an unknown unit is an error, as in the broker."""
    levels = []
    for token in text.split(" "):
        if not token:
            continue
        unit, number = token[-1], token[:-1]
        if unit not in _UNIT_MS or not number.isdigit():
            raise SettingsError(f"messageDelayLevel: cannot parse level {token!r}")
        levels.append(int(number) * _UNIT_MS[unit])
    return tuple(levels)


def parse_properties_text(text: str) -> dict[str, str]:
    """Parse Java `.properties` syntax (comments, `=`/`:`/blank separators, line continuations)."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip() if pending else raw.lstrip()
        pending = ""
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        logical.append(line)
    if pending:
        logical.append(pending)
    for line in logical:
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:\s]?\s*(.*)$", line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        out[key.replace("\\", "")] = value.strip()
    return out


def _coerce(name: str, value: str, kind: type) -> object:
    if kind is bool:
        if value.lower() not in ("true", "false"):
            raise SettingsError(f"{name}: expected true or false, got {value!r}")
        return value.lower() == "true"
    if kind is int:
        try:
            return int(value)
        except ValueError:
            raise SettingsError(f"{name}: expected an integer, got {value!r}") from None
    return value


def settings_from_mapping(props: dict[str, str]) -> BrokerSettings:
    """Typed settings from broker property names; names reput does not use are ignored."""
    kwargs = {}
    for name, value in props.items():
        if name in _PROPERTY_FIELDS:
            field_name, kind = _PROPERTY_FIELDS[name]
            kwargs[field_name] = _coerce(name, value, kind)
    settings = BrokerSettings(**kwargs)
    _validate(settings)
    return settings


def load_settings(path: str | Path | None) -> BrokerSettings:
    """Settings from a broker `.properties` file, or the broker's defaults when `path` is None."""
    if path is None:
        return BrokerSettings()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read broker config {path}: {exc.strerror}") from None
    try:
        return settings_from_mapping(parse_properties_text(text))
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}") from None


def _validate(s: BrokerSettings) -> None:
    if s.mapped_file_size_commitlog <= 0:
        raise SettingsError("mappedFileSizeCommitLog must be positive")
    if s.mapped_file_size_consume_queue <= 0:
        raise SettingsError("mappedFileSizeConsumeQueue must be positive")
    if s.max_hash_slot_num <= 0 or s.max_index_num <= 1:
        raise SettingsError("maxHashSlotNum must be > 0 and maxIndexNum > 1")
    s.delay_levels_ms  # parses or raises
