# reput: the two commands an operator needs on a fresh machine are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO := demo

.PHONY: venv system-deps oracle demo nightly-demo test test-full test-floors test-cluster test-boundscheck boundscheck-warm bench package clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m storage_format.kernels.warm
	-$(PY) -m jobs.pipeline.runtime.session
	touch $@

venv: $(VENV)/.installed

# Debian packages the notebook needs: a font with CJK glyphs for topic names (fonts-droid-fallback).
CJK_FONT := /usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf
system-deps:
	@if [ -f $(CJK_FONT) ]; then echo "system-deps: $(CJK_FONT) present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-droid-fallback >/dev/null; \
	else echo "system-deps: install the Debian package fonts-droid-fallback (as root)" >&2; exit 1; fi

# RocketMQ's own store code, which the broker tests run (tests/oracle.py): ../shared/oracle/setup.sh builds it into
# $$REPUT_ORACLE, else ~/.cache/reput-oracle, when it is missing or was built from another version of the kit (a
# stamp in it; a lock beside it, so two runs do not build at once). setup.sh installs Debian's JDK and jars with
# apt-get when they are missing (as root, like system-deps), then compiles for about 20 s. Once $(VENV) is installed,
# also the RocksDB kit (rocksdb/build.sh into ROOT/rocksbuild, ~10 s, against the venv's pyspark rocksdbjni jar; before
# that a note): .ci/run's early `make oracle` beside `make venv` builds the rest, and `make test`, whose prerequisites
# run in order (venv before oracle), the RocksDB kit.
oracle:
	$(PYTHON) -m tests.oracle --venv $(VENV)

demo: venv
	rm -rf $(DEMO)
	$(PY) -m storage_format.kernels.warm
	$(PY) -m storegen.sample $(DEMO)/store
	$(PY) -m storegen.sample --dledger $(DEMO)/dledger-store
	$(PY) -m jobs.inspect --store $(DEMO)/store --broker-config $(DEMO)/store/broker.conf
	# --engine spark: the sample store is small enough for auto to take the local engine; the demo shows Spark's path
	$(PY) -m jobs.rebuild --store $(DEMO)/store --broker-config $(DEMO)/store/broker.conf --out $(DEMO)/rebuilt \
		--engine spark
	mkdir -p $(DEMO)/checked && ln -s ../store/commitlog ../rebuilt/consumequeue ../rebuilt/index $(DEMO)/checked/
	$(PY) -m jobs.verify --store $(DEMO)/checked --broker-config $(DEMO)/store/broker.conf
	@echo "demo: rebuilt consume queues and index files are in $(DEMO)/rebuilt (run report: $(DEMO)/rebuilt/reput-report.json)"

# The nightly recipe (docs/nightly.md) on the demo store: last night's store rebuilt and catalogued; a day of
# messages later, its oldest segment expired, catalogued again (new records appended) and rebuilt --since; the
# broker's directory verified last night, and tonight (grown in place: the same store) verified --since.
N := $(DEMO)/nightly
nightly-demo: venv
	rm -rf $(N)
	$(PY) -m storegen.earlier $(N)
	$(PY) -m jobs.rebuild --store $(N)/last-night --broker-config $(N)/store/broker.conf --out $(N)/rebuilt-1
	$(PY) -m jobs.catalog --store $(N)/last-night --broker-config $(N)/store/broker.conf --table $(N)/catalog \
		--store-id demo
	$(PY) -m jobs.catalog --store $(N)/store --broker-config $(N)/store/broker.conf --table $(N)/catalog \
		--store-id demo
	$(PY) -m jobs.rebuild --store $(N)/store --broker-config $(N)/store/broker.conf --out $(N)/rebuilt-2 \
		--since $(N)/rebuilt-1
	# the broker's own directory, verified each night: last night's store (the demo stores hold no consume queues or
	# index of their own: each night's rebuild stands in for the broker's), then the same directory a day later
	cp -r $(N)/last-night $(N)/broker
	cp -r $(N)/rebuilt-1/consumequeue $(N)/rebuilt-1/index $(N)/broker/
	$(PY) -m jobs.verify --store $(N)/broker --broker-config $(N)/store/broker.conf --report $(N)/verify-1.json
	$(PY) -m storegen.earlier $(N) --grow $(N)/broker
	rm -rf $(N)/broker/consumequeue $(N)/broker/index
	cp -r $(N)/rebuilt-2/consumequeue $(N)/rebuilt-2/index $(N)/broker/
	$(PY) -m jobs.verify --store $(N)/broker --broker-config $(N)/store/broker.conf --report $(N)/verify-2.json \
		--since $(N)/verify-1.json
	@echo "nightly-demo: tonight's consume queues and index files are in $(N)/rebuilt-2 (its report's since section:"
	@echo "  what was decoded, reused and expired); the catalog $(N)/catalog holds both nights' records; tonight's"
	@echo "  verify --since $(N)/verify-1.json checked only what the log gained ($(N)/verify-2.json)"

# The suite CI runs: everything but the rest of the matrices (`full`) and the real cluster (`make test-cluster`), the
# broker tests included (RocketMQ's own store code: `make oracle`), in TEST_WORKERS xdist workers (2, the CI
# machine's cores: the suite waits on JVMs and subprocesses as much as it computes, and two workers take 0.7x of
# one's time; docs/testing.md).
TEST_WORKERS ?= 2
test: venv system-deps oracle
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not full and not cluster" tests

# Everything, the whole matrices too (docs/testing.md): run before each release note.
test-full: venv system-deps oracle
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not cluster" tests

# Every dependency at its floor in pyproject.toml (a venv outside the repository), then the tests marked `floors` there.
test-floors:
	PYTHON=$(PYTHON) TEST_WORKERS=$(TEST_WORKERS) .ci/floors

test-cluster: package
	$(PY) -m pytest -q -n 2 --dist loadscope -m cluster tests/test_cluster.py

# The compiled kernels on untrusted bytes with numba's bounds checks on. numba's cache index does not record
# NUMBA_BOUNDSCHECK: with the usual cache the unchecked kernels would be loaded, so they compile into a cache
# directory of their own (tests/conftest.py refuses NUMBA_BOUNDSCHECK=1 without NUMBA_CACHE_DIR): BOUNDSCHECK_CACHE,
# kept, when given (`make boundscheck-warm` compiles into it ahead: .ci/run does so beside make test), else a new
# temporary one, removed after.
BOUNDSCHECK_CACHE ?=
test-boundscheck: venv
	d=$(or $(BOUNDSCHECK_CACHE),$$(mktemp -d)) && NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$$d $(PY) -m pytest -q tests/test_split_kernel.py \
		tests/test_crc_kernel.py tests/test_hostile.py tests/test_index_file.py::test_compiled_entries_equal_numpy_reference \
		tests/test_index_file.py::test_compiled_append_chain_equals_numpy_reference; rc=$$?; \
		[ -n "$(BOUNDSCHECK_CACHE)" ] || rm -rf "$$d"; exit $$rc

boundscheck-warm: venv
	@[ -n "$(BOUNDSCHECK_CACHE)" ] || { echo "boundscheck-warm: set BOUNDSCHECK_CACHE (the bounds-checked kernels' own cache)" >&2; exit 2; }
	NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(BOUNDSCHECK_CACHE) $(PY) -m storage_format.kernels.warm

bench: venv
	$(PY) -m bench

# dist/reput.zip (the code, for --py-files) and dist/reput-env.tar.gz (the executors' Python, for --archives;
# built again when pyproject.toml changes; ./env links to it): what conf/spark-defaults.conf ships.
package: venv
	$(PY) -m jobs.pipeline.runtime.package dist/reput.zip --env dist/reput-env.tar.gz

clean:
	rm -rf $(VENV) $(DEMO) dist build env .pytest_cache
