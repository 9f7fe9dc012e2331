"""Everything the jobs share, grouped by what it serves (tests/test_layout.py checks that this map names every
module; docs/pipeline-map.md is the same map as a table). Entry points stay in jobs/; bytes and broker rules
live in storage_format/, Spark column functions in udfs/. The packages are layers, listed here lowest first: a
package imports only packages listed before it, `verify`, `since`, `convert`, `dump` and `catalog` none of each
other (docs/pipeline-map.md, "Layers"; tests/test_import_graph.py). This package's own module names nothing.

- `runtime`: how a job runs, whatever it does
  `runtime.cli` (common flags, exit codes, the broker config read, `run_main`),
  `runtime.failure` (any failure as one line),
  `runtime.interrupt` (Ctrl-C and SIGTERM: one line, exit 130 or 143, half-made output removed),
  `runtime.faults` (fault-injection hooks for the crash-safety tests), `runtime.session` (the SparkSession:
  embedded or submitted), `runtime.worker_daemon` (the embedded session's warm Python worker daemon),
  `runtime.jvm_output` (the embedded JVM's output to stderr, less Spark's own noise),
  `runtime.tasks` (small work items as tasks of the job's engine, with progress; the Spark engine's runner),
  `runtime.contract` (what the pipeline needs of an engine: TaskRunner; under spark-submit?), `runtime.engine`
  (--engine and auto's choice), `runtime.local` (the local engine:
  forked worker processes, no JVM), `runtime.local_sizing` (how many it forks: CPU affinity, cgroup CPU quota,
  REPUT_LOCAL_WORKERS, what the cgroup memory limit holds), `runtime.cgroup` (the process's cgroup CPU quota and
  memory limit, found as the JVM finds them), `runtime.heap` (task processes keep the memory a task frees for the next
  one), `runtime.limits` (the open-file limit a job needs: raised or refused before it starts),
  `runtime.driver_memory` (the driver's need from the queues and splits counted, against spark.driver.memory),
  `runtime.env` (the one registry of
  REPUT_* variables: name, default, effect; non-default values noted and reported), `runtime.package` (the zip and env
  spark-submit ships to a cluster)
- `io`: where bytes come from and go
  `io.fs` (one filesystem layer: local, hdfs://, s3://), `io.paths` (outputs lie outside the store),
  `io.publish` (atomic publishing: staging directory, check, rename), `io.commit_marker` (publishing on object
  storage, where the run report is the commit), `io.workdir` (the decode stage's per-split Arrow work files),
  `io.job_args` (the --store and --report a job is given, checked before Spark starts),
  `io.store_gate` (a store's first look: refusals by name, the consume queues' layout, where the commit log lives),
  `io.rocksdb_db` (a RocksDB consume-queue database read read-only through a private link directory), `io.rocksdb_writer`
  (SST files in the broker's table format and a fresh consume-queue database of them, with rocksdict), `io.live_broker`
  (what a running broker means for a job), `io.store_lock` (is a broker running on this store? its lock),
  `io.replaceable` (may a run write OUT: --overwrite replaces only an OUT as reput published it), `io.run_lock`
  (one run per output: the lock file beside OUT),
  `io.copy` (a file copied verbatim by the fastest safe means: copy_file_range, a byte stream, an opt-in hard link),
  `io.background_copy` (files copied in a thread while the job still plans, joined before publish),
  `io.compare` (two local files byte for byte, read only where either holds data),
  `io.direct` (a large output file written from one aligned buffer, O_DIRECT where the filesystem takes it),
  `io.durable` (local files made durable: batched fsyncs of files and directories, a hard link, a copy fsynced
  and renamed), `io.file_id` (a local file known again: its sha256, or its fingerprint with nothing read), `io.out_files`
  (what an OUT held when it was published: its files' sizes and mtimes, proven again before --since continues it
  and before --overwrite replaces it)
- `store`: what a store says about itself before any scan
  `store.segments` (the commit log's segments, as the broker loads them), `store.markers` (the one reader of
  abort, abort.bak and checkpoint, with its damage policy; the generation, 4.x or 5.x, given or detected),
  `store.dispatch` (how far the broker's dispatch goes: controller mode, duplicationEnable; DLedger's committed
  position), `store.built_to` (what an OUT was built to:
  the end offset and the digests of the bytes before it, checked against the store later), `store.identity` (which
  store a verify report was made on: its resolved path and inodes, beyond its commit log's bytes),
  `store.run_report` (an earlier run's report read back: parsed, its version, the settings it was made with),
  `store.rocksdb_summary` (a RocksDB consume-queue database counted for inspect: units, queues, max/min records,
  its dirty tail and checkpoint)
- `scan`: stages 1-2 of every Spark job
  `scan.decode` (splits decoded in Spark tasks and stitched into the broker's one scan), `scan.result` (the
  scan's contracts: SplitTask, SplitSummary, ScanResult), `scan.report_sections` (the report's `dispatch` and `dledger`
  sections: the store's facts beside the scan's), `scan.split_records` (a DLedger split's records listed by its
  decode task: what convert lays out), `scan.cq_rows` (a decode task's consume-queue
  rows), `scan.source` (the `rocketmq-commitlog` Spark data source), `scan.key_scan` (query --scan's per-split
  search), `scan.crc_audit` (every valid record whose
  body CRC fails, listed), `scan.queue_order` (queues whose queueOffsets do not step by 1, the first misplaced
  record named)
- `outputs`: stages 3-4
  `outputs.build` (consume-queue files and index files from the work files), `outputs.continued` (files that
  continue a file of the same name: OUT2's consume-queue file joined to OUT1's and checked, a queue placed from its
  files' state, the last index file appended to), `outputs.cq_tail` (a consume-queue file read from a unit on to
  its end of data only, where its units end), `outputs.index_continuation` (an index continued by new keys: the
  files they fill and their names by counts, the clean service's deletions, the tasks), `outputs.rebuild_out` (a
  rebuild's staged OUT checked, its run report), `outputs.rocksdb_units` (a RocksDB consume queue's units: one
  task per key range writes one sorted SST file), `outputs.rocksdb_run` (rebuild of a storeType=defaultRocksDB store: the
  database in OUT/consumequeue/, its offset family, checks, report)
- `recover`: jobs.recover
  `recover.inputs` (what recovery gathers from a store, in Spark tasks), `recover.plan` (the plan's record
  and its JSON form), `recover.gather` (the facts gathered: validating scan, queues, index; then decided),
  `recover.write` (the files recovery rewrites, creates and deletes), `recover.inplace` (apply a plan to the store: the switch's
  steps, backup, journal, resume, rollback), `recover.staging` (the staging area, removed again when the run stops
  before its journal), `recover.partial_backup` (the backup a switch began in DIR, taken out again when it stops
  before its journal), `recover.journal` (the switch's file operations, their JSON form, its file names), `recover.patches` (a kept file's changed pages: found, staged, written, read back),
  `recover.op_state` (what the store holds at an op's path: old, new, absent, torn), `recover.text` (the plan and results as console lines), `recover.dledger` (the facts
  of a DLedger-mode recovery, planned by storage_format.recovery.dledger), `recover.dledger_v5` (the same for 5.3.3's
  model), `recover.dledger_mode` (which DLedger recovery applies: the store's generation), `recover.dledger_audit` (a DLedger dry run's audit of what its recovery does not look at), `recover.interrupted` (what an interrupted in-place run, --resume or --rollback left in the store), `recover.rocksdb_store` (a RocksDB store's recovery: RocksDB's start segment, the index, the database copied and never written, `abort` kept), `recover.timer` (the 5.x timer store:
  warnings, verify's timer findings, what --repair-timer writes)
- `since`: rebuild --since OUT1 (docs/nightly.md)
  `since.out1` (OUT1's report read and checked, the store's bytes before OUT1's end), `since.queues` (OUT1's
  consume-queue files: none lost, the expired ones found in tasks, the rest copied), `since.report` (what the run
  wrote and reused, its report), `since.run` (the checks before Spark, the run up to the staged files, OUT2
  published), `since.inplace` (--in-place: OUT1's locks, only the changed files staged, switched into OUT1 by
  recover's in-place protocol)
- `verify`: jobs.verify's comparisons
  `verify.cq` (consume queues), `verify.index_files` (index files), `verify.pointer` (what a pointer on disk
  points at), `verify.findings` (the one registry of finding kinds), `verify.dledger_index` (DLedger's index/ against
  the data files), `verify.dledger_v5` (a 5.x DLedger store: double-indexed records set apart, a crash's lag named),
  `verify.double_index` (the broker's double-indexed records, rebuilt and compared byte for byte), `verify.index_gap` (the broker's own index loss after its DLedger recovery, named), `verify.since` (verify --since: the earlier
  verify's report checked, where this one starts), `verify.index_seed` (the index
  from the commit log's first kept offset on when its head expired: the store's file holding it cut back and continued),
  `verify.restart` (the broker's restart re-index of the log's last indexed record, counted apart), `verify.out_dir`
  (verify --files OUT: a reput output's files checked against the store's log up to OUT's end), `verify.text` (the
  console summary), `verify.rocksdb_store` (a RocksDB store's database against the log: the `offset` family, the
  checkpoint and the next start on the driver), `verify.rocksdb_units` (its `default` family compared in tasks, key
  range by key range), `verify.rocksdb_text` (its console lines), `verify.stage` (the comparison stage as one job:
  queue checks, the index seed and the index files' checks side by side)
- `convert`: jobs.convert (a DLedger store to a plain commit log)
  `convert` (its stages), `convert.plan` (the new layout, the segment tasks, the dry-run plan), `convert.segments` (writing one
  segment and its part of the msgId map), `convert.write` (the write job: segments, their body CRCs, plain segments,
  the builds), `convert.msgid_map` (the old -> new msgId map keyed by offsets: written
  per segment, ids derived on reading, an old id looked up), `convert.remap` (the source scan's work files given the new offsets),
  `convert.transactions` (the COMMIT/ROLLBACK records' half records mapped per split, pairs in the work directory),
  `convert.bad_crc` (records whose body CRC fails: where they land, what the plain broker does),
  `convert.broker_conf` (the broker config OUT is started with: written into OUT, checked by --check-config)
- `catalog`: jobs.catalog
  `catalog.parquet` (one task per split writes the records' Parquet files)
- `dump`: jobs.dump and jobs.query, random access with no Spark
  `dump.readers` (consume-queue entries, records from an offset, an index file's header, slots and chains),
  `dump.text` (their plain-text form), `dump.messages` (one record by its offset, as JSON and as lines),
  `dump.rocksdb` (a RocksDB store's queue units, its offset column family and its checkpoints)
"""
