"""The migration's rights on the secure stack: preflight passes for the migrator principal, names
each right an ACL takes away before anything is written, and the source refuses the migrator's
writes whatever the project does."""
from __future__ import annotations

import contextlib
import re

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.claims.runs import release_topics
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions, marker_transactional_id
from kmigrate.errors import MissingAcls
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.checks.selection import Selection
from kmigrate.run.preflight.checks import check_run
from kmigrate.run.targets.prepare import prepare_target_topic, prepare_targets

from tests.support.kafka import TxnSeeder, create_topic, seed_plain, watermarks
from tests.support.results import SECURE_RESULTS_ENV, record


@contextlib.contextmanager
def denied(cluster, name: str, operation: AclOperation, principal: str = "User:migrator",
           resource: ResourceType = ResourceType.TOPIC):
    """A DENY ACL for `principal` on the literal resource name, removed afterwards."""
    admin = AdminClient(cluster.admin())
    binding = AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", operation,
                         AclPermissionType.DENY)
    admin.create_acls([binding])[binding].result(30)
    try:
        yield
    finally:
        gone = AclBindingFilter(resource, name, ResourcePatternType.LITERAL, principal, "*", operation,
                                AclPermissionType.DENY)
        admin.delete_acls([gone])[gone].result(30)


def preflight(secure_stack, topic: str):
    return check_run(secure_stack.cluster("source"), secure_stack.cluster("target"), None, None,
                     Selection(topics_include=re.escape(topic)))


def target_has(secure_stack, topic: str) -> bool:
    with ClusterAdmin(secure_stack.target) as admin:
        return admin.partition_count(topic) is not None


def test_the_migrator_has_what_the_run_needs(secure_stack, unique_name):
    seed_plain(secure_stack.source, unique_name, 2, 100)
    plan = preflight(secure_stack, unique_name)
    assert plan["partitions"] == 2 and not target_has(secure_stack, unique_name)  # preflight writes nothing


@pytest.mark.parametrize(("side", "operation", "named"), [
    ("source", AclOperation.READ, "source: READ on topic"),
    ("source", AclOperation.DESCRIBE_CONFIGS, "source: DESCRIBE_CONFIGS on topic"),
    ("target", AclOperation.CREATE, "target: CREATE on topic"),
])
def test_preflight_names_the_missing_acl_and_writes_nothing(secure_stack, unique_name, side, operation, named):
    topic = unique_name
    seed_plain(secure_stack.source, topic, 1, 50)
    with denied(secure_stack.source if side == "source" else secure_stack.target, topic, operation):
        with pytest.raises(MissingAcls, match=re.escape(f"{named} {topic!r}")) as refused:
            preflight(secure_stack, topic)
    assert "nothing was written" in str(refused.value)
    assert not target_has(secure_stack, topic)
    record(SECURE_RESULTS_ENV, missing_acl_named=True)


def test_preflight_names_a_missing_right_on_the_claims_topic(secure_stack, unique_name):
    seed_plain(secure_stack.source, unique_name, 1, 50)
    target = secure_stack.cluster("target")
    release_topics(target, unique_name)  # a record on the claims topic: it exists from here on
    with denied(secure_stack.target, CLAIMS_TOPIC, AclOperation.WRITE):
        with pytest.raises(MissingAcls, match=re.escape(f"target: WRITE on topic {CLAIMS_TOPIC!r}")):
            preflight(secure_stack, unique_name)
    assert not target_has(secure_stack, unique_name)
    record(SECURE_RESULTS_ENV, missing_acl_named=True)


def test_a_topic_the_run_creates_is_checked_before_any_record_is_written(secure_stack, unique_name):
    topic = unique_name
    seed_plain(secure_stack.source, topic, 1, 50)
    with denied(secure_stack.target, topic, AclOperation.WRITE):
        preflight(secure_stack, topic)  # the topic does not exist yet: Create and Describe are all it can ask
        with pytest.raises(MissingAcls, match=re.escape(f"target: WRITE on topic {topic!r}")):
            prepare_targets(secure_stack.cluster("source"), secure_stack.cluster("target"), [WorkUnit(topic, 0, 50)])
    assert watermarks(secure_stack.target, topic) == (0, 0)  # created, and nothing written


def test_a_transactional_id_the_principal_may_not_use_is_named(secure_stack, unique_name):
    topic = unique_name
    create_topic(secure_stack.source, topic)
    seeder = TxnSeeder(secure_stack.source, topic)
    seeder.records(5, "before")
    seeder.transaction(3, "txn", commit=True)
    source, target = secure_stack.cluster("source"), secure_stack.cluster("target")
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        prepare_target_topic(source_admin, target_admin, topic)
    options = CopyOptions(run_id="rights", raw_batches=False)
    # the commit marker after the transaction's last record is a marker alone, under the markers' id
    txn_id = marker_transactional_id(options.run_id, topic, 0)
    with denied(secure_stack.target, txn_id, AclOperation.WRITE, resource=ResourceType.TRANSACTIONAL_ID):
        with pytest.raises(MissingAcls, match=re.escape(f"transactional id {txn_id!r}")):
            copy_partition(source, target, WorkUnit(topic, 0, seeder.end), options)
    result = copy_partition(source, target, WorkUnit(topic, 0, seeder.end), options)  # granted again: the retry copies
    assert result.digests_equal and result.markers == 1 and result.target_end == seeder.end


def test_the_source_refuses_the_migrators_writes(secure_stack, unique_name):
    topic = unique_name
    seed_plain(secure_stack.source, topic, 1, 10)
    migrator = secure_stack.cluster("source")
    producer = Producer({**migrator.settings, "message.timeout.ms": 10_000})
    failures = []
    producer.produce(topic, b"from the migrator", on_delivery=lambda err, _msg: failures.append(err))
    producer.flush(30)
    assert failures and failures[0] is not None and failures[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        admin = AdminClient(migrator.admin())
        for future in admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=30).values():
            future.result(30)
    assert watermarks(secure_stack.source, topic) == (0, 10)
    record(SECURE_RESULTS_ENV, source_writes_refused=True)


def test_preflight_shows_the_applications_acls_and_names_the_right_to_create_them(secure_stack, unique_name):
    """An application's ACL on a selected topic is in the plan a dry run shows; a migrator that may
    not Alter the target cluster is refused before anything is written, the way out named."""
    seed_plain(secure_stack.source, unique_name, 1, 10)
    app = f"User:{unique_name}-app"
    binding = AclBinding(ResourceType.TOPIC, unique_name, ResourcePatternType.LITERAL, app, "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    admin = AdminClient(secure_stack.source.admin())
    admin.create_acls([binding])[binding].result(30)
    try:
        shown = preflight(secure_stack, unique_name)["acls"]
        assert shown["to_add"] == [f"{app} ALLOW READ on TOPIC {unique_name!r}"] and shown["expected"] == 1
        with denied(secure_stack.target, "kafka-cluster", AclOperation.ALTER, resource=ResourceType.BROKER):
            with pytest.raises(MissingAcls, match="lacks Alter on the target cluster.*acls=off"):
                preflight(secure_stack, unique_name)
        off = check_run(secure_stack.cluster("source"), secure_stack.cluster("target"), None, None,
                        Selection(topics_include=re.escape(unique_name), acls="off"))
        assert off["acls"] == {"scope": "off"}
        assert not target_has(secure_stack, unique_name)
    finally:
        gone = AclBindingFilter(ResourceType.TOPIC, unique_name, ResourcePatternType.LITERAL, app, "*",
                                AclOperation.READ, AclPermissionType.ALLOW)
        admin.delete_acls([gone])[gone].result(30)
