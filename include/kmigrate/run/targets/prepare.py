"""Target topics (docs/DESIGN.md §7): created like the source's, set for the copy while it writes,
restored to the source's settings afterwards, and kept in line with what the source changed since
the pre-copy on the topics the run created."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka.admin import NewTopic

from kmigrate.config import ClusterConfig
from kmigrate.errors import TopicMismatch, TopicNotFound
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.targets import config_versions
from kmigrate.run.records.events import finished
from kmigrate.run.checks.rights import check_created
from kmigrate.run.records.snapshot import read_snapshot
from kmigrate.run.targets.topic_io import TopicFacts, create_all, facts_of, read_facts, wait_for_leaders

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
    "min.insync.replicas",             # set at creation with the replication factor (replication_settings)
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


def desired_configs(source_explicit: dict[str, str], source_effective: dict[str, str],
                    kafka_4: bool = True) -> dict[str, str]:
    """The configs a target topic keeps after the migration: the source's own settings, those a Kafka 4
    target (`kafka_4`) no longer knows mapped to their successors or dropped (`config_versions`)."""
    configs = {k: v for k, v in source_explicit.items() if k not in NOT_COPIED}
    configs.update({k: source_effective[k] for k in CARRY_EFFECTIVE if k in source_effective})
    return config_versions.for_target(configs, kafka_4)[0]


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


def _wanted(source: ClusterAdmin, target: ClusterAdmin, topic: str) -> dict[str, str]:
    return desired_configs(source.topic_configs(topic, explicit_only=True), source.topic_configs(topic),
                           config_versions.is_kafka_4(target.cluster))


def replication_settings(source_replicas: int, brokers: int, topic: str,
                         source_effective: dict[str, str]) -> tuple[int, dict[str, str]]:
    """The replication factor and min.insync.replicas of a new target topic: the source topic's
    (`source_replicas`; `source_effective`: its effective configs), capped by the target's broker
    count `brokers` (a warning says when), so that writes with acks=all find as many in-sync
    replicas on the target as on the source."""
    replicas = max(1, min(source_replicas, brokers))
    min_isr = int(source_effective.get("min.insync.replicas", "1"))
    if replicas < source_replicas:
        log.warning("%s: replication factor %d on the source, %d on the target (it has %d brokers); "
                    "min.insync.replicas %d", topic, source_replicas, replicas, brokers, min(min_isr, replicas))
    return replicas, {"min.insync.replicas": str(min(min_isr, replicas))}


def prepare_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str, *, writes: bool = True,
                         wait: bool = True, facts: TopicFacts | None = None,
                         to_create: list[NewTopic] | None = None, target_topic: str | None = None) -> TopicPlan:
    """Create the topic on the target like the source's (as `target_topic` where the run renames it;
    the plan returned names the target's topic), or check that the existing one matches.
    Fewer partitions or conflicting configs are refused; nothing is changed then. `writes`: the
    copy will write to the topic, so the COPY_SETTINGS are set on it (a new topic gets them at
    creation). `wait`: until a topic created has a leader for every partition (else the caller
    waits for all the topics it created at once). `facts`: what this reads of both clusters, read
    already for many topics (`read_facts`); `to_create`: a topic to create is added to it, for the
    caller to create with the others in as few requests as the controller takes (`topic_io.create_all`),
    not created here."""
    facts = facts or facts_of(source, target, topic, target_topic)
    topic = target_topic or topic  # from here on, the target's
    partitions, source_effective = facts.partitions, facts.source_effective
    wanted = desired_configs(facts.source_explicit, source_effective, config_versions.is_kafka_4(target.cluster))
    existing = facts.target_partitions
    if existing is None:
        replicas, replication = replication_settings(facts.source_replicas, facts.target_brokers, topic,
                                                     source_effective)
        if to_create is not None:
            to_create.append(NewTopic(topic, partitions, replicas, config={**wanted, **replication, **COPY_SETTINGS}))
            return TopicPlan(topic, partitions, wanted, True)
        created = target.create_topic(topic, partitions, {**wanted, **replication, **COPY_SETTINGS}, replicas,
                                      wait=wait)
        if created:
            log.info("created %s on %s with %d partitions, replication factor %d and %s", topic, target.cluster.name,
                     partitions, replicas, {**wanted, **replication})
            return TopicPlan(topic, partitions, wanted, True)
        existing = target.require_partition_count(topic)  # created concurrently: check it like any other
        facts = dataclasses.replace(facts, target_configs=target.topic_configs(topic))
    if existing < partitions:
        raise TopicMismatch(
            f"target topic {topic!r} has {existing} partitions, the source has {partitions}; records of partitions "
            f"{existing}..{partitions - 1} would have nowhere to go, and this run did not create the topic, so it "
            "does not change it. Nothing was written. If the target topic is not in use yet, add the partitions "
            f"there (kafka-topics.sh --alter --topic {topic} --partitions {partitions}) and re-run")
    if existing > partitions:
        log.warning("target topic %s has %d partitions, the source %d: the extra ones stay empty",
                    topic, existing, partitions)
    target_configs = facts.target_configs if facts.target_configs is not None else target.topic_configs(topic)
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
            target.alter_topic_configs(topic, relax, visible=True)  # the copy's first write follows
            log.info("%s on %s: %s set for the copy (restored after the verification)", topic, target.cluster.name,
                     relax)
    return TopicPlan(topic, partitions, wanted, False)


def reconcile_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str, *, created_by_run: bool,
                           target_topic: str | None = None, facts: TopicFacts | None = None) -> dict[str, Any]:
    """What the source topic gained since the target topic (`target_topic` where renamed) was
    created: partitions added and configs changed. Applied when this run created the target topic;
    refused (TopicMismatch, nothing changed) when it did not. Returns {"partitions": [before, after]
    or None, "configs": {name: [target value, source value]}}; both empty when the topics agree or
    the target topic does not exist yet (the copy creates it). `facts`: both clusters' side of it,
    read already for many topics (`read_facts`)."""
    there = target_topic or topic
    existing = facts.target_partitions if facts else target.partition_count(there)
    if existing is None:
        return {"partitions": None, "configs": {}}
    if facts:
        partitions, target_configs = facts.partitions, facts.target_configs
        wanted = desired_configs(facts.source_explicit, facts.source_effective, config_versions.is_kafka_4(target.cluster))
    else:
        partitions, target_configs = source.require_partition_count(topic), target.topic_configs(there)
        wanted = _wanted(source, target, topic)
    wrong = conflicts(wanted, target_configs)
    grown = [existing, partitions] if existing < partitions else None
    if (grown or wrong) and not created_by_run:
        changes = ([f"partitions {existing} -> {partitions}"] if grown else []) + \
                  [f"{k}={have!r} -> {want!r}" for k, (have, want) in sorted(wrong.items())]
        raise TopicMismatch(
            f"source topic {topic!r} changed after its target topic{'' if there == topic else f' {there!r}'} was made "
            f"({'; '.join(changes)}), and this run "
            "did not create the target topic, so it does not change it. Nothing was changed. If the target topic "
            "is not in use yet, apply the same change there (kafka-topics.sh / kafka-configs.sh --alter) and re-run "
            "this step")
    if grown:
        target.add_partitions(there, partitions)
    if wrong:
        target.alter_topic_configs(there, {k: want for k, (_have, want) in wrong.items()}, visible=True)
    return {"partitions": grown, "configs": {k: [have, want] for k, (have, want) in sorted(wrong.items())}}


def restore_target_topic(source: ClusterAdmin, target: ClusterAdmin, topic: str, target_topic: str | None = None
                         ) -> dict[str, list[str | None]]:
    """`restore_target_topics` of one topic (`target_topic`: its name on the target, where renamed)."""
    return restore_target_topics(source, target, {topic: target_topic or topic})[topic]


def restore_target_topics(source: ClusterAdmin, target: ClusterAdmin, topics: Mapping[str, str]
                          ) -> dict[str, dict[str, list[str | None]]]:
    """Put each COPY_SETTING of the target topics ({source topic: its name on the target}) back to the
    source's value: the source's own setting where it has one, else the target's default, set
    explicitly when that default differs from the source's effective value. A setting already equal
    is not touched, so a re-run changes nothing. Every topic's configs are read in one DescribeConfigs
    a cluster and changed in as few IncrementalAlterConfigs as the controller takes, waited for
    together (one at a time, 400 topics took 15 s of the window). Returns, by source topic,
    {config: [value during the copy, value now]}."""
    kafka_4 = config_versions.is_kafka_4(target.cluster)
    names = sorted(topics)
    every, own = source.topics_configs_and_own(names)
    explicit = {t: config_versions.for_target(own[t], kafka_4)[0] for t in names}
    effective = {t: {**config_versions.for_target(every[t], kafka_4)[0], **explicit[t]} for t in names}
    before = target.topics_configs([topics[t] for t in names])
    stale = {t: [k for k in COPY_SETTINGS if k in effective[t] and before[topics[t]].get(k) != effective[t][k]]
             for t in names}
    # waited for: a describe before the change reached the broker it asks would report the copy's values
    target.alter_topics_configs({topics[t]: ({k: explicit[t][k] for k in stale[t] if k in explicit[t]},
                                             [k for k in stale[t] if k not in explicit[t]]) for t in names},
                                visible=True)
    after = target.topics_configs([topics[t] for t in names if stale[t]])
    differs = {t: {k: effective[t][k] for k in stale[t] if after[topics[t]].get(k) != effective[t][k]}
               for t in names if stale[t]}
    if any(differs.values()):  # the target broker's default is not the source's
        target.alter_topics_configs({topics[t]: (values, ()) for t, values in differs.items()}, visible=True)
        after = target.topics_configs([topics[t] for t in names if stale[t]])
    return {t: {k: [before[topics[t]].get(k), after.get(topics[t], before[topics[t]]).get(k)] for k in COPY_SETTINGS}
            for t in names}


def prepare_targets(source: ClusterConfig, target: ClusterConfig, units: list[WorkUnit], *,
              manifest: Manifest | None = None, timeout_s: float = 10.0) -> None:
    """Before any task starts: both clusters answer, every topic of the plan exists on the source
    with the planned partitions, and each target topic exists like the source's (created when
    absent, recorded in the run's manifest as created by it; refused when it conflicts; set for
    the copy where the copy will write). Fails fast with one clear error."""
    needed: dict[str, int] = {}
    for unit in units:
        needed[unit.topic] = max(needed.get(unit.topic, 0), unit.partition + 1)
    names = {u.topic: u.target_topic for u in units if u.renamed}  # the run's renames: a topic's target name
    created = []
    with ClusterAdmin(source, timeout_s) as source_admin, ClusterAdmin(target, timeout_s) as target_admin:
        source_admin.check_reachable(timeout_s)
        target_admin.check_reachable(timeout_s)
        facts = read_facts(source_admin, target_admin, sorted(needed), names)
        for topic, partitions in sorted(needed.items()):
            count = facts[topic].partitions if topic in facts else source_admin.partition_count(topic)
            if count is None:
                raise TopicNotFound(
                    f"topic {topic!r} of the plan does not exist on the source cluster "
                    f"({source.bootstrap_servers}); check the topic selection, or start a new run id so that a "
                    "new snapshot is taken")
            if count < partitions:
                raise TopicMismatch(
                    f"topic {topic!r} has {count} partitions on the source, the plan has {partitions}; the plan is "
                    "from another cluster or the topic was re-created: start a new run id")
        if manifest is not None:
            explicit = ({t: f.source_explicit for t, f in facts.items()} if facts else
                        source_admin.topics_configs(sorted(needed), explicit_only=True))
            across = config_versions.changes_for(explicit, target)
            if across:
                log.warning("configs the target's Kafka version removed: %s", across)
                manifest.write_once(Part.attempt(Part.CONFIG_VERSIONS), {"topics": across})
            for topic in reconcile_topics(manifest, source_admin, target_admin, sorted(needed), names, facts):
                facts.pop(topic, None)  # the run changed the target topic: read it again
        by_topic: dict[str, list[WorkUnit]] = {}
        for unit in units:
            by_topic.setdefault(unit.topic, []).append(unit)
        to_create: list[NewTopic] = []
        written = _written_to(target_admin, {names.get(t, t): by_topic[t] for t in needed},
                              {names.get(t, t): f.target_partitions for t, f in facts.items()})
        for topic in sorted(needed):
            there = names.get(topic, topic)
            plan = prepare_target_topic(source_admin, target_admin, topic, facts=facts.get(topic), to_create=to_create,
                                        writes=there in written, target_topic=there)
            if plan.created:
                created.append(plan)
        made, existed, failure = create_all(target_admin, to_create, hidden=COPY_SETTINGS)
        created = [plan for plan in created if plan.topic in made]
        source_of = {there: topic for topic, there in names.items()}
        for there in sorted(existed):  # created by someone else meanwhile: checked like any other
            prepare_target_topic(source_admin, target_admin, source_of.get(there, there), writes=True,
                                 target_topic=there)
        if failure is not None:
            if made and manifest is not None:
                manifest.write_once(Part.attempt(Part.CREATED_TOPICS), {"topics": sorted(made)})
            raise failure
        made_now = [plan.topic for plan in created]
        if made_now and manifest is not None:  # before the wait: topics whose leaders are late are the run's too
            manifest.write_once(Part.attempt(Part.CREATED_TOPICS), {"topics": made_now})
        # the new topics' leaders, waited for together (one metadata request a round for all)
        wait_for_leaders(target_admin, {plan.topic: plan.partitions for plan in created})
        check_created(target_admin, made_now)


def _written_to(target_admin: ClusterAdmin, units: Mapping[str, Sequence[WorkUnit]],
                counts: Mapping[str, int | None]) -> set[str]:
    """The target topics that copying their `units` writes to: absent, short of a unit's partition, or
    a partition's end short of its unit's (`counts`: the target's partition counts read already, by
    topic; another topic's is read on its own). One ListOffsets for all the partitions, asked again for
    those answered with a retriable error (a leader moving, a topic just made)."""
    count = {there: counts[there] if there in counts else target_admin.partition_count(there) for there in units}
    written = {there for there, topic_units in units.items()
               if count[there] is None or any(u.partition >= count[there] for u in topic_units)}
    rest = [u for there, topic_units in units.items() if there not in written for u in topic_units]
    ends = target_admin.end_offsets((u.target_key for u in rest), retry=True) if rest else {}
    return written | {u.target_topic for u in rest if ends[u.target_key] < u.end_offset}


def created_topics(manifest: Manifest) -> set[str]:
    """The target topics this run created (recorded by the copy jobs' preflight)."""
    return {topic for part in manifest.parts() if part.startswith(f"{Part.CREATED_TOPICS}/")
            for topic in manifest.read(part)["topics"]}


def reconcile_topics(manifest: Manifest, source_admin: ClusterAdmin, target_admin: ClusterAdmin,
                     topics: Iterable[str], names: Mapping[str, str] | None = None,
                     facts: Mapping[str, TopicFacts] | None = None) -> dict[str, Any]:
    """What each of `topics` gained on the source since its target topic was made (partitions,
    configs) is applied to the target topics this run created, and refused with TopicMismatch for
    the others (nothing changed then). What was applied is recorded (part topic-changes/<attempt>)
    and returned: {topic: {"partitions": [before, after] | None, "configs": {name: [old, new]}}}, by
    source topic (`names`: a topic's name on the target, where the run renames it). Nothing once the
    run has resumed on the target: the topics are in use there."""
    if finished(manifest):
        return {}
    mine = created_topics(manifest)
    topics = list(topics)
    if facts is None:  # read here unless the caller read them ({}: each topic read on its own)
        facts = read_facts(source_admin, target_admin, topics, names)
    changes = {}
    for topic in topics:
        there = (names or {}).get(topic, topic)
        changed = reconcile_target_topic(source_admin, target_admin, topic, created_by_run=there in mine,
                                         target_topic=there, facts=facts.get(topic))
        if changed["partitions"] or changed["configs"]:
            changes[topic] = changed
    if changes:
        manifest.write_once(Part.attempt(Part.TOPIC_CHANGES), {"topics": changes})
    return changes


def topic_changes(manifest: Manifest) -> dict[str, Any]:
    """Every change `reconcile_topics` applied in this run, by topic, in order."""
    out: dict[str, Any] = {}
    for part in sorted(p for p in manifest.parts() if p.startswith(f"{Part.TOPIC_CHANGES}/")):
        for topic, change in manifest.read(part)["topics"].items():
            entry = out.setdefault(topic, {"partitions": None, "configs": {}})
            if change["partitions"]:
                entry["partitions"] = [(entry["partitions"] or change["partitions"])[0], change["partitions"][1]]
            entry["configs"].update(change["configs"])
    return out


def check_target_topics(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, topics: Sequence[str],
                        names: Mapping[str, str] | None = None) -> None:
    """Before the connectors stop: a target topic this run did not create must still agree with its
    source topic (partitions, configs), since the run will not change it; TopicMismatch otherwise,
    while the source is still live and nothing is stopped. Topics the run created are brought in
    line at the snapshot (`reconcile_target_topics`)."""
    mine = created_topics(manifest)
    others = [topic for topic in topics if (names or {}).get(topic, topic) not in mine]
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        facts = read_facts(source_admin, target_admin, others, names)  # {}: each topic read on its own
        for topic in others:
            reconcile_target_topic(source_admin, target_admin, topic, created_by_run=False,
                                   target_topic=(names or {}).get(topic, topic), facts=facts.get(topic))


def reconcile_target_topics(manifest: Manifest, source: ClusterConfig, target: ClusterConfig,
                            names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """At the snapshot, before the copy: what the source changed since the pre-copy (partitions
    added, configs altered) on the snapshot's topics, applied to the target topics this run
    created and refused for the others (`plan.reconcile_topics`)."""
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        return reconcile_topics(manifest, source_admin, target_admin, sorted(read_snapshot(manifest)["topics"]), names)


def restore_topic_configs(manifest: Manifest, source: ClusterConfig, target: ClusterConfig,
                          names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """After the verification, before anything else writes to the target topics: the configs the
    copy set (COPY_SETTINGS) back to the source's values on every snapshot topic. Idempotent (a
    setting already right is not touched); each attempt is recorded (part topic-configs/<attempt>)."""
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        restored = restore_target_topics(source_admin, target_admin, {topic: (names or {}).get(topic, topic)
                                                                      for topic in read_snapshot(manifest)["topics"]})
    result = {"topics": restored}
    manifest.write_once(Part.attempt(Part.TOPIC_CONFIGS), result)
    return result
