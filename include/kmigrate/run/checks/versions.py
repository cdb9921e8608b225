"""What the clusters and Connect workers of a run are, and which method each step uses with them:
named by the preflight (the plan a dry run shows) and by the migration report."""
from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.transport import Transport, Unsupported
from kmigrate.kafka.wire import BrokerConnection
from kmigrate.run.connectors import old_connect

log = logging.getLogger(__name__)

API_VERSIONS = 18
# The requests a run makes of each side that are newer than Kafka 2.1, with the release that added
# them: {api key: (lowest version needed, what it is for, Kafka release)}.
NEEDS = {
    "source": {1: (11, "Fetch v11 (whole batches read with their transaction state)", "2.3"),
               60: (0, "DescribeCluster (the cluster's id and the principal's rights)", "2.8")},
    "target": {0: (7, "Produce v7 (whole batches written at their offsets)", "2.1"),
               60: (0, "DescribeCluster (the cluster's id and the principal's rights)", "2.8"),
               44: (0, "IncrementalAlterConfigs (the copy's topic settings)", "2.3")},
}

COPY = ("whole batches: Fetch v11 from the source, Produce v7 to the target; other partitions record by record "
        "through the Kafka clients")
GROUPS = "OffsetFetch on the source, OffsetCommit (AlterConsumerGroupOffsets) on the target"
STOP = "PUT /connectors/{name}/stop (STOPPED, KIP-875)"
PAUSE = ("PUT /connectors/{name}/pause: Connect {version} has no STOPPED state; a paused task commits what it "
         "has not yet committed at the worker's next offset flush, within the quiesce window when that is long enough")
ON_TARGET = ("POST /connectors created STOPPED (KIP-980), PATCH /connectors/{name}/offsets (KIP-875), then resumed "
             "in the state each had on the source")


def kafka_release(admin: ClusterAdmin) -> str:
    """How the cluster's brokers run, from one broker's configs: "ZooKeeper, inter.broker.protocol.version
    2.8-IV1", "KRaft, ..."; "unknown (...)" when the broker's configs cannot be read."""
    try:
        node = admin.client.describe_cluster(request_timeout=admin.timeout_s).result(timeout=admin.timeout_s).nodes[0]
        resource = ConfigResource(ConfigResource.Type.BROKER, str(node.id))
        entries = admin.client.describe_configs([resource], request_timeout=admin.timeout_s)[resource].result(
            timeout=admin.timeout_s)
    except (KafkaException, IndexError) as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else type(exc).__name__
        return f"unknown (a broker's configs could not be read: {reason})"
    values = {name: entry.value for name, entry in entries.items() if entry.value}
    mode = "ZooKeeper" if values.get("zookeeper.connect") else "KRaft"
    protocol = values.get("inter.broker.protocol.version")
    return f"{mode}, inter.broker.protocol.version {protocol}" if protocol else f"{mode} (Kafka 4.0 or later)"


def api_versions(cluster: ClusterConfig) -> dict[int, tuple[int, int]] | None:
    """{api key: (min, max)} a bootstrap broker of the cluster supports (ApiVersions v0), or None
    when the raw connection cannot honour the cluster's settings (then librdkafka's own errors speak)."""
    try:
        transport = Transport.of(cluster)
    except Unsupported as exc:
        log.info("%s: API versions not checked (%s)", cluster.name, exc)
        return None
    for host, port in cluster.addresses:  # the first that answers (each host:port, ConfigError otherwise)
        address = f"{host}:{port}"
        try:
            with BrokerConnection(host, port, timeout_s=10, transport=transport) as conn:
                conn.send(API_VERSIONS, 0, b"")
                _, data = conn.receive()
            break
        except OSError as exc:
            log.info("%s: %s did not answer ApiVersions (%s)", cluster.name, address, exc)
    else:
        return None  # none answered: the reachability checks that follow name the problem
    error, count = struct.unpack_from(">hi", data, 0)
    if error:
        return None
    return {key: (low, high) for key, low, high in struct.iter_unpack(">hhh", data[6:6 + 6 * count])}


def check_apis(cluster: ClusterConfig, role: str) -> None:
    """The cluster's brokers answer the requests a run makes of the `role` side (NEEDS); else a
    ConfigError naming each missing one and the Kafka release that has it. Read-only."""
    supported = api_versions(cluster)
    if supported is None:
        return
    missing = [(what, release) for key, (version, what, release) in NEEDS[role].items()
               if key not in supported or supported[key][1] < version]
    if missing:
        raise ConfigError(
            f"the {role} cluster ({cluster.bootstrap_servers}) does not answer "
            + "; ".join(f"{what}, which Kafka {release} added" for what, release in missing)
            + f". Its brokers are older than this project supports as a {role} (Kafka 2.8 or later as a source, "
            "the target tested on 4.3.1 and 4.4.0); nothing was stopped or written")


def check_workers(source_connect: ConnectClient, target_connect: ConnectClient, infos: Mapping[str, Mapping[str, Any]],
                  source: ClusterAdmin) -> None:
    """The target worker can take the connectors (Kafka 3.7 or later), and an old source worker's
    offsets can be found (its offsets topic, when a source connector is selected). Read-only."""
    if not target_connect.creates_stopped:
        raise ConfigError(
            f"the target Kafka Connect at {target_connect.url} runs {target_connect.worker_version}: creating a "
            "connector STOPPED and writing its offsets need Kafka Connect 3.7 or later (KIP-980, KIP-875). Upgrade "
            "the target workers, or select no connectors and move them by hand. Nothing was stopped or written")
    if not source_connect.has_offsets_api and any(i["type"] == "source" for i in infos.values()):
        old_connect.offsets_topic(source, source_connect)


def methods(source: ClusterAdmin, target: ClusterAdmin, source_connect: ConnectClient | None,
            target_connect: ConnectClient | None, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Versions and the method of each step, for the plan."""
    out: dict[str, Any] = {"source_kafka": kafka_release(source), "target_kafka": kafka_release(target),
                           "copy": COPY, "groups": GROUPS}
    if infos and source_connect is not None and target_connect is not None:
        legacy = not source_connect.has_offsets_api
        out.update({
            "source_connect": source_connect.worker_version, "target_connect": target_connect.worker_version,
            "stop_connectors": PAUSE.format(name="{name}", version=source_connect.worker_version) if legacy else STOP,
            "connector_offsets": _offsets_from(source, source_connect, infos),
            "connectors_on_target": ON_TARGET,
        })
    return out


def _offsets_from(source: ClusterAdmin, connect: ConnectClient, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    if connect.has_offsets_api:
        return {name: f"GET /connectors/{name}/offsets" for name in infos}
    topic = (old_connect.offsets_topic(source, connect) if any(i["type"] == "source" for i in infos.values())
             else None)
    return {name: f"offsets topic {topic}" if info["type"] == "source"
            else f"consumer group {old_connect.sink_group(name, info['config'])}" for name, info in infos.items()}


def report_lines(snapshot: Mapping[str, Any]) -> list[str]:
    """The report's lines on versions and methods, from the snapshot."""
    versions = snapshot.get("versions", {})
    lines = [f"- Source Kafka: {versions.get('source_kafka', 'not recorded')}",
             f"- Copy: {COPY}", f"- Consumer groups: {GROUPS}"]
    connectors = snapshot.get("connectors", {})
    if connectors:
        workers = sorted({c.get("worker", "?") for c in connectors.values()})
        paused = any(c.get("stopped_by") == "pause" for c in connectors.values())
        lines += [f"- Source Connect: {', '.join(workers)}",
                  "- Stopping connectors: " + (PAUSE.format(name="{name}", version=", ".join(workers)) if paused else STOP),
                  "- Connector offsets read from: " + "; ".join(
                      f"{name}: {c.get('offsets_from', 'GET /connectors/' + name + '/offsets')}"
                      for name, c in sorted(connectors.items())),
                  f"- Connectors on the target: {ON_TARGET}"]
    return lines
