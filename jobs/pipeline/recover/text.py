"""The console form of `jobs.recover`'s plan and results, for people: the JSON (--json, --report FILE) stays
the machine form with unchanged keys; this module only reads it and turns it into short lines."""
from __future__ import annotations

from storage_format.consume_queue import CQ_UNIT_SIZE
from storage_format.record_text import iso_utc

SHOWN = 12  # file names listed per kind before "... and N more"
CHECKPOINT_FIELDS = (("physic_msg_timestamp", "physicMsgTimestamp"), ("logics_msg_timestamp", "logicsMsgTimestamp"),
                     ("index_msg_timestamp", "indexMsgTimestamp"))


def when(ms: int | None) -> str:
    """A checkpoint or header time for people: ISO-8601 UTC; 0 (never set) and None (absent) said as such."""
    if ms is None:
        return "-"
    return "0 (never set)" if ms == 0 else iso_utc(ms)


def _listed(verb: str, names: list[str], note: str = "") -> list[str]:
    """One line per name (at most SHOWN), then how many more."""
    lines = [f"    {verb:<9}{n}{note}" for n in names[:SHOWN]]
    if len(names) > SHOWN:
        lines.append(f"    ... and {len(names) - SHOWN} more to {verb.strip()}")
    return lines


def _head(s: dict, title: str, broker: str | None) -> list[str]:
    """Where, what generation, clean or not, broker or not, changes or not."""
    lines = [f"{title}: {s['store']}",
             f"  state      {s['state']}: the broker would run its {s['recovery']} recovery",
             f"  generation RocketMQ {s['generation']} ({'; '.join(s['generation_evidence'])})"]
    if broker:
        lines.append(f"  broker     {broker}")
    lines.append(f"  changes    {_changes(s) if s['changes'] else 'none: the broker recovery rules leave this store as it is'}")
    return lines


def _count(n: int, what: str) -> str:
    """`1 file`, `2 files`."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def _changes(s: dict) -> str:
    """One line of counts: what the recovery does to which files."""
    cq, idx = s["consumequeue"], s["index"]
    removed = idx.get("deleted_newer_than_checkpoint", idx.get("deleted", []))
    logs = "DLedger data file" if s.get("mode") == "dledger" else "commit-log segment"
    parts = [f"{_count(len(s['commitlog']['to_delete']), logs)} removed",
             f"consume-queue files: {len(cq['to_cut'])} cut, {len(cq['to_rewrite'])} rewritten, "
             f"{len(cq['to_create'])} created, {len(cq['to_delete'])} removed",
             f"index files: {len(removed)} removed, {len(idx.get('to_create', []))} created"
             + (", 1 appended to" if idx.get("appended_to") else ""),
             "checkpoint rewritten" if s["checkpoint"]["before"] != s["checkpoint"]["after"] else "checkpoint kept"]
    return "; ".join(parts)


def _checkpoint(s: dict) -> list[str]:
    """The checkpoint's times before and after, with why each one moves (or not)."""
    cp = s["checkpoint"]
    lines = ["checkpoint (times in ISO-8601 UTC)"]
    for key, java in CHECKPOINT_FIELDS:
        before, after = cp["before"][key], cp["after"][key]
        change = "unchanged" if before == after else f"-> {when(after)} ({after})"
        lines.append(f"    {java:<20} {when(before)} ({before}) {change}")
        if before != after and cp["why"].get(key):
            lines.append(f"    {'':<20} why: {cp['why'][key]}")
    if "confirm_phy_offset" in cp["why"]:  # 5.x: an offset, not a time
        before, after = cp["before"]["confirm_phy_offset"], cp["after"]["confirm_phy_offset"]
        lines.append(f"    {'confirmPhyOffset':<20} {before} " + ("unchanged" if before == after else f"-> {after}"))
        lines.append(f"    {'':<20} why: {cp['why']['confirm_phy_offset']}")
    return lines


def _commitlog(s: dict) -> list[str]:
    """Start segment, validation, the truncation point and the segments deleted past it."""
    st, v, t, cl = s["start_segment"], s["validation"], s["truncation"], s["commitlog"]
    where = (f" = segment {t['segment']} + byte {t['position_in_segment']}" if t.get("segment") else "")
    lines = ["commit log",
             f"    start    segment {st['name']} (offset {st['offset']}): {st['reason']}",
             f"    checked  {v['records']} records in {v['segments']} segments from offset {v['from_offset']} "
             f"({'body CRC checked' if v['crc'] else 'body CRC not checked (checkCRCOnRecover=false)'})",
             f"    valid up to offset {t['offset']}{where}: {t['reason']}"]
    if t.get("detail"):
        lines.append(f"             {t['detail']}")
    d = s.get("dispatch") or {}
    if d.get("confirm_offset") is not None:
        lines.append(f"    dispatch stops at the confirm offset {d['confirm_offset']}: {d['records_not_dispatched']} "
                     f"valid records from offset {d['first_record_not_dispatched']} on stay undispatched "
                     f"({d['reason']})")
    if cl["to_delete"]:
        lines += _listed("remove", cl["to_delete"], " (whole segment past the truncation point)")
    else:
        lines.append(f"    no segment removed ({cl['segments']} segments kept)")
    return lines


def _dledger(s: dict) -> list[str]:
    """DLedger mode: DLedger's own recovery walk, the write end, the committed position, the member's files."""
    d, idx = s["dledger"], s["dledger"]["index"]
    stop = d["stop"]
    peers = f"{d['peers']} member{'' if d['peers'] == 1 else 's'} in dLegerPeers" if d["peers"] else "no dLegerPeers"
    lines = [f"DLedger log ({d['member']}, {peers})",
             f"    walk     from data file {d['walk_from_data_file']}: {s['start_segment']['reason']}",
             f"    checked  {d['entries_walked']} entries (index {d['first_walked_index']}..{d['last_index']}; "
             f"DLedger checks magic, pos, size, index and term, no CRC)",
             f"    valid up to offset {d['write_end']} = data file {stop['data_file']} + byte "
             f"{stop['position_in_file']}: {stop['reason']}",
             f"             {stop['detail']}"]
    before = d.get("checkpoint_committed_index_before")
    lines.append(f"    committed index {d['committed_index']}, dispatch up to offset {d['committed_position']}: "
                 f"{d['reading']['reason']}")
    if before is not None:
        lines.append(f"             (the DLedger checkpoint said committedIndex {before}: "
                     f"{d['entries_past_checkpoint_committed_index']} entries lie past it)")
    lines += _load_dispatch(s.get("load_dispatch"))
    lines += _listed("remove", [f"{d['member']}/data/{n}" for n in d["data_files_to_delete"]],
                     " (data file past the write end)")
    if idx["rewritten_from_index"] is not None:
        lines.append(f"    index    rewritten from entry {idx['rewritten_from_index']} "
                     f"({idx['rewritten_units']} units): {idx['rewrite_reason']}")
    lines.append(f"    index    cut at byte {idx['cut_at']} (after the last entry)")
    lines += _listed("remove", [f"{d['member']}/index/{n}" for n in idx["files_to_delete"]])
    lines += _listed("rewrite", d["files_rewritten"])
    return lines + [f"    note: {n}" for n in d["notes"]]


def _load_dispatch(ld: dict | None) -> list[str]:
    """5.x: what the recovery dispatches during load, and the end it computes (or why nothing is dispatched)."""
    if not ld:
        return []
    if ld.get("from_offset") is None:
        return [f"    load     nothing dispatched during load: {ld['reason']}"]
    return [f"    load     dispatches offsets {ld['from_offset']}..{ld['to_offset']} during load, from data file "
            f"{ld['from_data_file']}: {ld['reason']}",
            f"             stops at {ld['to_offset']}: {ld['end_reason']}",
            f"             computed end {ld['computed_end']} ({ld['computed_end_short_by']} bytes short: "
            f"{ld['computed_end_rule']})"]


def _consume_queues(s: dict) -> list[str]:
    """Cuts (with byte positions), rewrites, new files and deletions of consume-queue files."""
    cq = s["consumequeue"]
    lines = [f"consume queues ({cq['queues']} queues; highest physical offset before: {cq['max_phy_offset_before']})"]
    for c in cq["to_cut"][:SHOWN]:
        lines.append(f"    cut      {c['file']}: keep {c['units_kept']} units, write position byte "
                     f"{c['units_kept'] * CQ_UNIT_SIZE}; first unit left behind points at offset "
                     f"{c['first_unit_left_behind_phy_offset']} (its bytes stay on disk)")
    if len(cq["to_cut"]) > SHOWN:
        lines.append(f"    ... and {len(cq['to_cut']) - SHOWN} more to cut")
    lines += _listed("rewrite", cq["to_rewrite"], " (entries re-dispatched from the commit log)")
    lines += _listed("create", cq["to_create"], " (new file of re-dispatched entries)")
    lines += _listed("remove", cq["to_delete"], " (first entry past the truncation point)")
    if cq["queues_redispatched"]:
        lines.append(f"    re-dispatched into {len(cq['queues_redispatched'])} queues: "
                     + ", ".join(cq["queues_redispatched"][:SHOWN])
                     + (" ..." if len(cq["queues_redispatched"]) > SHOWN else ""))
    if len(lines) == 1:
        lines.append("    no consume-queue file changes")
    return lines + [f"    warning: {w}" for w in cq["warnings"]]


def _index(s: dict) -> list[str]:
    """Index files removed, appended to, created; the boundary records indexed a second time."""
    idx = s["index"]
    lines = [f"index ({idx['mode']}; {idx['files_before']} files before; checkpoint index time "
             f"{when(idx['checkpoint_index_msg_timestamp'])})"]
    removed = idx.get("deleted_newer_than_checkpoint", idx.get("deleted", []))
    why = " (newer than the checkpoint's index time)" if "deleted_newer_than_checkpoint" in idx else ""
    lines += _listed("remove", [f"index/{n}" for n in removed], why)
    if idx.get("last_kept"):
        lines.append(f"    resume   in index/{idx['last_kept']} (the last file kept)")
    if idx.get("appended_to"):
        lines.append(f"    append   {idx['appended_to']['entries']} entries to index/{idx['appended_to']['file']}")
    for new in idx.get("to_create", [])[:SHOWN]:
        if isinstance(new, dict):
            lines.append(f"    create   index/{new['file']}: {new['entries']} entries; header starts at "
                         f"{when(new['inherits_end_timestamp'])}, offset {new['inherits_end_phy_offset']} "
                         f"(the previous file's end)")
        else:
            lines.append(f"    create   index/{new}")
    if len(idx.get("to_create", [])) > SHOWN:
        lines.append(f"    ... and {len(idx['to_create']) - SHOWN} more to create")
    for b in idx.get("boundary_records_indexed_again", []):
        lines.append(f"    again    record at offset {b['record_offset']} indexed a second time "
                     f"({_count(b['keys'], 'key')}, {b['pass']}), as the broker does")
    return lines


def _timer(s: dict) -> list[str]:
    """The 5.x timer store: what was found, and what --repair-timer changes."""
    t = s.get("timer")
    if not t:
        return []
    lines = [f"timer store ({t['note']})"]
    if "stale_units" in t:
        lines.append(f"    timer log valid to offset {t['timer_log_valid_end']}; {t['units_read']} units read, "
                     f"{t['stale_units']} name records past the truncation point"
                     + (f" (from timer-log offset {t['first_stale_unit']})" if t["first_stale_unit"] is not None else ""))
    r = t.get("repair")
    if r:
        for name, f in r["timer_log_files_rewritten"].items():
            lines.append(f"    rewrite  timerlog/{name}: keep {f['bytes_kept']} bytes, zeros after")
        lines += _listed("remove", [f"timerlog/{n}" for n in r["timer_log_files_deleted"]], " (past the cut)")
        lines.append(f"    wheel    {r['wheel_slots_shortened']} slots pointed back, {r['wheel_slots_cleared']} cleared "
                     f"({r['units_removed']} units removed)")
        b, a = r["timercheck_before"], r["timercheck_after"]
        for key in ("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset",
                    "master_timer_queue_offset"):
            if b[key] != a[key]:
                lines.append(f"    timercheck {key} {b[key]} -> {a[key]}")
        lines.append(f"    {r['last_read_time_rule']}")
    return lines


def _tail(s: dict) -> list[str]:
    """What the broker re-dispatches after it starts, marker files, warnings and timings."""
    r, m = s["post_start_redispatch"], s["markers"]
    span = (f"re-dispatches offsets {r['from_offset']}..{r['to_offset']}" if r["to_offset"] > r["from_offset"]
            else f"has nothing to re-dispatch (from offset {r['from_offset']})")
    rocks = (s.get("rocksdb") or {}).get("next_start")  # a RocksDB store: its next start's own re-dispatch
    lines = [f"after the broker starts: {rocks['message']}" if rocks else
             f"after the broker starts: it {span} ({r['rule']})",
             f"markers: abort {m['abort']}; abort.bak {m['abort.bak']}"
             + (f"; compaction/position-checkpoint {m['compaction/position-checkpoint']}"
                if "compaction/position-checkpoint" in m else "")]
    lines += [f"warning: {w}" for w in s["warnings"][:SHOWN]]
    if len(s["warnings"]) > SHOWN:
        lines.append(f"... and {len(s['warnings']) - SHOWN} more warnings (the JSON plan lists every one)")
    if s.get("timings"):
        lines.append("timings: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f}s" for k, v in s["timings"].items()))
    return lines


def plan_lines(summary: dict, broker: str | None = None, title: str = "recovery plan (dry run, nothing written)") -> list[str]:
    """The whole plan (or what a run did) in short sections; the JSON form has every detail."""
    log = _dledger(summary) if summary.get("mode") == "dledger" else _commitlog(summary)
    return (_head(summary, title, broker) + _checkpoint(summary) + log + _consume_queues(summary)
            + _index(summary) + _timer(summary) + _tail(summary) + ["(the full plan as JSON: --json, or --report FILE)"])


def result_lines(summary: dict, headline: str) -> list[str]:
    """After --out or --in-place: the headline, then the plan that was carried out."""
    lines = [headline]
    if summary.get("in_place"):
        ip = summary["in_place"]
        patched = (ip.get("backup") or {}).get("patched", 0)
        what = (f"; {patched} files patched in place (the old bytes of their changed ranges saved)" if patched
                else "")
        lines.append(f"  {ip['operations']} file operations{what}; every replaced or removed file was kept in "
                     f"{ip['backup_dir']} first (undo: --rollback --backup-dir {ip['backup_dir']})")
    return lines + plan_lines(summary, title="recovered")


def resume_lines(result: dict, store: str) -> list[str]:
    """After --resume: how many switch operations were finished."""
    return [f"resumed: {store} recovered in place ({result['resumed']} file operations finished; "
            f"backup in {result['backup_dir']})"]


def rollback_lines(result: dict, store: str) -> list[str]:
    """After --rollback: how many files were put back."""
    return [f"rolled back: {store} is as it was before recovery ({result['restored']} file operations undone "
            f"from the backup in {result['backup_dir']})"]
