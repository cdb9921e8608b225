"""`make demo`: the main job on the local stack.

Until the migration DAG lands this is a stack check a person can read: it seeds a topic on the
source cluster, reads it back there, writes the same records to the target cluster partition by
partition, reads them back on the target and prints what both ends hold. Its last line is JSON.

    python -m kmigrate.demo [--source localhost:19092] [--target localhost:29092] [--records 3000]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig

PARTITIONS = 3


def produce(cluster: ClusterConfig, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    failures: list[KafkaError] = []
    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 10}))
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition,
                         on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    if producer.flush(60) or failures:
        raise KafkaException(failures[0] if failures else "records left undelivered after 60s")


def read_all(cluster: ClusterConfig, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, offset, key, value) of every record, read up to each partition's end."""
    consumer = Consumer(cluster.consumer())
    try:
        assignment = []
        for partition in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                assignment.append(TopicPartition(topic, partition, low))
        consumer.assign(assignment)
        pending, rows = {tp.partition for tp in assignment}, []
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise KafkaException(msg.error())
            rows.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        if pending:
            raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end within 60s")
        return sorted(rows)
    finally:
        consumer.close()


def digest(rows: list[tuple[int, int, bytes, bytes]]) -> str:
    h = hashlib.sha256()
    for partition, offset, key, value in rows:
        h.update(f"{partition}:{offset}:".encode() + key + b"\0" + value + b"\0")
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="localhost:19092")
    parser.add_argument("--target", default="localhost:29092")
    parser.add_argument("--records", type=int, default=3000)
    args = parser.parse_args(argv)
    source = ClusterConfig.from_bootstrap("source", args.source)
    target = ClusterConfig.from_bootstrap("target", args.target)
    topic = f"demo.orders.{uuid.uuid4().hex[:6]}"

    started = time.monotonic()
    records = [(i % PARTITIONS, f"order-{i}".encode(), json.dumps({"order": i, "amount": i * 7 % 1000}).encode())
               for i in range(args.records)]
    print(f"demo: seeding {len(records)} records into {topic} ({PARTITIONS} partitions) on source {args.source}")
    with ClusterAdmin(source) as admin:
        admin.create_topic(topic, PARTITIONS, {})
    produce(source, topic, records)
    on_source = read_all(source, topic)

    print(f"demo: writing them to target {args.target}, partition by partition")
    with ClusterAdmin(target) as admin:
        admin.create_topic(topic, PARTITIONS, {})
    produce(target, topic, [(p, k, v) for p, _offset, k, v in on_source])
    on_target = read_all(target, topic)

    summary = {
        "topic": topic,
        "records_source": len(on_source),
        "records_target": len(on_target),
        "digest_source": digest(on_source),
        "digest_target": digest(on_target),
        "equal": on_source == on_target,
        "seconds": round(time.monotonic() - started, 2),
    }
    for partition in range(PARTITIONS):
        src = [r for r in on_source if r[0] == partition]
        print(f"demo:   {topic}[{partition}] source offsets {src[0][1]}..{src[-1][1]}, "
              f"target holds {sum(1 for r in on_target if r[0] == partition)} records")
    print(f"demo: source and target hold {'the same' if summary['equal'] else 'DIFFERENT'} records "
          f"(digest {summary['digest_source']} / {summary['digest_target']})")
    print(json.dumps(summary))
    return 0 if summary["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
