"""The kafka_migration DAG on the secure stack (SASL_SSL with SCRAM, ACLs, HTTPS Connect with basic
authentication): a mixed workload moves exactly while the source is read as the `migrator`
principal, which may only Describe and Read there, and no secret of the run is left in a file the
run wrote (manifest, report, task logs, Spark event logs), its output or a process's command line:
the stack's passwords, a connector's literal secrets (a password, a schema registry's
basic.auth.user.info, a JDBC URL's password) and a connector override's value. And the
applications' ACLs move with their topics: a consumer and a transactional producer switched to the
target with their own principals work there at once, with no ACL written by hand."""
from __future__ import annotations

import json
import secrets as tokens
import threading
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kmigrate.kafka import quota_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.report.markdown import summarize
from kmigrate_demo.workload import seed_mixed

from tests.support.airflow import AIRFLOW_HOME, run_dag, task_states
from tests.support.connect import delete_connectors
from tests.support.kafka import create_topic, produce, read_partition
from tests.support.migration import assert_migrated_exactly, partition_watermarks
from tests.support.results import SECURE_RESULTS_ENV, record

# spark_connect_conn_id None: the jobs run under spark-submit, whose command lines and event logs are checked
CONN_IDS = {"source_kafka_conn_id": "kafka_secure_source", "target_kafka_conn_id": "kafka_secure_target",
            "source_connect_conn_id": "connect_secure_source", "target_connect_conn_id": "connect_secure_target",
            "spark_connect_conn_id": None}
CONNECTOR_SECRET = f"connector-literal-{uuid.uuid4().hex}"  # a literal secret in a connector's config
USER_INFO_SECRET = f"user-info-{uuid.uuid4().hex}"  # value.converter.basic.auth.user.info's password
URL_SECRET = f"url-password-{uuid.uuid4().hex}"  # the password in a connector's JDBC URL
OVERRIDE_SECRET = f"override-{uuid.uuid4().hex}"  # a connector override's value (a target database password)


@pytest.fixture
def secure_connections(secure_stack, monkeypatch):
    """The run's Airflow connections: Kafka as `migrator` (SCRAM-SHA-512 over TLS, the CA file),
    Connect over HTTPS with basic authentication."""
    security = secure_stack.security
    for role, cluster in zip(("source", "target"), secure_stack.clusters):
        monkeypatch.setenv(f"AIRFLOW_CONN_KAFKA_SECURE_{role.upper()}", json.dumps(
            {"conn_type": "kafka", "extra": security.client(cluster, "migrator", "SCRAM-SHA-512")}))
        user, password = security.connect_auth
        monkeypatch.setenv(f"AIRFLOW_CONN_CONNECT_SECURE_{role.upper()}", json.dumps(
            {"conn_type": "http", "host": "localhost", "port": cluster.connect_port, "schema": "https",
             "login": user, "password": password, "extra": {"verify": str(security.ca)}}))


@pytest.fixture
def spark_event_logs(tmp_path, monkeypatch) -> Path:
    """The run's spark-submit jobs write Spark event logs here (spark-defaults.conf of their own)."""
    conf, events = tmp_path / "spark-conf", tmp_path / "spark-events"
    conf.mkdir()
    events.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir {events.as_uri()}\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    return events


class CommandLineWatch:
    """Reads every process's command line every 0.2 s while the run goes on (a sampling interval,
    not a wait for anything), keeping those that hold a secret, and the Spark jobs' it saw."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets, self.found, self.samples = secrets, set(), 0
        self.command_lines: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.samples += 1
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = cmdline.read_bytes().decode(errors="replace")
                except OSError:
                    continue
                self.command_lines.add(text)
                self.found.update(s for s in self.secrets if s in text)

    def spark_jobs(self) -> list[str]:
        return [c for c in self.command_lines if "SparkSubmit" in c and "spark_jobs" in c]

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def files_holding(roots: list[Path], secrets: list[str]) -> tuple[dict[str, list[str]], int]:
    """The files under `roots` holding a secret (its hits), and how many files were searched."""
    found, searched = {}, 0
    for root in roots:
        for path in (p for p in root.rglob("*") if p.is_file()):
            searched += 1
            data = path.read_bytes()
            hits = [s for s in secrets if s.encode() in data]
            if hits:
                found[str(path)] = hits
    return found, searched


def test_a_mixed_workload_moves_exactly_as_a_read_only_source_principal_and_no_secret_is_left(
        secure_stack, secure_connections, dagbag, tmp_path, capfd, spark_event_logs):
    prefix = f"secure{uuid.uuid4().hex[:6]}"
    w = seed_mixed(secure_stack.source, secure_stack.source_connect, prefix, tmp_path / "workload", records=300)
    connect = secure_stack.source_connect
    # literal secrets the snapshot must leave out: by name, a schema registry's user info, a URL's password
    config = {**connect.config(w.sink_connector), "x.api.password": CONNECTOR_SECRET,
              "value.converter.basic.auth.user.info": f"registry-user:{USER_INFO_SECRET}",
              "x.connection.url": f"jdbc:postgresql://app:{URL_SECRET}@db.example:5432/shop?sslmode=require"}
    requests.put(f"{connect.url}/connectors/{w.sink_connector}/config", json=config, auth=secure_stack.security.connect_auth,
                 verify=str(secure_stack.security.ca), timeout=30).raise_for_status()
    state = tmp_path / "state"
    source_before = partition_watermarks(secure_stack.source, w.topics)
    secrets = [*secure_stack.passwords(), CONNECTOR_SECRET, USER_INFO_SECRET, URL_SECRET, OVERRIDE_SECRET]
    try:
        with CommandLineWatch(secrets) as watch:
            run = run_dag(dagbag, **CONN_IDS, topics_include=w.topic_pattern, groups=w.group_pattern,
                          connectors=[w.source_connector, w.sink_connector],
                          connector_overrides={w.sink_connector: {"file": str(w.sink_file_target),
                                                                  "x.target.password": OVERRIDE_SECRET}},
                          quiesce_seconds=2, state_location=str(state), run_name="secure")
        output = "".join(capfd.readouterr())
        assert str(run.state) == "success", task_states(run)
        summary = summarize(Manifest(str(state), "secure"))
        assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        manifest = Manifest(str(state), "secure")
        rows = [row for part in manifest.parts() for row in (manifest.read(part) or {}).get("rows", [])
                if isinstance(row, dict)]
        assert sum(row.get("whole_batches", 0) for row in rows) > 0  # the raw path ran over SASL_SSL
        assert_migrated_exactly(secure_stack.source, secure_stack.target, w.topics, w.groups, source_before)
        # the target's copy of the sink connector has its literal secrets, read again from the source
        # worker, and the override's value
        got = secure_stack.target_connect.config(w.sink_connector)
        assert {k: got[k] for k in ("x.api.password", "value.converter.basic.auth.user.info", "x.connection.url")} == \
            {k: config[k] for k in ("x.api.password", "value.converter.basic.auth.user.info", "x.connection.url")}
        assert got["x.target.password"] == OVERRIDE_SECRET

        event_logs = [p for p in spark_event_logs.rglob("*") if p.is_file()]
        assert event_logs, "the Spark jobs wrote no event log"  # they ran under spark-submit, logging events
        assert watch.spark_jobs(), "no Spark job's command line was sampled"
        in_files, searched = files_holding([state, AIRFLOW_HOME / "logs", spark_event_logs], secrets)
        in_output = [s for s in secrets if s in output]
        record(SECURE_RESULTS_ENV, partitions=summary["partitions"], partitions_equal=summary["partitions_equal"],
               groups_exact=summary["groups_exact"], connectors_resumed=summary["connectors_resumed"],
               secrets_found=len(watch.found) + len(in_output) + sum(len(v) for v in in_files.values()),
               files_searched=searched, spark_event_logs=len(event_logs), cmdline_samples=watch.samples,
               command_lines_seen=len(watch.command_lines), secrets_searched=len(secrets))
        assert watch.samples > 10 and not watch.found, f"secrets in a command line: {len(watch.found)}"
        assert not in_output, "a secret in the run's output"
        assert in_files == {}
    finally:
        delete_connectors((secure_stack.source_connect, secure_stack.target_connect),
                          (w.source_connector, w.sink_connector))


def scram_users(cluster, passwords: dict[str, str]) -> None:
    admin = AdminClient(cluster.admin())
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode()) for user, password in passwords.items()]).values():
        future.result(timeout=30)


def allow(cluster, bindings: list[tuple[ResourceType, str, ResourcePatternType, str, AclOperation]]) -> None:
    admin = AdminClient(cluster.admin())
    for future in admin.create_acls([AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
                                     for kind, name, pattern, principal, operation in bindings]).values():
        future.result(timeout=30)


def forget_acls(cluster, users: list[str]) -> None:
    """The users' ACLs on `cluster` removed. Their SCRAM credentials stay (names of this test alone):
    on Kafka 4.3.1, brokers started again after a SCRAM-SHA-512 credential was deleted refused every
    user's SCRAM-SHA-512 logins here."""
    admin = AdminClient(cluster.admin())
    filters = [AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{u}", None, AclOperation.ANY,
                                AclPermissionType.ANY) for u in users]
    for future in admin.delete_acls(filters).values():
        future.result(timeout=30)


@pytest.mark.parametrize("renamed", [False, True], ids=["same-names", "renamed"])
def test_the_applications_acls_move_with_their_topics_and_their_principals_work_on_the_target_at_once(
        secure_stack, secure_connections, dagbag, tmp_path, renamed):
    """A reader (prefixed Read on the topics, its group) and a transactional writer (Write on the topic,
    its transactional id, IdempotentWrite on the cluster) exist as SCRAM users on both clusters; a
    third user has ACLs on the source only and no credentials on the target. After the run, the
    reader's consumer continues its group on the target and the writer's transactions commit there,
    both at once, as their own principals. `renamed`: a consolidation moves them under the prefix
    `a.` (topics and groups): the bindings name the new names (the prefixed one prefixed alike)."""
    prefix = f"acl{uuid.uuid4().hex[:6]}"
    topic, group, txn_id = f"{prefix}.orders", f"{prefix}.readers", f"{prefix}-tx"
    there = (lambda name: f"a.{name}") if renamed else (lambda name: name)  # a topic's or group's target name
    renames = {"topic_prefix": "a.", "group_prefix": "a."} if renamed else {}
    reader, writer, ghost = f"{prefix}-reader", f"{prefix}-writer", f"{prefix}-ghost"
    passwords = {user: tokens.token_hex(12) for user in (reader, writer, ghost)}
    source_conf, target_conf = secure_stack.clusters
    as_user = {(side, user): {**secure_stack.security.client(cluster, "admin"), "sasl.username": user,
                              "sasl.password": passwords[user]}
               for side, cluster in (("source", source_conf), ("target", target_conf)) for user in passwords}
    users = list(passwords)
    try:
        scram_users(secure_stack.source, passwords)
        scram_users(secure_stack.target, {u: p for u, p in passwords.items() if u != ghost})
        create_topic(secure_stack.source, topic, 2)
        create_topic(secure_stack.source, f"{prefix}x-other", 1)  # an ACL of a topic the run does not move
        T, G, X, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.BROKER
        LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
        allow(secure_stack.source, [
            (T, f"{prefix}.", PRE, f"User:{reader}", AclOperation.READ),
            (T, f"{prefix}.", PRE, f"User:{reader}", AclOperation.DESCRIBE),
            (G, group, LIT, f"User:{reader}", AclOperation.READ),
            (T, topic, LIT, f"User:{writer}", AclOperation.WRITE),
            (T, topic, LIT, f"User:{writer}", AclOperation.DESCRIBE),
            (X, txn_id, LIT, f"User:{writer}", AclOperation.WRITE),
            (X, txn_id, LIT, f"User:{writer}", AclOperation.DESCRIBE),
            (C, "kafka-cluster", LIT, f"User:{writer}", AclOperation.IDEMPOTENT_WRITE),
            (T, topic, LIT, f"User:{ghost}", AclOperation.READ),
            (T, f"{prefix}x-other", LIT, f"User:{reader}", AclOperation.READ)])
        quotas = {(("user", reader),): {"consumer_byte_rate": 4194304.0},
                  (("client-id", "orders-app"), ("user", writer)): {"producer_byte_rate": 2097152.0}}
        quota_wire.alter(secure_stack.source, quotas)
        for p in range(2):
            produce(secure_stack.source, topic, [(b"k%d" % i, b"v%d-%d" % (p, i)) for i in range(30)], p)
        consumer = Consumer({**as_user[("source", reader)], "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, p, 10) for p in range(2)], asynchronous=False)
        consumer.close()

        state = tmp_path / "state"
        run = run_dag(dagbag, **CONN_IDS, topics_include=f"{prefix}\\..*", groups=group, quiesce_seconds=1,
                      state_location=str(state), run_name="acls", **renames)
        assert str(run.state) == "success", task_states(run)
        summary = summarize(Manifest(str(state), "acls"))
        assert summary["acls_scope"] == "principals" and summary["acls_expected"] == 9 == summary["acls_on_target"]
        assert summary["principals_missing"] == [f"User:{ghost}"]
        assert summary["quotas_expected"] == 2 == summary["quotas_on_target"]
        assert {e: v for e, v in quota_wire.describe(secure_stack.target).items() if e in quotas} == quotas
        report = (state / "acls" / "report.md").read_text()
        assert "## ACLs" in report and f"User:{ghost} is missing on the target" in report
        with ClusterAdmin(secure_stack.target) as admin:
            mine = [b for b in admin.client.describe_acls(AclBindingFilter(
                ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY),
                request_timeout=30).result() if b.principal.startswith(f"User:{prefix}")]
        assert not [b for b in mine if "x-other" in b.name], "an ACL of a topic the run did not move"
        named = {(b.restype.name, b.name, b.resource_pattern_type.name) for b in mine}
        assert {("TOPIC", there(f"{prefix}."), "PREFIXED"), ("TOPIC", there(topic), "LITERAL"),
                ("GROUP", there(group), "LITERAL"), ("TRANSACTIONAL_ID", txn_id, "LITERAL")} <= named
        if renamed:
            assert not {n for _, n, _ in named} & {f"{prefix}.", topic, group}, "a source name bound on the target"

        # on the target, as their own principals, at once: the reader's group continues where it committed,
        # the writer's transaction commits
        got, failures = [], []

        def read() -> None:
            try:
                c = Consumer({**as_user[("target", reader)], "group.id": there(group), "auto.offset.reset": "error",
                              "enable.partition.eof": True})
                c.subscribe([there(topic)])
                ended = set()
                while len(ended) < 2:
                    for msg in c.consume(100, 1.0):
                        if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                            ended.add(msg.partition())
                        elif msg.error():
                            raise KafkaException(msg.error())
                        else:
                            got.append((msg.partition(), msg.offset()))
                c.commit(asynchronous=False)
                c.close()
            except Exception as exc:  # noqa: BLE001 - asserted in the test's thread
                failures.append(exc)

        thread = threading.Thread(target=read)
        thread.start()
        producer = Producer({**as_user[("target", writer)], "transactional.id": txn_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(there(topic), b"after the switch %d" % i, partition=0)
        producer.commit_transaction(30)
        thread.join(120)
        assert not thread.is_alive() and not failures, failures
        assert len(set(got)) == len(got), "a record read twice"
        assert sorted(x for x in got if x[1] < 30) == [(p, o) for p in range(2) for o in range(10, 30)]
        values = [v for _, _, v in read_partition(secure_stack.target, there(topic), 0)]
        assert values[-5:] == [b"after the switch %d" % i for i in range(5)]
        if renamed:
            return
        record(SECURE_RESULTS_ENV, acls_expected=summary["acls_expected"], acls_on_target=summary["acls_on_target"],
               quotas_expected=summary["quotas_expected"], quotas_on_target=summary["quotas_on_target"],
               principals_missing_named=summary["principals_missing"] == [f"User:{ghost}"])
    finally:
        for cluster in (secure_stack.source, secure_stack.target):
            forget_acls(cluster, users)  # their quotas stay, as their credentials do: names of this test alone
