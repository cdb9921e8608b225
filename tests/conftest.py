"""Shared fixtures: the local Kafka stack and its secure profile (each used if running, started
otherwise; what a fixture starts it stops again, by pid, at the end of the session) and unique names."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kmigrate import claims
from kmigrate.config import ClusterConfig
from kmigrate.kafka import leaders, pool, records
from kmigrate.kafka.connect import ConnectClient

PROJECT_DIR = Path(__file__).resolve().parent.parent


def load_stack_module():
    """stack/stack.py is a stdlib script, not part of the package; load it by path."""
    if "kmigrate_stack" in sys.modules:
        return sys.modules["kmigrate_stack"]
    spec = importlib.util.spec_from_file_location("kmigrate_stack", PROJECT_DIR / "stack" / "stack.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kmigrate_stack"] = module
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass(frozen=True)
class Stack:
    source: ClusterConfig
    target: ClusterConfig
    source_connect: ConnectClient
    target_connect: ConnectClient
    state_dir: Path


def close_pooled_clients() -> None:
    """This process's pooled clients (admins, record readers, raw connections, the claims log's): closed before the
    clusters they talk to stop, so that they do not keep reconnecting to them, nor meet the next
    stack on the same ports."""
    pool.admins.close_all()
    records.readers.close_all()
    leaders.connections.close_all()
    claims.close_all()


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


@dataclasses.dataclass(frozen=True)
class SecureStack:
    """The secure clusters; `admin` settings for seeding and checking, `migrator` ones for the run
    (Describe and Read only on the source)."""

    security: Any            # stack.Security: CA, certificates, passwords
    clusters: tuple[Any, Any]  # stack.Cluster source, target
    source_connect: ConnectClient
    target_connect: ConnectClient
    state_dir: Path

    def cluster(self, role: str, user: str = "migrator", method: str = "SCRAM-SHA-512") -> ClusterConfig:
        cluster = self.clusters[0 if role == "source" else 1]
        return ClusterConfig(role, self.security.client(cluster, user, method))

    @property
    def source(self) -> ClusterConfig:
        return self.cluster("source", "admin")

    @property
    def target(self) -> ClusterConfig:
        return self.cluster("target", "admin")

    def passwords(self) -> list[str]:
        """Every secret of the stack: Kafka users', the Connect REST user's, the keystore's."""
        return list(self.security.passwords.values())


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


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/connector name no other test (or earlier run) uses: test name + random suffix."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-").lower()[:60]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"integration", "secure", "faults", "chaos"} & set(item.path.parts):
            item.add_marker(pytest.mark.stack)
