"""`config/timermetrics` (+ `.bak`): TimerMetrics' JSON (dataVersion, timingCount per real topic). Only metrics;
but when neither the file nor its backup loads (ConfigManager.load), TimerMessageStore.load fails and the
broker does not start. reput only checks that one of them parses."""
from __future__ import annotations

import json

METRICS = "config/timermetrics"


def metrics_problem(main: bytes | None, bak: bytes | None) -> str | None:
    """Why the broker would not load its timer metrics, or None. ConfigManager.load: a non-empty file that
    parses loads; otherwise the backup, where an empty or absent backup also counts as loaded."""
    if main and _parses(main):
        return None
    if not bak or _parses(bak):
        return None
    return (f"{METRICS} ({0 if main is None else len(main)} bytes) and {METRICS}.bak ({len(bak)} bytes) do not "
            f"parse as JSON: TimerMessageStore.load fails and the broker does not start (#9705)")


def _parses(raw: bytes) -> bool:
    """Whether the text is a JSON object or null (fastjson maps both; anything else fails to load)."""
    try:
        return isinstance(json.loads(raw.decode("utf-8")), (dict, type(None)))
    except (ValueError, UnicodeDecodeError):
        return False
