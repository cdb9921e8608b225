"""The quiesce on a live source (docs/DESIGN.md §3.1): a transaction still open is waited for while it
may yet be decided and refused by name when it stays open; a consumer group member whose consumer
stopped without leaving (as Kafka Streams closes) is waited out until the broker drops it, while one
that still heartbeats is refused."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from kmigrate.errors import GroupActive, TransactionOpen
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.cutover.quiesce import quiesce_poke

from tests.support.kafka import seed_plain
from tests.support.waiting import wait_until

# a consumer in its own process: joins the group, commits, says so, then idles (heartbeating) until killed
MEMBER = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([sys.argv[3]])
while True:
    msg = consumer.poll(0.5)
    if msg is not None and not msg.error():
        consumer.commit(msg, asynchronous=False)
        print("ready", flush=True)
        break
while True:
    consumer.poll(0.5)
"""


def open_transaction(cluster, topic: str) -> Producer:
    producer = Producer(cluster.producer(**{"transactional.id": f"{topic}-open"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"undecided", partition=0)
    producer.flush(30)
    return producer


def test_a_transaction_left_open_fails_the_quiesce_naming_its_producer(stack, unique_name, tmp_path):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=10)
    producer = open_transaction(stack.source, unique_name)
    try:
        with pytest.raises(TransactionOpen, match=rf"{unique_name}\[0\]: a transaction open since offset 10 by "
                                                  r"producer id \d+ \(epoch \d+"):
            quiesce_poke(Manifest(str(tmp_path), "open"), stack.source, [unique_name], 1.0, budget_s=20)
    finally:
        producer.abort_transaction(30)


def test_a_transaction_decided_within_the_quiesce_is_waited_for(stack, unique_name, tmp_path):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=10)
    producer = open_transaction(stack.source, unique_name)
    timer = threading.Timer(0.8, producer.commit_transaction, args=(30,))
    timer.start()
    try:
        assert quiesce_poke(Manifest(str(tmp_path), "decided"), stack.source, [unique_name], 1.5, budget_s=30)
    finally:
        timer.join(30)
    with ClusterAdmin(stack.source) as admin:
        assert admin.stable_ends([(unique_name, 0)]) == admin.end_offsets([(unique_name, 0)]) == {(unique_name, 0): 12}


def test_a_member_that_stopped_without_leaving_is_waited_out(stack, unique_name, tmp_path):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=10)
    group = f"{unique_name}-g"
    member = subprocess.Popen([sys.executable, "-c", MEMBER, stack.source.bootstrap_servers, group, unique_name],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert member.stdout.readline().strip() == "ready"
        os.kill(member.pid, signal.SIGKILL)  # no LeaveGroup: the member stays until its session expires
        member.wait(30)
        with ClusterAdmin(stack.source) as admin:
            assert admin.live_members(group)
        began = time.monotonic()
        assert quiesce_poke(Manifest(str(tmp_path), "stopped"), stack.source, [unique_name], 1.0,
                            groups=group, budget_s=60, member_timeout_s=30)
        assert time.monotonic() - began > 2  # it waited for the broker to drop the member (6 s session)
        with ClusterAdmin(stack.source) as admin:
            assert admin.live_members(group) is None
    finally:
        if member.poll() is None:
            member.kill()
            member.wait(30)


def test_a_member_that_still_heartbeats_is_refused_after_the_session_timeout(stack, unique_name, tmp_path):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=10)
    group = f"{unique_name}-g"
    stop = threading.Event()

    def idle_member() -> None:
        consumer = Consumer(stack.source.consumer(group, **{"session.timeout.ms": 6000}))
        consumer.subscribe([unique_name])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    consumer.commit(msg, asynchronous=False)
        finally:
            consumer.close()

    thread = threading.Thread(target=idle_member, daemon=True)
    thread.start()
    try:
        with ClusterAdmin(stack.source) as admin:
            wait_until(lambda: admin.committed_offsets(group).get((unique_name, 0)) == 10, "the member to commit")
        with pytest.raises(GroupActive, match=rf"'{group}': members stayed for more than 3s while the offsets stood "
                                              "still"):
            quiesce_poke(Manifest(str(tmp_path), "idle"), stack.source, [unique_name], 1.0, groups=group,
                         budget_s=30, member_timeout_s=3)
    finally:
        stop.set()
        thread.join(30)
