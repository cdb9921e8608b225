"""Shared fixtures: the local Kafka stack and its secure profile (each used if running, started
otherwise; what a fixture starts it stops again, by pid, at the end of the session), unique names,
and the local Airflow of the DAG and bad-input tests. Their helpers are in tests/support/."""
from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.kafka.connect import ConnectClient

from tests.support.stack import PROJECT_DIR, SecureStack, Stack, close_pooled_clients, load_stack_module


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The two local clusters with their Connect workers. Services already running are used
    as they are; those this fixture starts, it stops again (by pid) at the end of the session."""
    stack_mod = load_stack_module()
    state_dir = Path(os.environ.get("KMIGRATE_STACK_DIR", stack_mod.DEFAULT_STATE_DIR)).resolve()
    clusters = stack_mod.DEFAULT_CLUSTERS
    started = stack_mod.up(clusters, state_dir, timeout_s=180)
    source, target = clusters
    try:
        yield Stack(
            source=ClusterConfig.from_bootstrap("source", source.bootstrap),
            target=ClusterConfig.from_bootstrap("target", target.bootstrap),
            source_connect=ConnectClient(source.connect_url),
            target_connect=ConnectClient(target.connect_url),
            state_dir=state_dir,
        )
    finally:
        close_pooled_clients()
        for service in reversed(started):
            stack_mod.stop(service)


@pytest.fixture(scope="session")
def secure_stack() -> Iterator[SecureStack]:
    stack_mod = load_stack_module()
    state_dir = Path(os.environ.get("KMIGRATE_SECURE_STACK_DIR", stack_mod.SECURE_STATE_DIR)).resolve()
    clusters = stack_mod.SECURE_CLUSTERS
    started = stack_mod.up(clusters, state_dir, timeout_s=180, secure=True)
    security = stack_mod.prepare_security(state_dir)
    try:
        yield SecureStack(
            security=security, clusters=clusters,
            source_connect=ConnectClient(f"https://localhost:{clusters[0].connect_port}", auth=security.connect_auth,
                                         verify=str(security.ca)),
            target_connect=ConnectClient(f"https://localhost:{clusters[1].connect_port}", auth=security.connect_auth,
                                         verify=str(security.ca)),
            state_dir=state_dir,
        )
    finally:
        close_pooled_clients()
        for service in reversed(started):
            stack_mod.stop(service)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """The local Airflow's database, migrated once a session; its folder removed afterwards. Its
    environment was set when tests/dags/conftest.py or tests/badinput/conftest.py imported
    tests/support/airflow.py, before their test modules imported Airflow."""
    from tests.support.airflow import AIRFLOW_HOME, local

    local.migrate_db(AIRFLOW_HOME)
    yield AIRFLOW_HOME
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_DIR / "dags"))


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/connector name no other test (or earlier run) uses: test name + random suffix."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-").lower()[:60]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"integration", "secure", "faults", "chaos"} & set(item.path.parts):
            item.add_marker(pytest.mark.stack)
