"""Copier benchmark on the local stack (`make bench-copy`).

For 100 B and 1 KiB records, in 1 and 6 partitions: the copier's records/s and MB/s, and the raw
produce ceiling of the same target with the same producer settings (a plain producer loop writing
the same records, read into memory first). Then alignment speed: a source partition whose log
start is at several million is aligned on the target, in offsets/s. All measured in one run, side
by side. Last, the same copy on the secure stack (`stack.py --secure`: SASL_SSL with
SCRAM-SHA-512, ACLs, read as the `migrator` principal) beside the PLAINTEXT stack, the two
alternating, five rounds each, by whole batches and by the record path: `secure_vs_plaintext` is
the ratio of the median records/s. During each of those copies the CPU seconds of the copier's
process and of the source's and the target's broker are read (/proc): the side that used the most
of a core, in the median secure round, is named as the one that limits. Then, as a reference,
Kafka's own producer (ProducerPerformance, fetched with mvn on first use) writes the same records
to each stack's target broker, SASL_SSL and PLAINTEXT alternating: the ratio the target broker
allows on this machine without the copier (`kafka_producer_secure_vs_plaintext`). The last line is
one JSON object.

    python bench/bench_copy.py [--records-100b 300000] [--records-1k 100000] [--align 5000000] [--secure-rounds 5]
                               [--secure-only]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import SOURCE, TARGET, broker_pids, process_cpu_s
from confluent_kafka import Producer
from kmigrate.config import ClusterConfig
from kmigrate.copy import fastfill
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions, Writer
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import iter_range, reader
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic


def seed(topic: str, partitions: int, records: int, value_size: int, source: ClusterConfig = SOURCE,
         incompressible: bool = False) -> None:
    """`records` records of `value_size` bytes; `incompressible`: values cut from random bytes (what
    crosses the wire is then as large as the data, as with real payloads), else repeated bytes."""
    with ClusterAdmin(source) as admin:
        admin.create_topic(topic, partitions, {})
    noise = random.Random(7).randbytes(1 << 20)
    producer = Producer(source.producer(**{"linger.ms": 20, "batch.size": 4 << 20, "compression.type": "lz4",
                                           "queue.buffering.max.messages": 2_000_000}))
    filler = b"v" * value_size
    for i in range(records):
        key = b"key-%08d" % i
        while True:
            try:
                at = (i * 7919) % ((1 << 20) - value_size)
                value = noise[at: at + value_size - 8] if incompressible else filler[: value_size - 8]
                producer.produce(topic, key=key, value=value + b"%08d" % i, partition=i % partitions)
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


def copy(topic: str, partitions: int, source: ClusterConfig = SOURCE, target: ClusterConfig = TARGET,
         raw_batches: bool = True, cpu: dict | None = None) -> float:
    """Seconds to copy the topic; with `cpu` ({"pids": {side: pid, or None for this process}}), each
    side's share of a core while it copied is appended to cpu["shares"][side]."""
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        prepare_target_topic(source_admin, target_admin, topic)
        ends = [source_admin.watermarks(topic, p)[1] for p in range(partitions)]
    pids = (cpu or {}).get("pids", {})
    before = {side: process_cpu_s(pid) for side, pid in pids.items()}
    started = time.monotonic()
    for p, end in enumerate(ends):
        result = copy_partition(source, target, WorkUnit(topic, p, end),
                                CopyOptions(verify=False, run_id="bench", raw_batches=raw_batches))
        assert (result.whole_batches > 0) == raw_batches or end < 100, "the copy took another path"
    seconds = time.monotonic() - started
    for side, pid in pids.items():
        cpu.setdefault("shares", {}).setdefault(side, []).append(round((process_cpu_s(pid) - before[side]) / seconds, 3))
    return seconds


def _stack():  # noqa: ANN202 - stack/stack.py, loaded once
    if "kmigrate_stack" not in sys.modules:
        spec = importlib.util.spec_from_file_location("kmigrate_stack", Path(__file__).resolve().parents[1] / "stack" / "stack.py")
        sys.modules["kmigrate_stack"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["kmigrate_stack"])
    return sys.modules["kmigrate_stack"]


def secure_clusters() -> tuple[ClusterConfig, ClusterConfig, ClusterConfig]:
    """The secure stack's source as its admin (to seed), and source and target as the migrator."""
    stack = _stack()
    security = stack.prepare_security(stack.SECURE_STATE_DIR)
    source, target = stack.SECURE_CLUSTERS
    return (ClusterConfig("source", security.client(source, "admin")),
            ClusterConfig("source", security.client(source, "migrator")),
            ClusterConfig("target", security.client(target, "migrator")))


def setup_ms(rounds: int = 5) -> dict:
    """Median time to copy a 10-record partition on each stack: the fixed cost of a partition
    (clients created, connections authenticated), which the secure stack pays in TLS handshakes
    and SCRAM rounds."""
    seed_as, source, target = secure_clusters()
    times: dict[str, list[float]] = {"plaintext": [], "secure": []}
    for _ in range(rounds):
        for side, seed_on, src, tgt in (("plaintext", SOURCE, SOURCE, TARGET), ("secure", seed_as, source, target)):
            topic = f"bench.setup.{side}.{uuid.uuid4().hex[:6]}"
            seed(topic, 1, 10, 100, seed_on)
            times[side].append(copy(topic, 1, src, tgt))
    return {f"{side}_ms": round(statistics.median(values) * 1000, 1) for side, values in times.items()}


def secure_vs_plaintext(records: int, value_size: int, rounds: int, raw_batches: bool = True) -> dict:
    """The copier's records/s on both stacks, alternating which goes first, `rounds` each, values
    incompressible (TLS then encrypts as many bytes as the data has), by whole batches or by the
    record path; each side's share of a core in each round, and the side that limits."""
    seed_as, source, target = secure_clusters()
    stack_dir = Path(__file__).resolve().parents[1]
    pids = {"plaintext": broker_pids(stack_dir / ".stack"), "secure": broker_pids(stack_dir / ".stack-secure")}
    rates: dict[str, list[float]] = {"plaintext": [], "secure": []}
    cpu: dict[str, dict] = {side: {"pids": {"copier": None, **pids[side]}} for side in rates}
    for round_ in range(rounds):
        order = ("plaintext", "secure") if round_ % 2 == 0 else ("secure", "plaintext")
        for side in order:
            topic = f"bench.secure.{side}.{value_size}b.{uuid.uuid4().hex[:6]}"
            clusters = (SOURCE, SOURCE, TARGET) if side == "plaintext" else (seed_as, source, target)
            seed(topic, 1, records, value_size, clusters[0], incompressible=True)
            rates[side].append(records / copy(topic, 1, *clusters[1:], raw_batches=raw_batches, cpu=cpu[side]))
    plain, secure = statistics.median(rates["plaintext"]), statistics.median(rates["secure"])
    shares = {side: cpu[side]["shares"] for side in rates}
    median_round = sorted(range(rounds), key=lambda i: rates["secure"][i])[rounds // 2]
    limits = max(shares["secure"], key=lambda name: shares["secure"][name][median_round])
    return {"path": "whole batches" if raw_batches else "record path", "value_bytes": value_size, "records": records,
            "rounds": rounds, "mb": round(records * value_size / 1e6),
            "plaintext_records_per_s": round(plain), "secure_records_per_s": round(secure),
            "secure_vs_plaintext": round(secure / plain, 3), "secure_limited_by": limits,
            "all_records_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()}, "core_shares": shares}


def kafka_producer(records: int, value_size: int, rounds: int) -> dict:
    """Kafka's own producer (kafka-producer-perf-test's ProducerPerformance, Java) writing to each
    stack's target broker, SASL_SSL as the admin and PLAINTEXT, alternating: what the target broker
    takes on this machine without the copier, the reference for the copier's ratio."""
    stack = _stack()
    security = stack.prepare_security(stack.SECURE_STATE_DIR)
    sides = {"plaintext": {"bootstrap.servers": TARGET.bootstrap_servers},
             "secure": {"bootstrap.servers": stack.SECURE_CLUSTERS[1].bootstrap, **security.java_client("admin")}}
    admins = {"plaintext": TARGET, "secure": ClusterConfig("target", security.client(stack.SECURE_CLUSTERS[1], "admin"))}
    rates: dict[str, list[float]] = {"plaintext": [], "secure": []}
    for round_ in range(rounds):
        for side in ("plaintext", "secure") if round_ % 2 == 0 else ("secure", "plaintext"):
            topic = f"bench.kafka-producer.{side}.{value_size}b.{uuid.uuid4().hex[:6]}"
            with ClusterAdmin(admins[side]) as admin:
                admin.create_topic(topic, 1, {})
                admin.wait_for_topics({topic: 1})
            settings = security.dir / f"bench-kafka-producer-{os.getpid()}-{side}.properties"  # owner-only
            stack.write_private(settings, "".join(f"{k}={v}\n" for k, v in {
                **sides[side], "acks": "1", "linger.ms": "20", "batch.size": str(1 << 20),
                "max.request.size": str(16 << 20)}.items()))
            try:
                out = subprocess.run([stack.java_binary(), "-Xmx512m", "-cp", stack.tools_classpath(),
                                      "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                                      str(records), "--record-size", str(value_size), "--throughput", "-1",
                                      "--producer.config", str(settings)], capture_output=True, text=True, check=True)
            finally:
                settings.unlink()
            summary = [line for line in out.stdout.splitlines() if "records sent" in line][-1]
            rates[side].append(float(summary.split(" records/sec")[0].rsplit(" ", 1)[-1]))
    plain, secure = statistics.median(rates["plaintext"]), statistics.median(rates["secure"])
    return {"value_bytes": value_size, "records": records, "rounds": rounds, "secure_vs_plaintext": round(secure / plain, 3),
            "all_records_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()}}


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
    parser.add_argument("--secure-rounds", type=int, default=5, help="0 leaves the secure stack out")
    parser.add_argument("--secure-only", action="store_true", help="only the secure stack beside the PLAINTEXT one")
    args = parser.parse_args()

    cases = []
    for value_size, records in ((100, args.records_100b), (1024, args.records_1k)):
        for partitions in (() if args.secure_only else (1, 6)):
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
    alignment = {} if args.secure_only else align(args.align)
    if alignment:
        print(f"alignment: {alignment['offsets']} offsets in {alignment['seconds']} s = {alignment['offsets_per_s']} "
              "offsets/s")
    secure, setup, references = [], {}, []
    if args.secure_rounds:
        setup = setup_ms()
        print(f"a partition's fixed cost (10 records): SASL_SSL {setup['secure_ms']} ms, PLAINTEXT {setup['plaintext_ms']} ms",
              flush=True)
        for raw_batches in (True, False):
            for value_size, records in ((100, args.records_100b), (1024, args.records_1k)):
                records = records if raw_batches else records // 3  # the record path is several times slower
                case = secure_vs_plaintext(records, value_size, args.secure_rounds, raw_batches)
                secure.append(case)
                print(f"{case['path']}, {value_size:>5} B x 1 partition, {records} records: SASL_SSL/SCRAM-SHA-512 "
                      f"{case['secure_records_per_s']:>8} rec/s | PLAINTEXT {case['plaintext_records_per_s']:>8} rec/s"
                      f" | secure/plaintext {case['secure_vs_plaintext']} (medians of {case['rounds']}), limited by "
                      f"{case['secure_limited_by']} (shares of a core: {case['core_shares']['secure']})", flush=True)
        for value_size, records in ((100, args.records_100b), (1024, args.records_1k)):
            reference = kafka_producer(records, value_size, args.secure_rounds)
            references.append(reference)
            print(f"Kafka's own producer to the target broker, {value_size:>5} B, {records} records: secure/plaintext "
                  f"{reference['secure_vs_plaintext']} (medians of {reference['rounds']}; {reference['all_records_per_s']})",
                  flush=True)
    headline = min(cases, key=lambda c: c["copy_vs_ceiling"]) if cases else {}
    whole = [c for c in secure if c["path"] == "whole batches"]
    by_records = [c for c in secure if c["path"] == "record path"]
    print(json.dumps({
        "copy_records_per_s": cases[0]["copy_records_per_s"] if cases else None,       # 100 B, 1 partition
        "ceiling_records_per_s": cases[0]["ceiling_records_per_s"] if cases else None,
        "copy_vs_ceiling": headline.get("copy_vs_ceiling"),             # the worst case of the four
        "align_offsets_per_s": alignment.get("offsets_per_s"),
        **({"secure_vs_plaintext": min(c["secure_vs_plaintext"] for c in whole),  # the worse case
            "secure_vs_plaintext_record_path": min(c["secure_vs_plaintext"] for c in by_records),
            "secure_limited_by": sorted({c["secure_limited_by"] for c in secure}),
            "kafka_producer_secure_vs_plaintext": min(r["secure_vs_plaintext"] for r in references)} if secure else {}),
        "kafka_producer_cases": references,
        "cases": cases,
        "secure_cases": secure,
        "partition_setup_ms": setup,
        "machine": f"{platform.machine()} {platform.processor() or ''} cores={__import__('os').cpu_count()}".strip(),
    }))


if __name__ == "__main__":
    main()
