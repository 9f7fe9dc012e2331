"""The notebook's volume panels (notebooks.volume): every active period gets bars wide enough to be
seen on its own axis, from a one-second burst to a period of hours."""
from __future__ import annotations

import pandas as pd
import pytest

from notebooks.volume import MAX_BARS, bin_for, bin_label, binned, periods, refined, x_limits

T0 = pd.Timestamp("2026-11-22 05:08:00")


def series(times: list[str], step: str) -> pd.DataFrame:
    """(t, records, bytes) rows at T0 + each offset, truncated to `step` like Spark's date_trunc."""
    t = pd.Series([(T0 + pd.Timedelta(x)).floor(step) for x in times])
    return pd.DataFrame({"t": t, "records": 1, "bytes": 100}).groupby("t", as_index=False).sum()


@pytest.mark.parametrize(("span", "width"), [("1s", "1s"), ("59s", "1s"), ("60s", "2s"), ("50min", "1min"),
                                             ("3h", "5min"), ("20D", "1D"), ("100D", "7D"), ("1000D", "7D")])
def test_bin_for_keeps_at_most_max_bars(span, width):
    assert bin_for(pd.Timedelta(span)) == pd.Timedelta(width)


def test_periods_split_at_gaps_and_keep_the_busiest():
    per_minute = series(["0s", "50min", "3h", "3h1min", "40D", "41D"], "min")
    found = periods(per_minute, most=3)
    assert [(p.start - T0, p.end - p.start) for p in found] == [
        (pd.Timedelta(0), pd.Timedelta("51min")), (pd.Timedelta("3h"), pd.Timedelta("2min")),
        (pd.Timedelta("40D"), pd.Timedelta("1min"))]
    assert found[0].bin == pd.Timedelta("1min") and found[1].fine


def test_one_second_and_one_hour_periods_both_show_their_bars():
    """A burst of one second 40 days later than an hour with activity at its two ends: the burst gets
    1-second bars on a few-second axis, the hour gets minute bars (not 1-second bars on an hour axis)."""
    raw = ["0s", "1s", "50min", "40D"]
    per_minute, per_second = series(raw, "min"), series(raw, "s")
    hour, burst = periods(per_minute)
    burst = refined(burst, per_second)
    assert burst.bin == pd.Timedelta("1s") and bin_label(burst.bin) == "1 s"
    assert hour.bin == pd.Timedelta("1min") and bin_label(hour.bin) == "1 min"
    for p, data in ((hour, per_minute), (burst, per_second)):
        bars = binned(data, p)
        lo, hi = x_limits(p, bars)
        assert bars["records"].sum() == len([x for x in raw if p.start <= T0 + pd.Timedelta(x) < p.end])
        assert (hi - lo) / p.bin <= MAX_BARS + 1, "each bar is at least 1/61 of its axis"
        assert lo <= bars["t"].min() and bars["t"].max() + p.bin <= hi
    assert len(binned(per_second, burst)) == 1 and (lambda r: r[1] - r[0])(x_limits(burst, binned(per_second, burst))) \
        == pd.Timedelta("6s")
