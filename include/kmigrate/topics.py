"""Target topic preparation: same partition count and the source's configs, CreateTime timestamps."""
from __future__ import annotations

import dataclasses
import logging

from kmigrate.admin import ClusterAdmin
from kmigrate.errors import TopicMismatch

log = logging.getLogger(__name__)

# Source configs that describe the source cluster's operation, not the data: never copied.
NOT_COPIED = frozenset({
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "message.timestamp.type",          # the target always keeps the source's timestamps (CreateTime)
    "remote.storage.enable",           # tiered storage is a property of the target cluster
    "local.retention.ms",
    "local.retention.bytes",
})
# Configs that decide which records survive and which are accepted: the source's effective values
# are always carried over, so a target broker with other defaults cannot delete or refuse what the
# source keeps.
CARRY_EFFECTIVE = ("cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms",
                   "min.compaction.lag.ms", "max.compaction.lag.ms", "max.message.bytes")
# Configs where a larger target value is no conflict.
AT_LEAST = frozenset({"max.message.bytes"})


@dataclasses.dataclass(frozen=True)
class TopicPlan:
    topic: str
    partitions: int
    configs: dict[str, str]
    created: bool


def desired_configs(source_explicit: dict[str, str], source_effective: dict[str, str]) -> dict[str, str]:
    configs = {k: v for k, v in source_explicit.items() if k not in NOT_COPIED}
    configs.update({k: source_effective[k] for k in CARRY_EFFECTIVE if k in source_effective})
    configs["message.timestamp.type"] = "CreateTime"
    return configs


def conflicts(desired: dict[str, str], target_configs: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """{config: (target value, wanted value)} for every config the target topic gets wrong."""
    out: dict[str, tuple[str | None, str]] = {}
    for name, wanted in desired.items():
        have = target_configs.get(name)
        if name in AT_LEAST and have is not None and int(have) >= int(wanted):
            continue
        if have != wanted:
            out[name] = (have, wanted)
    return out


def prepare_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str) -> TopicPlan:
    """Create the topic on the target like the source's, or check that the existing one matches.
    Fewer partitions or conflicting configs are refused; nothing is changed then."""
    partitions = source.require_partition_count(topic)
    wanted = desired_configs(source.topic_configs(topic, explicit_only=True), source.topic_configs(topic))
    existing = target.partition_count(topic)
    if existing is None:
        created = target.create_topic(topic, partitions, wanted)
        if created:
            log.info("created %s on %s with %d partitions and %s", topic, target.cluster.name, partitions, wanted)
            return TopicPlan(topic, partitions, wanted, True)
        existing = target.require_partition_count(topic)  # created concurrently: check it like any other
    if existing < partitions:
        raise TopicMismatch(
            f"target topic {topic!r} has {existing} partitions, the source has {partitions}; records of partitions "
            f"{existing}..{partitions - 1} would have nowhere to go. Increase them on the target "
            f"(kafka-topics.sh --alter --topic {topic} --partitions {partitions}) or delete the target topic")
    if existing > partitions:
        log.warning("target topic %s has %d partitions, the source %d: the extra ones stay empty",
                    topic, existing, partitions)
    wrong = conflicts(wanted, target.topic_configs(topic))
    if wrong:
        detail = ", ".join(f"{k}={have!r} (source needs {want!r})" for k, (have, want) in sorted(wrong.items()))
        raise TopicMismatch(
            f"target topic {topic!r} exists with conflicting configs: {detail}; change them on the target "
            "(kafka-configs.sh --alter) or delete the target topic")
    return TopicPlan(topic, partitions, wanted, False)
