"""Records whose body CRC fails, in convert's terms: where they land in the converted log and what the plain broker
will do with each. DLedger never checks body CRCs; the plain broker does when it recovers (checkCRCOnRecover, on by
default): a normal start checks the last RECOVER_CHECKED_SEGMENTS segments (CommitLog.recoverNormally) and cuts the
commit log and consume queues at the first record that fails, so every later message is gone; a recovery after a
crash checks from the segment its checkpoint names. convert refuses such a store unless `--accept-bad-crc`.
"""
from __future__ import annotations

import sys

from ..runtime.failure import JobError
from ..scan.crc_audit import BadCrc, CrcAudit
from .plan import ConvertPlan

RECOVER_CHECKED_SEGMENTS = 3  # CommitLog.recoverNormally: from mappedFiles.size() - 3 on (4.9.8 and 5.x)
ACCEPT_FLAG = "--accept-bad-crc"


def described(bad: BadCrc, header: int, plan: ConvertPlan, segment_starts: list[int]) -> dict:
    """One failing record: the source's file, byte offset and offset, its new offset, and the broker's consequence.
    `header`: the DLedger entry header in front of the record (0 in a plain segment); `segment_starts`: every
    segment of the converted commit log."""
    old = bad.offset + header
    new = plan.new_offset(old)
    segment = max(i for i, s in enumerate(segment_starts) if s <= new) if segment_starts else 0
    checked = segment >= len(segment_starts) - RECOVER_CHECKED_SEGMENTS
    after = plan.records_after(old)
    consequence = (f"the plain broker's first start checks this segment's CRCs (one of the last "
                   f"{RECOVER_CHECKED_SEGMENTS}) and cuts the commit log and consume queues here: this record and the "
                   f"{after} after it are lost" if checked else
                   f"the plain broker serves it as it is at a normal start (it checks only the last "
                   f"{RECOVER_CHECKED_SEGMENTS} segments); a recovery after a crash that starts at or before its "
                   f"segment cuts the log here, losing the {after} records after it")
    return {**bad.to_dict(), "old_offset": old, "new_offset": new, "cut_at_normal_start": checked,
            "records_after": after, "broker_will": consequence}


def refusal(first: dict, count: int) -> str:
    """The one line convert refuses with."""
    more = f" (and {count - 1} more)" if count > 1 else ""
    return (f"the record in {first['file']} at byte offset {first['byte_offset']} (old offset {first['old_offset']}, "
            f"new offset {first['new_offset']} in the converted log) fails its body CRC check{more}: {first['detail']}; DLedger "
            f"never checks it, but a plain broker does when it recovers (checkCRCOnRecover): "
            f"{first['broker_will']}; nothing written. Pass {ACCEPT_FLAG} to convert anyway (the report lists each "
            f"such record and what the broker will do with it)")


def describe_all(audit: CrcAudit, header_of: dict[str, int], plan: ConvertPlan, segment_starts: list[int],
                 end: int) -> list[dict]:
    """The audit's records below the converted log's end (`end`, old offsets), described."""
    return [described(b, header_of.get(b.path, 0), plan, segment_starts) for b in audit.listed if b.offset < end]


BY_WRITERS = "by the segment writers, as they copied each record"  # convert: the writers' check (convert.write)
BY_AUDIT = "by a decode of the store before writing"  # a dry run, or records left out past the committed position


def verdict(audit: CrcAudit, header_of: dict[str, int], plan: ConvertPlan, end: int, accept: bool, writing: bool,
            checked: str) -> dict:
    """The audit in the report's form (`bad_crc_records`): a failing record refuses the conversion unless `accept`
    (--accept-bad-crc), which goes on and says so on stderr; `checked` says where the CRCs were checked."""
    starts = sorted([s.start for s in plan.plain_segments] + plan.segment_starts)
    bad = describe_all(audit, header_of, plan, starts, end)
    count = len(bad) + audit.count - len(audit.listed)
    if bad and writing and not accept:
        raise JobError(refusal(bad[0], count))
    if bad:
        print(f"reput convert: warning: {count} records fail their body CRC check, the first in {bad[0]['file']} at "
              f"byte offset {bad[0]['byte_offset']}: {bad[0]['broker_will']}"
              + ("" if writing else f" (convert refuses them unless {ACCEPT_FLAG})"), file=sys.stderr)
    return {"count": count, "accepted": bool(bad and accept), "records": bad, "checked": checked}
