"""iter_range's reading of what a pooled consumer delivers (pure logic, a scripted consumer): what
an earlier read of the consumer fetched and delivers late is not this read's, and an offset out of
range is believed only when the partition's log start lies above the position."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kmigrate.errors import CopyInterrupted
from kmigrate.kafka.records import iter_range


class Message:
    def __init__(self, topic: str, partition: int, offset: int, code: int | None = None) -> None:
        self._at, self._code = (topic, partition, offset), code

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def error(self) -> KafkaError | None:
        return None if self._code is None else KafkaError(self._code)


class Scripted:
    """Delivers `script` a message a consume(); after that, records from the assigned position on."""

    def __init__(self, script: list[Message], log_start: int) -> None:
        self.script, self.log_start, self.assigned = list(script), log_start, []

    def list_topics(self, topic: str, timeout: float) -> None:
        pass

    def assign(self, partitions) -> None:  # noqa: ANN001
        self.assigned.append(partitions[0].offset)
        self.at = partitions[0]

    def unassign(self) -> None:
        pass

    def get_watermark_offsets(self, tp, timeout: float, cached: bool) -> tuple[int, int]:  # noqa: ANN001
        return self.log_start, 1000

    def consume(self, count: int, timeout: float) -> list[Message]:
        if self.script:
            return [self.script.pop(0)]
        message = Message(self.at.topic, self.at.partition, self.at.offset)
        self.at.offset += 1
        return [message]


def offsets(consumer: Scripted, start: int, end: int) -> list[int]:
    return [m.offset() for chunk in iter_range(consumer, "t", 0, start, end) for m in chunk]


def test_an_earlier_reads_answers_delivered_late_are_not_this_reads():
    late = [Message("other", 3, 999, KafkaError._PARTITION_EOF), Message("other", 3, 5, KafkaError._AUTO_OFFSET_RESET),
            Message("other", 0, 252), Message("t", 0, 200, KafkaError._AUTO_OFFSET_RESET), Message("t", 0, 249)]
    consumer = Scripted(late, log_start=250)
    assert offsets(consumer, 250, 300) == list(range(250, 300))
    assert consumer.assigned == [250, 250]  # read on from its position once, after the stale offset out of range


def test_an_offset_out_of_range_below_the_log_start_interrupts_the_read():
    consumer = Scripted([Message("t", 0, 250, KafkaError._AUTO_OFFSET_RESET)], log_start=260)
    with pytest.raises(CopyInterrupted, match=r"t\[0\]: offset 250 is below the log start now"):
        offsets(consumer, 250, 300)
