"""The local stack's profiles: which clusters each runs, on which ports, of which Kafka version, and
where its state lives. The default profile (.stack/): a source and a target KRaft cluster with a
Connect worker each; secure (--secure, .stack-secure/): the same with SASL_SSL, mutual TLS and ACLs
(stack_security.py); multi-broker (--brokers N, .stack-multi/): N nodes a cluster, replicated like
production; compat (--source-version V, .stack-compat-V/; with --target-version T other than
the default, .stack-compat-V-to-T/): a source of another version, with ZooKeeper before 4.0. What each service of a cluster is started with: stack_settings.py. Standard library only."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from stack_common import PROJECT_DIR
from stack_install import KAFKA_VERSION, kafka_home

DEFAULT_STATE_DIR = PROJECT_DIR / ".stack"
SECURE_STATE_DIR = PROJECT_DIR / ".stack-secure"
MULTI_STATE_DIR = PROJECT_DIR / ".stack-multi"
COMPAT_STATE_DIR = PROJECT_DIR / ".stack-compat"  # + "-<version>", compat_state_dir


@dataclasses.dataclass(frozen=True)
class Cluster:
    name: str
    kafka_port: int
    controller_port: int
    connect_port: int
    brokers: int = 1  # combined broker+controller nodes; node n listens on kafka_port + 10 * (n - 1)
    version: str = KAFKA_VERSION  # before 4.0: a ZooKeeper cluster (ZooKeeper on controller_port)

    @property
    def zookeeper(self) -> bool:
        return int(self.version.split(".")[0]) < 4

    @property
    def home(self) -> Path:
        return kafka_home(self.version)

    def broker_port(self, node: int) -> int:
        return self.kafka_port + BROKER_PORT_STEP * (node - 1)

    def controller_port_of(self, node: int) -> int:
        return self.controller_port + BROKER_PORT_STEP * (node - 1)

    @property
    def nodes(self) -> range:
        return range(1, self.brokers + 1)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"localhost:{self.broker_port(n)}" for n in self.nodes)

    @property
    def connect_url(self) -> str:
        return f"http://localhost:{self.connect_port}"


DEFAULT_CLUSTERS = (
    Cluster("source", 19092, 19093, 18083),
    Cluster("target", 29092, 29093, 28083),
)
# the secure profile: kafka_port is the SASL_SSL listener, kafka_port + 2 the mutual-TLS one
SECURE_CLUSTERS = (
    Cluster("source", 19192, 19193, 18183),
    Cluster("target", 29192, 29193, 28183),
)
BROKER_PORT_STEP = 10


def compat_clusters(version: str, target_version: str = KAFKA_VERSION) -> tuple[Cluster, Cluster]:
    """The compat profile (`--source-version V`): a source of Kafka V (with ZooKeeper before 4.0) on
    19392 (ZooKeeper 19393, Connect 18383) and a KRaft target of `target_version` on 29392 (Connect 28383)."""
    return (Cluster("source", 19392, 19393, 18383, version=version),
            Cluster("target", 29392, 29393, 28383, version=target_version))


def compat_state_dir(version: str, target_version: str = KAFKA_VERSION) -> Path:
    """Where the compat profile of a source and target version keeps its state: a cluster formatted
    by one Kafka version may not start under another, so each pair has its own."""
    suffix = version if target_version == KAFKA_VERSION else f"{version}-to-{target_version}"
    return Path(f"{COMPAT_STATE_DIR}-{suffix}")


def multi_clusters(brokers: int) -> tuple[Cluster, Cluster]:
    """The multi-broker profile (`--brokers N`, N >= 2): each cluster's nodes are combined
    broker+controller KRaft nodes, source on 19292, 19302, ... and target on 29292, 29302, ..."""
    return (Cluster("source", 19292, 19293, 18283, brokers), Cluster("target", 29292, 29293, 28283, brokers))


def parse_cluster(text: str) -> Cluster:
    """NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT, e.g. source:19092:19093:18083."""
    try:
        name, kafka_port, controller_port, connect_port = text.split(":")
        return Cluster(name, int(kafka_port), int(controller_port), int(connect_port))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--cluster {text!r}: expected NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT"
        ) from None


def broker_name(cluster: Cluster, node: int) -> str:
    return f"{cluster.name}-kafka" if cluster.brokers == 1 else f"{cluster.name}-kafka-{node}"

