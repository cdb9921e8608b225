"""What a migration must leave behind, checked on both clusters: each partition with the same log start,
end and read_committed-visible records at the same offsets, the same topic configs, and each group's
consumers continuing on the target exactly at the next unread record."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kmigrate.kafka.admin import ClusterAdmin

from tests.support.kafka import all_watermarks, read_partition, records_of
from tests.support.waiting import wait_until


def assert_same_partition(stack, topic, partition):
    source_marks = all_watermarks(stack.source, topic)[partition]
    assert all_watermarks(stack.target, topic)[partition] == source_marks
    assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)


def partition_watermarks(cluster, topics: dict[str, int]) -> dict:
    """(log start, end) of every partition of `topics` (topic -> partition count), by (topic, partition)."""
    with ClusterAdmin(cluster) as admin:
        return {(t, p): admin.watermarks(t, p) for t, n in topics.items() for p in range(n)}


def assert_migrated_exactly(source, target, topics: dict[str, int], groups, source_before: dict) -> None:
    """The source untouched since `source_before` (its watermarks then); on the target every partition
    with the same log start and end and every read_committed-visible record at its offset (key, value,
    headers, timestamp); each of `groups` committed at the same offsets."""
    assert partition_watermarks(source, topics) == source_before  # the source was never written to
    for (topic, partition), marks in source_before.items():
        with ClusterAdmin(target) as admin:
            assert admin.watermarks(topic, partition) == marks  # log start and end, offset for offset
        assert records_of(target, topic, partition) == records_of(source, topic, partition)
    with ClusterAdmin(source) as on_source, ClusterAdmin(target) as on_target:
        for group in groups:
            assert on_target.committed(group) == on_source.committed(group)


# Target topic configs that may differ from the source's after a migration, and why: none today
# (the copy's own settings are restored, and both local clusters run the same broker defaults).
CONFIGS_ALLOWED_TO_DIFFER: frozenset[str] = frozenset()


def assert_same_topic_configs(stack, topics) -> None:
    """Every effective config of each topic equal on both clusters, but CONFIGS_ALLOWED_TO_DIFFER."""
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic in topics:
            on_source, on_target = source.topic_configs(topic), target.topic_configs(topic)
            differ = {k: (on_source.get(k), on_target.get(k)) for k in set(on_source) | set(on_target)
                      if on_source.get(k) != on_target.get(k) and k not in CONFIGS_ALLOWED_TO_DIFFER}
            assert not differ, f"{topic}: source vs target {differ}"


def consume_group(cluster, group: str, topic: str, partitions: int, timeout_s: float = 60.0) -> list[tuple]:
    """What a consumer of `group` reads on `cluster` from its committed positions to the end:
    (partition, key, value) of each record."""
    consumer = Consumer(cluster.consumer(group))
    consumer.subscribe([topic])
    out, at_end = [], set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(f"group {group} did not reach the end of {topic} in {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def expected_after(stack, topic: str, positions: dict[int, int]) -> list[tuple]:
    return [(p, key, value) for p, position in positions.items()
            for offset, key, value in read_partition(stack.source, topic, p) if offset >= position]


def assert_exactly(got: list[tuple], expected: list[tuple]) -> None:
    duplicates = len(got) - len(set(got))
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert (duplicates, len(missing), len(extra)) == (0, 0, 0), (duplicates, sorted(missing)[:5], sorted(extra)[:5])
    assert len(got) == len(expected)


def assert_workload_continues_on_target(stack, w, names: dict[str, str] | None = None,
                                        group_names: dict[str, str] | None = None) -> None:
    """After the mixed workload (kmigrate_demo.workload.seed_mixed) moved: each group's consumers
    continue on the target exactly at the next unread record, the file source continues there with
    the lines written since, and the file sink with exactly the records after its committed offsets.
    `names`, `group_names`: the target's names of the topics and groups a run renamed."""
    names, group_names = names or {}, group_names or {}
    for group, topics in w.groups.items():
        for topic, positions in topics.items():
            got = consume_group(stack.target, group_names.get(group, group), names.get(topic, topic), w.topics[topic])
            assert_exactly([g for g in got if g[0] in positions], expected_after(stack, topic, positions))
    with w.source_file.open("a") as handle:
        handle.write("".join(f"line {i:04d}\n" for i in range(100, 120)))
    lines = names.get(w.topic("lines"), w.topic("lines"))
    wait_until(lambda: len(read_partition(stack.target, lines)) == 120, "120 lines on the target")
    assert [v.decode() for _, _, v in read_partition(stack.target, lines)] == [f"line {i:04d}" for i in range(120)]
    producer = Producer(stack.target.producer())
    for i in range(5):
        producer.produce(names.get(w.topic("orders"), w.topic("orders")), key=b"new", value=f"new order {i}".encode(), partition=0)
    producer.flush(30)
    wait_until(lambda: w.sink_file_target.exists() and len(w.sink_file_target.read_text().splitlines()) == 5,
               "the sink on the target to write the 5 new orders")
    assert w.sink_file_target.read_text().splitlines() == [f"new order {i}" for i in range(5)]
