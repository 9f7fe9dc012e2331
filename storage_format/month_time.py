"""Month arithmetic of unique keys (`UNIQ_KEY`): a key holds the ms since the start of the producer's
current month, so its born time is a month start, as java.util.Calendar reckons it in a time zone,
plus that offset (MessageClientIDSetter.getNearlyTimeFromID). Used by storage_format.msg_id."""
from __future__ import annotations

import datetime as dt
import zoneinfo

import numpy as np

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ONE_MS = dt.timedelta(milliseconds=1)


def _java_month_starts(months: np.ndarray, tz: str) -> tuple[np.ndarray, np.ndarray]:
    """For months counted from 1970-01: (instant the wall clock in `tz` first shows the month,
    java.util.Calendar's lenient start of the month: a gap -> its end, an overlap -> its later instant)."""
    zone = zoneinfo.ZoneInfo(tz)
    enter = np.empty(months.size, dtype=np.int64)
    java = np.empty(months.size, dtype=np.int64)
    for i, m in enumerate(months.tolist()):
        year, month = 1970 + m // 12, m % 12 + 1
        if not 1 <= year <= 9998:
            raise ValueError(f"timestamp out of range for time zone arithmetic (year {year})")
        first = dt.datetime(year, month, 1, tzinfo=zone)
        readings = [(first.replace(fold=fold) - _EPOCH) // _ONE_MS for fold in (0, 1)]
        shown = [r for r in readings if (_EPOCH + r * _ONE_MS).astimezone(zone).month == month]
        enter[i] = min(shown or readings)
        java[i] = max(readings)
    return enter, java


def month_start_ms(ms: np.ndarray, tz: str = "UTC", months_back: int = 0) -> np.ndarray:
    """Start (epoch ms) of the month holding each instant in time zone `tz`, `months_back` months
    earlier, as java.util.Calendar computes it (lenient: a local midnight in a DST gap is the end of
    the gap, one in an overlap the later instant). Zone rules come from zoneinfo (they hold past 2037,
    unlike Arrow's); the per-zone work is done once per distinct month, not per row."""
    ms = np.asarray(ms, dtype=np.int64)
    utc_month = ms.astype("datetime64[ms]").astype("datetime64[M]").astype(np.int64)
    if tz.upper() in ("UTC", "Z", "GMT", "ETC/UTC"):
        return (utc_month - months_back).astype("datetime64[M]").astype("datetime64[ms]").astype(np.int64)
    if ms.size == 0:
        return ms.copy()
    # The local month is the UTC month or a neighbour; list those (and the months back) once each.
    distinct = np.unique(utc_month)
    months = np.unique(np.concatenate([distinct + d for d in range(-1 - months_back, 2)]))
    enter, java = _java_month_starts(months, tz)
    local = months[np.searchsorted(enter, ms, side="right") - 1]
    return java[np.searchsorted(months, local - months_back)]


def born_time_ms(
    offset_ms: np.ndarray, reference_ms: np.ndarray, tz: str = "UTC", future_slack_ms: int = 0
) -> np.ndarray:
    """Born time of unique keys from their month offsets: start of the reference's month + offset, or
    of the month before when that is later than reference + future_slack_ms (getNearlyTimeFromID
    steps back already when equal to "now"; a record can be stored in the millisecond it was born)."""
    offset_ms = np.asarray(offset_ms, dtype=np.int64)
    reference_ms = np.asarray(reference_ms, dtype=np.int64)
    born = month_start_ms(reference_ms, tz) + offset_ms
    late = born > reference_ms + future_slack_ms
    if np.any(late):
        born[late] = month_start_ms(reference_ms[late], tz, months_back=1) + offset_ms[late]
    return born
