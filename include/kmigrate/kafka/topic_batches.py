"""CreateTopics in batches the KRaft controller takes (at most MAX_RECORDS_PER_REQUEST records a
request, `kmigrate.kafka.admin`), sent at once, whatever the number of topics: a batch refused for
its size all the same is halved and sent again. What creates the target topics
(`kmigrate.run.targets.topic_io`) and what checks the right to create them with a validate-only
request (`kmigrate.run.checks.rights`) send theirs so."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from kmigrate.kafka.admin import MAX_RECORDS_PER_REQUEST, ClusterAdmin, in_batches

log = logging.getLogger(__name__)


def topic_records(new: NewTopic) -> int:
    """The controller records creating `new` writes: its topic, its configs and its partitions (the
    broker's default count, -1, counted as one)."""
    return 1 + max(new.num_partitions, 1) + len(new.config or {})


def too_large(error: KafkaError) -> bool:
    """Whether the controller refused the request for the records it would write (its two messages)."""
    return error.code() == KafkaError.POLICY_VIOLATION and "excessively large" in error.str().lower()


def create_topics(admin: ClusterAdmin, new_topics: Sequence[NewTopic], *, validate_only: bool = False,
                  limit: int = MAX_RECORDS_PER_REQUEST) -> dict[str, KafkaException | None]:
    """CreateTopics for `new_topics` in batches of whole topics of at most `limit` records each
    (`topic_records`), the batches sent at once and then waited for. A batch refused for its size all
    the same (`too_large`) is halved and each half sent again, never the whole batch. Returns each
    topic's outcome: None (created; with `validate_only`, valid) or its failure."""
    outcome: dict[str, KafkaException | None] = {}
    pending = in_batches(new_topics, topic_records, limit)
    while pending:
        sent = [(batch, admin.client.create_topics(batch, validate_only=validate_only,
                                                   operation_timeout=admin.timeout_s, request_timeout=admin.timeout_s))
                for batch in pending]
        pending = []
        for batch, futures in sent:
            for new in batch:
                try:
                    futures[new.topic].result(timeout=admin.timeout_s)
                    outcome[new.topic] = None
                except KafkaException as exc:
                    outcome[new.topic] = exc
            refused = any((exc := outcome[new.topic]) is not None and too_large(exc.args[0]) for new in batch)
            if refused and len(batch) > 1:
                log.info("%s: CreateTopics of %d topics (%d records) refused for its size; sent again in halves",
                         admin.cluster.name, len(batch), sum(topic_records(new) for new in batch))
                pending += [batch[:len(batch) // 2], batch[len(batch) // 2:]]
    return outcome
