"""What the one-writer lease costs a partition copy (`make bench-claims`), on the local PLAINTEXT stack.

Small partitions (10 records of 100 B) are copied one after another in this process, once with the
copier as it is (a lease on each partition: a claim appended and read back, a release appended) and
once with the lease replaced by a stand-in that does nothing, alternating, `--rounds` rounds of
`--partitions` partitions each: the median per-partition time of both and their difference. Then
how long a new process takes to read the claims log (every new Spark worker does once): the log
grown by `--log-records` lease renewals (a mirror of 24 partitions writes that many in about 7 hours)
and read whole, as before the log was kept short, then read from its snapshot once two readers past
SNAPSHOT_AFTER records have trimmed it. The last line is one JSON object.

    python bench/bench_claims.py [--partitions 100] [--rounds 5] [--log-records 100000]
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
from kmigrate.claims import leases
from kmigrate.claims import log as claims_log
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
from kmigrate.claims import log as claims_log
from kmigrate.config import ClusterConfig
if sys.argv[2] == "whole":  # as before the log was kept short: no snapshot written, the whole log read
    claims_log.SNAPSHOT_AFTER = 1 << 62
began = time.monotonic()
log = claims_log.claim_log(ClusterConfig.from_bootstrap("target", sys.argv[1]))
log.current()
print(time.monotonic() - began)
"""
FILL = "bench-claims-fill"


def grow_log(records: int) -> None:
    """`records` lease renewals of 100 partitions no topic has, appended to the claims log as a mirror's
    renewals are (then released)."""
    producer = Producer(TARGET.producer(**{"linger.ms": 20, "compression.type": "lz4"}))
    for i in range(records):
        record = {"kind": "lease", "scope": f"{FILL}:{i % 100}", "holder": FILL, "run": FILL, "lease_ms": 30_000}
        producer.produce(claims_log.CLAIMS_TOPIC, key=record["scope"].encode(), value=json.dumps(record).encode(),
                         partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    claims_log.claim_log(TARGET).submit_all([{"kind": "lease-release", "scope": f"{FILL}:{p}", "holder": FILL}
                                         for p in range(100)])


def cold_reads(how: str) -> tuple[float, int]:
    """The median of three new processes' reads of the claims log, and the records it holds."""
    with ClusterAdmin(TARGET) as admin:
        low, high = admin.watermarks(claims_log.CLAIMS_TOPIC, 0)
    times = [float(subprocess.run([sys.executable, "-c", COLD_READ, TARGET.bootstrap_servers, how], check=True,
                                  capture_output=True, text=True).stdout) for _ in range(3)]
    return statistics.median(times), high - low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--log-records", type=int, default=100_000)
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
        grow_log(args.log_records)
        whole_s, whole_records = cold_reads("whole")
        print(f"a new process reads the whole claims log ({whole_records:,} records) in {whole_s:.3f} s", flush=True)
        claims_log.claim_log(TARGET).current()  # the first reader past the mark: a snapshot
        grow_log(claims_log.SNAPSHOT_AFTER)
        claims_log.claim_log(TARGET).current()  # the second: a snapshot, and the records below the first deleted
        trimmed_s, trimmed_records = cold_reads("trimmed")
        print(f"trimmed: {trimmed_records:,} records from its snapshot on, read in {trimmed_s:.3f} s", flush=True)
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
        "claims_log_records_whole": whole_records, "cold_read_whole_s": round(whole_s, 3),
        "claims_log_records_trimmed": trimmed_records, "cold_read_trimmed_s": round(trimmed_s, 3),
        "cold_read_ratio": round(whole_s / trimmed_s, 1),
    }
    print(f"per partition: {leased:.2f} ms with the lease, {unleased:.2f} ms without "
          f"(+{leased - unleased:.2f} ms; per-round differences' median between {low:.2f} and {high:.2f} ms, "
          f"{coverage:.0%}); a new process reads the claims log in {whole_s:.3f} s whole ({whole_records:,} records), "
          f"{trimmed_s:.3f} s trimmed ({trimmed_records:,})")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
