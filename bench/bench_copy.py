"""Copier benchmark on the local stack (`make bench-copy`).

For 100 B and 1 KiB records, in 1 and 6 partitions: the copier's records/s and MB/s, and the raw
produce ceiling of the same target with the same producer settings (a plain producer loop writing
the same records, read into memory first). Then alignment speed: a source partition whose log
start is at several million is aligned on the target, in offsets/s. All measured in one run, side
by side. The last line is one JSON object.

    python bench/bench_copy.py [--records-100b 300000] [--records-1k 100000] [--align 5000000]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
import uuid

from confluent_kafka import Producer
from kmigrate.config import ClusterConfig
from kmigrate.copy import fastfill
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions, Writer
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import iter_range, reader
from kmigrate.model import WorkUnit
from kmigrate.run.targets import prepare_target_topic

SOURCE = ClusterConfig.from_bootstrap("source", "localhost:19092")
TARGET = ClusterConfig.from_bootstrap("target", "localhost:29092")


def seed(topic: str, partitions: int, records: int, value_size: int) -> None:
    with ClusterAdmin(SOURCE) as admin:
        admin.create_topic(topic, partitions, {})
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "batch.size": 4 << 20, "compression.type": "lz4",
                                           "queue.buffering.max.messages": 2_000_000}))
    filler = b"v" * value_size
    for i in range(records):
        key = b"key-%08d" % i
        while True:
            try:
                producer.produce(topic, key=key, value=filler[: value_size - 8] + b"%08d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def read_all(topic: str, partitions: int) -> list[list[tuple]]:
    out = []
    with ClusterAdmin(SOURCE) as admin:
        for p in range(partitions):
            _, end = admin.watermarks(topic, p)
            consumer = reader(SOURCE)
            rows = [(m.key(), m.value(), m.headers(), m.timestamp()[1])
                    for chunk in iter_range(consumer, topic, p, 0, end) for m in chunk]
            consumer.close()
            out.append(rows)
    return out


def ceiling(topic: str, rows_by_partition: list[list[tuple]]) -> float:
    """Seconds for a plain producer loop (the copier's bulk settings) to write the same records."""
    target_topic = topic + ".ceiling"
    with ClusterAdmin(TARGET) as admin:
        admin.create_topic(target_topic, len(rows_by_partition), {"message.timestamp.type": "CreateTime"})
        # the copier's own producer settings, taken from the copier itself
        writer = Writer(TARGET, target_topic, 0, admin, CopyOptions(), transactional=False)
        producer = writer.bulk
        started = time.monotonic()
        for partition, rows in enumerate(rows_by_partition):
            for key, value, headers, timestamp in rows:
                while True:
                    try:
                        producer.produce(target_topic, key=key, value=value, headers=headers,
                                         timestamp=timestamp, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
        assert producer.flush(60) == 0
        return time.monotonic() - started


def copy(topic: str, partitions: int) -> float:
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        prepare_target_topic(source, target, topic)
        ends = [source.watermarks(topic, p)[1] for p in range(partitions)]
    started = time.monotonic()
    for p, end in enumerate(ends):
        copy_partition(SOURCE, TARGET, WorkUnit(topic, p, end), CopyOptions(verify=False, run_id="bench"))
    return time.monotonic() - started


def align(offsets: int) -> dict:
    topic = f"bench.align.{uuid.uuid4().hex[:6]}"
    with ClusterAdmin(SOURCE) as admin:
        admin.create_topic(topic, 1, {})
        fastfill.write_fillers(SOURCE, topic, 0, 0, offsets)  # seeding the bench's own source topic
        admin.delete_records(topic, 0, offsets)
    producer = Producer(SOURCE.producer())
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"after the log start", partition=0)
    producer.flush(30)
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        prepare_target_topic(source, target, topic)
    fastfill.filler_batch(100_000)  # build the reusable batch before timing (once per process)
    result = copy_partition(SOURCE, TARGET, WorkUnit(topic, 0, offsets + 10), CopyOptions(verify=True, run_id="bench"))
    assert result.digests_equal and result.fillers == offsets
    with ClusterAdmin(TARGET) as target:
        assert target.watermarks(topic, 0) == (offsets, offsets + 10)
    return {"offsets": offsets, "seconds": round(result.align_seconds, 3),
            "offsets_per_s": round(offsets / result.align_seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-100b", type=int, default=300_000)
    parser.add_argument("--records-1k", type=int, default=100_000)
    parser.add_argument("--align", type=int, default=5_000_000)
    args = parser.parse_args()

    cases = []
    for value_size, records in ((100, args.records_100b), (1024, args.records_1k)):
        for partitions in (1, 6):
            topic = f"bench.copy.{value_size}b.{partitions}p.{uuid.uuid4().hex[:6]}"
            seed(topic, partitions, records, value_size)
            rows = read_all(topic, partitions)
            mb = sum(len(k) + len(v) for part in rows for k, v, _h, _t in part) / 1e6
            ceiling_s = ceiling(topic, rows)
            copy_s = copy(topic, partitions)
            case = {
                "value_bytes": value_size, "partitions": partitions, "records": records,
                "copy_records_per_s": round(records / copy_s), "copy_mb_per_s": round(mb / copy_s, 1),
                "ceiling_records_per_s": round(records / ceiling_s), "ceiling_mb_per_s": round(mb / ceiling_s, 1),
                "copy_vs_ceiling": round(ceiling_s / copy_s, 3),
            }
            cases.append(case)
            print(f"{value_size:>5} B x {partitions} partition(s), {records} records: copy {case['copy_records_per_s']:>8} rec/s "
                  f"{case['copy_mb_per_s']:>6} MB/s | ceiling {case['ceiling_records_per_s']:>8} rec/s "
                  f"{case['ceiling_mb_per_s']:>6} MB/s | copy/ceiling {case['copy_vs_ceiling']}", flush=True)
    alignment = align(args.align)
    print(f"alignment: {alignment['offsets']} offsets in {alignment['seconds']} s = {alignment['offsets_per_s']} offsets/s")
    headline = min(cases, key=lambda c: c["copy_vs_ceiling"])
    print(json.dumps({
        "copy_records_per_s": cases[0]["copy_records_per_s"],       # 100 B, 1 partition
        "ceiling_records_per_s": cases[0]["ceiling_records_per_s"],
        "copy_vs_ceiling": headline["copy_vs_ceiling"],             # the worst case of the four
        "align_offsets_per_s": alignment["offsets_per_s"],
        "cases": cases,
        "machine": f"{platform.machine()} {platform.processor() or ''} cores={__import__('os').cpu_count()}".strip(),
    }))


if __name__ == "__main__":
    main()
