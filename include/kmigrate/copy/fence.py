"""The fence of earlier copiers of a target partition (docs/DESIGN.md §4.4): what a copy that does
not continue its own last commit does before it writes."""
from __future__ import annotations

import time

from kmigrate.config import ClusterConfig
from kmigrate.copy.writer import Writer, marker_transactional_id, transactional_id
from kmigrate.errors import ForeignTarget
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin


def fence_earlier(target: ClusterConfig, target_admin: ClusterAdmin, writer: Writer, topic: str, partition: int,
                  run_id: str) -> tuple[int, int]:
    """Fence the run's earlier copiers of `topic[partition]` and abort what they left open; the
    target's (log start, end) after it. An earlier copier may have left a transaction open there, of
    its producer or of a marker alone: both ids are fenced and their transactions aborted (their
    markers land) before the end is read again. Only a partition empty by its high watermark holds
    none: the last stable offset stops where an open transaction begins, so a partition that holds
    nothing else looks empty by it (a copy that took it so wrote its own fillers past the dead
    copier's, the target's end then past the source's). Over the raw connection that is an
    InitProducerId an id (a few ms), else librdkafka's transactional producer (about 50 ms). A
    transaction still open after that is another producer's: ForeignTarget."""
    if writer.raw:
        for fenced in (transactional_id, marker_transactional_id):
            txn_wire.fence(target, topic, partition, fenced(run_id, topic, partition))
    else:
        writer.txn  # noqa: B018 - created for its init_transactions side effect
    low, stable, high = _settled(target_admin, topic, partition)
    if high != stable:
        raise ForeignTarget(
            f"{topic}[{partition}]: a transaction that is not this copy's is open on the target from offset "
            f"{stable} (its end is {high}): another producer writes to the target topic. Nothing was written. "
            "Stop it; if the topic is not in use, migrate it to a target where it does not exist yet",
            topic=topic, partition=partition)
    return low, stable


def high_water_of(target_admin: ClusterAdmin, topic: str, partition: int) -> int:
    return target_admin.end_offsets([(topic, partition)], retry=True)[(topic, partition)]


def _settled(target_admin: ClusterAdmin, topic: str, partition: int, timeout_s: float = 5.0) -> tuple[int, int, int]:
    """(log start, last stable offset, high watermark) once the last two agree, or as they are after
    `timeout_s` (a transaction of another producer open there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        low, stable = target_admin.watermarks(topic, partition)
        high = high_water_of(target_admin, topic, partition)
        if high == stable or time.monotonic() > deadline:
            return low, stable, high
        time.sleep(0.1)
