"""The consumer-group calls of `admin.ClusterAdmin`: list, describe, read and write committed
offsets with their metadata (over the raw connection where it can: `group_wire`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kmigrate.config import ClusterConfig
from kmigrate.errors import GroupError, KmigrateError
from kmigrate.kafka import group_wire, transport


class Committed(NamedTuple):
    """One committed position of a consumer group."""

    offset: int
    metadata: str = ""



class GroupCalls:
    """Mixed into ClusterAdmin, whose admin client, cluster, timeout and error wording these use."""

    _admin: AdminClient
    cluster: ClusterConfig
    timeout_s: float

    def _unavailable(self, what: str, exc: KafkaException) -> KmigrateError:
        raise NotImplementedError

    @property
    def _raw(self) -> bool:
        """Whether group offsets go over the raw connection (`group_wire`: their metadata whole)."""
        return transport.raw_capable(self.cluster, "group offsets over raw requests",
                                     "librdkafka's admin client reads and writes them")

    def list_groups(self) -> list[str]:
        try:
            listed = self._admin.list_consumer_groups(request_timeout=self.timeout_s).result(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable("the consumer groups", exc) from exc
        return sorted(g.group_id for g in listed.valid)

    def describe_group(self, group: str) -> dict[str, Any]:
        """{"state": "EMPTY"|"STABLE"|"DEAD"|..., "members": [client ids and hosts]}; a group that
        does not exist is DEAD with no members."""
        try:
            described = self._admin.describe_consumer_groups([group], request_timeout=self.timeout_s)[group].result(
                timeout=self.timeout_s)
        except KafkaException as exc:
            raise GroupError(f"{self.cluster.name}: describing consumer group {group!r} failed: {exc.args[0].str()}",
                             group=group) from exc
        return {"state": described.state.name,
                "members": [f"{m.client_id}@{m.host}" for m in described.members]}

    def live_members(self, group: str) -> list[str] | None:
        """The members of a group that is neither EMPTY nor DEAD (["joining"] while it has none
        yet); None for an inactive group, whose offsets can be read as final and written."""
        described = self.describe_group(group)
        if not described["members"] and described["state"] in ("EMPTY", "DEAD"):
            return None
        return described["members"] or ["joining"]

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets (`committed` without metadata)."""
        return {key: committed.offset for key, committed in self.committed(group).items()}

    def committed(self, group: str) -> dict[tuple[str, int], Committed]:
        """Everything the group committed, by (topic, partition): offset and metadata (not the leader
        epoch, meaningless on another cluster); empty for an unknown group. Read over the raw
        connection where it can (`group_wire`: the metadata whole), else librdkafka."""
        if self._raw:
            return {key: Committed(*value) for key, value in group_wire.committed(self.cluster, group, self.timeout_s).items()}
        try:
            answer = self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s)[group].result(
                timeout=self.timeout_s)
        except KafkaException as exc:
            raise GroupError(f"{self.cluster.name}: reading the offsets of consumer group {group!r} failed: "
                             f"{exc.args[0].str()}", group=group) from exc
        return {(tp.topic, tp.partition): Committed(tp.offset, tp.metadata or "") for tp in answer.topic_partitions
                if tp.error is None and tp.offset >= 0}

    def alter_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int | Committed]) -> None:
        """Set the group's committed offsets, with their metadata when given (the group must have
        no members); over the raw connection where it can (`group_wire`: the metadata as it is)."""
        if self._raw:
            group_wire.commit(self.cluster, group, {key: (value.offset, value.metadata) if isinstance(value, Committed)
                                                    else (value, "") for key, value in offsets.items()}, self.timeout_s)
            return
        request = ConsumerGroupTopicPartitions(group, [
            TopicPartition(topic, partition, value.offset, metadata=value.metadata)
            if isinstance(value, Committed) else TopicPartition(topic, partition, value)
            for (topic, partition), value in sorted(offsets.items())])
        try:
            answer = self._admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)[group].result(
                timeout=self.timeout_s)
        except KafkaException as exc:
            raise GroupError(f"{self.cluster.name}: writing the offsets of consumer group {group!r} failed: "
                             f"{exc.args[0].str()}", group=group) from exc
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in answer.topic_partitions if tp.error]
        if failed:
            raise GroupError(f"{self.cluster.name}: consumer group {group!r}: offsets not written for "
                             f"{', '.join(failed)}", group=group)
