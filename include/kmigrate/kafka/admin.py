"""Cluster admin: watermarks, topic shape and configs, topic creation, DeleteRecords (confluent-kafka)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable, KmigrateError, TopicNotFound
from kmigrate.kafka.group_admin import Committed, GroupCalls
from kmigrate.kafka.wire import time_left

log = logging.getLogger(__name__)

# A partition just created, not served yet: its leader has no log for it, or the client's metadata (from
# a broker behind the one that answered the wait for its leaders) has no leader for it yet.
NOT_SERVED_YET = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._NOENT, KafkaError._UNKNOWN_PARTITION,
                            KafkaError._UNKNOWN_TOPIC})
# Errors that pass once a partition's leadership settles: librdkafka does not flag the epoch ones
# retriable, yet a broker just restarted answers UNKNOWN_LEADER_EPOCH until its metadata catches up.
RETRIABLE = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._WAIT_COORD,
    KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT, KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE,
})

# The most metadata records the KRaft controller writes for one request: QuorumController's
# MAX_RECORDS_PER_USER_OP and ReplicationControlManager's MAX_PARTITIONS_PER_BATCH, both 10,000 in
# Kafka 4.3.1 (constants: no broker setting changes them). CreateTopics writes a TopicRecord, a
# ConfigRecord a config and a PartitionRecord a partition of each topic (validate_only as well), and a
# request over the limit is refused whole with POLICY_VIOLATION: "Excessively large number of
# partitions per request." when its partitions alone pass it, else "Unable to perform excessively large
# batch operation." CreatePartitions writes a PartitionRecord a new partition.
MAX_RECORDS_PER_REQUEST = 10_000

T = TypeVar("T")


def in_batches(items: Iterable[T], size: Callable[[T], int], limit: int = MAX_RECORDS_PER_REQUEST) -> list[list[T]]:
    """`items` in their order, cut into batches whose `size`s add up to at most `limit`; an item larger
    than `limit` is alone in its batch (the broker refuses it, and its error names it)."""
    out: list[list[T]] = []
    total = 0
    for item in items:
        n = size(item)
        if not out or total + n > limit:
            out.append([])
            total = 0
        out[-1].append(item)
        total += n
    return out


class ClusterAdmin(GroupCalls):
    """Admin and offset look-ups for one cluster, every call with an explicit timeout (the consumer
    groups' calls: `GroupCalls`)."""

    def __init__(self, cluster: ClusterConfig, timeout_s: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._admin = cluster.client(AdminClient, cluster.admin())
        self._offsets_reader: Consumer | None = None
        self._connected = False

    def close(self) -> None:
        """Close the offsets reader and let go of the admin client: AdminClient has no close(),
        its threads end when the last reference goes, and a copy's writer, which keeps this
        object, is only freed by the garbage collector. Not to be used after this."""
        if self._offsets_reader is not None:
            self._offsets_reader.close()
            self._offsets_reader = None
        self._admin = None  # type: ignore[assignment]

    def __enter__(self) -> ClusterAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> AdminClient:
        """The underlying admin client, for a metadata request of the caller's own."""
        return self._admin

    def _connect(self, topic: str) -> None:
        """Before a new client's first request to partition leaders: one Metadata request (`topic`'s).
        librdkafka's admin asks for the leaders at once, and when its broker connection is not up yet
        asks again 1 s and 2 s later: measured on the local stack, 3.0 s for 14 of 40 new clients'
        first ListOffsets, none after this request. A failure is left to the request's own."""
        if self._connected:
            return
        self._connected = True
        try:
            self._admin.list_topics(topic, timeout=min(self.timeout_s, 5.0))
        except KafkaException:
            pass

    def _reader(self) -> Consumer:
        if self._offsets_reader is None:
            self._offsets_reader = self.cluster.client(Consumer, self.cluster.consumer("kmigrate-offsets-reader"))
        return self._offsets_reader

    # ------------------------------------------------------------------ offsets

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of one partition. Retriable errors (a leader moving
        or not elected yet, as right after creation) are retried until the admin timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return self._reader().get_watermark_offsets(TopicPartition(topic, partition), timeout=time_left(deadline))
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() and error.code() not in RETRIABLE or time.monotonic() > deadline:
                    raise self._unavailable(f"watermarks of {topic}[{partition}]", exc) from exc
                time.sleep(0.1)

    def watermarks_of(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """`watermarks` of many partitions in two ListOffsets rounds (retriable errors asked again)."""
        keys = list(partitions)
        starts = self._list_offsets(keys, OffsetSpec.earliest(), "log start offset", retry=True)
        ends = self._list_offsets(keys, OffsetSpec.latest(), "end offset", retry=True)
        return {key: (starts[key], ends[key]) for key in keys}

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's partition count (one metadata request); TopicNotFound naming a missing one."""
        try:
            meta = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable("the topic list", exc) from exc
        counts = {}
        for topic in topics:
            if topic not in meta.topics or meta.topics[topic].error is not None:
                counts[topic] = self.require_partition_count(topic)  # asked alone: it names what is wrong
            else:
                counts[topic] = len(meta.topics[topic].partitions)
        return counts

    def end_offsets(self, partitions: Iterable[tuple[str, int]], *, retry: bool = False) -> dict[tuple[str, int], int]:
        """The high watermarks of many partitions, in one ListOffsets round (default: no retries)."""
        return self._list_offsets(partitions, OffsetSpec.latest(), "end offset", retry=retry)

    def stable_ends(self, partitions: Iterable[tuple[str, int]], *, retry: bool = False) -> dict[tuple[str, int], int]:
        """The last stable offsets of many partitions (one ListOffsets round, read_committed)."""
        return self._list_offsets(partitions, OffsetSpec.latest(), "last stable offset", retry=retry,
                                  isolation=IsolationLevel.READ_COMMITTED)

    def start_offsets(self, partitions: Iterable[tuple[str, int]], *, retry: bool = False) -> dict[tuple[str, int], int]:
        """The log start offsets of many partitions, in one ListOffsets round (by default no retries)."""
        return self._list_offsets(partitions, OffsetSpec.earliest(), "log start offset", retry=retry)

    def wait_until_served(self, partitions: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Until the leader of each of `partitions` (topics just created) answers for it. A broker
        makes a new partition's log once it has applied the metadata record that creates it, and
        answers UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER until then; with more than one broker a
        cluster, the metadata another broker gives (a leader for every partition) runs ahead of the
        leader's own. The admin client keeps the leaders it was first told of: measured on two
        brokers a cluster, 400 of 20,000 new partitions were still asked of a broker that did not
        lead them 5 minutes on, while a new client found all served; so a round that finds some
        unserved is followed by one of a new client. ClusterUnavailable naming a partition still
        unserved after `timeout_s`."""
        wanted = [TopicPartition(t, p) for t, p in partitions]
        deadline = time.monotonic() + timeout_s
        client = self._admin
        while wanted:
            futures = client.list_offsets({tp: OffsetSpec.latest() for tp in wanted},
                                          request_timeout=max(1.0, time_left(deadline)))
            wanted = []
            for tp, future in futures.items():
                try:
                    future.result()
                except KafkaException as exc:
                    error = exc.args[0]
                    if (not error.retriable() and error.code() not in RETRIABLE | NOT_SERVED_YET
                            or time.monotonic() > deadline):
                        raise self._unavailable(f"end offset of {tp.topic}[{tp.partition}]", exc) from exc
                    wanted.append(tp)
            if wanted:
                time.sleep(0.2)
                client = self.cluster.client(AdminClient, self.cluster.admin())

    def _list_offsets(self, partitions: Iterable[tuple[str, int]], spec: OffsetSpec, what: str, *,
                      retry: bool = False, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                      ) -> dict[tuple[str, int], int]:
        """One ListOffsets round for `partitions`; with `retry`, the partitions answered with a
        retriable error (a leader moving, not elected yet) are asked again until the admin timeout."""
        wanted = [TopicPartition(t, p) for t, p in partitions]
        out: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + self.timeout_s
        if wanted:
            self._connect(wanted[0].topic)
        while wanted:
            futures = self._admin.list_offsets({tp: spec for tp in wanted}, isolation_level=isolation,
                                               request_timeout=time_left(deadline))
            wanted = []
            for tp, future in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as exc:
                    error = exc.args[0]
                    if (not retry or not error.retriable() and error.code() not in RETRIABLE
                            or time.monotonic() > deadline):
                        raise self._unavailable(f"{what} of {tp.topic}[{tp.partition}]", exc) from exc
                    wanted.append(tp)
            if wanted:
                time.sleep(0.1)
        return out

    def wait_for_end(self, topic: str, partition: int, at_least: int, timeout_s: float = 30.0) -> int:
        """Poll until the partition's high watermark is >= `at_least` (a marker landed); returns it."""
        deadline = time.monotonic() + timeout_s
        while True:
            _, high = self.watermarks(topic, partition)
            if high >= at_least:
                return high
            if time.monotonic() > deadline:
                raise ClusterUnavailable(
                    f"{self.cluster.name}: {topic}[{partition}] end offset stayed at {high} < {at_least} for "
                    f"{timeout_s:.0f}s (a transaction marker did not land); check the broker log"
                )
            time.sleep(0.005)

    def check_reachable(self, timeout_s: float = 10.0) -> None:
        """One metadata request; ClusterUnavailable naming the bootstrap servers when it fails."""
        try:
            self._admin.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise ClusterUnavailable(
                f"{self.cluster.name} cluster at {self.cluster.bootstrap_servers} did not answer within "
                f"{timeout_s:.0f}s ({exc.args[0].str()}); check bootstrap.servers, that the cluster is up and "
                "that this host can reach it") from exc

    # ------------------------------------------------------------------ topics

    def cluster_id(self) -> str:
        try:
            return str(self._admin.describe_cluster(request_timeout=self.timeout_s).result(
                timeout=self.timeout_s).cluster_id)
        except KafkaException as exc:
            raise self._unavailable("the cluster id", exc) from exc

    def list_topics(self) -> list[str]:
        try:
            meta = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable("the topic list", exc) from exc
        return sorted(meta.topics)

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions, or None when the topic does not exist."""
        try:
            meta = self._admin.list_topics(topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable(f"metadata of {topic}", exc) from exc
        described = meta.topics.get(topic)
        if described is None or described.error is not None and described.error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return None
        if described.error is not None:
            raise KmigrateError(f"{self.cluster.name}: topic {topic}: {described.error}")
        return len(described.partitions)

    def require_partition_count(self, topic: str) -> int:
        count = self.partition_count(topic)
        if count is None:
            raise TopicNotFound(f"{self.cluster.name}: topic {topic!r} does not exist; check the topic selection")
        return count

    def topic_configs(self, topic: str, *, explicit_only: bool = False) -> dict[str, str]:
        """The topic's configs; with `explicit_only`, only those set on the topic itself."""
        return self.topics_configs([topic], explicit_only=explicit_only)[topic]

    def topics_configs(self, topics: Iterable[str], *, explicit_only: bool = False) -> dict[str, dict[str, str]]:
        """topic_configs of many topics in one DescribeConfigs request."""
        return self.topics_configs_and_own(topics)[1 if explicit_only else 0]

    def topics_configs_and_own(self, topics: Iterable[str]) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """Many topics' configs and those set on each topic itself, both from one DescribeConfigs request."""
        resources = {topic: ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics}
        if not resources:
            return {}, {}
        futures = self._admin.describe_configs(list(resources.values()), request_timeout=self.timeout_s)
        every, own = {}, {}
        for topic, resource in resources.items():
            try:
                entries = futures[resource].result(timeout=self.timeout_s)
            except KafkaException as exc:
                raise self._unavailable(f"configs of {topic}", exc) from exc
            every[topic] = {name: entry.value for name, entry in entries.items() if entry.value is not None}
            own[topic] = {name: value for name, value in every[topic].items()
                          if entries[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
        return every, own

    def create_topic(self, topic: str, partitions: int, configs: Mapping[str, str], replicas: int = -1,
                     wait: bool = True) -> bool:
        """Create the topic (`replicas`: its replication factor; -1, the broker's default); False
        (with a warning) when it already exists. `wait`: until every partition has a leader (else
        the caller waits for its topics together, `wait_for_topics`)."""
        futures = self._admin.create_topics(
            [NewTopic(topic, partitions, replicas, config=dict(configs))], operation_timeout=self.timeout_s,
            request_timeout=self.timeout_s)
        for future in futures.values():
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    log.warning("%s: topic %s already exists", self.cluster.name, topic)
                    return False
                raise KmigrateError(f"{self.cluster.name}: creating topic {topic!r} failed: {exc.args[0].str()}") from exc
        if wait:
            self.wait_for_topics({topic: partitions})
        return True

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete: Iterable[str] = (),
                            visible: bool = False) -> None:
        """Set some of the topic's configs and remove the overrides of others (IncrementalAlterConfigs:
        the topic's other configs stay as they are). `visible`: return once the values set, and the
        overrides removed, read back. A broker applies the change when the controller's record reaches
        it, and a copy that wrote at once could have its first batches stamped under the old settings
        (LogAppendTime, say)."""
        self.alter_topics_configs({topic: (set_configs, delete)}, visible=visible)

    def alter_topics_configs(self, changes: Mapping[str, tuple[Mapping[str, str], Iterable[str]]], *,
                             visible: bool = False) -> None:
        """`alter_topic_configs` of many topics, {topic: (configs to set, overrides to remove)}: in
        IncrementalAlterConfigs requests of at most MAX_RECORDS_PER_REQUEST entries (the controller
        writes a record an entry), sent at once; with `visible`, then until every topic reads its
        change back, one DescribeConfigs a round for those still behind. KmigrateError naming the
        first topic refused (the others of its request may have changed: a retry sets them again)."""
        wanted = {topic: (dict(set_configs), set(delete)) for topic, (set_configs, delete) in changes.items()
                  if set_configs or delete}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            *(ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
              for name, value in sorted(set_configs.items())),
            *(ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in sorted(delete))])
            for topic, (set_configs, delete) in wanted.items()]
        sent = [self._admin.incremental_alter_configs(batch, request_timeout=self.timeout_s)
                for batch in in_batches(resources, lambda resource: len(resource.incremental_configs))]
        for futures in sent:
            for resource, future in futures.items():
                try:
                    future.result(timeout=self.timeout_s)
                except KafkaException as exc:
                    names = ", ".join(entry.name for entry in resource.incremental_configs)
                    raise KmigrateError(f"{self.cluster.name}: changing configs {names} of topic {resource.name!r} "
                                        f"failed: {exc.args[0].str()}; check the principal's AlterConfigs "
                                        "permission on the topic") from exc
        deadline = time.monotonic() + self.timeout_s
        behind = sorted(wanted) if visible else []
        while behind:
            own = self.topics_configs(behind, explicit_only=True)
            behind = [topic for topic in behind if not shows_change(own[topic], *wanted[topic])]
            if behind and time.monotonic() > deadline:
                set_configs, removed = wanted[behind[0]]
                raise ClusterUnavailable(f"{self.cluster.name}: topic {behind[0]!r} accepted configs {set_configs} "
                                         f"(overrides removed: {sorted(removed)}) but did not show them within "
                                         f"{self.timeout_s:.0f} s" + (f" ({len(behind) - 1} more topics alike)"
                                                                      if len(behind) > 1 else "") +
                                         "; nothing was written. Check the brokers' metadata (a broker behind its "
                                         "controller), then retry")
            if behind:
                time.sleep(0.02)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow the topic to `total` partitions (CreatePartitions, at most MAX_RECORDS_PER_REQUEST new
        partitions a request: the controller refuses more), and wait until each has a leader."""
        current = self.partition_count(topic) or 0
        steps = list(range(current + MAX_RECORDS_PER_REQUEST, total, MAX_RECORDS_PER_REQUEST)) + [total]
        for step in steps:
            futures = self._admin.create_partitions([NewPartitions(topic, step)], operation_timeout=self.timeout_s,
                                                    request_timeout=self.timeout_s)
            for future in futures.values():
                try:
                    future.result(timeout=self.timeout_s)
                except KafkaException as exc:
                    raise KmigrateError(f"{self.cluster.name}: growing topic {topic!r} to {step} partitions failed: "
                                        f"{exc.args[0].str()}") from exc
        self.wait_for_topics({topic: total})

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """DeleteRecords(before=`before_offset`); returns the new log start offset."""
        self._connect(topic)
        futures = self._admin.delete_records([TopicPartition(topic, partition, before_offset)],
                                             request_timeout=self.timeout_s, operation_timeout=self.timeout_s)
        for future in futures.values():
            try:
                return future.result(timeout=self.timeout_s).low_watermark
            except KafkaException as exc:
                raise KmigrateError(
                    f"{self.cluster.name}: DeleteRecords on {topic}[{partition}] before {before_offset} failed: "
                    f"{exc.args[0].str()}") from exc
        raise AssertionError("no DeleteRecords result")

    def wait_for_topics(self, partitions: Mapping[str, int]) -> None:
        """Until each topic is in the metadata with its count of partitions, each led by a broker."""
        deadline = time.monotonic() + self.timeout_s
        waiting = dict(partitions)
        seen: dict[str, str] = {}  # what the last answer said of each topic waited for, for the error
        while waiting:
            # the topics waited for alone (a metadata request for all of a big cluster's topics costs more)
            futures = self._admin.describe_topics(TopicCollection(sorted(waiting)), request_timeout=self.timeout_s)
            for topic, future in futures.items():
                try:
                    described = future.result(timeout=self.timeout_s)
                except KafkaException as exc:
                    seen[topic] = exc.args[0].str()
                    continue  # not known to the broker answering yet
                led = sum(p.leader is not None for p in described.partitions)
                if len(described.partitions) == waiting[topic] and led == waiting[topic]:
                    del waiting[topic]
                else:
                    seen[topic] = f"{led} of {waiting[topic]} partitions led"
            if waiting and time.monotonic() > deadline:
                said = "; ".join(f"{topic}: {seen.get(topic, 'no answer')}" for topic in sorted(waiting))
                raise ClusterUnavailable(
                    f"{self.cluster.name}: topics {', '.join(sorted(waiting))} have no leader for every partition "
                    f"{self.timeout_s:.0f}s after creation ({said}); check the broker log")
            if waiting:
                time.sleep(0.05)

    def _unavailable(self, what: str, exc: KafkaException) -> KmigrateError:
        return ClusterUnavailable(
            f"{self.cluster.name} ({self.cluster.bootstrap_servers}): reading {what} failed: {exc.args[0].str()}; "
            "check that the cluster is reachable and the credentials are right"
        )


def shows_change(own: Mapping[str, str], set_configs: Mapping[str, str], removed: set[str]) -> bool:
    """Whether a topic's own configs `own` hold `set_configs` and none of `removed`."""
    return all(own.get(name) == value for name, value in set_configs.items()) and not removed & own.keys()
