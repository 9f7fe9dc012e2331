"""`python -m jobs.query --store STORE (--topic T --key K | --msg-id ID | --uniq-key ID)`: find messages
the way the broker's query does, and print them.

By key: IndexService.queryOffset over the index files on disk (newest first by name; a file is searched
when its time range overlaps [begin, end]; the walk stops after a file that begins before `begin` or
when max-num offsets are collected), each slot chain walked as IndexFile.selectPhyOffset does. Then
every offset's record is read from the commit log and, as the client does, kept only when it really
carries the key (topic and a KEYS token, or UNIQ_KEY): hash collisions are filtered out and listed.
By offset message id: the id's physical offset is read directly. No Spark is needed unless --scan.
"""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see the module)
    import _script_path  # noqa: F401
if __name__ == "__main__":  # run as a job: Ctrl-C from here on (imports of pyspark, ...) is one line
    from jobs.pipeline.runtime.interrupt import guard_startup

    guard_startup()

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import string  # noqa: E402

from jobs.pipeline.runtime.cli import (EXIT_FINDINGS, EXIT_OK, JobError, emit, parser, progress_quiet,  # noqa: E402
                                       run_process, settings_from, utf8_text, warn)
from jobs.pipeline.io.job_args import check_report, check_store  # noqa: E402
from jobs.pipeline.io.fs import Location  # noqa: E402
from jobs.pipeline.io.live_broker import warn_if_running  # noqa: E402
from jobs.pipeline.io.rocksdb_db import open_store_database  # noqa: E402
from jobs.pipeline.io.store_gate import store_cq_layout  # noqa: E402
from jobs.pipeline.dump.messages import (Message, RecordReader, host_text, message_dict, message_lines,  # noqa: E402,F401
                                    preview)
from storage_format.index_file import IndexSearch, query_offsets  # noqa: E402
from storage_format.java_hash import index_key_hash_scalar, java_hash  # noqa: E402
from storage_format.msg_id import decode_offset_msg_id  # noqa: E402
from jobs.pipeline.convert.msgid_map import MAP_DIR as CONVERT_MAP_DIR, lookup as converted_lookup  # noqa: E402
from storage_format.properties import KEYS, UNIQ_KEY, parse_properties, split_keys  # noqa: E402
from storage_format.multi_dispatch import is_lmq  # noqa: E402
from storage_format.settings import BrokerSettings  # noqa: E402

DEFAULT_MAX_NUM = 64  # the broker's maxMsgsNumBatch: queryOffset never returns more per query
MSG_ID_FALLBACK_MAX_NUM = 32  # MQAdminImpl.queryMessageByUniqKey asks for 32 offsets
LONG_MAX = 2**63 - 1
def index_names(index_dir: Location) -> list[str]:
    """Index files in name order (the broker's load order; names are creation times)."""
    return [i.base_name for i in index_dir.list() if i.type.name == "File"]


def query_index(index_dir: Location, settings: BrokerSettings, key: str, max_num: int, begin: int,
                end: int) -> IndexSearch:
    """IndexService.queryOffset for the index key `key` (`topic#key`) over the store's index files."""
    return query_offsets(index_names(index_dir), lambda name: index_dir.child(name).open_input(),
                         settings.index_layout, index_key_hash_scalar(java_hash(key)), max_num, begin, end)


def carries(msg: Message, topic: str | None, key: str, uniq: bool) -> bool:
    """The client's filter after a key query: the record's UNIQ_KEY is the id (unique-key query), or
    its topic is the topic and one of its KEYS tokens is the key."""
    props = parse_properties(msg.properties)
    if uniq:
        return props.get(UNIQ_KEY) == key
    return msg.topic == topic and key in split_keys(props.get(KEYS))


# ----------------------------------------------------------------------------------------- modes


def parse_time(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC when it has no zone)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise JobError(f"not a time: {text!r} (epoch milliseconds or ISO-8601)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def topics_with_queues(store: Location, settings: BrokerSettings) -> list[str]:
    """Topics that have a consume queue (the candidates for a unique key without --topic): a consumequeue directory,
    or units in a RocksDB store's database; except `%LMQ%` queues: the broker indexes a multi-dispatched record only
    under its own topic, so an LMQ name holds no index key (and an LMQ store can have 100,000s of them)."""
    layout = store_cq_layout(store, settings)
    if layout.reads_database:
        with open_store_database(store, layout.db_dir) as db:
            names = [t.decode("utf-8", "replace") for t in db.unit_topics()]
    else:
        names = [i.base_name for i in store.child("consumequeue").list() if i.type.name == "Directory"]
    return [n for n in names if not is_lmq(n)]


def by_index(store: Location, settings: BrokerSettings, reader: RecordReader, topics: list[str], key: str,
             uniq: bool, max_num: int, begin: int, end: int, result: dict) -> list[int]:
    """Offsets found through the index for `key` in each topic, filtered like the client does."""
    index_dir = store.child("index")
    if not index_dir.is_dir():
        raise JobError(f"{index_dir.uri}: no index directory (use --scan to search the commit log)")
    found: list[int] = []
    for topic in topics:
        search = query_index(index_dir, settings, f"{topic}#{key}", max_num, begin, end)
        result["index_files"] = search.files
        result["lookups"].append({"index_key": f"{topic}#{key}", "candidates": search.offsets,
                                  "files_searched": len(search.searched), "files_skipped": search.skipped})
        _index_warnings(index_dir, search, f"{topic}#{key}", max_num, result["warnings"])
        for off in sorted(set(search.offsets)):
            msg, why = reader.read(off)
            if msg is None:
                result["unreadable"].append({"physical_offset": off, "reason": why})
            elif carries(msg, topic, key, uniq):
                found.append(off)
            else:
                props = parse_properties(msg.properties)
                result["hash_collisions"].append({"physical_offset": off, "topic": msg.topic,
                                                  "keys": props.get(KEYS), "uniq_key": props.get(UNIQ_KEY)})
                if not uniq and msg.topic == topic and props.get(UNIQ_KEY) == key:
                    result["warnings"].append(f"the record at offset {off} carries {key!r} as its unique key "
                                              f"(UNIQ_KEY), not among its keys: query it with --uniq-key")
    return sorted(set(found))


def _index_warnings(index_dir: Location, search, index_key: str, max_num: int, warnings: list[str]) -> None:
    """What makes an index answer incomplete, once each: an index file skipped (its messages are not found through
    the index), the --max-num cap reached (a record's repeated key tokens count too)."""
    for s in search.skipped:
        text = (f"{index_dir.child(s['file']).uri} skipped: {s['reason']}; the messages it indexes are not found "
                f"through the index (--scan reads the commit log)")
        if text not in warnings:
            warnings.append(text)
    if len(search.offsets) >= max_num:
        warnings.append(f"{index_key}: the index gave {len(search.offsets)} candidate offsets, the --max-num cap: "
                        f"more may carry the key; raise --max-num")


def by_scan(args: argparse.Namespace, store: Location, settings: BrokerSettings, topic: str | None, key: str,
            uniq: bool, begin: int, end: int) -> list[int]:
    """Offsets of matching records found by scanning the whole commit log in Spark tasks (no index), one task per
    split (scan.key_scan: the records as the `rocketmq-commitlog` reader gives them)."""
    from jobs.pipeline.runtime.session import job_context
    from jobs.pipeline.runtime.tasks import SparkRunner, run_tasks
    from jobs.pipeline.scan.key_scan import KeyScanTask, KeySearch, carrying_offsets
    from jobs.pipeline.scan.result import SplitTask
    from jobs.pipeline.store.segments import list_segments
    from storage_format.scan_plan import plan_splits

    search = KeySearch(key=key, uniq=uniq, topic=topic, begin=begin, end=end)
    tasks = [KeyScanTask(SplitTask(split=sp, settings=settings, with_cq=False, with_keys=False), search)
             for sp in plan_splits(list_segments(store, settings), args.split_size)]
    runner = SparkRunner(job_context(args, "query"))
    found = run_tasks(runner, tasks, carrying_offsets, "commit-log search", quiet=progress_quiet(args))
    return sorted(off for offsets in found for off in offsets)


def main(argv: list[str] | None = None) -> int:
    p = parser("query", "Find messages by key, unique key or offset message id, like the broker's query.")
    p.add_argument("--topic", type=utf8_text, help="topic of the key (required with --key; optional with --uniq-key)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--key", type=utf8_text, help="a message key (one KEYS token)")
    mode.add_argument("--uniq-key", type=utf8_text, help="a producer unique key (UNIQ_KEY, the client's msgId)")
    mode.add_argument("--msg-id", help="a message id: an offset message id (store host + port + physical offset), "
                                       "else searched as a unique key like mqadmin queryMsgById")
    p.add_argument("--begin", type=parse_time, default=0,
                   help="window start: epoch ms or ISO-8601, UTC when it names no zone (default 0)")
    p.add_argument("--end", type=parse_time, default=LONG_MAX,
                   help="window end: epoch ms or ISO-8601, UTC when it names no zone (default: no end)")
    p.add_argument("--max-num", type=int, default=DEFAULT_MAX_NUM,
                   help=f"offsets collected per index key, collisions included (default {DEFAULT_MAX_NUM}, "
                        f"the broker's maxMsgsNumBatch)")
    p.add_argument("--scan", action="store_true",
                   help="search the commit log with Spark instead of the index (slow; needs no index files)")
    p.add_argument("--show-body", action="store_true", help="print whole bodies (decompressed)")
    args = p.parse_args(argv)
    if args.key is not None and not args.topic:
        p.error("--key needs --topic (the index key is topic#key)")
    if args.max_num <= 0:
        p.error("--max-num must be positive")
    if args.begin < 0 or args.end < args.begin:
        p.error(f"--begin {args.begin} .. --end {args.end} is no time window (epoch milliseconds, begin <= end)")
    store, settings = check_store(args, settings_from(args))
    warn_if_running("query", store)
    report_loc = check_report(args, store)
    reader = RecordReader(store, settings)
    result: dict = {"store": store.uri, "log_place": args.log_place, "cq_layout": args.cq_layout, "query": {}, "index_files": None, "lookups": [],
                    "hash_collisions": [], "unreadable": [], "warnings": [], "messages": []}
    if args.msg_id is not None:
        offsets, why = query_msg_id(args.msg_id, reader, result, store)
        if why is not None:
            offsets = msg_id_fallback(args, store, settings, reader, offsets, why, result)
    else:
        uniq = args.uniq_key is not None
        key = args.uniq_key if uniq else args.key
        topics = [args.topic] if args.topic else topics_with_queues(store, settings)
        if not topics and not args.scan:
            raise JobError(f"{store.child('consumequeue').uri}: no topics with consume queues to search; pass --topic "
                           f"or --scan")
        result["query"] = {"mode": "uniq_key" if uniq else "key", "topic": args.topic, "key": key,
                           "topics_searched": None if args.scan else topics, "begin": args.begin,
                           "end": args.end, "max_num": args.max_num, "via": "scan" if args.scan else "index"}
        if args.scan:
            offsets = by_scan(args, store, settings, args.topic, key, uniq, args.begin, args.end)
        else:
            offsets = by_index(store, settings, reader, topics, key, uniq, args.max_num, args.begin, args.end, result)
    for off in offsets:
        msg, why = reader.read(off)
        if msg is None:
            result["unreadable"].append({"physical_offset": off, "reason": why})
        else:
            result["messages"].append(message_dict(msg, args.show_body))
    emit(args, result, lambda r: print_human(r, args.show_body), report_loc)
    return EXIT_OK if result["messages"] else EXIT_FINDINGS


def query_msg_id(msg_id: str, reader: RecordReader, result: dict,
                 store: Location | None = None) -> tuple[list[int], str | None]:
    """The record an offset message id names, and why the id must also be tried as a unique key (None
    when the record is there and was stored by the id's host): mqadmin queryMsgById falls back to the
    unique-key query whenever the id does not decode or viewing it fails."""
    text = msg_id.strip()
    result["query"] = {"mode": "msg_id", "msg_id": msg_id, "via": "commitlog"}
    try:
        mid = decode_offset_msg_id(text)
    except ValueError as exc:
        if not text or any(c not in string.hexdigits for c in text):
            raise JobError(str(exc)) from None
        return [], f"{text} is not an offset message id ({exc})"
    result["query"].update({"store_host": mid.host, "store_port": mid.port, "physical_offset": mid.physical_offset})
    mapped = None if store is None else converted_offset(store, text)
    if mapped is not None:
        result["query"]["converted"] = mapped
        direct, _ = reader.read(mid.physical_offset)
        if direct is not None and bytes(direct.store_host) == mid.host_bytes and direct.store_port == mid.port:
            result["warnings"].append(f"{text} is an id from before convert, now {mapped['new_offset_msg_id']} (offset "
                                      f"{mapped['new_physical_offset']}); as an id of the converted store it would "
                                      f"name the record at offset {mid.physical_offset}, also shown")
            return [mapped["new_physical_offset"], mid.physical_offset], None
        return [mapped["new_physical_offset"]], None
    msg, why = reader.read(mid.physical_offset)
    if msg is None:
        result["unreadable"].append({"physical_offset": mid.physical_offset, "reason": why})
        return [], f"no record at the id's offset {mid.physical_offset}"
    if bytes(msg.store_host) != mid.host_bytes or msg.store_port != mid.port:
        result["warnings"].append(f"the record's store host {host_text(msg.store_host, msg.store_port)} differs from "
                                  f"the id's {mid.host}:{mid.port} (an id of another broker, or not an offset id)")
        return [mid.physical_offset], "the record at the id's offset was stored by another host"
    return [mid.physical_offset], None


def converted_offset(store: Location, msg_id: str) -> dict | None:
    """An id from before `convert` in the converted store's msgId map (CONVERT_MAP_DIR): its old and new
    offsets and new id, or None (no map, or not an old id)."""
    return converted_lookup(store, msg_id)


def msg_id_fallback(args: argparse.Namespace, store: Location, settings: BrokerSettings, reader: RecordReader,
                    at_offset: list[int], why: str, result: dict) -> list[int]:
    """The id as a unique key (UNIQ_KEY) in --topic or every topic, at most MSG_ID_FALLBACK_MAX_NUM
    offsets per topic (the admin's 32), in the --begin/--end window; the record at the id's offset
    stays the answer when no message carries the id as its unique key."""
    key = args.msg_id.strip()
    topics = [args.topic] if args.topic else topics_with_queues(store, settings)
    result["query"].update({"fallback": "uniq_key", "topics_searched": topics, "max_num": MSG_ID_FALLBACK_MAX_NUM,
                            "via": "index"})
    found = by_index(store, settings, reader, topics, key, True, MSG_ID_FALLBACK_MAX_NUM, args.begin, args.end,
                     result) if topics else []
    if found:
        result["unreadable"] = [u for u in result["unreadable"]
                                if u["physical_offset"] != result["query"].get("physical_offset")]
        result["warnings"].append(f"{why}: found as a unique key (UNIQ_KEY), as mqadmin queryMsgById falls back to")
        return found
    result["warnings"].append(f"{why}; no message has it as its unique key either (searched "
                              f"{len(topics)} topics; a producer's msgId is a UNIQ_KEY: --uniq-key)")
    return at_offset


def print_human(r: dict, show_body: bool) -> None:
    """The console form of the result: what was searched, then each message in a few lines."""
    q = r["query"]
    if q.get("mode") == "msg_id":
        if "store_host" in q:
            print(f"offset message id {q['msg_id']}: store host {q['store_host']}:{q['store_port']}, "
                  f"physical offset {q['physical_offset']}")
        if q.get("converted"):
            c = q["converted"]
            print(f"an id from before convert: now {c['new_offset_msg_id']} at physical offset "
                  f"{c['new_physical_offset']} (the store's {CONVERT_MAP_DIR}/)")
        if q.get("fallback"):
            print(f"then as a unique key in {len(q['topics_searched'])} topics via the index "
                  f"(max {q['max_num']} offsets per topic, like mqadmin queryMsgById)")
    else:
        where = q["topic"] if q["topic"] else f"{len(q['topics_searched'] or [])} topics"
        print(f"{q['mode'].replace('_', ' ')} {q['key']!r} in {where or 'every topic'} via {q['via']}"
              + (f", window {q['begin']}..{q['end']}" if q["begin"] or q["end"] != LONG_MAX else ""))
        if q["via"] == "index":
            cands = sum(len(lk["candidates"]) for lk in r["lookups"])
            print(f"index: {r['index_files']} files, {cands} candidate offsets (max {q['max_num']} per key), "
                  f"{len(r['hash_collisions'])} hash collisions filtered out")
    for w in r["warnings"]:
        warn("query", w)
    for u in r["unreadable"]:
        print(f"unreadable offset {u['physical_offset']}: {u['reason']}")
    print(f"{len(r['messages'])} message(s)")
    for m in r["messages"]:
        print("\n".join(message_lines(m, show_body)))


if __name__ == "__main__":
    run_process("query", main)
