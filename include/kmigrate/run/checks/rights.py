"""The rights the migration's principal needs on each cluster, checked before anything is written
(docs/DESIGN.md §10). Each cluster is asked which operations the principal may perform on the
selected topics, groups and the cluster (authorized operations, KIP-430), and a topic the target
does not have yet is checked with a validate-only CreateTopics. A cluster without an authorizer
allows everything, so a PLAINTEXT stack passes as it is."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import NewTopic

from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.errors import MissingAcls
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.topic_batches import create_topics

log = logging.getLogger(__name__)

# What a migration does on each side: the source is only read; on the target topics are created,
# written, trimmed (DeleteRecords aligns a log start above 0) and configured, groups committed.
NEEDS = {
    "source": {"topic": ("DESCRIBE", "READ", "DESCRIBE_CONFIGS"), "group": ("DESCRIBE",), "cluster": ("DESCRIBE",)},
    "target": {"topic": ("DESCRIBE", "READ", "WRITE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
               "group": ("DESCRIBE", "READ"), "cluster": ("DESCRIBE",),
               "claims": ("DESCRIBE", "READ", "WRITE")},  # the claims topic (kmigrate.claims)
}


@dataclasses.dataclass(frozen=True)
class Missing:
    """Operations a principal lacks on one resource of one cluster."""

    side: str
    resource: str  # topic, group, cluster
    name: str
    operations: tuple[str, ...]

    def __str__(self) -> str:
        what = "the cluster" if self.resource == "cluster" else f"{self.resource} {self.name!r}"
        return f"{self.side}: {', '.join(self.operations)} on {what}"


def operation_names(allowed: Iterable | None) -> set[str] | None:
    """The names of a describe's authorized operations; None when the broker does not say (before 2.3)."""
    return None if allowed is None else {op.name for op in allowed}


def _lacking(side: str, resource: str, name: str, allowed: Iterable | None) -> list[Missing]:
    have = operation_names(allowed)
    if have is None:  # the step that needs a right will fail naming it
        log.warning("%s: the cluster does not report authorized operations on %s %s; its rights are not checked "
                    "before the run", side, resource, name)
        return []
    if "ALL" in have:
        return []
    lacking = tuple(op for op in NEEDS[side][resource] if op not in have)
    return [Missing(side, resource, name, lacking)] if lacking else []


def _failure(exc: KafkaException) -> KafkaError:
    return exc.args[0]


def topic_rights(admin: ClusterAdmin, side: str, topics: Collection[str]) -> tuple[list[Missing], list[str]]:
    """The rights lacking on each of `topics`, and those of `topics` the cluster does not have (which
    the principal may Describe, else a missing Describe is named)."""
    if not topics:
        return [], []
    futures = admin.client.describe_topics(TopicCollection(sorted(topics)), include_authorized_operations=True,
                                           request_timeout=admin.timeout_s)
    missing, absent = [], []
    for topic, future in sorted(futures.items()):
        try:
            missing += _lacking(side, "topic", topic, future.result(timeout=admin.timeout_s).authorized_operations)
        except KafkaException as exc:
            code = _failure(exc).code()
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                absent.append(topic)
            elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                missing.append(Missing(side, "topic", topic, NEEDS[side]["topic"]))
            else:
                raise
    return missing, absent


def group_rights(admin: ClusterAdmin, side: str, groups: Collection[str]) -> list[Missing]:
    if not groups:
        return []
    futures = admin.client.describe_consumer_groups(sorted(groups), include_authorized_operations=True,
                                                    request_timeout=admin.timeout_s)
    missing = []
    for group, future in sorted(futures.items()):
        try:
            missing += _lacking(side, "group", group, future.result(timeout=admin.timeout_s).authorized_operations)
        except KafkaException as exc:
            if _failure(exc).code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                raise
            missing.append(Missing(side, "group", group, NEEDS[side]["group"]))
    return missing


def cluster_operations(admin: ClusterAdmin) -> list | None:
    """The operations the principal may perform on the cluster; None when the broker does not say."""
    described = admin.client.describe_cluster(include_authorized_operations=True, request_timeout=admin.timeout_s)
    return described.result(timeout=admin.timeout_s).authorized_operations


def cluster_rights(admin: ClusterAdmin, side: str) -> list[Missing]:
    return _lacking(side, "cluster", "", cluster_operations(admin))


def claims_rights(target: ClusterAdmin) -> list[Missing]:
    """Describe, Read and Write on the claims topic (Create while the target does not have it),
    named as rights on that topic."""
    future = target.client.describe_topics(TopicCollection([CLAIMS_TOPIC]), include_authorized_operations=True,
                                           request_timeout=target.timeout_s)[CLAIMS_TOPIC]
    try:
        lacking = _lacking("target", "claims", CLAIMS_TOPIC, future.result(timeout=target.timeout_s).authorized_operations)
    except KafkaException as exc:
        code = _failure(exc).code()
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            lacking = [dataclasses.replace(m, operations=("CREATE", *NEEDS["target"]["claims"]))
                       for m in create_rights(target, [CLAIMS_TOPIC])]
        elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            lacking = [Missing("target", "claims", CLAIMS_TOPIC, NEEDS["target"]["claims"])]
        else:
            raise
    return [dataclasses.replace(m, resource="topic") for m in lacking]


def create_rights(admin: ClusterAdmin, topics: Collection[str]) -> list[Missing]:
    """CREATE on each of `topics`, asked with validate-only CreateTopics (nothing is created), in
    batches the controller takes (`topic_batches.create_topics`: it counts a validation's records too)."""
    if not topics:
        return []
    outcome = create_topics(admin, [NewTopic(t, 1, -1) for t in sorted(topics)], validate_only=True)
    missing = []
    for topic, exc in sorted(outcome.items()):
        if exc is not None and _failure(exc).code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                         KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            missing.append(Missing("target", "topic", topic, ("CREATE",)))
    return missing


def missing_rights(source: ClusterAdmin, target: ClusterAdmin, topics: Collection[str],
                   groups: Collection[str], names: Mapping[str, str] | None = None,
                   group_names: Mapping[str, str] | None = None) -> tuple[list[Missing], list[str]]:
    """Every right the principal lacks for migrating `topics` and `groups` (on the target under
    `names` and `group_names`, the run's renames, where given), and the target topics whose other
    rights can only be asked once they exist (`check_created`)."""
    on_target = sorted({(names or {}).get(t, t) for t in topics})
    target_groups = sorted({(group_names or {}).get(g, g) for g in groups})
    missing = cluster_rights(source, "source") + group_rights(source, "source", groups)
    source_topics, _ = topic_rights(source, "source", topics)
    missing += source_topics
    missing += cluster_rights(target, "target") + group_rights(target, "target", target_groups)
    target_topics, absent = topic_rights(target, "target", on_target)
    return missing + target_topics + create_rights(target, absent) + claims_rights(target), absent


def refuse(missing: list[Missing], when: str) -> None:
    if missing:
        raise MissingAcls(
            f"the migration's principal lacks {len(missing)} right{'s' if len(missing) > 1 else ''} {when}: "
            + "; ".join(str(m) for m in missing) + ". Grant these ACLs (README, Secured clusters) and trigger the run "
            "again; nothing was written")


def check_rights(source: ClusterAdmin, target: ClusterAdmin, topics: Collection[str], groups: Collection[str],
                 names: Mapping[str, str] | None = None, group_names: Mapping[str, str] | None = None) -> None:
    """Refuse, naming every missing right, before anything is written (`missing_rights`)."""
    missing, absent = missing_rights(source, target, topics, groups, names, group_names)
    refuse(missing, "for this migration")
    if absent:
        log.info("rights on %d topic(s) the target does not have yet are checked when they are created: %s",
                 len(absent), ", ".join(sorted(absent)[:10]) + (", ..." if len(absent) > 10 else ""))


def check_created(target: ClusterAdmin, topics: Collection[str]) -> None:
    """The rights on topics just created on the target, before any record is written to them."""
    missing, _ = topic_rights(target, "target", topics)
    if missing:
        raise MissingAcls(
            f"the migration's principal created {', '.join(sorted(topics))} on the target but lacks: "
            + "; ".join(str(m) for m in missing) + ". No record was written; grant these ACLs and trigger the run "
            "again (the topics are kept and reused)")
