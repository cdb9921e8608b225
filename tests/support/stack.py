"""The project's folder, the one loader of stack/'s scripts by path (they are stdlib scripts, not
part of a package), and what the stack fixtures of tests/conftest.py hand to a test."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from kmigrate.claims import log as claims_log
from kmigrate.config import ClusterConfig
from kmigrate.kafka import leaders, pool, records
from kmigrate.kafka.connect import ConnectClient

PROJECT_DIR = Path(__file__).resolve().parents[2]
STACK_DIR = PROJECT_DIR / "stack"


def load_by_path(path: Path, name: str) -> ModuleType:
    """The script at `path` as module `name`, loaded once: registered in sys.modules before it runs,
    since dataclasses look their module up there while a class is built."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_stack_module() -> ModuleType:
    """stack/stack.py: installs, starts and stops the local clusters."""
    return load_by_path(STACK_DIR / "stack.py", "kmigrate_stack")


def load_spark_cluster_module() -> ModuleType:
    """stack/spark_cluster.py: a Spark standalone cluster or a Spark Connect server from the pinned pyspark."""
    return load_by_path(STACK_DIR / "spark_cluster.py", "kmigrate_spark_cluster")


def close_pooled_clients() -> None:
    """This process's pooled clients (admins, record readers, raw connections, the claims log's): closed before the
    clusters they talk to stop, so that they do not keep reconnecting to them, nor meet the next
    stack on the same ports."""
    pool.admins.close_all()
    records.readers.close_all()
    leaders.connections.close_all()
    claims_log.close_all()


@dataclasses.dataclass(frozen=True)
class Stack:
    source: ClusterConfig
    target: ClusterConfig
    source_connect: ConnectClient
    target_connect: ConnectClient
    state_dir: Path


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
