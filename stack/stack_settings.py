"""What each service of the local stack is started with: the broker, ZooKeeper and Connect settings
of its profile (one broker or several, KRaft or ZooKeeper, plain or secure), written into its
configuration files, and the java command line that runs it. Standard library only."""
from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from stack_common import StackError
from stack_profiles import broker_name
from stack_security import (KAFKA_USERS, SCRAM_MECHANISMS, connect_jaas_file, secure_broker_settings,
                            secure_connect_settings)
from stack_services import Service, start

# Broker settings shared by every local cluster; docker-compose.yaml carries the same values
# (tests/test_compose.py compares them).
BROKER_SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.backoff.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "4",
}

CONNECT_SETTINGS: dict[str, str] = {
    "config.storage.topic": "_connect-configs",
    "offset.storage.topic": "_connect-offsets",
    "status.storage.topic": "_connect-status",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "config.storage.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "offset.flush.interval.ms": "1000",
    # plugins found through their ServiceLoader manifests only (every plugin Kafka ships has them):
    # the reflective scan of every jar took 18.7 s of a worker's 23 s start, measured
    "plugin.discovery": "service_load",
}

# the heaps Kafka's own start scripts give a broker (kafka-server-start.sh) and a Connect worker
# (connect-distributed.sh): a broker on half of it collected about twice as often under bench-dr's load,
# its young generation held at G1's floor (5% of the heap), and MirrorMaker 2's worker is compared
# on the heap it ships with
BROKER_HEAP = "-Xms1g -Xmx1g"
CONNECT_HEAP = "-Xms256m -Xmx2g"
JVM_FLAGS = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"


def multi_broker_settings(brokers: int) -> dict[str, str]:
    """What a production-like cluster of `brokers` nodes has beside BROKER_SETTINGS: replication
    factor 3 (or the node count) with min.insync.replicas 2 for topics and internal topics, and a
    short broker session so that a killed broker's partitions move within seconds. Leaders are not
    moved back automatically (`auto.leader.rebalance.enable`): the fault tests move them themselves."""
    replicas = str(min(3, brokers))
    isr = str(min(2, brokers))
    return {
        "default.replication.factor": replicas,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": isr,
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        "unclean.leader.election.enable": "false",
        "auto.leader.rebalance.enable": "false",
    }


def write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def write_log4j(service: Service) -> Path:
    path = service.dir / "log4j2.properties"
    logs = service.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "status = warn\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {logs / 'server.log'}\n"
        f"appender.file.filePattern = {logs / 'server.log.%i'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        "appender.file.policies.size.size = 50MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        "appender.file.strategy.max = 3\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "logger.reflections.name = org.reflections\n"
        "logger.reflections.level = ERROR\n"
    )
    return path


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64. Like Kafka's own, never one that begins
    with '-', which kafka-storage's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_command(java: str, service: Service, heap: str, main_class: str, *args: str,
                 jvm: tuple[str, ...] = (), gc_log: bool = False) -> list[str]:
    """`gc_log`: the JVM's collections logged to logs/gc.log, as Kafka's own start scripts log a
    broker's (the benchmarks read the pauses from it)."""
    log4j = write_log4j(service)
    if gc_log:
        (service.dir / "logs").mkdir(parents=True, exist_ok=True)
        jvm = (f"-Xlog:gc:file={service.dir / 'logs' / 'gc.log'}:time,uptime:filecount=3,filesize=10m", *jvm)
    classpath = str(service.cluster.home / "libs" / "*")
    return [
        java, *heap.split(), *JVM_FLAGS.split(), *jvm,
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={service.dir / 'logs'}",
        f"-Dkmigrate.service.dir={service.dir}",  # lets pid checks recognise our process
        "-cp", classpath, main_class, *args,
    ]


# A ZooKeeper-era broker (the compat profile's source): BROKER_SETTINGS without the KRaft ones.
ZK_BROKER_SETTINGS = {k: v for k, v in BROKER_SETTINGS.items()
                      if k not in ("process.roles", "node.id", "controller.listener.names") and not k.startswith("share.")}


def prepare_zookeeper(java: str, service: Service) -> list[str]:
    config = service.dir / "zookeeper.properties"
    write_properties(config, {"dataDir": str(service.dir / "data"), "clientPort": str(service.port),
                              "clientPortAddress": "localhost", "tickTime": "2000", "maxClientCnxns": "0",
                              "admin.enableServer": "false", "4lw.commands.whitelist": "ruok,stat"})
    return java_command(java, service, "-Xmx256m", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config))


def prepare_zk_kafka(java: str, service: Service) -> list[str]:
    props = service.dir / "server.properties"
    write_properties(props, {
        **ZK_BROKER_SETTINGS,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
        "broker.id": str(service.node),
        "zookeeper.connect": f"localhost:{service.cluster.controller_port}",
        "listeners": f"PLAINTEXT://localhost:{service.port}",
        "advertised.listeners": f"PLAINTEXT://localhost:{service.port}",
        "log.dirs": str(service.dir / "data"),
    })
    return java_command(java, service, BROKER_HEAP, "kafka.Kafka", str(props), gc_log=True)


def prepare_kafka(java: str, service: Service) -> list[str]:
    cluster, node = service.cluster, service.node
    if cluster.zookeeper:
        return prepare_zk_kafka(java, service)
    data_dir = service.dir / "data"
    props = service.dir / "server.properties"
    settings = {
        **BROKER_SETTINGS,
        **(multi_broker_settings(cluster.brokers) if cluster.brokers > 1 else {}),
        "node.id": str(node),
        "controller.quorum.voters": ",".join(f"{n}@localhost:{cluster.controller_port_of(n)}" for n in cluster.nodes),
        "listeners": f"PLAINTEXT://localhost:{service.port},CONTROLLER://localhost:{cluster.controller_port_of(node)}",
        "advertised.listeners": f"PLAINTEXT://localhost:{service.port}",
        "log.dirs": str(data_dir),
    }
    scram: list[str] = []
    if service.security:
        settings.update(secure_broker_settings(cluster, service.security))
        scram = [arg for user in KAFKA_USERS for mechanism in SCRAM_MECHANISMS
                 for arg in ("--add-scram", f"{mechanism}=[name={user},password={service.security.passwords[user]}]")]
    write_properties(props, settings)
    props.chmod(0o600)
    if not (data_dir / "meta.properties").exists():
        # every node of a cluster is formatted with the same id (kept beside the first node's data)
        cluster_id_file = service.state_dir / f"{broker_name(cluster, 1)}" / "cluster.id"
        cluster_id_file.parent.mkdir(parents=True, exist_ok=True)
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id())
        fmt = java_command(java, service, "-Xmx256m", "kafka.tools.StorageTool",
                           "format", f"--cluster-id={cluster_id_file.read_text().strip()}", "-c", str(props), *scram)
        result = subprocess.run(fmt, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"{service.name}: formatting {data_dir} failed: {(result.stderr or result.stdout).strip()}")
    return java_command(java, service, BROKER_HEAP, "kafka.Kafka", str(props), gc_log=True)


def prepare_connect(java: str, service: Service) -> list[str]:
    cluster = service.cluster
    props = service.dir / "connect-distributed.properties"
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": f"kmigrate-{cluster.name}-connect",
        **CONNECT_SETTINGS,
        "listeners": f"http://localhost:{cluster.connect_port}",
        "rest.advertised.host.name": "localhost",
        "rest.advertised.port": str(cluster.connect_port),
        "plugin.path": str(cluster.home / "plugins"),
    }
    if cluster.brokers > 1:
        replicas = str(min(3, cluster.brokers))
        settings.update({f"{kind}.storage.replication.factor": replicas for kind in ("config", "offset", "status")})
    jvm: tuple[str, ...] = ()
    if service.security:
        settings.update(secure_connect_settings(cluster, service.security))
        jvm = (f"-Djava.security.auth.login.config={connect_jaas_file(service.dir, service.security)}",)
    write_properties(props, settings)
    props.chmod(0o600)
    return java_command(java, service, CONNECT_HEAP, "org.apache.kafka.connect.cli.ConnectDistributed", str(props),
                        jvm=jvm, gc_log=True)


def launch(java: str, service: Service) -> subprocess.Popen:
    """Start `service` with the settings of its profile (its kind, cluster and security)."""
    prepare = {"zookeeper": prepare_zookeeper, "kafka": prepare_kafka, "connect": prepare_connect}[service.kind]
    return start(service, lambda: prepare(java, service))
