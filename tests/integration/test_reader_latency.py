"""A pooled reader reading a topic it has not seen before: librdkafka learns a new topic's leaders
only on its next topic scan, up to a second after the assignment, unless the reader looks the topic
up first (`records.learn_topic`). A verification in the cutover window reads many small topics, one
after another, with the same pooled readers: each new topic cost a second there."""
from __future__ import annotations

import statistics
import time

from confluent_kafka import TopicPartition
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
