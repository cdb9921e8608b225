"""Partitions copied together (docs/DESIGN.md §4.6.1): a task's small partitions of plain batches,
each copied entirely, in Fetch and Produce requests shared by all of them.

A partition qualifies when the per-partition copier would copy all of it byte for byte and do
nothing else (docs/DESIGN.md §4): its log starts at 0 on the source and ends at the snapshot end,
every batch in it is plain (no transaction, no marker, no record removed by compaction, CreateTime),
and its target partition is empty, with nothing uncommitted on its leader. For those, one Fetch a
source leader a round reads the batches of all of them, and one Produce a target leader a round
writes the next batch of each (a v2 Produce takes one batch a partition), as one idempotent
producer a leader whose sequence numbers count per partition, up to MAX_IN_FLIGHT requests in
flight. Every response's base offset must be the offset the batch has on the source, and the
partition's lease is checked before each of its writes, as on the per-partition path.

A partition that does not qualify, or meets anything unexpected (an error, a leader moving, a base
offset not the expected one), gets no further write here and is left to `copy_partition`, which
resumes from the target's end with all its checks. Only the target is written."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyInterrupted, KmigrateError
from kmigrate.kafka import leaders, multi, wire
from kmigrate.kafka.pool import shared_admin
from kmigrate.model import PRESERVE, OffsetRun, PartitionResult, WorkUnit

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
FETCH_ROUNDS = 8              # a partition not read whole in this many rounds goes the per-partition way
PARTITION_FETCH_BYTES = 1 << 20
HELD_BYTES = 256 << 20        # fetched batches held at most for one task
REQUEST_BYTES = 8 << 20       # a Produce request's batches, at most (a batch larger than that goes alone)
MAX_IN_FLIGHT = 5


@dataclasses.dataclass
class PartitionBatches:
    """One partition's batches written in shared Produce requests (here, and by the mirror's streams):
    the target leader they go to, its producer, how many were written at their offsets, why it failed."""

    unit: WorkUnit
    target_leader: tuple[str, int]  # where it was found settled, and is written
    batches: list[wire.Batch] = dataclasses.field(default_factory=list)
    producer: wire.Idempotence | None = None
    written: int = 0        # batches acknowledged at their expected offsets
    failed: str | None = None

    @property
    def end(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    @property
    def target_key(self) -> TopicPartition:
        """The partition as the target names it (the run's renames)."""
        return self.unit.target_key


def plain(batch: wire.Batch) -> bool:
    return not (batch.legacy or batch.transactional or batch.control or not batch.dense or batch.log_append_time
                or batch.delete_horizon)


def copy_together(source: ClusterConfig, target: ClusterConfig, units: Sequence[WorkUnit],
               check_lease: Mapping[TopicPartition, object]) -> dict[TopicPartition, PartitionResult]:
    """The results of the units copied here, by (topic, partition); `check_lease`: each unit's
    lease check (raises when the lease is not known to be held). The others are not touched, or
    were written to where their copy_partition resumes."""
    started = time.monotonic()
    try:
        parts = _qualifying(source, target, units)
        if parts:
            _read(source, parts)
            write_all(target, parts, check_lease)
    except Exception as exc:  # noqa: BLE001 - the per-partition path copies, with its checks, what is left
        log.warning("copying partitions together stopped (%s: %s); each partition left is copied on its own",
                    type(exc).__name__, exc)
        return {}
    copied = [p for p in parts.values() if not p.failed and p.written == len(p.batches) and p.batches]
    if not copied:
        return {}
    with shared_admin(target) as admin:
        ends = admin.watermarks_of([p.target_key for p in copied])
    seconds = (time.monotonic() - started) / len(units)
    results = {}
    for p in copied:
        end = p.unit.end_offset
        if ends[p.target_key] != (0, end):
            continue  # not what was written: copy_partition looks again, with its checks
        records = sum(b.records for b in p.batches)
        results[_key(p.unit)] = PartitionResult(
            p.unit.topic, p.unit.partition, PRESERVE, 0, end, 0, end, records=records,
            bytes=sum(len(b.data) for b in p.batches), whole_batches=len(p.batches), whole_records=records, first_offset=0,
            last_offset=end - 1, offset_map=[OffsetRun(0, 0, end)], copy_seconds=round(seconds, 4),
            target_topic=p.unit.target_topic)
    return results


def _key(unit: WorkUnit) -> TopicPartition:
    return unit.topic, unit.partition


def _qualifying(source: ClusterConfig, target: ClusterConfig, units: Sequence[WorkUnit]
                ) -> dict[TopicPartition, PartitionBatches]:
    """The units whose source log is [0, end) and whose target partition is empty and settled."""
    wanted = [_key(u) for u in units if u.mode == PRESERVE and u.end_offset > 0]
    if not wanted:
        return {}
    with shared_admin(source) as admin:
        on_source = admin.watermarks_of(wanted)
    ends = {_key(u): u.end_offset for u in units}
    wanted = [tp for tp in wanted if on_source[tp] == (0, ends[tp])]
    if not wanted:
        return {}
    by_key = {_key(u): u for u in units}
    named = {(by_key[tp].target_topic, tp[1]): tp for tp in wanted}  # the target's name of each: the source's
    with shared_admin(target) as admin:
        on_target = admin.watermarks_of(named)
    named = {there: tp for there, tp in named.items() if on_target[there] == (0, 0)}
    # nothing uncommitted on the target leader either (an earlier copier's write cut off by a
    # leader change would land below this copy's batches): its log end offset is 0 too
    settled = {}
    for address, tps in multi.by_leader(leaders.look_up(target, named)).items():
        with leaders.connection(target, address) as conn:
            multi.send_list_offsets(conn, tps, replica_id=-2)
            settled |= {named[there]: address for there, (error, offset) in multi.receive_list_offsets(conn).items()
                        if not error and offset == 0}
    return {tp: PartitionBatches(by_key[tp], settled[tp]) for tp in named.values() if tp in settled}


def _read(source: ClusterConfig, parts: dict[TopicPartition, PartitionBatches]) -> None:
    """Each partition's batches up to its end, or `failed` saying why not."""
    places = leaders.look_up(source, parts)
    reading = {tp for tp in parts if tp in places}
    for tp in set(parts) - reading:
        parts[tp].failed = "no leader"
    held = 0
    for _ in range(FETCH_ROUNDS):
        if not reading:
            return
        for address, tps in multi.by_leader({tp: places[tp] for tp in reading}).items():
            with leaders.connection(source, address) as conn:
                multi.send_fetch(conn, {tp: parts[tp].end for tp in tps}, partition_max_bytes=PARTITION_FETCH_BYTES)
                fetched = multi.receive_fetch(conn)
            for tp in tps:
                error, _, blob = fetched.get(tp, multi.MISSING)[:3]
                part = parts[tp]
                batches = [b for b in wire.parse_batches(blob) if b.last_offset >= part.end]
                expected = part.end
                for batch in batches:
                    if batch.base_offset != expected or not plain(batch):
                        error = error or -1
                        break
                    expected = batch.last_offset + 1
                if error:
                    part.failed = wire.error_name(error) if error > 0 else f"not plain batches from offset {part.end}"
                    reading.discard(tp)
                    continue
                part.batches += batches
                held += sum(len(b.data) for b in batches)
                if part.end >= part.unit.end_offset:
                    reading.discard(tp)
                    if part.end > part.unit.end_offset:
                        part.failed = "a batch crosses the snapshot end"
        if held > HELD_BYTES:
            break
    for tp in reading:
        parts[tp].failed = f"not read whole in {FETCH_ROUNDS} fetches"


def write_all(target: ClusterConfig, parts: dict[TopicPartition, PartitionBatches],
              check_lease: Mapping[TopicPartition, object]) -> None:
    """The batches of every partition read whole, in order, at their offsets, to the leader its
    settled end was read from (a leader moved since refuses the writes: the partition falls back),
    each as its `producer` (one new producer id a leader for those without)."""
    ready = {tp: p for tp, p in parts.items() if not p.failed}
    for address, tps in multi.by_leader({tp: p.target_leader for tp, p in ready.items()}).items():
        with leaders.connection(target, address) as conn:
            _write_to(conn, {tp: ready[tp] for tp in tps}, check_lease)


def _write_to(conn: wire.BrokerConnection, parts: dict[TopicPartition, PartitionBatches],
              check_lease: Mapping[TopicPartition, object]) -> None:
    producer_for(conn, parts)
    on_target = {p.target_key: p for p in parts.values()}  # a Produce request names the target's partitions
    pending: dict[int, dict[TopicPartition, int]] = {}  # correlation id -> {target tp: expected base offset}
    rounds = iter(produce_requests(parts, check_lease))
    request = next(rounds, None)
    while request is not None or pending:
        while request is not None and len(pending) < MAX_IN_FLIGHT:
            batches, expected = stamped(on_target, {parts[tp].target_key: b for tp, b in request.items()})
            pending[multi.send_produce(conn, batches)] = expected
            request = next(rounds, None)
        correlation_id, answers = multi.receive_produce(conn)
        take_answers(on_target, pending.pop(correlation_id), answers)


def producer_for(conn: wire.BrokerConnection, parts: Mapping[TopicPartition, PartitionBatches]) -> None:
    """One new producer id on this leader for the partitions without one (sequences count per partition)."""
    if any(part.producer is None for part in parts.values()):
        producer = _producer_id(conn)
        for part in parts.values():
            part.producer = part.producer or wire.Idempotence(producer.producer_id, producer.epoch)


def stamped(parts: Mapping[TopicPartition, PartitionBatches], request: Mapping[TopicPartition, wire.Batch]
            ) -> tuple[dict[TopicPartition, memoryview], dict[TopicPartition, int]]:
    """A request's batches stamped with their partitions' producers, and the base offset each must get."""
    return ({tp: parts[tp].producer.stamp(b.for_produce()) for tp, b in request.items()},  # type: ignore[union-attr]
            {tp: b.base_offset for tp, b in request.items()})


def take_answers(parts: Mapping[TopicPartition, PartitionBatches], expected: Mapping[TopicPartition, int],
                 answers: Mapping[TopicPartition, tuple[int, int]]) -> None:
    """A Produce answer: each batch written at its expected offset counts, anything else fails its partition."""
    for tp, base in expected.items():
        error, base_offset = answers.get(tp, (-1, -1))
        part = parts[tp]
        if error or base_offset != base:
            part.failed = part.failed or (wire.error_name(error) if error else f"written at offset {base_offset}, not {base}")
        elif not part.failed:
            part.written += 1


def _producer_id(conn: wire.BrokerConnection, timeout_s: float = 30.0) -> wire.Idempotence:
    """A new idempotent producer id, asked again while the broker answers with an error that passes
    (a transaction coordinator still loading after a broker start, a leader moving)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return conn.idempotence()
        except CopyInterrupted:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def produce_requests(parts: Mapping[TopicPartition, PartitionBatches], check_lease: Mapping[TopicPartition, object]):
    """The Produce requests in order: round k holds the k-th batch of each partition (none of a
    partition that failed since, or whose lease is not held), cut at REQUEST_BYTES."""
    rounds = max(len(p.batches) for p in parts.values())
    for k in range(rounds):
        request: dict[TopicPartition, wire.Batch] = {}
        size = 0
        for tp, part in parts.items():
            if k >= len(part.batches) or part.failed:
                continue
            try:
                check_lease[tp]()  # type: ignore[operator]
            except KmigrateError as exc:
                part.failed = str(exc)
                continue
            batch = part.batches[k]
            if request and size + len(batch.data) > REQUEST_BYTES:
                yield request
                request, size = {}, 0
            request[tp] = batch
            size += len(batch.data)
        if request:
            yield request
