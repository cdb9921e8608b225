"""The ends of many partitions read with raw ListOffsets requests (kmigrate.kafka.ends) on the real
broker: the log start, the high watermark and the last stable offset each as the admin client reads
them (and through the admin client where the raw connection cannot go), a leader remembered wrong
looked up again, and a topic the cluster lacks named."""
from __future__ import annotations

import time

import pytest
from kmigrate.errors import ClusterUnavailable
from kmigrate.kafka import ends, leaders, transport
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.pool import identity

from tests.support.kafka import TxnSeeder, create_topic, produce


def test_the_ends_read_raw_are_the_admin_clients(stack, unique_name, monkeypatch):
    topic = unique_name
    create_topic(stack.source, topic, partitions=2)
    seeder = TxnSeeder(stack.source, topic)
    seeder.records(5, "plain")
    seeder.open_transaction(2)  # partition 0: high watermark 7, last stable offset 5
    try:
        produce(stack.source, topic, [(None, b"x")] * 4, partition=1)
        with ClusterAdmin(stack.source) as admin:
            admin.delete_records(topic, 1, 3)  # partition 1 starts at 3
            keys = [(topic, 0), (topic, 1)]
            expected = [admin.start_offsets(keys), admin.end_offsets(keys), admin.stable_ends(keys)]
        kinds = (ends.START, ends.HIGH, ends.STABLE)
        got = ends.read(stack.source, keys, kinds, 10)
        assert got == expected == [{keys[0]: 0, keys[1]: 3}, {keys[0]: 7, keys[1]: 4}, {keys[0]: 5, keys[1]: 4}]
        with monkeypatch.context() as m:  # a cluster only librdkafka reaches (GSSAPI, say)
            m.setattr(transport, "raw_capable", lambda cluster, what: False)
            m.setattr(leaders, "connection", None)  # no raw connection is made
            assert ends.read(stack.source, keys, kinds, 10) == expected

        # partition 0's leader remembered as the DR broker, which lacks the topic: looked up again
        create_topic(stack.target, f"{topic}-dr")
        [dr_broker] = leaders.look_up(stack.target, [(f"{topic}-dr", 0)]).values()
        leaders._remembered[(identity(stack.source), topic, 0)] = (time.monotonic(), dr_broker)
        assert ends.read(stack.source, keys, (ends.HIGH,), 10) == [{keys[0]: 7, keys[1]: 4}]
        assert leaders.leaders(stack.source, keys)[keys[0]] != dr_broker
    finally:
        seeder.txn.abort_transaction(30)

    with pytest.raises(ClusterUnavailable, match=f"cluster {stack.source.name} did not say"):
        ends.read(stack.source, [(f"{topic}-absent", 0)], (ends.HIGH,), 10)
