# The project's commands. The README names two of them: `make demo` and `make test`.
# Everything downloaded is cached under .cache/ (git-ignored), so a second run works offline.

PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STACK := $(PYTHON) stack/stack.py
# SECURE=1: the stack targets act on the secure profile (SASL_SSL, mutual TLS, ACLs, HTTPS Connect);
# it creates its ACLs with confluent-kafka, so it runs in the project's virtualenv
SECURE ?=
ifeq ($(SECURE),1)
STACK := $(VENV)/bin/python stack/stack.py --secure
endif
# BROKERS=3: the stack targets act on the multi-broker profile (each cluster 3 KRaft nodes, replication
# factor 3, min.insync.replicas 2; state in .stack-multi/), the one the fault tests use
BROKERS ?= 1
ifneq ($(BROKERS),1)
STACK := $(PYTHON) stack/stack.py --brokers $(BROKERS)
endif
# SOURCE_VERSION=3.9.1 (or 2.8.2, 4.3.1, 4.4.0) and/or TARGET_VERSION=4.4.0 (or 4.3.1): the stack targets
# act on the compat profile, the source that Kafka version (with ZooKeeper before 4.0) and a Connect worker
# of that version, the target that version on KRaft; each unset one is 4.3.1 (.stack-compat-V[-to-T]/)
SOURCE_VERSION ?=
TARGET_VERSION ?=
ifneq ($(SOURCE_VERSION)$(TARGET_VERSION),)
STACK := $(PYTHON) stack/stack.py $(if $(SOURCE_VERSION),--source-version $(SOURCE_VERSION)) \
  $(if $(TARGET_VERSION),--target-version $(TARGET_VERSION))
endif
PYSPARK_PIN := $(shell grep -E '^pyspark==' requirements.txt)
PYTEST_ARGS ?=

export PIP_CACHE_DIR := $(CURDIR)/.cache/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install browser prometheus kafka-jars stack-up stack-down stack-clean stack-status airflow-up airflow-down spark-up spark-down spark-status spark-connect-up spark-connect-down test test-secure test-faults test-metrics test-bad-input test-compat test-chaos test-unit demo bench-copy bench-claims bench-spark bench-mm2 bench-cutover bench-dr bench-scale bench-topic-steps bench-mirror-scale bench-mirror-lag bench-incremental constraints check-python

# the virtualenv, the Kafka jars and the browser side by side: none needs another
install:
	@$(MAKE) --no-print-directory -j4 --output-sync=line $(VENV)/.installed kafka-jars browser prometheus

# Debian's Prometheus unpacked into .cache/ (stack/prometheus_install.py): promtool tests the alert rules
# of monitoring/
PROMETHEUS_VERSION := $(shell sed -n 's/^PROMETHEUS_VERSION = "\([^"]*\)".*/\1/p' stack/prometheus_install.py)
PROMTOOL ?= $(CURDIR)/.cache/prometheus-$(PROMETHEUS_VERSION)/usr/bin/promtool
export PROMTOOL
prometheus: | check-python
	@test -f .cache/prometheus-$(PROMETHEUS_VERSION)/.complete || $(PYTHON) stack/prometheus_install.py

# Debian's Chromium for the browser test of the trigger form (tests/dags/test_trigger_form.py);
# installed with apt-get when missing and this is root, else a message says what to do.
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM
browser:
	@test -x "$(CHROMIUM)" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "install: Debian's chromium for the browser test (apt-get)"; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  else \
	    echo "make: Chromium not found at $(CHROMIUM); install Debian's chromium package (sudo apt-get install chromium) or run make with CHROMIUM=/path/to/chromium" >&2; exit 2; \
	  fi; }

check-python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found: install Python 3.11 or run make with PYTHON=/path/to/python3.11" >&2; exit 2; }

$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml | check-python
	@echo "install: virtualenv $(VENV) with the pinned requirements (pip cache: .cache/pip)"
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q -r requirements.txt -c constraints.txt
	# pyspark-client (a dependency of the Spark provider) overwrites pyspark's Python files: put pyspark back
	$(VPY) -m pip install -q --no-deps --force-reinstall "$(PYSPARK_PIN)"
	$(VPY) -m pip install -q --no-deps -e .
	@touch $@

kafka-jars: | check-python
	@$(STACK) install

stack-up: kafka-jars $(if $(filter 1,$(SECURE)),$(VENV)/.installed)
	@$(STACK) up

stack-down:
	@$(STACK) down

stack-clean:
	@$(STACK) down --wipe

stack-status:
	@$(STACK) status

# Airflow's UI on the local stack: api-server, scheduler and dag-processor (LocalExecutor, SQLite
# under .stack/airflow-ui), the project's connections and pool in place, and a Spark Connect server
# (make spark-connect-up) as the connection spark_connect_default: the DAGs' Spark jobs run there,
# with no Spark application to start per job. Prints the URL.
SPARK_CONNECT_URL := sc://127.0.0.1:15002
airflow-up: stack-up spark-connect-up
	@$(VPY) stack/local_airflow.py up --spark-connect $(SPARK_CONNECT_URL)

# Stops exactly the processes airflow-up started (by the pids it recorded).
airflow-down:
	@$(VPY) stack/local_airflow.py down

# A Spark standalone master and two workers on localhost, from the pinned pyspark (.stack/spark/);
# jobs reach it with --master spark://127.0.0.1:17077, its UI is http://127.0.0.1:18090.
spark-up: $(VENV)/.installed
	@$(PYTHON) stack/spark_cluster.py up

spark-down:
	@$(PYTHON) stack/spark_cluster.py down

spark-status:
	@$(PYTHON) stack/spark_cluster.py status

# A Spark Connect server (a long-running Spark application, local[4,4]) from the pinned pyspark;
# the jobs run on it as Python clients: python spark_jobs/copy_partitions.py --remote sc://127.0.0.1:15002 ...
spark-connect-up: $(VENV)/.installed
	@$(PYTHON) stack/spark_cluster.py connect-up

spark-connect-down:
	@$(PYTHON) stack/spark_cluster.py connect-down

# Every JVM a test target starts (brokers, Connect workers, ZooKeeper, Spark, and the Maven that
# resolves jars) compiles with C1 only (the java launcher reads JDK_JAVA_OPTIONS): they live minutes
# and carry test-sized loads, and C2's compiler threads were much of their CPU on this 2-core machine
# (a local Spark job: 14.3 CPU-s with C2, 8.3 with C1 only). The README's demo and the benchmarks keep
# the JVM's default, as a user's clusters would run.
TEST_JVM_OPTIONS ?= -XX:TieredStopAtLevel=1
test test-secure test-compat test-faults test-chaos test-bad-input test-unit: export JDK_JAVA_OPTIONS = $(TEST_JVM_OPTIONS)

# Starts whatever part of the stack is not running, runs pytest, stops only what it started. The tests
# run in PYTEST_WORKERS processes side by side (pytest-xdist): those that share a stack profile (the
# fault tests' multi-broker stack, the secure and compat profiles) or servers on fixed ports run in
# one of them, one after another, and every other module runs whole in one (the groups in tests/conftest.py,
# handed out longest first)
PYTEST_WORKERS ?= 2
test: install
	@$(STACK) run -- $(VPY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# The secure profile's tests: starts the secure stack (what it starts, it stops), runs them, and
# prints one JSON line of what they showed (tests/secure/summary.py).
test-secure: install
	@rm -f test-artifacts/secure-results.jsonl
	@KMIGRATE_SECURE_RESULTS=$(CURDIR)/test-artifacts/secure-results.jsonl $(VPY) -m pytest tests/secure \
	  tests/dags/test_secure_migration.py $(PYTEST_ARGS); status=$$?; \
	  $(VPY) -m tests.secure.summary test-artifacts/secure-results.jsonl || status=1; exit $$status

# Whole migrations through the kafka_migration DAG between Kafka versions (tests/dags/test_compat_migration.py):
# the compat profile for each of COMPAT_VERSIONS in turn (SOURCE, to a 4.3.1 target, or SOURCE:TARGET; what
# it starts, it stops); a JSON line a pair, then one JSON object with each pair's partitions, groups and
# connectors, equal, exact and resumed.
COMPAT_VERSIONS ?= 2.8.2,3.9.1,4.3.1,4.4.0,4.3.1:4.4.0
test-compat: install
	@rm -f test-artifacts/compat-results.jsonl
	@KMIGRATE_COMPAT_VERSIONS=$(COMPAT_VERSIONS) KMIGRATE_COMPAT_RESULTS=$(CURDIR)/test-artifacts/compat-results.jsonl \
	  $(VPY) -m pytest tests/dags/test_compat_migration.py $(PYTEST_ARGS); \
	  status=$$?; $(VPY) -m tests.dags.compat_summary test-artifacts/compat-results.jsonl || status=1; exit $$status

# The fault matrix on 3-broker clusters (tests/faults): starts the multi-broker stack (what it starts,
# it stops), runs the tests, and prints one JSON line: faults shown, passed, records compared, mismatches.
# A real Prometheus scraping the mirror's exporter, the shipped alert rules and dashboard queries
# (tests/integration/test_prometheus.py, in the suite too); ends in one JSON line.
test-metrics: install stack-up
	@rm -f test-artifacts/metrics-results.jsonl
	@KMIGRATE_METRICS_RESULTS=$(CURDIR)/test-artifacts/metrics-results.jsonl $(VPY) -m pytest \
	  tests/integration/test_prometheus.py tests/unit/test_alert_rules.py $(PYTEST_ARGS); status=$$?; \
	  $(VPY) -m tests.integration.prometheus_summary test-artifacts/metrics-results.jsonl || status=1; exit $$status

test-faults: install
	@rm -f test-artifacts/fault-results.jsonl
	@KMIGRATE_FAULT_RESULTS=$(CURDIR)/test-artifacts/fault-results.jsonl $(VPY) -m pytest tests/faults $(PYTEST_ARGS); \
	  status=$$?; $(VPY) -m tests.faults.summary test-artifacts/fault-results.jsonl || status=1; exit $$status

# Seeded runs of the copy contract against a live source (tests/chaos): SEEDS seeds from FIRST_SEED,
# each pre-copy rounds at random moments while producers write, then the cutover, every partition
# compared with the source and a model of what the producers were told; the last line is one JSON
# object (tests/chaos/summary.py). `make test` runs seeds 0-4; this target also the regression seeds.
SEEDS ?= 5
FIRST_SEED ?= 0
test-chaos: install
	@rm -f test-artifacts/chaos-results.jsonl
	@KMIGRATE_CHAOS_SEEDS=$(SEEDS) KMIGRATE_CHAOS_FIRST_SEED=$(FIRST_SEED) KMIGRATE_CHAOS_REGRESSION=1 \
	  KMIGRATE_CHAOS_RESULTS=$(CURDIR)/test-artifacts/chaos-results.jsonl \
	  $(STACK) run -- $(VPY) -m pytest tests/chaos -q $(PYTEST_ARGS); \
	  status=$$?; $(VPY) -m tests.chaos.summary test-artifacts/chaos-results.jsonl || status=1; exit $$status

# Bad input against the real stack (tests/badinput): each kind of malformed param, file, config or
# answer must end in a clear error naming it before anything is written or stopped; the last line is
# one JSON object: tried, clear_errors, tracebacks (0), written_before_refusal (0).
test-bad-input: install
	@rm -f test-artifacts/bad-input-results.jsonl
	@KMIGRATE_BAD_INPUT_RESULTS=$(CURDIR)/test-artifacts/bad-input-results.jsonl \
	  $(STACK) run -- $(VPY) -m pytest tests/badinput -q $(PYTEST_ARGS); \
	  status=$$?; $(VPY) -m tests.badinput.summary test-artifacts/bad-input-results.jsonl || status=1; exit $$status

# The tests of every folder that need no service: no Kafka, no JVM, no Airflow database (those with none
# of the markers tests/conftest.py sets from tests/support/needs.py).
test-unit: $(VENV)/.installed
	$(VPY) -m pytest tests -m "not (stack or secure or multi_broker or compat or airflow or spark or browser)" $(PYTEST_ARGS)

# A whole migration of a mixed workload through the kafka_migration DAG (stack/demo.py), its Spark
# jobs on a Spark Connect server started beside the stack: no Spark application starts inside the
# cutover window (the demo's downtime: 8.5 s, against 18.1 s with spark-submit, measured 2026-11-23).
demo: install stack-up spark-connect-up
	$(VPY) stack/demo.py --spark-remote $(SPARK_CONNECT_URL)

# Copier throughput against a plain producer ceiling, alignment speed, and the copy on the secure stack
# beside PLAINTEXT (bench/bench_copy.py); the last line is JSON.
bench-copy: install stack-up
	@$(MAKE) --no-print-directory stack-up SECURE=1
	$(VPY) bench/bench_copy.py

# What the one-writer lease costs a partition copy, and a new process's read of the claims log
# (bench/bench_claims.py); the last line is JSON.
bench-claims: install stack-up
	$(VPY) bench/bench_claims.py $(BENCH_ARGS)

# The Spark copy job against the bare copier, sequential and in a process pool (bench/bench_spark.py).
bench-spark: install stack-up
	$(VPY) bench/bench_spark.py

# MirrorMaker 2 against this project's copy, one run on the same clusters (bench/bench_mm2.py);
# writes docs/BENCHMARKS.md and docs/bench_mm2.png. BENCH_ARGS=--quick for a small run.
bench-mm2: install stack-up
	$(VPY) bench/bench_mm2.py $(BENCH_ARGS)

# The cutover window at two sizes of the same migration (about 160 MB and 1.3 GB of values), a writer
# live during the pre-copy, on a Spark Connect server (bench/bench_cutover.py); the last line is JSON.
bench-cutover: install stack-up airflow-up
	$(VPY) bench/bench_cutover.py $(BENCH_ARGS)

# This project's continuous mirror and MirrorMaker 2 side by side on a live source (5 MB/s, 24
# partitions, 5 minutes), then a planned failover, both through the scheduler of airflow-up.
bench-dr: install stack-up airflow-up
	$(VPY) bench/bench_dr.py $(BENCH_ARGS)

# Many small partitions (default 2,000 over 40 topics) against MirrorMaker 2, and the growth from N/4 to
# N partitions (bench/bench_scale.py); writes docs/BENCHMARKS.md, the last line is JSON.
# BENCH_ARGS=--partitions 400 for a smaller run.
# BROKERS=2 runs it on the multi-broker profile with one replica a partition: a Kafka broker keeps a file
# open for each partition, so 20,000 partitions need two brokers a cluster where a process may open 20,000.
bench-scale: install stack-up
	BENCH_BROKERS=$(BROKERS) $(VPY) bench/bench_scale.py $(BENCH_ARGS)

# The cutover window's steps on the target topics (what the source changed, the copy's settings put back)
# at 400 topics, one topic at a time against all together (bench/bench_topic_steps.py); the last line is JSON.
bench-topic-steps: install stack-up
	$(VPY) bench/bench_topic_steps.py $(BENCH_ARGS)

# The continuous mirror over 10,000 idle partitions and bench-dr's 24 busy ones at 5 MB/s: the busy ones'
# lag, the mirror's CPU while all is idle, its statuses and fetch sessions (bench/bench_mirror_scale.py)
bench-mirror-scale: install stack-up
	BENCH_BROKERS=$(BROKERS) $(VPY) bench/bench_mirror_scale.py $(BENCH_ARGS)

# Applications moved one at a time onto a running mirror's DR cluster (consumers first, then producers)
# while the others keep running on the source, 2 MB/s over 24 partitions, every DAG through the scheduler
# of airflow-up; then the same workload's big-bang window (bench/bench_incremental.py); the last line is JSON.
bench-incremental: install stack-up airflow-up
	$(VPY) bench/bench_incremental.py $(BENCH_ARGS)

# The mirror's copy alone under bench-dr's load, for several settings one after another (docs/BENCHMARKS.md)
bench-mirror-lag: install stack-up
	$(VPY) bench/bench_mirror_lag.py $(BENCH_ARGS)

constraints: | check-python
	rm -rf .cache/constraints-venv
	$(PYTHON) -m venv .cache/constraints-venv
	.cache/constraints-venv/bin/pip install -q -r requirements.txt
	( sed -n 1,2p constraints.txt; .cache/constraints-venv/bin/pip freeze ) > constraints.txt.new
	mv constraints.txt.new constraints.txt
