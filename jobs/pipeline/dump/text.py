"""The plain-text form of `jobs.dump` rows (jobs.pipeline.dump.readers yields them; --json prints them as they
are, one per line): one line per consume-queue unit, a block per record, a short report per index file."""
from __future__ import annotations

from .messages import message_lines


def _where(row: dict) -> str:
    """`segment S + byte B` / `FILE byte B`: the bytes a row was read from."""
    if "segment" in row:
        return f"segment {row['segment']} + byte {row['byte']}"
    if "database" in row:
        return f"RocksDB {row['database']}"
    return f"{row['file']} byte {row['byte']}" if "file" in row else ""


def entry_line(row: dict) -> list[str]:
    """A consume-queue unit and the record it points at."""
    head = (f"queueOffset {row['queue_offset']}  {_where(row)}  phyOffset {row['phy_offset']}  size {row['size']}  "
            f"tagsCode {row['tags_code']}" + (f"  storeTimestamp {row['store_timestamp']}" if "store_timestamp" in row
                                              else ""))
    m = row["message"]
    lines = [head] if m is None else [
        head, f"    stored {m['store_time']} ({m['store_timestamp']})  keys [{m['keys'] or ''}]  uniqKey "
              f"{m['uniq_key'] or '-'}  tags {m['tags'] or '-'}  msgId {m['offset_msg_id']}"]
    if row.get("problem"):
        lines.append(f"    ! {row['problem']}")
    return lines


def record_lines(row: dict) -> list[str]:
    """A commit-log record: where it is, its sizes and CRC, then every header field and property."""
    head = [f"record at offset {row['physical_offset']} ({_where(row)}): totalSize {row['total_size']}, "
            f"magic v{row['magic_version']}, bodyCRC {row['body_crc']}, preparedTransactionOffset "
            f"{row['prepared_transaction_offset']}, flag {row['flag']}"]
    e = row.get("dledger_entry")
    if e is not None:
        head.append(f"  DLedger entry at pos {e['pos']}: index {e['index']}  term {e['term']}  size {e['size']}  "
                    f"bodySize {e['bodySize']}  magic {e['magic']}  channel {e['channel']}  chainCrc {e['chainCrc']}  "
                    f"bodyCrc {e['bodyCrc']}")
    return head + message_lines(row)


def index_lines(row: dict) -> list[str]:
    """Header, slot use and chain lengths of an index file."""
    h, s, e, c = row["header"], row["slots"], row["entries"], row["chains"]
    hist = "  ".join(f"{k}:{v}" for k, v in c["length_histogram"].items())
    lines = [f"{row['file']}",
             f"  header   beginTimestamp {h['beginTime']} ({h['beginTimestamp']})  endTimestamp {h['endTime']} "
             f"({h['endTimestamp']})",
             f"           beginPhyOffset {h['beginPhyOffset']}  endPhyOffset {h['endPhyOffset']}  hashSlotCount "
             f"{h['hashSlotCount']}  indexCount {h['indexCount']}",
             f"  slots    {s['used']} of {s['total']} used ({100 * s['used'] / max(s['total'], 1):.1f}%)",
             f"  entries  {e['used']} of {e['capacity']} used ({100 * e['used'] / max(e['capacity'], 1):.1f}%)",
             f"  chains   {c['count']}: length min {c['min']}, mean {c['mean']}, max {c['max']}; "
             f"{c['entries_reachable']} entries reachable from a slot",
             f"           lengths (length:chains) {hist or '-'}",
             f"  broken   {c['broken']}"]
    return lines + [f"           {d}" for d in c["broken_details"]]


def index_entry_line(row: dict) -> list[str]:
    """One index entry with its slot and time."""
    return [f"position {row['position']} (byte {row['byte']})  keyHash {row['keyHash']}  slot {row['slot']}  "
            f"phyOffset {row['phyOffset']}  timeDiff {row['timeDiff']} ({row['time']})  prevIndex {row['prevIndex']}"]


def other_line(row: dict) -> list[str]:
    """Filler units, blank records and the reason a listing ended early."""
    if row["kind"] == "filler":
        return [f"queueOffset {row['queue_offset']}  {_where(row)}  filler unit (before the queue's first entry)"]
    if row["kind"] == "dledger_blank":
        return [f"DLedger blank at offset {row['offset']} ({_where(row)}): {row['total_size']} bytes left, the rest "
                f"of the data file is unused; the walk goes on in the next file"]
    if row["kind"] == "blank":
        return [f"blank record at offset {row['offset']} ({_where(row)}): totalSize {row['total_size']}, the rest "
                f"of the segment is unused; the walk goes on in the next segment"]
    if row["kind"] == "gap":
        return [f"gap at queue offset {row['queue_offset']}: {row['reason']}"]
    if row["kind"] == "wrong_size":
        return [f"{row['file']}: {row['size']} bytes, not mappedFileSizeConsumeQueue {row['expected']}: the broker "
                f"does not start with it (MappedFileQueue.load refuses a file of another size: \"length not matched "
                f"message store config value\"; 5.x first deletes an empty last file); its whole units are listed"]
    where = f" at offset {row['offset']}" if "offset" in row else f" at queue offset {row['queue_offset']}"
    return [f"end{where}: {row.get('detail') or row['reason']}"]


def queue_offset_line(row: dict) -> list[str]:
    """A RocksDB queue's "max" or "min" record."""
    return [f"{row['topic']}/{row['queue_id']}  {row['record']}  phyOffset {row['phy_offset']}  queueOffset "
            f"{row['queue_offset']}"]


def checkpoint_lines(row: dict) -> list[str]:
    """The `checkpoint` file, or a RocksDB database's dispatch checkpoint (CHECKPOINT_TOPIC)."""
    if row["kind"] == "checkpoint_file":
        t = row["times"]
        return ["checkpoint", f"  physicMsgTimestamp {row['physic_msg_timestamp']} ({t['physic_msg_timestamp']})",
                f"  logicsMsgTimestamp {row['logics_msg_timestamp']} ({t['logics_msg_timestamp']})",
                f"  indexMsgTimestamp  {row['index_msg_timestamp']} ({t['index_msg_timestamp']})",
                f"  masterFlushedOffset {row['master_flushed_offset']}  confirmPhyOffset {row['confirm_phy_offset']}"]
    where = f" ({_where(row)})" if "segment" in row else ""
    head = f"{row.get('database', '')} " if "database" in row else ""
    if row["phy_offset"] is None:
        return [f"{head}{row['topic']}  absent: dispatch reads it as 0"]
    return [f"{head}{row['topic']}  phyOffset {row['phy_offset']}{where}: dispatch had reached this offset (the end "
            f"of the last dispatched record)"]


FORMATS = {"entry": entry_line, "record": record_lines, "index_file": index_lines, "index_entry": index_entry_line,
           "queue_offset": queue_offset_line, "checkpoint_file": checkpoint_lines, "rocksdb_checkpoint": checkpoint_lines}


def row_lines(row: dict) -> list[str]:
    """The text lines of any dump row."""
    return FORMATS.get(row["kind"], other_line)(row)
