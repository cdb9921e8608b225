"""Shared fixtures: the local Kafka stack and its secure profile (each used if running, started
otherwise; what a fixture starts it stops again, by pid, at the end of the session), unique names,
and the local Airflow of the DAG and bad-input tests. Their helpers are in tests/support/. Each test
is marked with what it needs (tests/support/needs.py) and put in its pytest-xdist group."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.kafka.connect import ConnectClient

from tests.support.needs import needs
from tests.support.stack import PROJECT_DIR, SecureStack, Stack, close_pooled_clients, load_stack_module

# Airflow puts its plugins folder on sys.path; the tests of plugins/kmigrate_airflow import it the same way
if str(PROJECT_DIR / "plugins") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "plugins"))

try:
    from _pytest.nodeid import NodeId  # pytest 9: a node's structured id
except ImportError:  # an older pytest, whose node ids pytest-xdist marks itself
    NodeId = None


@contextlib.contextmanager
def services_up(stack_mod: Any, clusters: tuple, state_dir: str | Path, **up_options: Any) -> Iterator[Path]:
    """The services of `clusters` up (stack.py's `up`): those already running used as they are, those
    started here stopped again (by pid) at the end. Yields the state folder."""
    state_dir = Path(state_dir).resolve()
    started = stack_mod.up(clusters, state_dir, timeout_s=180, **up_options)
    try:
        yield state_dir
    finally:
        close_pooled_clients()
        for service in reversed(started):
            stack_mod.stop(service)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The two local clusters with their Connect workers."""
    stack_mod = load_stack_module()
    source, target = clusters = stack_mod.DEFAULT_CLUSTERS
    state = os.environ.get("KMIGRATE_STACK_DIR", stack_mod.DEFAULT_STATE_DIR)
    with services_up(stack_mod, clusters, state) as state_dir:
        yield Stack(
            source=ClusterConfig.from_bootstrap("source", source.bootstrap),
            target=ClusterConfig.from_bootstrap("target", target.bootstrap),
            source_connect=ConnectClient(source.connect_url),
            target_connect=ConnectClient(target.connect_url),
            state_dir=state_dir,
        )


@pytest.fixture(scope="session")
def secure_stack() -> Iterator[SecureStack]:
    """The secure profile's clusters (SASL_SSL, mutual TLS, ACLs) and HTTPS Connect workers."""
    stack_mod = load_stack_module()
    clusters = stack_mod.SECURE_CLUSTERS
    state = os.environ.get("KMIGRATE_SECURE_STACK_DIR", stack_mod.SECURE_STATE_DIR)
    with services_up(stack_mod, clusters, state, secure=True) as state_dir:
        security = stack_mod.prepare_security(state_dir)
        urls = [f"https://localhost:{cluster.connect_port}" for cluster in clusters]
        yield SecureStack(
            security=security, clusters=clusters,
            source_connect=ConnectClient(urls[0], auth=security.connect_auth, verify=str(security.ca)),
            target_connect=ConnectClient(urls[1], auth=security.connect_auth, verify=str(security.ca)),
            state_dir=state_dir,
        )


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """The local Airflow's database, migrated once a session; its folder removed afterwards. Its
    environment was set when tests/dags/conftest.py or tests/badinput/conftest.py imported
    tests/support/airflow.py, before their test modules imported Airflow."""
    from tests.support.airflow import AIRFLOW_HOME, local

    local.migrate_db(AIRFLOW_HOME)
    yield AIRFLOW_HOME
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


# The DAG runs' Spark jobs go to a Spark Connect server of this test process's own (one an xdist
# worker, on ports of its own), as spark_connect_default: a job is then a Python client of a warm
# server, not a spark-submit that starts a JVM (measured: a mixed-workload migration and its rerun
# took 72 s so, 108 s with spark-submit). The tests of the spark-submit path pass
# spark_connect_conn_id=None; tests/integration/test_spark_jobs.py runs the jobs under spark-submit.
DAG_SPARK_PORT, DAG_SPARK_UI_PORT = 30402, 30440


@pytest.fixture(scope="session")
def dag_spark_server(tmp_path_factory) -> Iterator[str]:
    """The DAG runs' Spark Connect server (local[4,4]), started here and stopped by pid at the end."""
    from tests.support.spark import airflow_connect_server

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = 2 * int(worker[2:] or 0) if worker.startswith("gw") else 0
    port, ui_port = DAG_SPARK_PORT + offset, DAG_SPARK_UI_PORT + offset
    with airflow_connect_server(tmp_path_factory.mktemp("dag-spark"), "local[4,4]", port, ui_port,
                                "spark_connect_default", memory="2g"):
        yield f"sc://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def dagbag(airflow_db, dag_spark_server):
    """The DAG files parsed, for DAG runs: the database and Spark server of those runs up."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_DIR / "dags"))


@pytest.fixture(scope="session")
def dag_files():
    """The DAG files parsed, to read the DAGs (`.dags[dag_id]`; get_dag asks the database): parsing
    needs no Airflow database nor Spark server."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_DIR / "dags"))


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/connector name no other test (or earlier run) uses: test name + random suffix."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-").lower()[:60]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


# Tests that share a stack profile or a server on fixed ports run in one group: under `pytest -n N
# --dist loadgroup` (make test) a group runs on one worker, one test after another, so that two
# workers never start the same services. Every other test module is a group of its own: its
# module-scoped fixtures start once.
SHARED = {
    "multi-stack": lambda item: item.path.relative_to(PROJECT_DIR).parts[:2] == ("tests", "faults"),
    "secure-stack": lambda item: "secure_stack" in item.fixturenames,
    "compat-stack": lambda item: "compat_stack" in item.fixturenames,
    "stack-profiles": lambda item: item.path.relative_to(PROJECT_DIR).parts[:2] == ("tests", "stack"),
    "spark-servers": lambda item: item.path.name in ("test_spark_jobs.py", "test_spark_connect.py"),
}


# The groups that take longest, longest first, by their worker-seconds in a full run of the suite
# (2026-11-28, the JVMs on C1 only; spark-servers from a run of its own after its jobs' refusals moved
# to the Spark Connect server). The items are ordered so, and make test keeps that order
# (--no-loadscope-reorder; pytest-xdist would otherwise hand out the groups with the most tests first):
# a worker that starts a long group last keeps the suite waiting.
LONGEST = {"multi-stack": 714, "secure-stack": 199, "tests/dags/test_dr_unplanned.py": 390,
           "spark-servers": 171, "tests/dags/test_source_changes.py": 148, "tests/dags/test_kafka_migration.py": 98,
           "tests/dags/test_dr_mirror.py": 95, "tests/chaos/test_chaos.py": 93, "tests/dags/test_trigger_form.py": 60,
           "tests/integration/test_copier.py": 60, "tests/dags/test_streams_migration.py": 59, "compat-stack": 57,
           "tests/dags/test_cutover_course.py": 39, "tests/integration/test_mirror_in_step.py": 30,
           "tests/dags/test_dr_drill.py": 29}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        for name in sorted(needs(item.path, item.fixturenames)):
            item.add_marker(name)
        group = next((name for name, member in SHARED.items() if member(item)), None)
        group = groups[id(item)] = group or str(item.path.relative_to(PROJECT_DIR))
        item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and NodeId is not None:
            # pytest-xdist 3.8 marks the group in the node id by setting `_nodeid`, which pytest 9 no longer
            # reads (a node's id is `_id`): without this, --dist loadgroup spreads a group over the workers
            item._id = NodeId.parse(f"{item.nodeid}@{group}")
    items.sort(key=lambda item: -LONGEST.get(groups[id(item)], 0))  # stable: a group's own order kept


BROKER_LOG_LINES = 30


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed test of a stack's clusters carries the warnings and errors its brokers logged lately:
    a failure in CI (a broker fenced, a topic without a leader) is then read from CI's output."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for name in ("stack", "secure_stack"):
        used = getattr(item, "funcargs", {}).get(name)
        if used is None:
            continue
        for log in sorted(Path(used.state_dir).glob("*-kafka*/logs/server.log")):
            lines = broker_log_tail(log)
            if lines:
                report.sections.append((f"{log.parent.parent.name} warnings and errors (last {len(lines)})",
                                        "\n".join(lines)))


def broker_log_tail(log: Path, window: int = 512 * 1024) -> list[str]:
    """The last BROKER_LOG_LINES WARN and ERROR lines of the last `window` bytes of a broker's log."""
    with contextlib.suppress(OSError), open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - window))
        text = f.read().decode("utf-8", "replace")
        return [line for line in text.splitlines() if " WARN " in line or " ERROR " in line][-BROKER_LOG_LINES:]
    return []
