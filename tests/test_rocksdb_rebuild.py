"""rebuild of a store whose consume queues live in RocksDB (storeType=defaultRocksDB; issue 54 item 5): OUT/consumequeue/
is a RocksDB database, proven three ways on copies of the golden cases. (a) Its logical content, dumped by the
oracle kit's own dump_rocksdb_cq.py (the reader that wrote the golden expectations), equals what the broker's
database of the same log holds, less the lazy "min" records (the crash image: as 5.3.3's recovery left it, the log
fully dispatched); the index files are the file-queue rebuild's. (b) RocketMQ 5.3.3's RocksDBMessageStore (the kit's
RocksGolden `reopen`) opens OUT with the commit log beside it: no error, its checkpoint OUT's, its dispatch at the
log's end with nothing to append, and the database's content unchanged after. (c) The SST files are format_version
5 (read from their footers, the reader checked on a format_version 4 file) and the database holds exactly the two
column families, every key in the bottommost level, an empty WAL, nothing of the binding's."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.rebuild import main as rebuild_main
from tests.helpers import rebuild_refused, run_job
from tests.oracle import KIT, ROCKS_BUILD, STAMP, ensure, rocks_event, rocks_golden, rocks_problem
from tests.rocksdb_helpers import rocks_case, rocks_copy, store_listing

# case rebuilt -> the golden case whose database the rebuild equals (less its "min" records)
CASES = {"rocksdb-clean-11": "rocksdb-clean-11", "rocksdb-lmq-clean-11": "rocksdb-lmq-clean-11",
         "rocksdb-unclean-11": "rocksdb-unclean-11-recovered"}
SST_MAGIC = 0x88E241B785F4CFF7  # kBlockBasedTableMagicNumber
FOOTER = 53  # format_version 1-5: checksum type, two block handles padded to 40 bytes, version, magic


def dump(db_or_store: Path, tmp: Path) -> list[str]:
    """The database's logical content as the kit's dump_rocksdb_cq.py writes it (sorted JSON lines)."""
    out = tmp / f"dump-{abs(hash(str(db_or_store)))}.jsonl"
    done = subprocess.run([sys.executable, str(KIT / "rocksdb" / "dump_rocksdb_cq.py"), str(db_or_store), "-o",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text().splitlines()


def expected(case: str) -> list[str]:
    """The golden case's dump without its "min" records (a rebuilt database has none: nothing asked for them)."""
    lines = (rocks_case(case) / "expected-cq.jsonl").read_text().splitlines()
    return [x for x in lines if json.loads(x).get("kind") != "min"]


def rebuild(store: Path, out: Path, *extra: str) -> dict:
    assert rebuild_main(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out", str(out),
                         "--json", *extra]) == 0
    return json.loads((out / "reput-report.json").read_text())


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """Per case: (the store copy, OUT, its report), the store's listing checked unchanged by the rebuild."""
    done = {}
    for case in CASES:
        base = tmp_path_factory.mktemp(case)
        store = rocks_copy(case, base / "store")
        before = store_listing(store)
        report = rebuild(store, base / "out")
        assert store_listing(store) == before
        done[case] = (store, base / "out", report)
    return done


def sst_format_version(path: Path) -> int:
    """A block-based SST file's format_version, from its footer (1-5: the fixed 53-byte footer)."""
    tail = path.read_bytes()[-FOOTER:]
    version, magic = struct.unpack("<IQ", tail[-12:])
    assert magic == SST_MAGIC, f"{path}: no block-based table magic"
    return version


@pytest.mark.parametrize("case", list(CASES))
def test_the_database_holds_what_the_brokers_dispatch_writes(case, rebuilt, tmp_path):
    """(a) Both column families equal the broker's own database of the same log (less "min"), the checkpoint at the
    end of the last record that got a unit, and the report counts them."""
    store, out, report = rebuilt[case]
    want = expected(CASES[case])
    assert dump(out / "consumequeue", tmp_path) == want
    rows = [json.loads(x) for x in want]
    checkpoint = next(r["checkpointPhyOffset"] for r in rows if r["topic"] == "CHECKPOINT_TOPIC")
    db = report["rocksdb"]
    assert (db["units"], db["queues"], db["checkpoint"], db["min_records"]) == (
        sum(r["cf"] == "default" for r in rows), sum(r.get("kind") == "max" for r in rows) - 1, checkpoint, 0)
    assert sum(n for q in report["consumequeue_entries_per_topic_queue"].values() for n in q.values()) == db["units"]
    assert report["consumequeue_layout"] == "rocksdb" and report["consumequeue_files"] == 0


def test_the_index_files_are_the_file_queue_rebuilds(rebuilt, tmp_path):
    """The index of a RocksDB rebuild is the one a rebuild of the same log as a file-queue store writes, and the
    broker's own (clean-11's index files, byte for byte)."""
    store, out, _ = rebuilt["rocksdb-clean-11"]
    plain = tmp_path / "plain"
    (plain / "commitlog").mkdir(parents=True)
    for seg in (store / "commitlog").iterdir():
        shutil.copy2(seg, plain / "commitlog" / seg.name)
    conf = (store / "broker.conf").read_text().replace("storeType=defaultRocksDB", "storeType=default")
    (plain / "broker.conf").write_text(conf)
    rebuild(plain, tmp_path / "plain-out")
    ours = [p.read_bytes() for p in sorted((out / "index").iterdir())]
    assert ours == [p.read_bytes() for p in sorted((tmp_path / "plain-out" / "index").iterdir())]
    assert ours == [p.read_bytes() for p in sorted((rocks_case("rocksdb-clean-11") / "index").iterdir())]


@pytest.mark.parametrize("case", list(CASES))
def test_the_sst_files_are_the_brokers_format(case, rebuilt):
    """(c) format_version 5 in every SST footer and in OPTIONS for both families; exactly `default` and `offset`;
    every SST in the bottommost level; the WAL empty; no LOG, no binding config."""
    _, out, report = rebuilt[case]
    db = out / "consumequeue"
    ssts = sorted(db.glob("*.sst"))
    assert ssts and {sst_format_version(p) for p in ssts} == {5}
    assert {f["name"] for f in report["rocksdb"]["sst_files"]} == {p.name for p in ssts}
    assert {f["level"] for f in report["rocksdb"]["sst_files"]} == {6}
    options = (sorted(db.glob("OPTIONS-*"))[-1]).read_text()
    families = [line.split('"')[1] for line in options.splitlines() if line.startswith("[CFOptions ")]
    assert families == ["default", "offset"]
    tables = options.split('[TableOptions/BlockBasedTable "')[1:]
    assert [t.split('"')[0] for t in tables] == families
    assert all("\n  format_version=5\n" in t for t in tables)
    names = {p.name for p in db.iterdir()}
    assert not names & {"LOG", "rocksdict-config.json"} and all(p.stat().st_size == 0 for p in db.glob("*.log"))
    assert names <= {p.name for p in ssts} | {"CURRENT", "IDENTITY", "LOCK"} | {p.name for p in db.glob("*.log")} \
        | {p.name for p in db.glob("MANIFEST-*")} | {p.name for p in db.glob("OPTIONS-*")}


def test_the_footer_reader_tells_format_versions_apart(tmp_path):
    """The footer reader against the broker's own SSTs (5.3.3 sets 5) and a format_version 4 file."""
    from jobs.pipeline.io.rocksdb_writer import binding, cf_options

    assert {sst_format_version(p) for p in (rocks_case("rocksdb-clean-11") / "consumequeue").glob("*.sst")} == {5}
    rocksdict = binding()
    opts, table = cf_options(rocksdict, "offset"), rocksdict.BlockBasedOptions()
    table.set_format_version(4)
    opts.set_block_based_table_factory(table)
    writer = rocksdict.SstFileWriter(options=opts)
    writer.open(str(tmp_path / "v4.sst"))
    writer[b"k"] = b"v"
    writer.finish()
    assert sst_format_version(tmp_path / "v4.sst") == 4


@pytest.mark.parametrize("case", list(CASES))
def test_the_broker_opens_the_rebuilt_database_as_its_store(case, rebuilt, oracle, tmp_path):
    """(b) 5.3.3's RocksDBMessageStore on OUT's database and index with the commit log beside them (as the broker
    expects: STORE/consumequeue/, STORE/commitlog/): load and start without error, its checkpoint OUT's, dispatch
    settled at the log's end having appended nothing, and the database's content unchanged by the broker."""
    why = rocks_problem(oracle.root, oracle.kit)
    if why:
        pytest.fail(why, pytrace=False)
    store, out, report = rebuilt[case]
    broker = tmp_path / "broker-store"
    shutil.copytree(store / "commitlog", broker / "commitlog")
    shutil.copytree(out / "consumequeue", broker / "consumequeue")
    shutil.copytree(out / "index", broker / "index")
    before = dump(broker, tmp_path)
    events = rocks_golden(oracle, "reopen", broker, store / "broker.conf")
    opened, settled = rocks_event(events, "store_open"), rocks_event(events, "settled")
    assert opened["store"] == "RocksDBMessageStore" and not opened["abort_before"]
    assert opened["rocksdb_checkpoint_after_load"] == report["rocksdb"]["checkpoint"]
    end = report["max_physical_offset"]
    assert settled["maxPhy"] == settled["reputFrom"] == end and settled["appended_bytes"] == 0
    assert settled["rocksdb_checkpoint"] == report["rocksdb"]["checkpoint"]
    assert dump(broker, tmp_path) == before == expected(CASES[case])
    assert not rocks_event(events, "shutdown")["abort_file_after"]


def test_a_store_the_broker_writes_now_is_rebuilt_to_its_database(oracle, tmp_path):
    """Beyond the golden cases: 5.3.3 writes a fresh LMQ store of another seed (RocksGolden write-clean, seed 5),
    and the rebuild of its commit log equals the database it left (less its "min" records), the index files its own."""
    why = rocks_problem(oracle.root, oracle.kit)
    if why:
        pytest.fail(why, pytrace=False)
    store, conf = tmp_path / "store", tmp_path / "broker.conf"
    shutil.copy(KIT / "rocksdb" / "broker-rocksdb-lmq.conf", conf)
    rocks_golden(oracle, "write-clean", store, conf, seed=5, n=1500)
    shutil.copy(conf, store / "broker.conf")
    want = [x for x in dump(store, tmp_path) if json.loads(x).get("kind") != "min"]
    before = store_listing(store)
    rebuild(store, tmp_path / "out")
    assert store_listing(store) == before
    assert dump(tmp_path / "out" / "consumequeue", tmp_path) == want
    assert [p.read_bytes() for p in sorted((tmp_path / "out" / "index").iterdir())] == \
        [p.read_bytes() for p in sorted((store / "index").iterdir())]


def test_spark_tasks_write_one_sst_per_key_range(spark, tmp_path, capfd, monkeypatch):
    """On Spark, the units of several key ranges (bytewise key order: the 164-byte topic's range last) are written
    by several tasks, each one SST file, ingested side by side into the bottommost level: the same content."""
    from jobs.pipeline.outputs import rocksdb_units

    monkeypatch.setattr(rocksdb_units, "MIN_UNITS_PER_TASK", 500)
    monkeypatch.setattr(rocksdb_units, "TARGET_UNITS_PER_TASK", 1000)
    store = rocks_copy("rocksdb-lmq-clean-11", tmp_path / "store")
    before = store_listing(store)
    code, _, err = run_job("rebuild", ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                                       str(tmp_path / "out"), "--engine", "spark"], capfd)
    assert code == 0, err[-2000:]
    assert store_listing(store) == before
    report = json.loads((tmp_path / "out" / "reput-report.json").read_text())
    defaults = [f for f in report["rocksdb"]["sst_files"] if f["column_family"] == "default"]
    assert report["rocksdb"]["unit_tasks"] >= 7 and len(defaults) == report["rocksdb"]["unit_tasks"]
    assert {f["level"] for f in report["rocksdb"]["sst_files"]} == {6}
    assert dump(tmp_path / "out" / "consumequeue", tmp_path) == expected("rocksdb-lmq-clean-11")


@pytest.mark.parametrize("flags, words", [
    (["--topics", "TopicTest"], ["--topics with storeType=defaultRocksDB", "reput does not implement it"]),
    (["--since", "OUT1"], ["--since with storeType=defaultRocksDB", "reput does not implement it"]),
], ids=["topics", "since"])
def test_what_a_rocksdb_rebuild_does_not_do_is_refused_by_name(flags, words, tmp_path, capfd):
    """--topics (a database of some topics would say every record was dispatched) and --since: one line, exit 2."""
    store = rocks_copy("rocksdb-clean-11", tmp_path / "store")
    flags = [str(tmp_path / "out1") if f == "OUT1" else f for f in flags]
    (tmp_path / "out1").mkdir()
    rebuild_refused(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                     str(tmp_path / "out"), *flags], capfd, tmp_path / "out", *words)


def test_without_the_extra_a_rocksdb_rebuild_is_one_line_naming_it(tmp_path, capfd, monkeypatch):
    """rocksdict missing (the reput[rocksdb] extra not installed): one line naming the extra, exit 2, no OUT."""
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # `import rocksdict` raises ImportError
    store = rocks_copy("rocksdb-clean-11", tmp_path / "store")
    rebuild_refused(["--store", str(store), "--broker-config", str(store / "broker.conf"), "--out",
                     str(tmp_path / "out")], capfd, tmp_path / "out", "pip install 'reput[rocksdb]'")


def test_make_oracle_builds_the_rocksdb_kit_once_the_venv_is_there(tmp_path, capsys):
    """ensure() with a venv: the kit's rocksdb/build.sh after setup.sh, once per kit and jar (a stamp in
    ROOT/rocksbuild); a venv not installed yet is a note, exit 0, nothing built; rocks_problem names `make oracle`
    while the build is missing or stale."""
    from tests.oracle import NEEDED, ROCKS_NEEDED

    kit, root, venv = tmp_path / "kit", tmp_path / "cache" / "reput-oracle", tmp_path / "venv"
    (kit / "rocksdb").mkdir(parents=True)
    files = [n for n in NEEDED if "." in n.rsplit("/", 1)[-1]]
    dirs = sorted({n.rsplit("/", 1)[0] for n in files} | {n for n in NEEDED if n not in files})
    (kit / "setup.sh").write_text(f'set -e\nmkdir -p "$1" && cd "$1"\nmkdir -p {" ".join(dirs)}\n'
                                  f'touch {" ".join(files)}\n')
    (kit / "rocksdb" / "build.sh").write_text(f'set -e\nmkdir -p "$2/classes"\necho "$2/classes:$3" > '
                                              f'"$2/classpath.txt"\ntouch "$2/classes/RocksGolden.class"\n'
                                              f'echo run >> "$2/../rocks-runs"\n')
    runs = lambda: (root / "rocks-runs").read_text().count("run") if (root / "rocks-runs").exists() else 0  # noqa: E731
    assert ensure(root, kit, venv) == 0 and runs() == 0
    assert "not installed yet" in capsys.readouterr().err
    assert "no RocksDB kit build" in rocks_problem(root, kit) and "`make oracle`" in rocks_problem(root, kit)
    jar = venv / "lib" / "python3.11" / "site-packages" / "pyspark" / "jars" / "rocksdbjni-9.8.4.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"jar")
    (venv / ".installed").touch()
    assert ensure(root, kit, venv) == 0 and runs() == 1 and rocks_problem(root, kit) is None
    assert all((root / n).exists() for n in ROCKS_NEEDED) and (root / ROCKS_BUILD / STAMP).is_file()
    assert ensure(root, kit, venv) == 0 and runs() == 1  # built from this kit and this jar: nothing to do
    (kit / "README.md").write_text("a newer kit")
    assert "made from another version" in rocks_problem(root, kit)
    assert ensure(root, kit, venv) == 0 and runs() == 2 and rocks_problem(root, kit) is None
    jar.unlink()  # the venv made again with another pyspark: the build names a jar that is gone
    jar.with_name("rocksdbjni-9.9.0.jar").write_bytes(b"jar")
    assert "is missing" in rocks_problem(root, kit)
    assert ensure(root, kit, venv) == 0 and runs() == 3 and rocks_problem(root, kit) is None
