"""What the one-writer lease costs a partition copy (`make bench-claims`), on the local PLAINTEXT stack.

Small partitions (10 records of 100 B) are copied one after another in this process, once with the
copier as it is (a lease on each partition: a claim appended and read back, a release appended) and
once with the lease replaced by a stand-in that does nothing, alternating, `--rounds` rounds of
`--partitions` partitions each: the median per-partition time of both and their difference. Then
how long a new process takes to read the claims log (every new Spark worker does once), at the
log's size now. The last line is one JSON object.

    python bench/bench_claims.py [--partitions 100] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

from common import SOURCE, TARGET, delete_topics, median_interval
from confluent_kafka import Producer
from kmigrate import claims, leases
from kmigrate.copy import partition as partition_module
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic


class NoLease:
    """The stand-in: holds nothing, checks nothing."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def acquire(self, wait_s=None) -> None:
        pass

    def check(self) -> None:
        pass

    def release(self) -> None:
        pass


def seed(topic: str, partitions: int) -> None:
    with ClusterAdmin(SOURCE) as admin:
        admin.create_topic(topic, partitions, {})
    producer = Producer(SOURCE.producer(**{"linger.ms": 5}))
    for p in range(partitions):
        for i in range(10):
            producer.produce(topic, key=b"k%d" % i, value=b"v" * 100, partition=p)
    assert producer.flush(60) == 0


def per_partition_ms(topic: str, partitions: int, leased: bool) -> float:
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        prepare_target_topic(source, target, topic)
        ends = [source.watermarks(topic, p)[1] for p in range(partitions)]
    partition_module.PartitionLease = leases.PartitionLease if leased else NoLease
    started = time.monotonic()
    for p, end in enumerate(ends):
        copy_partition(SOURCE, TARGET, WorkUnit(topic, p, end), CopyOptions(verify=False, run_id="bench-claims"))
    elapsed = time.monotonic() - started
    partition_module.PartitionLease = leases.PartitionLease
    return elapsed * 1000 / partitions


COLD_READ = """
import sys, time
from kmigrate import claims
from kmigrate.config import ClusterConfig
began = time.monotonic()
state = claims.claim_log(ClusterConfig.from_bootstrap("target", sys.argv[1])).current()
print(time.monotonic() - began)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    created = []
    times: dict[str, list[float]] = {"leased": [], "unleased": []}
    try:
        warm = f"bench.claims.warm.{uuid.uuid4().hex[:6]}"
        created.append(warm)
        seed(warm, 2)
        per_partition_ms(warm, 2, True)  # clients, pools and the claims log opened once
        for number in range(args.rounds):
            order = ("leased", "unleased") if number % 2 == 0 else ("unleased", "leased")
            for kind in order:
                topic = f"bench.claims.{kind}.{uuid.uuid4().hex[:6]}"
                created.append(topic)
                seed(topic, args.partitions)
                times[kind].append(per_partition_ms(topic, args.partitions, kind == "leased"))
                print(f"round {number + 1}: {kind}: {times[kind][-1]:.2f} ms a partition", flush=True)
        with ClusterAdmin(TARGET) as admin:
            log_records = admin.watermarks(claims.CLAIMS_TOPIC, 0)[1]
        cold = [float(subprocess.run([sys.executable, "-c", COLD_READ, TARGET.bootstrap_servers], check=True,
                                     capture_output=True, text=True).stdout) for _ in range(3)]
    finally:
        delete_topics(SOURCE, created)
        delete_topics(TARGET, created)
    leased, unleased = statistics.median(times["leased"]), statistics.median(times["unleased"])
    low, high, coverage = median_interval([a - b for a, b in zip(times["leased"], times["unleased"])])
    summary = {
        "partitions": args.partitions, "rounds": args.rounds,
        "leased_ms_per_partition": round(leased, 2), "unleased_ms_per_partition": round(unleased, 2),
        "lease_ms_per_partition": round(leased - unleased, 2),
        "lease_ms_interval": [round(low, 2), round(high, 2), round(coverage, 2)],
        "claims_log_records": log_records, "cold_read_s": round(statistics.median(cold), 3),
    }
    print(f"per partition: {leased:.2f} ms with the lease, {unleased:.2f} ms without "
          f"(+{leased - unleased:.2f} ms; per-round differences' median between {low:.2f} and {high:.2f} ms, "
          f"{coverage:.0%}); a new process reads the claims log ({log_records} records) in {summary['cold_read_s']} s")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
