"""Small applications the move tests run on either cluster: a producer writing numbered records round
a topic's partitions, and a consumer reading as a group, committing what each poll brought."""
from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer


class Writer(threading.Thread):
    """A producer writing numbered records round the partitions until stopped."""

    def __init__(self, cluster, topic: str, partitions: int, first: int = 0) -> None:  # noqa: ANN001
        super().__init__(daemon=True)
        self.producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))
        self.topic, self.partitions, self.first, self.sent = topic, partitions, first, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            number = self.first + self.sent
            self.producer.produce(self.topic, value=b"%d" % number, partition=number % self.partitions)
            self.sent += 1
            if self.sent % 20 == 0:
                self.producer.flush(10)
                self.stopping.wait(0.02)
        assert self.producer.flush(10) == 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def read_as(cluster, group: str, topic: str, read: dict, until, **settings) -> None:  # noqa: ANN001
    """Read as `group` until `until()` holds, what each poll brought committed before it counts as read."""
    consumer = Consumer(cluster.consumer(**{"group.id": group, "enable.auto.commit": False,
                                            "session.timeout.ms": 6000, **settings}))
    consumer.subscribe([topic])
    try:
        while not until():
            messages = [m for m in consumer.consume(200, 0.2) if not m.error()]
            if messages:
                consumer.commit(asynchronous=False)  # the positions after them
                for message in messages:
                    read.setdefault(message.partition(), []).append((message.offset(), message.value()))
    finally:
        consumer.close()  # leaves the group
