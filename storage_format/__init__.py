"""Byte-level RocketMQ store formats: pure Python + numpy/pyarrow, no Spark.

Every broker rule and store layout lives in one module here (tests/test_layout.py checks this list):

- `record`: the record's constants (magics, sysFlag bits, transaction types) and the `Message` object
- `commitlog`: the record chain walk and the columnar record decoder (the reference the kernel is tested against)
- `record_columns`: the columnar record decoder's fields and per-record checks (field sum, CRC, DELAY)
- `segment_names`: commit-log segment file names and byte offsets inside a segment
- `kernels`: the compiled (numba) kernels, each beside its numpy reference:
  `kernels.jit` (the kernels' decorator, numba imported at the first call, and where numba caches them:
  keyed by the kernels' source, wherever a `--py-files` zip lies; imports nothing else of the package), `kernels.warm` (run every kernel once),
  `kernels.split_kernel` (the one-pass decoder of a split: chain walk, properties, hashes, summary),
  `kernels.kernel_bytes` (its inlined byte helpers: big-endian reads, Java hash over UTF-8, property scan),
  `kernels.crc_kernel` (CRC-32 compiled, zlib.crc32 its reference: the body check of checkCRCOnRecover),
  `kernels.lmq_kernel` (its inlined multi-dispatch rules per generation: which records get LMQ entries, their items),
  `kernels.record_search` (the first record start in a split that begins mid-segment, eight bytes a step;
  commitlog.find_first_record its reference: a zero-filled segment tail is searched at memory speed),
  `kernels.record_fields` (storeTimestamp of records at known positions, for RocksDB units; RecordColumns its
  reference),
  `kernels.row_groups` (a split's consume-queue rows grouped by queue: compiled stable counting sort),
  `kernels.split_decode` (the kernel's Python side: `FastSplit`, its `QueueTable` and `CqRows`, or why the reference
  decodes), `kernels.index_chain` (index slot chains as sequential loops; index_build's vectorised form is the
  reference)
- `split_rows`: what decoding a split hands on, whichever decoder ran (`CqRows`; kernel-free)
- `queue_table`: per-queue counts and queue-offset ranges as columns: a split's `QueueTable` (either decoder's)
  and their vectorised merge across splits (`MergedQueues`, what the driver plans consume queues from)
- `record_reader`: one record by physical offset (the broker's getData + decode), columns as `Message`s
- `record_text`: a record's fields as people read them (a time as ISO-8601 UTC, a host as `ip:port`)
- `scan_plan`: byte-range splits of a commit log and stitching their walks into the broker's one scan
- `properties`: the properties string (`name\\x01value\\x02`) with the broker's parsing rules
- `java_hash`: Java `String.hashCode()` over many UTF-8 strings (tagsCode, index key hashes)
- `ragged`: ragged byte slices of one buffer as Arrow arrays
- `arrow_numpy`: numpy <-> Arrow columns from their buffers, without pyarrow's pandas import (job start-up)
- `consume_queue`: consume-queue entries, tagsCode, where an entry lands in its queue, file layout
- `rocksdb_cq`: 5.x RocksDB consume queues (`storeType=defaultRocksDB`): the keys and values of its `default` (units)
  and `offset` (max/min records, the dispatch checkpoint) column families
- `rocksdb_dispatch`: RocksDB's dispatch rules: the units and "max" records dispatch leaves (LMQ by enableLmq, names
  with '/' kept, stored offsets, the last put of a key wins), and what the broker's next start re-dispatches
- `multi_dispatch`: LMQ / multi-dispatch: the extra entries INNER_MULTI_DISPATCH names, per generation
- `index_keys`: the index keys of dispatched records in the broker's order (`KeyBatch`, what decoding hands on)
- `index_file`: index-file header, slots, entry chains, names, the broker's lookup walk and the walk of every chain
- `index_header_check`: an index file's header against its own entries (what `rebuild --since` checks of the file
  it continues)
- `index_build`: index files written (fresh, in shares, appended to in place) with putKey's quirks; the
  vectorised references of the compiled chains
- `index_prefix`: an index file cut back to its entries before a commit-log offset (the state the broker had then)
- `checkpoint`: the `checkpoint` file
- `clean_service`: what the broker's clean service deletes of the consume queues and the index once the commit
  log's head is gone (rebuild --since over an expired head)
- `dledger`: the DLedger commit log's entries, blanks, index units and checkpoint (enableDLegerCommitLog), the
  pos rule for a split's first entry, and the committed-position reading (which entries count as dispatched)
- `commitlog_layout`: where records land in a plain commit log (`CommitLog`'s placement: a record that does not
  fit with the 8-byte end marker starts the next segment, a BLANK record ends the one before) as a pure function of
  their sizes, and the record fields convert rewrites (PHYSICALOFFSET, preparedTransactionOffset); the compiled form
  with convert's DLedger entry walk and record copy is `kernels.layout_kernel`
- `log_sources`: where a store's records sit (plain segments, DLedger data files, the upgraded mixed layout) as
  one list of segments the split planner and decoders read
- `markers`: `abort`, `abort.bak`, `lock` and telling 4.x stores from 5.x stores
- `msg_id`: offset message ids and producers' unique keys
- `month_time`: a unique key's born time from its month-relative offset (java.util.Calendar's month starts)
- `settings`: broker `.properties` over the broker's defaults
- `java_props`: java.util.Properties syntax and Java's value parsers (parseInt/parseLong/parseBoolean/trim)
- `broker_keys`: every key a 4.9.8 or 5.3.3 broker reads from its config file
- `recovery`: the broker's start-up recovery as pure planning, one module per concern:
  `recovery.start` (start segment, truncation point), `recovery.queues` (consume-queue load, re-dispatch,
  truncation), `recovery.index` (index resume), `recovery.post_start` (4.x post-start re-dispatch),
  `recovery.checkpoint_after` (the checkpoint left behind), `recovery.sequence` (the whole sequence, pure),
  `recovery.dledger` (DLedger mode: DLedger's recovery walk and index rewrite, the cut at the write end, the
  restart's dispatch, the DLedger checkpoint and currterm), `recovery.dledger_v5` (5.3.3's DLedger-mode recovery:
  the load dispatch, its end computed without entry headers, the restart from committedPos), `recovery.timer` (the 5.x timer store after a cut:
  warnings, the --repair-timer plan)
- `timer`: the 5.x timer message store's files: `timer.log` (timer-log units, filler, the broker's recovery
  scan), `timer.wheel` (the wheel's slots), `timer.check` (`config/timercheck`), `timer.metrics`
  (whether `config/timermetrics` loads)
- `store_layout`: broker features and store layouts reput does not implement, refused by name
- `cq_layout`: where a store's consume queues are (files, a RocksDB database, both: double write, or
  `consumequeue_rocksdb/`), decided from the files and checked against `storeType`/`rocksdbCQDoubleWriteEnable`
- `rocksdb_files`: a RocksDB database directory's file names, and a MANIFEST cut inside a log record (which RocksDB
  itself opens as an older view)
- `confirm_offset`: controller mode / duplicationEnable: how far dispatch goes, the confirm offset recovery keeps
- `errors`: the exception family (every error names the file and byte offset)

storage_format imports nothing else of the project. Its subpackages and top-level modules, each one node, form no
circle (tests/test_import_graph.py): `timer` imports nothing else of the package; the compiled `kernels` import only
each other but their Python side (`kernels.split_decode`, `kernels.warm`), which reads the format modules;
`index_build` writes index files with the compiled chains, so `index_file` (read by the settings) needs no kernel;
`recovery` plans from the format modules and `timer`.
"""
