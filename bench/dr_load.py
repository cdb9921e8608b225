"""bench-dr's load and its clock, shared by the benchmarks of the DR mirror (bench_dr.py,
bench_mirror_lag.py): the source's writers and consumers, the DR cluster's ends sampled every
0.1 s, and the seconds from each sampled record's acknowledgement to the DR end passing it."""
from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Consumer, Producer
from kmigrate.kafka.admin import ClusterAdmin

from common import SOURCE, TARGET

SAMPLE_EVERY = 10


class Load:
    """The source's writers and consumers, each a thread; `acked` holds (partition, offset,
    acknowledged at) of every SAMPLE_EVERY-th record of the plain topic."""

    def __init__(self, prefix: str, rate_mb: float, value_bytes: int, cluster=SOURCE) -> None:
        self.prefix, self.value_bytes, self.cluster = prefix, value_bytes, cluster
        self.per_s = rate_mb * 1e6 / value_bytes
        self.plain, self.tx, self.compact = (f"{prefix}.{n}" for n in ("plain", "tx", "compact"))
        self.groups = [f"{prefix}.readers-{i}" for i in range(2)]
        self.acked: list[tuple[int, int, float]] = []
        self.written = 0
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=t, daemon=True) for t in
                        (self._plain, self._transactional, self._compacted, *[self._consumer(g) for g in self.groups])]

    def create(self) -> None:
        with ClusterAdmin(SOURCE) as admin:
            admin.create_topic(self.plain, 20, {})
            admin.create_topic(self.tx, 2, {})
            admin.create_topic(self.compact, 2, {"cleanup.policy": "compact", "segment.ms": "10000",
                                                 "min.cleanable.dirty.ratio": "0.01"})
            admin.wait_for_topics({self.plain: 20, self.tx: 2, self.compact: 2})

    def warm_up(self) -> None:
        """One record in each partition of the three topics (the transactional one's in a committed
        transaction), written before the timed load: a mirror that starts copying on its first
        records (task start, first copies) does it before the clock runs."""
        producer = Producer(SOURCE.producer(**{"transactional.id": f"{self.prefix}-warm-up"}))
        producer.init_transactions(60)
        producer.begin_transaction()
        for p in range(2):
            producer.produce(self.tx, self._value(), partition=p)
        producer.commit_transaction(60)
        plain = Producer(SOURCE.producer(**{"enable.idempotence": True}))
        for p in range(20):
            plain.produce(self.plain, self._value(), partition=p)
        for p in range(2):
            plain.produce(self.compact, self._value(), key=b"warm-up", partition=p)
        if plain.flush(60):
            raise RuntimeError("the warm-up records were not all acknowledged in 60 s")

    def partitions(self) -> list[tuple[str, int]]:
        return [(self.plain, p) for p in range(20)] + [(t, p) for t in (self.tx, self.compact) for p in range(2)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _paced(self, share: float, write) -> None:
        """`write(i)` at `share` of the load's records per second, in steps of 10 ms."""
        began, i = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - began) * self.per_s * share)
            while i < due and not self.stopping.is_set():
                write(i)
                i += 1
            time.sleep(0.01)

    def _value(self) -> bytes:
        return random.randbytes(self.value_bytes)

    def _plain(self) -> None:
        producer = Producer(self.cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))

        def acked(err, msg) -> None:
            if err is None and msg.offset() % SAMPLE_EVERY == 0:
                self.acked.append((msg.partition(), msg.offset(), time.time()))

        def write(i: int) -> None:
            producer.produce(self.plain, self._value(), partition=i % 20, on_delivery=acked)
            producer.poll(0)
            self.written += 1

        self._paced(0.9, write)
        producer.flush(60)

    def _transactional(self) -> None:
        producer = Producer(SOURCE.producer(**{"transactional.id": f"{self.prefix}-tx", "linger.ms": 5}))
        producer.init_transactions(60)
        state = {"n": 0}

        def write(i: int) -> None:
            if i % 50 == 0:
                producer.begin_transaction()
            producer.produce(self.tx, self._value(), partition=i % 2)
            if i % 50 == 49:
                state["n"] += 1
                if state["n"] % 5 == 0:
                    producer.flush(60)  # librdkafka purges what is in flight on an abort, and its sequences break
                    producer.abort_transaction(60)
                else:
                    producer.commit_transaction(60)

        self._paced(0.05, write)
        try:
            producer.commit_transaction(60)
        except Exception:  # noqa: BLE001 - no transaction was open
            pass

    def _compacted(self) -> None:
        producer = Producer(SOURCE.producer(**{"linger.ms": 5}))
        self._paced(0.05, lambda i: (producer.produce(self.compact, self._value(), key=str(i % 1000).encode(),
                                                      partition=i % 2), producer.poll(0)))
        producer.flush(60)

    def _consumer(self, group: str):
        def consume() -> None:
            consumer = Consumer(self.cluster.consumer(group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                                                          "enable.partition.eof": False}))
            consumer.subscribe([self.plain])
            while not self.stopping.is_set():
                consumer.consume(2000, 0.5)
            consumer.close()  # commits, then leaves: the group is empty when the failover quiesces
        return consume


class Watcher(threading.Thread):
    """The DR cluster's end offsets of the plain topic's partitions under each mirror's name, every
    `every_s`: [(time, {name: [end a partition]})]."""

    def __init__(self, topics: dict[str, str], every_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.topics, self.samples, self.every_s = topics, [], every_s
        self.stopping = threading.Event()

    def run(self) -> None:
        keys = {name: [(t, p) for p in range(20)] for name, t in self.topics.items()}
        with ClusterAdmin(TARGET) as admin:
            while not self.stopping.wait(self.every_s):
                try:
                    ends = admin.end_offsets([k for ks in keys.values() for k in ks])
                except Exception:  # noqa: BLE001 - topics not created yet
                    continue
                self.samples.append((time.time(), {n: [ends[k] for k in ks] for n, ks in keys.items()}))


def latencies(acked: list[tuple[int, int, float]], samples: list, name: str, after: float = 0.0) -> list[float]:
    """Seconds from each sampled record's acknowledgement (those acknowledged at epoch `after` or
    later) to the first sample of `name`'s DR end past it."""
    out, i = [], 0
    for partition, offset, at in sorted((a for a in acked if a[2] >= after), key=lambda a: a[2]):
        while i < len(samples) and samples[i][0] < at:
            i += 1
        j = i
        while j < len(samples) and samples[j][1][name][partition] <= offset:
            j += 1
        if j < len(samples):
            out.append(samples[j][0] - at)
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
