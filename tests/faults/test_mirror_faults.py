"""The continuous mirror on the 3-broker stack: the leader broker of a source partition, then of a DR
partition, killed with SIGKILL and started again while the mirror follows a live producer. The
mirror goes on (its copies follow the new leaders; a partition that fails meanwhile is named and
tried again), and once the producer stops every partition is equal record by record."""
from __future__ import annotations

import re
import threading
import uuid

from confluent_kafka import Producer
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import request_stop

from tests.support.faults import MID_FAULT, compare
from tests.support.mirror import wait_caught_up
from tests.support.waiting import wait_until

PARTITIONS = 3


def write_until(stopping: threading.Event, source, topic: str) -> None:
    """Records to every partition (acks=all, idempotent: a broker killed under it loses and repeats
    nothing) until `stopping` is set."""
    producer = Producer(source.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5}))
    i = 0
    while not stopping.is_set():
        producer.produce(topic, b"record %d" % i, key=b"k%d" % (i % 50), partition=i % PARTITIONS)
        producer.poll(0)
        i += 1
        if i % 100 == 0:
            stopping.wait(0.05)  # a pace the mirror in this process keeps up with
    assert producer.flush(60) == 0


def dr_ends(manifest: Manifest) -> dict:
    status = mirror_status.read(manifest) or {"partitions": []}
    return {p["partition"]: p["dr_end"] for p in status["partitions"]}


def test_the_mirror_goes_on_through_a_source_leader_and_a_dr_leader_killed_and_restarted(faulty, tmp_path):
    topic = f"fault-mirror-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic, PARTITIONS)
    manifest = Manifest(str(tmp_path / "state"), "mirror")
    spec = write_spec(manifest, MirrorSpec(re.escape(topic), interval_s=0.2, term_s=5, verify_every_s=2))
    mirror = Mirror(manifest, faulty.source, faulty.target, spec, say=lambda line: print("mirror:", line))
    stopping = threading.Event()
    writer = threading.Thread(target=write_until, args=(stopping, faulty.source, topic), daemon=True)
    runner = threading.Thread(target=mirror.run, daemon=True)
    writer.start()
    runner.start()

    def moves_on(more: int, what: str) -> None:
        """The DR ends, all of them, move `more` past where they are now."""
        now = dr_ends(manifest)
        wait_until(lambda: (ends := dr_ends(manifest)) and all(ends[p] >= now.get(p, 0) + more for p in ends),
                   f"the mirror moving on {what}", 180, ignore=MID_FAULT)

    try:
        wait_until(lambda: len(dr_ends(manifest)) == PARTITIONS and min(dr_ends(manifest).values()) > 100,
                   "the mirror under way", 120)
        faulty.kill("source", faulty.leader("source", topic, 0))
        moves_on(100, "with a source broker killed")
        faulty.restart_killed()
        faulty.kill("target", faulty.leader("target", topic, 1))
        moves_on(100, "with a DR broker killed")
        faulty.restart_killed()
        stopping.set()
        writer.join(90)
        wait_caught_up(manifest, faulty.source, {topic: PARTITIONS})
    finally:
        stopping.set()
        request_stop(manifest, "the test is done")
        runner.join(120)
    assert not runner.is_alive() and mirror_status.read(manifest)["stopped"]
    compare(faulty, topic, PARTITIONS, "the mirror: a source leader and a DR leader SIGKILLed and restarted "
                                       "while a producer writes (every partition equal once it stops)")
