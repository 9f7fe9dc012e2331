"""verify's console lines for a RocksDB consume-queue store: what was compared in both column families, what the
broker's history leaves that is counted apart (not findings), and what its next start re-dispatches."""
from __future__ import annotations

APART = (("not_yet_dispatched_units", "units its next start dispatches"),
         ("max_records_rewritten_at_next_start", "\"max\" records its next start rewrites"),
         ("dirty_tail_units", "units of the dirty tail past a queue's \"max\" (nobody reads them)"),
         ("expired_units", "units below the commit log's min offset not compacted yet"),
         ("expired_max_records", "\"max\" records of expired queues"))


def consume_queue_lines(r: dict) -> list[str]:
    """What verify compared of the consume queues: file queues' count, or a RocksDB database's lines."""
    if not r.get("rocksdb"):
        return [f"consume queues: {r.get('consumequeue_files_checked', 0)} files compared"]
    return rocksdb_lines(r["rocksdb"])


def rocksdb_lines(d: dict) -> list[str]:
    """The `rocksdb` section of verify's report as console lines."""
    lines = [f"RocksDB consume queues ({d['database']}): {d.get('units_compared', 0)} of "
             f"{d.get('units_in_database', 0)} units compared, {d['max_records']} \"max\" records checked, "
             f"{d['min_records']} \"min\" records (written when asked, counted)"]
    apart = [f"{d[k]} {what}" for k, what in APART if d.get(k)]
    if apart:
        lines.append("counted apart (the broker's own state, not findings): " + "; ".join(apart))
    cp = d["checkpoint"]
    if cp.get("message"):
        lines.append(cp["message"])
    return lines
