"""Target topics: created like the source's, relaxed while the copy writes to them, brought back to
the source's settings before anything else writes to them (docs/DESIGN.md, target topics).

Three moments:
- `prepare_target_topic` (before a copy): create the topic with the source's partitions and
  configs, or check an existing one; where the copy will write, set the COPY_SETTINGS that keep
  the source's timestamps.
- `reconcile_target_topic` (at the snapshot): what the source changed since the pre-copy
  (partitions added, configs altered) is applied to a topic this run created, refused on another.
- `restore_target_topic` (after the verification, before connectors resume): every COPY_SETTING
  back to the source's value.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kmigrate.admin import ClusterAdmin
from kmigrate.errors import TopicMismatch

log = logging.getLogger(__name__)

LONG_MAX = str(2**63 - 1)
# What the copy sets on a target topic while it writes: the broker then keeps each copied record's
# timestamp (LogAppendTime would replace it, a bound on timestamps in the past or the future would
# refuse old or skewed ones the source accepted). Restored to the source's values afterwards.
COPY_SETTINGS = {
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": LONG_MAX,
}
# Source configs that describe the source cluster's operation, not the data: never copied.
NOT_COPIED = frozenset({
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
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
    """The configs a target topic keeps after the migration: the source's own settings."""
    configs = {k: v for k, v in source_explicit.items() if k not in NOT_COPIED}
    configs.update({k: source_effective[k] for k in CARRY_EFFECTIVE if k in source_effective})
    return configs


def conflicts(desired: dict[str, str], target_configs: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """{config: (target value, wanted value)} for every config the target topic gets wrong; the
    COPY_SETTINGS are not compared (the copy sets them, the restore puts them back)."""
    out: dict[str, tuple[str | None, str]] = {}
    for name, wanted in desired.items():
        if name in COPY_SETTINGS:
            continue
        have = target_configs.get(name)
        if name in AT_LEAST and have is not None and int(have) >= int(wanted):
            continue
        if have != wanted:
            out[name] = (have, wanted)
    return out


def _wanted(source: ClusterAdmin, topic: str) -> dict[str, str]:
    return desired_configs(source.topic_configs(topic, explicit_only=True), source.topic_configs(topic))


def prepare_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str, *, writes: bool = True) -> TopicPlan:
    """Create the topic on the target like the source's, or check that the existing one matches.
    Fewer partitions or conflicting configs are refused; nothing is changed then. `writes`: the
    copy will write to the topic, so the COPY_SETTINGS are set on it (a new topic gets them at
    creation)."""
    partitions = source.require_partition_count(topic)
    wanted = _wanted(source, topic)
    existing = target.partition_count(topic)
    if existing is None:
        created = target.create_topic(topic, partitions, {**wanted, **COPY_SETTINGS})
        if created:
            log.info("created %s on %s with %d partitions and %s", topic, target.cluster.name, partitions, wanted)
            return TopicPlan(topic, partitions, wanted, True)
        existing = target.require_partition_count(topic)  # created concurrently: check it like any other
    if existing < partitions:
        raise TopicMismatch(
            f"target topic {topic!r} has {existing} partitions, the source has {partitions}; records of partitions "
            f"{existing}..{partitions - 1} would have nowhere to go, and this run did not create the topic, so it "
            "does not change it. Nothing was written. If the target topic is not in use yet, add the partitions "
            f"there (kafka-topics.sh --alter --topic {topic} --partitions {partitions}) and re-run")
    if existing > partitions:
        log.warning("target topic %s has %d partitions, the source %d: the extra ones stay empty",
                    topic, existing, partitions)
    target_configs = target.topic_configs(topic)
    wrong = conflicts(wanted, target_configs)
    if wrong:
        detail = ", ".join(f"{k}={have!r} (source has {want!r})" for k, (have, want) in sorted(wrong.items()))
        raise TopicMismatch(
            f"target topic {topic!r} exists with configs that differ from the source's: {detail}; this run did not "
            "create it, so it does not change it. Nothing was written. Set them on the target "
            f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic}) if that is right for the "
            "applications that use it, and re-run")
    if writes:
        relax = {k: v for k, v in COPY_SETTINGS.items() if target_configs.get(k) != v}
        if relax:
            target.alter_topic_configs(topic, relax)
            log.info("%s on %s: %s set for the copy (restored after the verification)", topic, target.cluster.name,
                     relax)
    return TopicPlan(topic, partitions, wanted, False)


def reconcile_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str, *, created_by_run: bool
                           ) -> dict[str, Any]:
    """What the source topic gained since the target topic was created: partitions added and
    configs changed. Applied when this run created the target topic; refused (TopicMismatch,
    nothing changed) when it did not. Returns {"partitions": [before, after] or None, "configs":
    {name: [target value, source value]}}; both empty when the topics agree or the target topic
    does not exist yet (the copy creates it)."""
    existing = target.partition_count(topic)
    if existing is None:
        return {"partitions": None, "configs": {}}
    partitions = source.require_partition_count(topic)
    wrong = conflicts(_wanted(source, topic), target.topic_configs(topic))
    grown = [existing, partitions] if existing < partitions else None
    if (grown or wrong) and not created_by_run:
        changes = ([f"partitions {existing} -> {partitions}"] if grown else []) + \
                  [f"{k}={have!r} -> {want!r}" for k, (have, want) in sorted(wrong.items())]
        raise TopicMismatch(
            f"source topic {topic!r} changed after its target topic was made ({'; '.join(changes)}), and this run "
            "did not create the target topic, so it does not change it. Nothing was changed. If the target topic "
            "is not in use yet, apply the same change there (kafka-topics.sh / kafka-configs.sh --alter) and re-run "
            "this step")
    if grown:
        target.add_partitions(topic, partitions)
    if wrong:
        target.alter_topic_configs(topic, {k: want for k, (_have, want) in wrong.items()})
    return {"partitions": grown, "configs": {k: [have, want] for k, (have, want) in sorted(wrong.items())}}


def restore_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str) -> dict[str, list[str | None]]:
    """Put each COPY_SETTING of the target topic back to the source's value: the source's own
    setting where it has one, else the target's default, set explicitly when that default differs
    from the source's effective value. A setting already equal is not touched, so a re-run
    changes nothing. Returns {config: [value during the copy, value now]}."""
    explicit, effective = source.topic_configs(topic, explicit_only=True), source.topic_configs(topic)
    before = target.topic_configs(topic)
    stale = [k for k in COPY_SETTINGS if k in effective and before.get(k) != effective[k]]
    target.alter_topic_configs(topic, {k: explicit[k] for k in stale if k in explicit},
                               delete=[k for k in stale if k not in explicit])
    after = target.topic_configs(topic)
    differs = {k: effective[k] for k in stale if after.get(k) != effective[k]}
    if differs:  # the target broker's default is not the source's
        target.alter_topic_configs(topic, differs)
        after = target.topic_configs(topic)
    return {k: [before.get(k), after.get(k)] for k in COPY_SETTINGS}
