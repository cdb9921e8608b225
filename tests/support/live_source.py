"""A live source for the seeded runs of tests/chaos and for tests/dags/test_live_source.py: producers
that keep writing while the pre-copy rounds run, every choice drawn from one seeded random generator,
and a model of what each producer was told (offsets from its delivery reports, then whether its
transaction committed or aborted).

The actors, each a thread with its own generator derived from the seed:
- transactional producers (two or three transactional ids) writing into the same partitions of one
  topic, transactions of 1-30 records spread over its partitions, 20 % aborted, some held open for up
  to 1.5 s (across a round's end);
- a transactional producer whose transactions are aborted before their record was sent: the
  partition gets an abort marker with no record before it;
- an idempotent producer and a plain one (acks=1, no idempotence) on the same and another topic;
- a plain producer on a compacted topic (few keys, tombstones) whose segments roll every 100 ms, so
  that the cleaner removes records between rounds;
- records deleted on the source (DeleteRecords) at random offsets, transaction markers included;
- with `quiet_spells`, spells of 0.3-1.5 s in which no transaction begins: the transactional topic's
  partitions see plain batches only for a while, then transactions again.
At the cutover every actor stops; one transactional producer keeps its last transaction open a
while longer and then commits it, inside the quiesce window.
"""
from __future__ import annotations

import dataclasses
import random
import threading
import time
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range, timestamp_of

from tests.support.kafka import create_topic

Record = tuple[bytes | None, bytes | None, tuple, int]  # key, value, headers, timestamp


@dataclasses.dataclass
class Model:
    """What the producers were told: {(topic, partition): {offset: record}} for each fate."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    visible: dict[tuple[str, int], dict[int, Record]] = dataclasses.field(default_factory=dict)
    aborted: dict[tuple[str, int], set[int]] = dataclasses.field(default_factory=dict)
    transactions: int = 0
    aborts: int = 0
    lone_aborts: int = 0
    deletes: int = 0

    def settle(self, delivered: list[Any], committed: bool, headers: tuple = ()) -> None:
        """`headers`: what the producer gave each record (a delivery report does not carry them)."""
        with self.lock:
            for msg in delivered:
                key = (msg.topic(), msg.partition())
                if committed:
                    self.visible.setdefault(key, {})[msg.offset()] = (
                        msg.key(), msg.value(), headers, msg.timestamp()[1])
                else:
                    self.aborted.setdefault(key, set()).add(msg.offset())


class LiveSource:
    """The topics and actors of one seed; `start()`, then `stop()` at the cutover."""

    def __init__(self, cluster: ClusterConfig, prefix: str, seed: int, quiet_spells: bool = False) -> None:
        self.cluster = cluster
        self.quiet_spells = quiet_spells
        self._loud = threading.Event()  # cleared during a quiet spell
        self._loud.set()
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.model = Model()
        self.topics = {f"{prefix}.tx": 3, f"{prefix}.mixed": 2, f"{prefix}.compact": 2}
        self.compacted = {f"{prefix}.compact"}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.transactional_ids = 2 + self.rng.randrange(2)
        self.holder = self.rng.randrange(self.transactional_ids)  # keeps a transaction open at the cutover
        self.hold_s = self.rng.uniform(0.2, 1.0)

    @property
    def pattern(self) -> str:
        return f"{self.prefix}\\..*"

    def create(self) -> None:
        for topic, partitions in self.topics.items():
            config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                      "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"} if topic in self.compacted else {}
            create_topic(self.cluster, topic, partitions, config)

    def start(self) -> None:
        actors = [(self._transactional, i) for i in range(self.transactional_ids)]
        actors += [(self._lone_aborts, None), (self._idempotent, None), (self._plain, None), (self._compacting, None),
                   (self._deleter, None)] + ([(self._quiet, None)] if self.quiet_spells else [])
        for target, arg in actors:
            rng = random.Random(self.rng.random())
            thread = threading.Thread(target=self._guard, args=(target, rng, arg), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop_writing(self) -> None:
        """The cutover: each actor finishes what it is in and stops (without waiting for them)."""
        self._stop.set()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop every actor and wait for it; raises what one of them met."""
        self._stop.set()
        self._loud.set()
        for thread in self._threads:
            thread.join(timeout_s)
        assert not any(t.is_alive() for t in self._threads), "a producer of the live source did not stop"
        if self.errors:
            raise self.errors[0]

    def _guard(self, target: Any, rng: random.Random, arg: Any) -> None:
        try:
            target(rng) if arg is None else target(rng, arg)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop() in the test's thread
            self.errors.append(exc)

    def _producer(self, **settings: Any) -> Producer:
        return Producer(self.cluster.producer(**settings))

    # ---------------------------------------------------------------- actors

    def _transactional(self, rng: random.Random, index: int) -> None:
        topic = f"{self.prefix}.tx"
        producer = self._producer(**{"transactional.id": f"{self.prefix}-tx{index}", "linger.ms": rng.choice((0, 2, 50)),
                                     "transaction.timeout.ms": 60_000})
        producer.init_transactions(30)
        headers = (("producer", str(index).encode()),)
        serial = 0
        while True:
            self._loud.wait()
            stopping = self._stop.is_set()
            holding = stopping and index == self.holder
            if stopping and not holding:
                break
            delivered: list[Any] = []
            producer.begin_transaction()
            for _ in range(rng.randint(1, 30)):
                serial += 1
                partition = rng.randrange(self.topics[topic])
                producer.produce(topic, value=f"tx{index}-{serial}".encode(), key=f"k{serial % 7}".encode(),
                                 partition=partition, headers=list(headers),
                                 on_delivery=lambda err, msg: delivered.append(msg) if err is None else None)
                producer.poll(0)
                if rng.random() < 0.3:
                    time.sleep(rng.uniform(0, 0.01))  # the producer's own pace (the scenario, not a wait)
            if holding:
                producer.flush(30)
                time.sleep(self.hold_s)  # open across the stop, decided within the quiesce window
            elif rng.random() < 0.1:
                producer.flush(30)
                time.sleep(rng.uniform(0.2, 1.5))  # open across a round's end
            else:
                time.sleep(rng.uniform(0, 0.05))  # the producer's own pace (the scenario, not a wait)
            commit = holding or rng.random() >= 0.2
            producer.flush(30)  # every delivery report served: the model knows each record's offset
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
                self.model.aborts += 1
            producer.poll(0)
            self.model.settle(delivered, committed=commit, headers=headers)
            self.model.transactions += 1
            if holding:
                break
        producer.flush(30)

    def _quiet(self, rng: random.Random) -> None:
        while not self._stop.wait(rng.uniform(1.0, 3.0)):
            self._loud.clear()  # the transactions under way end; no new one begins
            self._stop.wait(rng.uniform(0.3, 1.5))
            self._loud.set()

    def _lone_aborts(self, rng: random.Random) -> None:
        """Transactions aborted before their one record was sent (it lingers): the coordinator has
        the partition registered, so the partition gets an abort marker with no record before it."""
        topic = f"{self.prefix}.tx"
        producer = self._producer(**{"transactional.id": f"{self.prefix}-lone", "linger.ms": 5000})
        producer.init_transactions(30)
        while not self._stop.wait(rng.uniform(0.2, 1.5)):
            producer.begin_transaction()
            producer.produce(topic, value=b"never", partition=rng.randrange(self.topics[topic]))
            time.sleep(0.25)  # the scenario: librdkafka registers the partition meanwhile; the record stays queued
            producer.abort_transaction(30)
            self.model.lone_aborts += 1

    def _writes(self, rng: random.Random, producer: Producer, topics: list[str], keys: int = 0) -> None:
        delivered: list[Any] = []
        serial = 0
        while not self._stop.is_set():  # a few hundred records a second: the interleavings matter, not the volume
            for _ in range(rng.randint(1, 10)):
                serial += 1
                topic = rng.choice(topics)
                key = f"key{rng.randrange(keys)}".encode() if keys else (f"p{serial}".encode() if rng.random() < 0.8
                                                                        else None)
                value = None if keys and rng.random() < 0.1 else f"{topic}-{serial}".encode() * rng.randint(1, 4)
                producer.produce(topic, value=value, key=key, partition=rng.randrange(self.topics[topic]),
                                 on_delivery=lambda err, msg: delivered.append(msg) if err is None else None)
            producer.poll(0)
            time.sleep(rng.uniform(0.005, 0.04))  # the producer's own pace (the scenario, not a wait)
        producer.flush(30)
        self.model.settle(delivered, committed=True)

    def _idempotent(self, rng: random.Random) -> None:
        self._writes(rng, self._producer(**{"enable.idempotence": True, "linger.ms": rng.choice((0, 5, 20))}),
                     [f"{self.prefix}.tx", f"{self.prefix}.mixed"])

    def _plain(self, rng: random.Random) -> None:
        self._writes(rng, self._producer(**{"enable.idempotence": False, "acks": "1", "linger.ms": 1}),
                     [f"{self.prefix}.mixed"])

    def _compacting(self, rng: random.Random) -> None:
        self._writes(rng, self._producer(**{"enable.idempotence": True, "linger.ms": 1}), [f"{self.prefix}.compact"],
                     keys=12)

    def _deleter(self, rng: random.Random) -> None:
        admin = AdminClient(self.cluster.admin())
        topics = [t for t in self.topics if t not in self.compacted]
        while not self._stop.wait(rng.uniform(0.5, 2.0)):
            topic = rng.choice(topics)
            tp = TopicPartition(topic, rng.randrange(self.topics[topic]))
            low, high = self._marks(tp)
            if high - low < 4:
                continue
            before = rng.randint(low + 1, low + (high - low) // 3)  # any offset: a record, a marker, an open one
            try:
                for future in admin.delete_records([TopicPartition(tp.topic, tp.partition, before)],
                                                   request_timeout=30).values():
                    future.result(30)
            except KafkaException as exc:
                raise AssertionError(f"deleting records of {tp.topic}[{tp.partition}] before {before}: {exc}") from exc
            self.model.deletes += 1

    def _marks(self, tp: TopicPartition) -> tuple[int, int]:
        from confluent_kafka import Consumer

        consumer = Consumer(self.cluster.consumer("chaos-marks", **{"isolation.level": "read_uncommitted"}))
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)
        finally:
            consumer.close()


def _view(cluster: ClusterConfig, topic: str, partition: int) -> dict[int, tuple]:
    """{offset: (key, value, headers, timestamp)} of every record a read_committed consumer sees."""
    with ClusterAdmin(cluster) as admin:
        low, high = admin.watermarks(topic, partition)
    return {m.offset(): (m.key(), m.value(), tuple(m.headers() or ()), timestamp_of(m))
            for m in read_range(cluster, topic, partition, low, high)}


def compare_with_model(stack: Any, topics: dict[str, int], compacted: set[str], model: Model,
                       names: dict[str, str] | None = None) -> int:
    """Every partition: both sides' log start and end equal; the read_committed views equal (on a
    compacted topic: what the source holds is on the target unless superseded there, and what only
    the target holds is superseded there); and the target's view is what the producers were told: every record on it
    one they wrote at that offset and saw committed, every such record from the log start on there
    (on a compacted topic, the latest of each key). `names`: the topics' names on the target (a run's
    renames; none: their own). Returns the records compared."""
    compared = 0
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic, count in topics.items():
            for partition in range(count):
                there = (names or {}).get(topic, topic)
                marks = source.watermarks_of([(topic, partition)])[(topic, partition)]
                assert target.watermarks_of([(there, partition)])[(there, partition)] == marks, f"{topic}[{partition}]"
                on_source, on_target = _view(stack.source, topic, partition), _view(stack.target, there, partition)
                told = {o: r for o, r in model.visible.get((topic, partition), {}).items() if o >= marks[0]}
                where = f"{topic}[{partition}]"
                for offset, record in on_target.items():
                    assert told.get(offset) == record, f"{where}: target offset {offset} is not what a producer wrote there"
                if topic in compacted:
                    later = {}
                    for offset in sorted(on_target):
                        later[on_target[offset][0]] = offset
                    for offset, record in on_source.items():
                        # the DR cluster's cleaner may remove a record before the source's does, once a later
                        # record of its key is there too (both topics compact within 100 ms here)
                        assert on_target.get(offset) == record or (offset not in on_target and
                                                                   later.get(record[0], -1) > offset), \
                            f"{where}: source offset {offset} differs on the target: {on_target.get(offset)!r}"
                    for offset, record in on_target.items():
                        assert offset in on_source or later[record[0]] > offset, f"{where}: {offset} only on the target"
                    newest = {}
                    for offset in sorted(told):
                        newest[told[offset][0]] = offset
                    for name, offset in newest.items():
                        assert offset in on_target, f"{where}: the latest record of key {name!r} ({offset}) is missing"
                else:
                    assert on_target == on_source, f"{where}: the read_committed views differ"
                    assert set(on_target) == set(told), (
                        f"{where}: offsets the producers saw committed {sorted(set(told) - set(on_target))[:5]} missing, "
                        f"{sorted(set(on_target) - set(told))[:5]} not theirs")
                compared += len(on_target)
    return compared
