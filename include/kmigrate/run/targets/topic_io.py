"""What preparing target topics reads of both clusters and creates on the target, for many topics
at once (docs/DESIGN.md §7): one metadata request and two DescribeConfigs a cluster, one
CreateTopics, whatever the number of topics. `kmigrate.run.targets.prepare` decides what to do with them."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from kmigrate.errors import KmigrateError
from kmigrate.kafka.admin import ClusterAdmin

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TopicFacts:
    """What preparing a target topic reads of both clusters, read for many topics at once (`read_facts`)."""

    partitions: int
    source_effective: dict[str, str]
    source_explicit: dict[str, str]
    source_replicas: int
    target_brokers: int
    target_partitions: int | None        # None: no such target topic
    target_configs: dict[str, str] | None


def read_facts(source: ClusterAdmin, target: ClusterAdmin, topics: Sequence[str]) -> dict[str, TopicFacts]:
    """TopicFacts of `topics` from one metadata request and two DescribeConfigs a cluster at most,
    whatever their number; {} when a topic is missing on the source or a read fails (each topic is
    then read on its own, which names what is wrong)."""
    try:
        source_topics = source.client.list_topics(timeout=source.timeout_s).topics
        target_meta = target.client.list_topics(timeout=target.timeout_s)
        if any(t not in source_topics or source_topics[t].error is not None for t in topics):
            return {}
        existing = [t for t in topics if t in target_meta.topics and target_meta.topics[t].error is None]
        effective, explicit = source.topics_configs(topics), source.topics_configs(topics, explicit_only=True)
        on_target = target.topics_configs(existing)
    except Exception as exc:  # noqa: BLE001 - the per-topic reads say what is wrong
        log.info("reading the topics at once failed (%s); each is read on its own", exc)
        return {}
    return {t: TopicFacts(len(source_topics[t].partitions), effective[t], explicit[t],
                          max(len(p.replicas) for p in source_topics[t].partitions.values()), len(target_meta.brokers),
                          len(target_meta.topics[t].partitions) if t in on_target else None, on_target.get(t))
            for t in topics}


def facts_of(source: ClusterAdmin, target: ClusterAdmin, topic: str) -> TopicFacts:
    """TopicFacts of one topic, read on its own."""
    described = source.client.list_topics(topic, timeout=source.timeout_s).topics.get(topic)
    partitions = source.require_partition_count(topic)
    existing = target.partition_count(topic)
    return TopicFacts(partitions, source.topic_configs(topic), source.topic_configs(topic, explicit_only=True),
                      max(len(p.replicas) for p in described.partitions.values()),
                      len(target.client.list_topics(timeout=target.timeout_s).brokers), existing,
                      target.topic_configs(topic) if existing is not None else None)


def create_all(target: ClusterAdmin, new_topics: Sequence[NewTopic], hidden: Collection[str] = ()
               ) -> tuple[set[str], set[str], KmigrateError | None]:
    """Create `new_topics` in one request; (the topics created, those that existed already, the
    first failure of the others). `hidden`: configs the log line leaves out."""
    made: set[str] = set()
    existed: set[str] = set()
    failure = None
    if not new_topics:
        return made, existed, failure
    futures = target.client.create_topics(list(new_topics), operation_timeout=target.timeout_s,
                                          request_timeout=target.timeout_s)
    for new in new_topics:
        try:
            futures[new.topic].result(timeout=target.timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                log.warning("%s: topic %s already exists", target.cluster.name, new.topic)
                existed.add(new.topic)
            elif failure is None:
                failure = KmigrateError(f"{target.cluster.name}: creating topic {new.topic!r} failed: "
                                        f"{exc.args[0].str()}")
            continue
        made.add(new.topic)
        log.info("created %s on %s with %d partitions, replication factor %d and %s", new.topic, target.cluster.name,
                 new.num_partitions, new.replication_factor, {k: v for k, v in new.config.items() if k not in hidden})
    return made, existed, failure
