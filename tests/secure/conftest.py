"""The secure profile of the local stack (stack.py --secure): SASL_SSL and mutual-TLS listeners,
ACLs, HTTPS Connect workers with basic authentication. Used if running, started otherwise; what
this fixture starts it stops again (by pid) at the end of the session."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.kafka.connect import ConnectClient

from tests.conftest import load_stack_module


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
        for service in reversed(started):
            stack_mod.stop(service)
