"""verify's console summary: what was compared, what is counted apart, the first findings (the JSON report holds
them all)."""
from __future__ import annotations

from .rocksdb_text import consume_queue_lines
from .since import OTHER_STORE_FLAG

CONSOLE_LINES = 25
EXPIRED_WORDS = {"consumequeue.files": "consume-queue files", "consumequeue.units": "consume-queue units",
                 "index.files": "index files", "index.entries": "index entries"}


def describe(d: dict) -> str:
    """One console line for a finding: where, what, expected vs found."""
    where = d["path"]
    if "entry" in d and d["kind"] not in ("missing_file", "extra_file"):
        where += f" entry {d['entry']}"
    elif d.get("position") is not None and d["kind"] not in ("missing_file",):
        where += f" position {d['position']}"
    if d.get("slot") is not None and d["kind"] in ("slot_differs", "key_not_found", "broken_chain"):
        where += f" slot {d['slot']}"
    if d.get("byte_offset") is not None:
        where += f" (byte {d['byte_offset']})"
    what = d["kind"]
    expected, found = d.get("expected", "-"), d.get("found", "-")  # a finding may carry either, or neither
    if d.get("field"):
        what += f" {d['field']}: expected {expected}, found {found}"
    elif d.get("fields") and isinstance(expected, dict) and isinstance(found, dict):
        what += " " + ", ".join(f"{f} expected {expected.get(f)} found {found.get(f)}" for f in d["fields"])
    elif d["kind"] == "slot_differs":
        what += f": expected {expected}, found {found}"
    elif d["kind"] == "extra_entry" and "found" in d:
        what += f": {found}"
    elif d["kind"] == "missing_entry" and "expected" in d:
        what += f": expected {expected}"
    if d.get("points_at"):
        what += f" -> points at: {d['points_at']}"
    if d.get("reason"):
        what += f": {d['reason']}"
    elif d.get("detail"):
        what += f": {d['detail']}"
    elif what == d["kind"] and d.get("message"):  # a finding told in its own words (a damaged record of the log)
        return f"  {d['kind']}: {d['message']}"
    return f"  {where}: {what}"


def restart_line(r: dict) -> str:
    """The console line for the broker's restart re-index (verify.restart), counted apart."""
    n, rec = r["restart_reindex"], r["restart_record"]
    files, starts = n.get("index.files", 0), n.get("index.starts", 0)
    return (f"restart re-index (not findings): {_count(n.get('index.entries', 0), 'index entry', 'index entries')}"
            + (f" and {_count(files, 'index file', 'index files')} opened for them" if files else "")
            + f": {_count(starts, 'start', 'starts')} of the broker each indexed again the "
              f"{_count(rec['keys'], 'key', 'keys')} of the record at commit-log offset {rec['offset']}, the log's "
              f"last indexed record, which lies at or after its consume queues' end (4.x resumes dispatch there; "
              f"verify.restart)")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def print_summary(r: dict, report_path: str | None) -> None:
    """The console summary: what was compared, counts per kind, the first findings."""
    c = r["commitlog"]
    print(f"store {r['store']}")
    print(f"commit log: {c['message_records']} records in {c['segments']} segments, valid up to offset "
          f"{c['max_physical_offset']}")
    print(f"scan ended: {c['scan_end_detail']}")
    if "dledger" in r:
        d = r["dledger"]
        print(f"DLedger: {d['entries']} entries (index {d['first_entry_index']} .. {d['last_entry_index']}), "
              f"{r.get('dledger_index_units_checked', 0)} DLedger index units compared; reading checked: "
              f"{d['reading_checked']} ({d['committed_reading']['reason']})")
    if r["checked"]["consumequeue"]:  # file queues, or a RocksDB store's database (verify.rocksdb_text)
        print("\n".join(consume_queue_lines(r)))
    if r["checked"]["index"]:
        print(f"index: {r.get('index_files_expected', 0)} files expected, {r.get('index_files_on_disk', 0)} on disk, "
              f"{r.get('index_files_checked', 0)} compared")
    elif r["checked"]["index_disabled_by_config"]:
        print("index: not checked (messageIndexEnable=false)")
    if r.get("files"):
        print(f"checked {r['files']['out']}'s files against the commit log up to offset {r['files']['built_to']}, "
              f"where it was built to")
    if r["in_flight"]:
        why = "not built into OUT yet" if r.get("files") else "a broker is running"
        print(f"in flight ({why}; not findings): {sum(r['in_flight'].values())} differences past "
              f"commit-log offset {r['in_flight_from']}, the last dispatched position")
    if r.get("since"):
        s = r["since"]
        done = ", ".join(f"{n} {EXPIRED_WORDS.get(k, k)}" for k, n in s["earlier"].items()) or "nothing"
        print(f"since {s['report']} (checked up to commit-log offset {s['built_to_before']}): decoded "
              f"{s['bytes_decoded']} bytes from offset {s['decoded_from']}; checked earlier, not again: {done}")
        if s.get("other_store"):
            print(f"  that report was made on another store ({s['other_store']['differs']}): built on with "
                  f"{OTHER_STORE_FLAG}")
    if r["expired"]:
        print(f"expired head (not findings): the commit log starts at offset {c['min_offset']}; the broker keeps "
              + ", ".join(f"{n} {EXPIRED_WORDS.get(k, k)}" for k, n in r["expired"].items())
              + " that point below it (storage_format.clean_service)")
    if r.get("restart_reindex"):
        print(restart_line(r))
    if r.get("double_indexed"):
        print(r["double_indexed"]["message"])
    if not r["findings_total"]:
        print("CONSISTENT: every checked file is what the commit log implies")
        return
    print(f"INCONSISTENT: {r['findings_total']} findings")
    for kind, n in r["finding_counts"].items():
        print(f"  {kind}: {n}")
    if r.get("index_gap"):
        print(f"  expected: {r['index_gap']['message']}")
    if r.get("recovery_lag"):
        print(f"  expected: {r['recovery_lag']['message']}")
    shown = r["findings"][:CONSOLE_LINES]
    print(f"first {len(shown)} of {r['findings_total']}:")
    for d in shown:
        print(describe(d))
    if report_path:
        print(f"details: {report_path}")
    else:
        print("details: pass --report FILE.json (or --json)")
