"""A record's fields as people read them: a store time as ISO-8601 UTC with milliseconds, a host as `ip:port`
(IPv6 as `[addr]:port`, as the DataFrame reader prints hosts). Shared by every job that prints records or times."""
from __future__ import annotations

import datetime as dt
import ipaddress


def iso_utc(ms: int) -> str:
    """Epoch ms as ISO-8601 UTC with milliseconds (`2026-11-22T05:08:55.948Z`), exact for any date; the
    JSON forms keep the number too."""
    try:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} (not a date)"
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def host_text(raw: bytes, port: int) -> str:
    """`ip:port`, IPv6 as `[addr]:port` (as the DataFrame reader prints hosts)."""
    addr = ipaddress.ip_address(raw)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"
