"""Records whose body CRC fails, in convert's terms: where they land in the converted log and what the plain broker
will do with each. DLedger never checks body CRCs; the plain broker does when it recovers (checkCRCOnRecover, on by
default): a normal start checks the last RECOVER_CHECKED_SEGMENTS segments (CommitLog.recoverNormally) and cuts the
commit log and consume queues at the first record that fails, so every later message is gone; a recovery after a
crash checks from the segment its checkpoint names. convert refuses such a store unless `--accept-bad-crc`.
"""
from __future__ import annotations

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
