"""Binning for the audit notebook's volume-over-time panels: each active period of a store (no gap longer
than PERIOD_GAP) gets its own bar width, so a period of a few seconds and one of hours both show bars
that fill their axis, instead of one-second bars lost on an hour-wide axis."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

PERIOD_GAP = pd.Timedelta(hours=1)
MAX_BARS = 60
BIN_STEPS = tuple(pd.Timedelta(s) for s in ("1s", "2s", "5s", "10s", "30s", "1min", "5min", "10min", "30min",
                                             "1h", "6h", "1D", "7D"))


@dataclass(frozen=True)
class Period:
    """One active stretch of store time: where it starts and ends (first/last active minute) and the
    bar width its panel uses."""

    start: pd.Timestamp
    end: pd.Timestamp
    bin: pd.Timedelta
    records: int

    @property
    def fine(self) -> bool:
        """True when the bars are narrower than the per-minute data: per-second data is needed."""
        return self.bin < pd.Timedelta(minutes=1)


def bin_for(span: pd.Timedelta, max_bars: int = MAX_BARS) -> pd.Timedelta:
    """The smallest bar width that covers `span` in at most `max_bars` bars."""
    return next((b for b in BIN_STEPS if span / b < max_bars), BIN_STEPS[-1])


def periods(per_minute: pd.DataFrame, most: int = 4) -> list[Period]:
    """Active periods of a per-minute series (columns t, records), the `most` busiest, in time order."""
    if per_minute.empty:
        return []
    s = per_minute.sort_values("t")
    group = (s["t"].diff() > PERIOD_GAP).cumsum()
    found = []
    for _, g in s.groupby(group):
        start, end = g["t"].iloc[0], g["t"].iloc[-1] + pd.Timedelta(minutes=1)
        found.append(Period(start, end, bin_for(end - start), int(g["records"].sum())))
    busiest = sorted(found, key=lambda p: -p.records)[:most]
    return sorted(busiest, key=lambda p: p.start)


def binned(series: pd.DataFrame, period: Period) -> pd.DataFrame:
    """A period's rows of a (t, records, bytes) series summed into bars of the period's width; the
    first bar starts at the period start rounded down to the bar width."""
    origin = period.start.floor(period.bin) if period.bin <= pd.Timedelta(days=1) else period.start.floor("D")
    rows = series[(series["t"] >= period.start - period.bin) & (series["t"] < period.end)]
    if rows.empty:
        return rows[["t", "records", "bytes"]]
    t0 = origin + ((rows["t"] - origin) // period.bin) * period.bin
    out = rows.assign(t=t0).groupby("t", as_index=False)[["records", "bytes"]].sum()
    return out


def x_limits(period: Period, bars: pd.DataFrame) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The axis range of a panel: the bars with half a bar of margin, at least a few bars wide, so a
    single bar is still a bar."""
    lo, hi = bars["t"].min(), bars["t"].max() + period.bin
    if hi - lo < 5 * period.bin:
        mid = lo + (hi - lo) / 2
        lo, hi = mid - 2.5 * period.bin, mid + 2.5 * period.bin
    return lo - period.bin / 2, hi + period.bin / 2


def refined(period: Period, per_second: pd.DataFrame) -> Period:
    """A fine period re-binned from its per-second data: its span is then known to the second."""
    rows = per_second[(per_second["t"] >= period.start) & (per_second["t"] < period.end)]
    if rows.empty:
        return period
    start, end = rows["t"].min(), rows["t"].max() + pd.Timedelta(seconds=1)
    return Period(start, end, bin_for(end - start), period.records)


def bin_label(b: pd.Timedelta) -> str:
    """`1 s`, `5 min`, `6 h`, `1 d`: a bar width for titles and axis labels."""
    secs = int(b.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs % size == 0:
            return f"{secs // size} {unit}"
    return f"{secs} s"
