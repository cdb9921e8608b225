"""The secure profile's credentials and settings: a local CA and certificates (openssl), random
passwords for the Kafka users and the Connect REST user, all owner-only under <state dir>/secure/;
the brokers' SASL_SSL, mutual-TLS and authorizer settings, the Connect workers' HTTPS with basic
authentication, and the `migrator` user's ACLs. Standard library only, but for the ACLs, which are
created with confluent-kafka (imported when they are: the secure profile runs in the virtualenv)."""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import ssl
import subprocess
from pathlib import Path

from stack_common import StackError
from stack_profiles import Cluster

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
KAFKA_USERS = ("admin", "connect", "migrator")  # admin and connect are super users
SUPER_USERS = ("broker", "admin", "connect")    # broker: the brokers' own certificate
CONNECT_REST_USER = "kmigrate"
MIGRATOR = "migrator"
CLIENT_METHODS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "MTLS")


def owner_only_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
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

    def java_client(self, user: str) -> dict[str, str]:
        """A Java client's SASL_SSL settings for `user` (SCRAM-SHA-512, the CA as a PEM truststore), as
        the Connect workers and Kafka's own tools take them; the bootstrap servers aside."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": _jaas("org.apache.kafka.common.security.scram.ScramLoginModule",
                                          username=user, password=self.passwords[user]),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)}

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
    tls = owner_only_dir(security.tls)
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
        write_private(security.keystore(name), security.key(name).read_text() + security.cert(name).read_text()
                       + security.ca.read_text())
    if not security.pkcs12("broker").exists():  # Connect's REST server (Jetty) takes no PEM keystore
        _openssl("pkcs12", "-export", "-in", str(security.cert("broker")), "-inkey", str(security.key("broker")),
                 "-certfile", str(security.ca), "-name", "broker", "-out", str(security.pkcs12("broker")),
                 "-passout", "env:KMIGRATE_KEYSTORE_PASSWORD", env={"KMIGRATE_KEYSTORE_PASSWORD": security.passwords["keystore"]})
    for path in tls.iterdir():
        path.chmod(0o600)


def prepare_security(state_dir: Path) -> Security:
    """The secure profile's credentials under `state_dir`/secure, made at the first start."""
    directory = owner_only_dir(state_dir / "secure")
    creds = directory / "credentials.json"
    if creds.exists():
        passwords = json.loads(creds.read_text())
    else:
        passwords = {user: secrets.token_urlsafe(18) for user in (*KAFKA_USERS, f"rest:{CONNECT_REST_USER}", "keystore")}
        write_private(creds, json.dumps(passwords, indent=2) + "\n")
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
    client = security.java_client("connect")
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
    write_private(users, f"{user}={password}\n")
    jaas = service_dir / "rest-jaas.conf"
    write_private(jaas, "KafkaConnect {\n  " + _jaas(
        "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule", file=str(users)) + "\n};\n")
    return jaas


def migrator_acls(role: str) -> list[tuple[str, str, str]]:
    """(resource type, name, operation) the `migrator` user is allowed on a cluster of `role`:
    Describe and Read only on the source; what a migration writes on the target (topics, groups,
    transactions, and the applications' ACLs)."""
    if role == "source":
        return [("TOPIC", "*", op) for op in ("DESCRIBE", "READ", "DESCRIBE_CONFIGS")] + \
               [("GROUP", "*", "DESCRIBE"), ("CLUSTER", "kafka-cluster", "DESCRIBE"),
                ("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")]
    return [("TOPIC", "*", op) for op in ("CREATE", "DESCRIBE", "READ", "WRITE", "DELETE", "DESCRIBE_CONFIGS",
                                          "ALTER_CONFIGS")] + \
           [("GROUP", "*", op) for op in ("DESCRIBE", "READ")] + \
           [("TRANSACTIONAL_ID", "*", op) for op in ("DESCRIBE", "WRITE")] + \
           [("CLUSTER", "kafka-cluster", op) for op in ("DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE",
                                                         "ALTER", "ALTER_CONFIGS")]  # the applications' ACLs, quotas


def acl_binding(resource: str, name: str, operation: str, principal: str = f"User:{MIGRATOR}"):  # noqa: ANN201
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    kind = ResourceType.BROKER if resource == "CLUSTER" else ResourceType[resource]  # the cluster is "BROKER" here
    return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation[operation], AclPermissionType.ALLOW)


def provision_acls(clusters: tuple[Cluster, ...], security: Security) -> None:
    """The stack users' SCRAM credentials set again, then the migrator's ACLs on each cluster (as the
    admin user, over PLAIN); existing ACLs are left as they are. The credentials: on Kafka 4.3.1 a
    cluster started again after SCRAM credentials of one mechanism were added or removed (as the
    secure tests do for their applications' users) refused every other user's logins with that
    mechanism here; set again, they hold."""
    try:
        from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                           UserScramCredentialUpsertion)
    except ImportError:
        raise StackError("the secure profile creates its ACLs with confluent-kafka: run it with the project's "
                         "virtualenv (make install, then make stack-up SECURE=1)") from None
    for cluster in clusters:
        admin = AdminClient(security.client(cluster, "admin", "PLAIN"))
        for mechanism in SCRAM_MECHANISMS:  # a request alters a user once
            info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
            upserts = [UserScramCredentialUpsertion(user, info, security.passwords[user].encode()) for user in KAFKA_USERS]
            for future in admin.alter_user_scram_credentials(upserts, request_timeout=30).values():
                future.result()
        role = "source" if cluster.name == "source" else "target"
        futures = admin.create_acls([acl_binding(*acl) for acl in migrator_acls(role)], request_timeout=30)
        for future in futures.values():
            future.result()
        print(f"stack: {cluster.name}: ACLs for User:{MIGRATOR} ({role}: "
              f"{'Describe and Read only' if role == 'source' else 'read and write'})", flush=True)
