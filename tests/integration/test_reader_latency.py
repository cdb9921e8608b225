"""New clients' first requests to partition leaders. A pooled reader reading a topic it has not seen
before: librdkafka learns a new topic's leaders only on its next topic scan, up to a second after
the assignment, unless the reader looks the topic up first (`records.learn_topic`); a verification in
the cutover window reads many small topics one after another with the same pooled readers, and each
new topic cost a second there. A new admin client's first ListOffsets: librdkafka asks for the
leaders before its connection is up and again 1 s and 2 s later, unless a Metadata request went
first (`ClusterAdmin._connect`); the window's steps open several such clients."""
from __future__ import annotations

import statistics
import time

from confluent_kafka import TopicPartition
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import partition_digest, reader

from tests.support.kafka import create_topic, produce


def test_the_first_read_of_each_new_topic_does_not_wait_for_a_topic_scan(stack, unique_name):
    topics = [f"{unique_name}-{i}" for i in range(5)]
    for topic in topics:
        create_topic(stack.source, topic)
        produce(stack.source, topic, [(b"k%d" % i, b"v" * 100) for i in range(100)])
    consumer = reader(stack.source)  # the watermarks asked of another client: this one knows no topic
    try:
        ends = {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] for t in topics}
    finally:
        consumer.close()
    seconds = []
    for topic in topics:
        began = time.monotonic()
        assert partition_digest(stack.source, topic, 0, 0, ends[topic]).records == 100
        seconds.append(time.monotonic() - began)
    # without the lookup each took 1.0 s (the scan timer); with it, a few milliseconds
    assert statistics.median(seconds) < 0.5, seconds


def test_the_first_list_offsets_of_each_new_admin_client_does_not_wait_for_a_leader_retry(stack, unique_name):
    topics = [f"{unique_name}-{i}" for i in range(10)]
    for topic in topics:
        create_topic(stack.source, topic)
    keys = [(t, 0) for t in topics]
    seconds = []
    previous = ClusterAdmin(stack.source)
    for _ in range(30):  # each client closed as the next starts, as one step's clients follow another's
        began = time.monotonic()
        admin = ClusterAdmin(stack.source)
        previous.close()
        assert admin.end_offsets(keys, retry=True) == dict.fromkeys(keys, 0)
        seconds.append(time.monotonic() - began)
        previous = admin
    previous.close()
    # without the Metadata request first, about a third took 3.0 s
    assert max(seconds) < 1.5, sorted(seconds)[-3:]
