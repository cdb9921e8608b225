"""What preparing target topics reads of both clusters and creates on the target, for many topics
at once (docs/DESIGN.md §7): one metadata request and two DescribeConfigs a cluster, and CreateTopics
in batches the KRaft controller takes (`kmigrate.kafka.topic_batches`: at most MAX_RECORDS_PER_REQUEST
records a request), sent at once, whatever the number of topics. `kmigrate.run.targets.prepare`
decides what to do with them."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Mapping, Sequence

from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from kmigrate.errors import ClusterUnavailable, KmigrateError
from kmigrate.kafka.admin import MAX_RECORDS_PER_REQUEST, ClusterAdmin
from kmigrate.kafka.topic_batches import create_topics, topic_records

log = logging.getLogger(__name__)

# How long past the admin timeout the leaders of topics just created are waited for, a partition: a
# broker shows the topics of a CreateTopics only once it has made the logs of the requests before it,
# so with many partitions the last batch's wait grows. Measured on the local stack's single broker:
# 2.4 ms a partition idle (a second request's topics led 9.5 s after a first one's 4,000 partitions),
# 5 ms while other suites ran; twice that here. A bound, not a cost: the wait ends once they are led.
LOG_CREATION_S = 0.01


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


def read_facts(source: ClusterAdmin, target: ClusterAdmin, topics: Sequence[str],
               names: Mapping[str, str] | None = None) -> dict[str, TopicFacts]:
    """TopicFacts of `topics` (by their source names; `names`: a topic's name on the target, where the
    run renames it) from one metadata request and two DescribeConfigs a cluster at most, whatever
    their number; {} when a topic is missing on the source or a read fails (each topic is then read
    on its own, which names what is wrong)."""
    there = {t: (names or {}).get(t, t) for t in topics}
    try:
        source_topics = source.client.list_topics(timeout=source.timeout_s).topics
        target_meta = target.client.list_topics(timeout=target.timeout_s)
        if any(t not in source_topics or source_topics[t].error is not None for t in topics):
            return {}
        existing = [there[t] for t in topics
                    if there[t] in target_meta.topics and target_meta.topics[there[t]].error is None]
        effective, explicit = source.topics_configs_and_own(topics)
        on_target = target.topics_configs(existing)
    except Exception as exc:  # noqa: BLE001 - the per-topic reads say what is wrong
        log.info("reading the topics at once failed (%s); each is read on its own", exc)
        return {}
    return {t: TopicFacts(len(source_topics[t].partitions), effective[t], explicit[t],
                          max(len(p.replicas) for p in source_topics[t].partitions.values()), len(target_meta.brokers),
                          len(target_meta.topics[there[t]].partitions) if there[t] in on_target else None,
                          on_target.get(there[t]))
            for t in topics}


def facts_of(source: ClusterAdmin, target: ClusterAdmin, topic: str, target_topic: str | None = None) -> TopicFacts:
    """TopicFacts of one topic, read on its own (`target_topic`: its name on the target, if renamed)."""
    there = target_topic or topic
    described = source.client.list_topics(topic, timeout=source.timeout_s).topics.get(topic)
    partitions = source.require_partition_count(topic)
    existing = target.partition_count(there)
    return TopicFacts(partitions, source.topic_configs(topic), source.topic_configs(topic, explicit_only=True),
                      max(len(p.replicas) for p in described.partitions.values()),
                      len(target.client.list_topics(timeout=target.timeout_s).brokers), existing,
                      target.topic_configs(there) if existing is not None else None)


def create_all(target: ClusterAdmin, new_topics: Sequence[NewTopic], hidden: Collection[str] = ()
               ) -> tuple[set[str], set[str], KmigrateError | None]:
    """Create `new_topics` in batches the controller takes, sent at once (`create_topics`); (the topics
    created, those that existed already, the first failure of the others). A topic too large for any
    one request is refused before anything is created. `hidden`: configs the log line leaves out."""
    made: set[str] = set()
    existed: set[str] = set()
    failure = None
    if not new_topics:
        return made, existed, failure
    for new in new_topics:
        if topic_records(new) > MAX_RECORDS_PER_REQUEST:
            raise KmigrateError(
                f"{target.cluster.name}: topic {new.topic!r} needs {new.num_partitions} partitions and "
                f"{len(new.config or {})} configs, {topic_records(new)} records of the KRaft controller, more than "
                f"the {MAX_RECORDS_PER_REQUEST} it writes for one request, so Kafka refuses to create it. Nothing was "
                "created. Create it on the target with the source topic's configs and fewer partitions, grow it "
                f"(kafka-topics.sh --alter --topic {new.topic} --partitions N, at most {MAX_RECORDS_PER_REQUEST} "
                f"more a time) to {new.num_partitions}, and re-run: an existing topic like the source's is used")
    outcome = create_topics(target, new_topics)
    for new in new_topics:
        exc = outcome[new.topic]
        if exc is not None:
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


def wait_for_leaders(target: ClusterAdmin, partitions: Mapping[str, int]) -> None:
    """`ClusterAdmin.wait_for_topics` for topics just created, given LOG_CREATION_S a partition more
    than the admin timeout, then each partition's leader answering for it (`wait_until_served`; the
    metadata runs ahead of the leader's log on a cluster of several brokers): ClusterUnavailable
    naming the topics without a leader, or a partition unserved, after that."""
    deadline = time.monotonic() + LOG_CREATION_S * sum(partitions.values())
    while True:
        try:
            target.wait_for_topics(partitions)
            break
        except ClusterUnavailable:
            if time.monotonic() > deadline:
                raise
    target.wait_until_served([(t, p) for t, n in partitions.items() for p in range(n)],
                             max(target.timeout_s, deadline - time.monotonic()))
