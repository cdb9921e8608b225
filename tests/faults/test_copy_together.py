"""A task of many partitions copying partitions together (copy_bin) on 3-broker clusters: a
target leader SIGKILLed between two of its shared Produce requests ends in a finished copy of every
partition with every offset preserved, shown record by record."""
from __future__ import annotations

import uuid

from confluent_kafka import Producer
from kmigrate.kafka import multi
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.copying.tasks import copy_bin

from tests.support.faults import compare, prepared

PARTITIONS = 6


def test_target_leader_killed_while_a_task_copies_partitions_together(faulty, monkeypatch):
    topic = f"fault-together-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic, partitions=PARTITIONS)
    producer = Producer(faulty.source.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5}))
    for batch in range(4):  # several batches a partition: more than one shared Produce round
        for p in range(PARTITIONS):
            for i in range(200):
                producer.produce(topic, key=b"k%d" % i, value=b"p%d b%d r%d" % (p, batch, i) * 10, partition=p)
        assert producer.flush(60) == 0
    prepared(faulty, topic)
    with ClusterAdmin(faulty.source) as source:
        ends = source.watermarks_of((topic, p) for p in range(PARTITIONS))
    with ClusterAdmin(faulty.target) as target:  # the new target partitions served (not only led)
        target.end_offsets(((topic, p) for p in range(PARTITIONS)), retry=True)
    victim = faulty.leader("target", topic, 0)
    sent = []
    send = multi.send_produce

    def send_then_kill(conn, batches, **kwargs):
        sent.append(len(batches))
        if len(sent) == 2:
            faulty.kill("target", victim)  # after the first round: the rest meets a dead or new leader
        return send(conn, batches, **kwargs)

    monkeypatch.setattr(multi, "send_produce", send_then_kill)
    units = [WorkUnit(topic, p, ends[(topic, p)][1]) for p in range(PARTITIONS)]
    rows = copy_bin([(u, {}) for u in units], (faulty.source, faulty.target), f"faults-{uuid.uuid4().hex[:6]}",
                    verify=False)

    assert len(sent) >= 2 and all(r["ok"] for r in rows), rows
    assert faulty.leader("target", topic, 0) != victim
    faulty.restart_killed()
    compare(faulty, topic, PARTITIONS, "target leader killed while a task copies partitions together")
