#!/usr/bin/env python3
"""Start, stop and inspect the local Kafka stack: two KRaft clusters, each with a Connect worker.

Standard library only, so it runs before the project's virtualenv exists. Every failure the
user can fix (a taken port, no java, Maven Central out of reach) ends in one line naming the
problem and the way out, exit status 2.

    python3 stack/stack.py install      # resolve the pinned Kafka jars into .cache/ (offline once cached)
    python3 stack/stack.py up           # start what is not running, wait until each service answers
    python3 stack/stack.py status
    python3 stack/stack.py down [--wipe]
    python3 stack/stack.py run -- CMD    # up, run CMD, stop only what this call started

With --secure (state in .stack-secure/, other ports) the same two clusters authenticate and
authorize every client: a SASL_SSL listener (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN users), an SSL
listener that requires a client certificate, KRaft's StandardAuthorizer with ACLs, and Connect
workers whose REST API is HTTPS with basic authentication. The CA, certificates (openssl) and
random passwords are made at the first start, owner-only, under .stack-secure/secure/; the
`migrator` user may only Describe and Read on the source and may write the target. Creating the
ACLs needs the project's virtualenv (confluent-kafka): `make stack-up SECURE=1` runs it there.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
POM = PROJECT_DIR / "stack" / "pom.xml"
KAFKA_VERSION = "4.3.1"
CACHE_DIR = Path(os.environ.get("KMIGRATE_CACHE_DIR", PROJECT_DIR / ".cache"))
KAFKA_HOME = CACHE_DIR / f"kafka-{KAFKA_VERSION}"
# Older sources the compat profile starts (`--source-version`): ZooKeeper-era brokers and Connect of
# that version, from Maven Central like the rest; the target stays KAFKA_VERSION on KRaft.
SOURCE_VERSIONS = ("4.3.1", "3.9.1", "2.8.2")
COMPAT_STATE_DIR = PROJECT_DIR / ".stack-compat"  # + "-<version>"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
DEFAULT_STATE_DIR = PROJECT_DIR / ".stack"
SECURE_STATE_DIR = PROJECT_DIR / ".stack-secure"
BASIC_AUTH_EXTENSION = "connect-basic-auth-extension"

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
}

BROKER_HEAP = "-Xms128m -Xmx512m"
CONNECT_HEAP = "-Xms128m -Xmx512m"
JVM_FLAGS = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"


class StackError(Exception):
    """A problem the user can fix; its message names it and the way out."""


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
MULTI_STATE_DIR = PROJECT_DIR / ".stack-multi"


def kafka_home(version: str) -> Path:
    return CACHE_DIR / f"kafka-{version}"


def compat_clusters(version: str) -> tuple[Cluster, Cluster]:
    """The compat profile (`--source-version V`): a source of Kafka V (with ZooKeeper before 4.0) on
    19392 (ZooKeeper 19393, Connect 18383) and a KAFKA_VERSION KRaft target on 29392 (Connect 28383)."""
    return (Cluster("source", 19392, 19393, 18383, version=version), Cluster("target", 29392, 29393, 28383))


def multi_clusters(brokers: int) -> tuple[Cluster, Cluster]:
    """The multi-broker profile (`--brokers N`, N >= 2): each cluster's nodes are combined
    broker+controller KRaft nodes, source on 19292, 19302, ... and target on 29292, 29302, ..."""
    return (Cluster("source", 19292, 19293, 18283, brokers), Cluster("target", 29292, 29293, 28283, brokers))


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


def parse_cluster(text: str) -> Cluster:
    """NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT, e.g. source:19092:19093:18083."""
    try:
        name, kafka_port, controller_port, connect_port = text.split(":")
        return Cluster(name, int(kafka_port), int(controller_port), int(connect_port))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--cluster {text!r}: expected NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT"
        ) from None


# --------------------------------------------------------------------------- install


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError(
            "java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    return found


def check_java() -> str:
    java = java_binary()
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    text = out.stderr + out.stdout
    try:
        quoted = text.split('"')[1]
        major = int(quoted.split(".")[0])
    except (IndexError, ValueError):
        raise StackError(f"{java} -version printed no version; install a Java 17+ runtime or set JAVA_HOME") from None
    if major < 17:
        raise StackError(f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java 17+: install one or set JAVA_HOME")
    return java


def maven_settings_args(workdir: Path) -> list[str]:
    """KMIGRATE_MAVEN_MIRROR (a repository URL) replaces Maven Central, e.g. a company mirror."""
    mirror = os.environ.get("KMIGRATE_MAVEN_MIRROR")
    if not mirror:
        return []
    settings = workdir / "maven-settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>kmigrate-mirror</id><mirrorOf>*</mirrorOf>"
        f"<url>{mirror}</url></mirror></mirrors></settings>\n"
    )
    return ["-s", str(settings)]


def installed_marker(home: Path = KAFKA_HOME) -> Path:
    return home / ".complete"


def install(home: Path = KAFKA_HOME, version: str = KAFKA_VERSION) -> Path:
    """Resolve the broker (with ZooKeeper before 4.0), Connect runtime and plugins of Kafka `version`
    into `home`; a no-op once complete."""
    if installed_marker(home).exists():
        return home
    check_java()
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("mvn not found: install Apache Maven (Debian: apt-get install maven)")
    repo = CACHE_DIR / "m2"
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"stack: resolving Apache Kafka {version} from Maven Central into {home} ...", flush=True)
    base = [mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={repo}", f"-Dkafka.version={version}",
            *maven_settings_args(partial)]
    steps = [
        [*base, f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={partial / 'libs'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-file:{version}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-file'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror:{version}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror-client:{version}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            log = partial.with_name("mvn-error.log")
            log.write_text(result.stdout + result.stderr)
            detail = next((ln for ln in (result.stdout + result.stderr).splitlines() if "[ERROR]" in ln), "")
            unreachable = any(
                s in result.stdout + result.stderr
                for s in ("Could not transfer", "Unknown host", "Connection refused", "connect timed out",
                          "Network is unreachable", "Could not resolve")
            )
            if unreachable:
                raise StackError(
                    "Maven Central is unreachable, so the Kafka jars cannot be downloaded: check the network "
                    "or set KMIGRATE_MAVEN_MIRROR to a reachable mirror, then run again "
                    f"(mvn output in {log})"
                )
            raise StackError(f"mvn failed resolving Kafka {version}: {detail.strip()} (full output in {log})")
    # older versions bring their own log4j 1 binding of SLF4J; the stack logs through log4j2 (the POM's)
    for binding in (partial / "libs").glob("slf4j-*log4j12-*.jar"):
        binding.unlink()
    for binding in (partial / "libs").glob("slf4j-reload4j-*.jar"):
        binding.unlink()
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)
    installed_marker(home).write_text(version + "\n")
    return home


# --------------------------------------------------------------------------- secure profile

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
KAFKA_USERS = ("admin", "connect", "migrator")  # admin and connect are super users
SUPER_USERS = ("broker", "admin", "connect")    # broker: the brokers' own certificate
CONNECT_REST_USER = "kmigrate"
MIGRATOR = "migrator"
CLIENT_METHODS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "MTLS")


def _owner_only_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


@dataclasses.dataclass(frozen=True)
class Security:
    """The secure profile's credentials: a local CA and certificates, random passwords for the Kafka
    users and the Connect REST user, all owner-only under `dir`."""

    dir: Path
    passwords: dict[str, str]

    @property
    def tls(self) -> Path:
        return self.dir / "tls"

    @property
    def ca(self) -> Path:
        return self.tls / "ca.pem"

    def cert(self, name: str) -> Path:
        return self.tls / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.tls / f"{name}.key"

    def keystore(self, name: str) -> Path:
        """Key, certificate and CA in one PEM file, as a Kafka or Connect keystore (type PEM)."""
        return self.tls / f"{name}-keystore.pem"

    def pkcs12(self, name: str) -> Path:
        return self.tls / f"{name}.p12"

    @property
    def connect_auth(self) -> tuple[str, str]:
        return CONNECT_REST_USER, self.passwords[f"rest:{CONNECT_REST_USER}"]

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def client(self, cluster: Cluster, user: str = MIGRATOR, method: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings for `user` on `cluster`: SASL_SSL with a SCRAM or PLAIN password, or
        MTLS (the SSL listener with the user's certificate)."""
        if method == "MTLS":
            return {"bootstrap.servers": f"localhost:{cluster.kafka_port + 2}", "security.protocol": "SSL",
                    "ssl.ca.location": str(self.ca), "ssl.certificate.location": str(self.cert(user)),
                    "ssl.key.location": str(self.key(user))}
        if method not in CLIENT_METHODS:
            raise StackError(f"unknown client method {method!r}: use one of {', '.join(CLIENT_METHODS)}")
        return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": method,
                "sasl.username": user, "sasl.password": self.passwords[user], "ssl.ca.location": str(self.ca)}


def _openssl(*args: str, env: dict[str, str] | None = None) -> None:
    openssl = shutil.which("openssl")
    if not openssl:
        raise StackError("openssl not found: the secure profile makes its certificates with it; install it "
                         "(Debian: apt-get install openssl)")
    result = subprocess.run([openssl, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {(result.stderr or result.stdout).strip()}")


def _make_certificates(security: Security) -> None:
    """A CA, a server/client certificate for the brokers and workers (CN=broker, localhost), and a
    client certificate per Kafka user (CN=<user>), RSA 2048, ten years."""
    tls = _owner_only_dir(security.tls)
    if not security.ca.exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tls / "ca.key"),
                 "-out", str(security.ca), "-days", "3650", "-subj", "/CN=kmigrate-local-ca")
    for name in ("broker", *KAFKA_USERS):
        if security.keystore(name).exists():
            continue
        ext = tls / f"{name}.ext"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
        csr = tls / f"{name}.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(security.key(name)), "-out", str(csr),
                 "-subj", f"/CN={name}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(security.ca), "-CAkey", str(tls / "ca.key"),
                 "-CAcreateserial", "-out", str(security.cert(name)), "-days", "3650", "-extfile", str(ext))
        csr.unlink()
        _write_private(security.keystore(name), security.key(name).read_text() + security.cert(name).read_text()
                       + security.ca.read_text())
    if not security.pkcs12("broker").exists():  # Connect's REST server (Jetty) takes no PEM keystore
        _openssl("pkcs12", "-export", "-in", str(security.cert("broker")), "-inkey", str(security.key("broker")),
                 "-certfile", str(security.ca), "-name", "broker", "-out", str(security.pkcs12("broker")),
                 "-passout", "env:KMIGRATE_KEYSTORE_PASSWORD", env={"KMIGRATE_KEYSTORE_PASSWORD": security.passwords["keystore"]})
    for path in tls.iterdir():
        path.chmod(0o600)


def prepare_security(state_dir: Path) -> Security:
    """The secure profile's credentials under `state_dir`/secure, made at the first start."""
    directory = _owner_only_dir(state_dir / "secure")
    creds = directory / "credentials.json"
    if creds.exists():
        passwords = json.loads(creds.read_text())
    else:
        passwords = {user: secrets.token_urlsafe(18) for user in (*KAFKA_USERS, f"rest:{CONNECT_REST_USER}", "keystore")}
        _write_private(creds, json.dumps(passwords, indent=2) + "\n")
    security = Security(directory, passwords)
    _make_certificates(security)
    return security


def _jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


def secure_broker_settings(cluster: Cluster, security: Security) -> dict[str, str]:
    plain_users = {f"user_{user}": security.passwords[user] for user in KAFKA_USERS}
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return {
        "listeners": f"SASL_SSL://localhost:{cluster.kafka_port},SSL://localhost:{cluster.kafka_port + 2},"
                     f"CONTROLLER://localhost:{cluster.controller_port}",
        "advertised.listeners": f"SASL_SSL://localhost:{cluster.kafka_port},SSL://localhost:{cluster.kafka_port + 2}",
        "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL,SSL:SSL",
        "inter.broker.listener.name": "SSL",
        "sasl.enabled.mechanisms": ",".join((*SCRAM_MECHANISMS, "PLAIN")),
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            _jaas("org.apache.kafka.common.security.plain.PlainLoginModule", **plain_users),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(security.keystore("broker")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(security.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(f"User:{user}" for user in SUPER_USERS),
        "allow.everyone.if.no.acl.found": "false",
    }


def secure_connect_settings(cluster: Cluster, security: Security) -> dict[str, str]:
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": _jaas("org.apache.kafka.common.security.scram.ScramLoginModule",
                                  username="connect", password=security.passwords["connect"]),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(security.ca),
    }
    return {
        **client,
        **{f"{prefix}.{k}": v for prefix in ("producer", "consumer", "admin") for k, v in client.items()},
        "listeners": f"https://localhost:{cluster.connect_port}",
        "rest.advertised.listener": "https",
        "listeners.https.ssl.keystore.type": "PKCS12",
        "listeners.https.ssl.keystore.location": str(security.pkcs12("broker")),
        "listeners.https.ssl.keystore.password": security.passwords["keystore"],
        "listeners.https.ssl.key.password": security.passwords["keystore"],
        "listeners.https.ssl.client.auth": "none",
        "rest.extension.classes": "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension",
    }


def connect_jaas_file(service_dir: Path, security: Security) -> Path:
    """The Connect REST API's users (basic authentication) and the JAAS file that names them."""
    users = service_dir / "rest-users.properties"
    user, password = security.connect_auth
    _write_private(users, f"{user}={password}\n")
    jaas = service_dir / "rest-jaas.conf"
    _write_private(jaas, "KafkaConnect {\n  " + _jaas(
        "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule", file=str(users)) + "\n};\n")
    return jaas


def migrator_acls(role: str) -> list[tuple[str, str, str]]:
    """(resource type, name, operation) the `migrator` user is allowed on a cluster of `role`:
    Describe and Read only on the source; what a migration writes on the target."""
    if role == "source":
        return [("TOPIC", "*", op) for op in ("DESCRIBE", "READ", "DESCRIBE_CONFIGS")] + \
               [("GROUP", "*", "DESCRIBE"), ("CLUSTER", "kafka-cluster", "DESCRIBE"),
                ("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")]
    return [("TOPIC", "*", op) for op in ("CREATE", "DESCRIBE", "READ", "WRITE", "DELETE", "DESCRIBE_CONFIGS",
                                          "ALTER_CONFIGS")] + \
           [("GROUP", "*", op) for op in ("DESCRIBE", "READ")] + \
           [("TRANSACTIONAL_ID", "*", op) for op in ("DESCRIBE", "WRITE")] + \
           [("CLUSTER", "kafka-cluster", op) for op in ("DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE")]


def acl_binding(resource: str, name: str, operation: str, principal: str = f"User:{MIGRATOR}"):  # noqa: ANN201
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    kind = ResourceType.BROKER if resource == "CLUSTER" else ResourceType[resource]  # the cluster is "BROKER" here
    return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation[operation], AclPermissionType.ALLOW)


def provision_acls(clusters: tuple[Cluster, ...], security: Security) -> None:
    """The migrator's ACLs on each cluster (as the admin user); existing ones are left as they are."""
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:
        raise StackError("the secure profile creates its ACLs with confluent-kafka: run it with the project's "
                         "virtualenv (make install, then make stack-up SECURE=1)") from None
    for cluster in clusters:
        admin = AdminClient(security.client(cluster, "admin"))
        role = "source" if cluster.name == "source" else "target"
        futures = admin.create_acls([acl_binding(*acl) for acl in migrator_acls(role)], request_timeout=30)
        for future in futures.values():
            future.result()
        print(f"stack: {cluster.name}: ACLs for User:{MIGRATOR} ({role}: "
              f"{'Describe and Read only' if role == 'source' else 'read and write'})", flush=True)


def ensure_basic_auth_extension(home: Path = KAFKA_HOME) -> None:
    """Connect's basic-authentication REST extension in libs/ (the secure profile's workers use it)."""
    if any((home / "libs").glob(f"{BASIC_AUTH_EXTENSION}-*.jar")):
        return
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("mvn not found: install Apache Maven (Debian: apt-get install maven)")
    step = [mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={CACHE_DIR / 'm2'}", *maven_settings_args(home),
            f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:{BASIC_AUTH_EXTENSION}:{KAFKA_VERSION}",
            f"-DoutputDirectory={home / 'libs'}"]
    result = subprocess.run(step, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"mvn could not fetch org.apache.kafka:{BASIC_AUTH_EXTENSION}:{KAFKA_VERSION}: "
                         f"{(result.stdout + result.stderr).strip()[-400:]}")


# --------------------------------------------------------------------------- services


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def kafka_answers(port: int, context: ssl.SSLContext | None = None) -> bool:
    """True when the broker answers an ApiVersions request (v0) on `port` (over TLS with `context`:
    a SASL_SSL listener answers ApiVersions before authentication)."""
    client_id = b"kmigrate-stack"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as plain, \
                (context.wrap_socket(plain, server_hostname="localhost") if context else plain) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = sock.recv(4)
            if len(header) < 4:
                return False
            (size,) = struct.unpack(">i", header)
            payload = b""
            while len(payload) < min(size, 6):
                chunk = sock.recv(size - len(payload))
                if not chunk:
                    return False
                payload += chunk
            correlation_id, error_code = struct.unpack(">ih", payload[:6])
            return correlation_id == 7 and error_code == 0
    except OSError:
        return False


def connect_answers(port: int, security: Security | None = None) -> bool:
    """True when the Connect worker's REST API lists connectors (the herder has started)."""
    request = urllib.request.Request(f"{'https' if security else 'http'}://localhost:{port}/connectors")
    if security:
        user, password = security.connect_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=3,
                                    context=security.ssl_context() if security else None) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclasses.dataclass
class Service:
    name: str
    kind: str  # "zookeeper", "kafka" or "connect"
    cluster: Cluster
    state_dir: Path
    security: Security | None = None
    node: int = 1  # a broker's KRaft node id

    @property
    def dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def port(self) -> int:
        if self.kind == "zookeeper":
            return self.cluster.controller_port
        return self.cluster.broker_port(self.node) if self.kind == "kafka" else self.cluster.connect_port

    @property
    def ports(self) -> list[int]:
        if self.kind == "kafka" and not self.cluster.zookeeper:
            extra = [self.cluster.kafka_port + 2] if self.security else []
            return [self.port, self.cluster.controller_port_of(self.node), *extra]
        return [self.port]

    @property
    def log_file(self) -> Path:
        return self.dir / "logs" / "server.log"

    def answers(self) -> bool:
        if self.kind == "zookeeper":
            return port_open(self.port)
        if self.kind == "kafka":
            return kafka_answers(self.port, self.security.ssl_context() if self.security else None)
        return connect_answers(self.port, self.security)

    def pid(self) -> int | None:
        return running_pid(self.pid_file, self.dir)


def running_pid(pid_file: Path, service_dir: Path) -> int | None:
    """The pid in `pid_file` if that process is running and is ours, else None; a stale pid file
    is removed."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if process_is_ours(pid, service_dir):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def process_is_ours(pid: int, service_dir: Path, settle_s: float = 1.0) -> bool:
    """The pid is alive and its command line names this service's directory (not a reused pid).

    /proc/<pid>/cmdline can read empty or stale while a process execs or exits, so a
    mismatch on a live pid is re-read for up to `settle_s` before it counts."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False  # no such process
        if "\nState:\tZ" in status:
            return False
        if str(service_dir) in cmdline:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def broker_name(cluster: Cluster, node: int) -> str:
    return f"{cluster.name}-kafka" if cluster.brokers == 1 else f"{cluster.name}-kafka-{node}"


def services(clusters: tuple[Cluster, ...], state_dir: Path, security: Security | None = None) -> list[Service]:
    ensembles = [Service(f"{c.name}-zookeeper", "zookeeper", c, state_dir) for c in clusters if c.zookeeper]
    brokers = [Service(broker_name(c, n), "kafka", c, state_dir, security, n) for c in clusters for n in c.nodes]
    workers = [Service(f"{c.name}-connect", "connect", c, state_dir, security) for c in clusters]
    return ensembles + brokers + workers


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
                 jvm: tuple[str, ...] = ()) -> list[str]:
    log4j = write_log4j(service)
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
    return java_command(java, service, BROKER_HEAP, "kafka.Kafka", str(props))


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
    return java_command(java, service, BROKER_HEAP, "kafka.Kafka", str(props))


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
                        jvm=jvm)


def launch(java: str, service: Service) -> subprocess.Popen:
    service.dir.mkdir(parents=True, exist_ok=True)
    service.dir.chmod(0o700)
    for port in service.ports:
        if port_open(port):
            raise StackError(
                f"{service.name}: port {port} is already taken by another process; stop it "
                f"(e.g. `ss -ltnp 'sport = :{port}'` shows which) or free the port, then run `make stack-up` again"
            )
    prepare = {"zookeeper": prepare_zookeeper, "kafka": prepare_kafka, "connect": prepare_connect}[service.kind]
    command = prepare(java, service)
    with open(service.dir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=service.dir)
    service.pid_file.write_text(f"{proc.pid}\n")
    return proc


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until_answering(pending: list[Service], launched: dict[str, subprocess.Popen], timeout_s: float) -> None:
    """Wait until every service in `pending` answers; one that exits meanwhile fails the wait.
    Liveness of a process launched by this call comes from its Popen handle."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pending)
    while waiting:
        for service in list(waiting):
            if service.answers():
                print(f"stack: {service.name} answers on localhost:{service.port}", flush=True)
                waiting.remove(service)
            elif (launched[service.name].poll() is not None if service.name in launched
                  else service.pid() is None):
                raise StackError(
                    f"{service.name} exited during start-up; see {service.dir / 'stdout.log'} and {service.log_file}:\n"
                    + tail(service.log_file if service.log_file.exists() else service.dir / "stdout.log")
                )
        if waiting and time.monotonic() > deadline:
            names = ", ".join(s.name for s in waiting)
            raise StackError(f"{names} did not answer within {timeout_s:.0f}s; see logs under {waiting[0].state_dir}")
        if waiting:
            time.sleep(0.5)


def up(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float, secure: bool = False) -> list[Service]:
    """Start every service that is not running and wait until all answer; returns those it started.
    `secure`: the secure profile (see the module's doc), its ACLs created once the brokers answer."""
    for version in sorted({c.version for c in clusters}):
        if not installed_marker(kafka_home(version)).exists():
            install(kafka_home(version), version)
    java = check_java()
    security = None
    if secure:
        ensure_basic_auth_extension()
        security = prepare_security(_owner_only_dir(state_dir))
    all_services = services(clusters, state_dir, security)
    started: list[Service] = []
    launched: dict[str, subprocess.Popen] = {}
    try:
        for kind in ("zookeeper", "kafka", "connect"):
            group = [s for s in all_services if s.kind == kind]
            to_wait = []
            for service in group:
                pid = service.pid()
                if pid is not None:
                    print(f"stack: {service.name} already running (pid {pid})", flush=True)
                    if not service.answers():
                        to_wait.append(service)
                    continue
                launched[service.name] = launch(java, service)
                started.append(service)
                to_wait.append(service)
                print(f"stack: started {service.name} (pid {launched[service.name].pid}), "
                      f"waiting for localhost:{service.port} ...", flush=True)
            wait_until_answering(to_wait, launched, timeout_s)
            if kind == "kafka" and security:
                provision_acls(clusters, security)
    except BaseException:
        for service in reversed(started):
            stop(service, pid=launched[service.name].pid)
        raise
    scheme = "https" if secure else "http"
    print(f"stack: up ({', '.join(f'{c.name}: kafka {c.bootstrap}, connect {scheme}://localhost:{c.connect_port}' for c in clusters)})"
          + (f"; credentials under {security.dir}" if security else ""))
    return started


def run_with_stack(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float, command: list[str],
                   secure: bool = False) -> int:
    """Bring the stack up, run `command`, then stop only the services this call started."""
    if not command:
        raise StackError("run needs a command after --, e.g. stack.py run -- pytest")
    started_at = time.monotonic()
    started = up(clusters, state_dir, timeout_s, secure)
    print(f"stack: ready after {time.monotonic() - started_at:.1f}s; running {' '.join(command)}", flush=True)
    try:
        return subprocess.call(command)
    finally:
        for service in stop_all(started):
            print(f"stack: stopped {service.name}", flush=True)


def stop(service: Service, timeout_s: float = 30.0, pid: int | None = None) -> bool:
    """SIGTERM the service's process group, SIGKILL after `timeout_s`; wait until it is gone.
    `pid`: a process this program launched itself (its group is ours whatever /proc says)."""
    pid = pid if pid is not None else service.pid()
    if pid is None:
        return False
    _terminate([pid], timeout_s)
    service.pid_file.unlink(missing_ok=True)
    return True


def stop_all(services_: list[Service], timeout_s: float = 30.0) -> list[Service]:
    """Stop services together: workers first (in parallel), then every broker at once, so that a
    cluster's brokers do not each wait for controllers that are already gone, then ZooKeeper.
    Returns those stopped."""
    stopped = []
    for kind in ("connect", "kafka", "zookeeper"):
        group = [(s, s.pid()) for s in services_ if s.kind == kind]
        group = [(s, pid) for s, pid in group if pid is not None]
        _terminate([pid for _, pid in group], timeout_s)
        for service, _ in group:
            service.pid_file.unlink(missing_ok=True)
            stopped.append(service)
    return stopped


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each process group, SIGKILL those still there after `timeout_s` (again every 10 s);
    wait until every one is gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while True:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and "\nState:\tZ" not in _status(pid)]
        if not alive:
            return
        if time.monotonic() > deadline:
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "\nState:\tZ"


def down(clusters: tuple[Cluster, ...], state_dir: Path, wipe: bool) -> None:
    for service in stop_all(services(clusters, state_dir)):  # workers before their brokers
        print(f"stack: stopped {service.name}", flush=True)
    if wipe:
        for service in services(clusters, state_dir):
            shutil.rmtree(service.dir, ignore_errors=True)
        shutil.rmtree(state_dir / "secure", ignore_errors=True)  # the secure profile's certificates and passwords
        print(f"stack: wiped data under {state_dir}")


def status(clusters: tuple[Cluster, ...], state_dir: Path, secure: bool = False) -> bool:
    report = {}
    security = prepare_security(state_dir) if secure and (state_dir / "secure").exists() else None
    for service in services(clusters, state_dir, security):
        report[service.name] = {"pid": service.pid(), "port": service.port, "answers": service.answers()}
    print(json.dumps(report, indent=2))
    return all(v["answers"] for v in report.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="stack.py {install,up,down,status,run} [options] [-- COMMAND ...]")
    parser.add_argument("command", choices=["install", "up", "down", "status", "run"])
    parser.add_argument("--secure", action="store_true",
                        help="the secure profile: SASL_SSL, mutual TLS, ACLs, HTTPS Connect with basic auth "
                             "(default state dir .stack-secure/, ports 19192-19194/18183 and 29192-29194/28183)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where configs, data, logs and pid files live (default: .stack/, or $KMIGRATE_STACK_DIR)")
    parser.add_argument("--cluster", type=parse_cluster, action="append", dest="clusters",
                        help="NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT; repeatable (default: source and target)")
    parser.add_argument("--brokers", type=int, default=1,
                        help="brokers per cluster; N >= 2 is the multi-broker profile: replication factor 3, "
                             "min.insync.replicas 2 (default state dir .stack-multi/, ports 19292, 19302, ... and 29292, "
                             "29302, ..., Connect 18283 and 28283)")
    parser.add_argument("--source-version", choices=SOURCE_VERSIONS, default=None,
                        help="the compat profile: the source as this Kafka version (with ZooKeeper before 4.0, and a "
                             f"Connect worker of that version), the target {KAFKA_VERSION} on KRaft (default state dir "
                             ".stack-compat-VERSION/, ports 19392-19393/18383 and 29392-29393/28383)")
    parser.add_argument("--wipe", action="store_true", help="with down: delete data and logs too")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each group of services")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    secure = args.secure or os.environ.get("KMIGRATE_STACK_SECURE", "") == "1"
    multi = args.brokers > 1
    compat = args.source_version is not None
    clusters = tuple(args.clusters or (SECURE_CLUSTERS if secure else multi_clusters(args.brokers) if multi
                                       else compat_clusters(args.source_version) if compat else DEFAULT_CLUSTERS))
    if args.clusters and multi:
        clusters = tuple(dataclasses.replace(c, brokers=args.brokers) for c in clusters)
    default_dir = os.environ.get("KMIGRATE_SECURE_STACK_DIR", SECURE_STATE_DIR) if secure else \
        os.environ.get("KMIGRATE_MULTI_STACK_DIR", MULTI_STATE_DIR) if multi else \
        Path(f"{COMPAT_STATE_DIR}-{args.source_version}") if compat else \
        os.environ.get("KMIGRATE_STACK_DIR", DEFAULT_STATE_DIR)
    state_dir = Path(args.state_dir or default_dir).resolve()
    try:
        if sum((secure, multi, compat)) > 1:
            raise StackError("--secure, --brokers N and --source-version are separate profiles for now: start one "
                             "of them")
        if not 1 <= args.brokers <= 5:
            raise StackError(f"--brokers {args.brokers}: use 1 to 5 (each broker takes up to 512 MB of heap)")
        if args.command == "install":
            for version in sorted({c.version for c in clusters}):
                print(f"stack: Kafka {version} jars in {install(kafka_home(version), version)}")
        elif args.command == "up":
            up(clusters, state_dir, args.timeout, secure)
        elif args.command == "run":
            return run_with_stack(clusters, state_dir, args.timeout, command, secure)
        elif args.command == "down":
            down(clusters, state_dir, args.wipe)
        else:
            return 0 if status(clusters, state_dir, secure) else 1
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
