"""Connect workers older than Kafka 3.5: no STOPPED state and no offsets REST API (KIP-875).

Such a worker's connectors are paused instead of stopped. Their offsets are read where the worker
keeps them: a source connector's in the worker's offsets topic (offset.storage.topic, on the source
cluster; key `["<connector>", {source partition}]`, value the offset map or null, the latest record
of a key wins), a sink connector's in its consumer group (`connect-<connector>` unless the
connector sets `consumer.override.group.id`). Both come out in the shape the REST API gives, so
everything after the snapshot is the same for old and new workers."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.records import iter_range, reader

log = logging.getLogger(__name__)

DEFAULT_OFFSETS_TOPIC = "connect-offsets"  # the name connect-distributed.properties ships with


def pause_connectors(connect: ConnectClient, names: Sequence[str], quiesce_s: float | None = None,
                     wait_s: float = 60.0) -> None:
    """Pause each connector and wait until it and its tasks are PAUSED."""
    log.warning(
        "Kafka Connect %s at %s has no STOPPED state (Kafka 3.5 added it): %s %s paused instead. A paused task "
        "keeps what it has not committed until the worker's next offset flush (offset.flush.interval.ms, 60 s "
        "unless the worker sets it); the snapshot reads the offsets after the quiesce window%s, so that window "
        "must be at least that long, or the target's connectors repeat the records sent since the last flush",
        connect.worker_version, connect.url, ", ".join(names), "is" if len(names) == 1 else "are",
        f" ({quiesce_s:g} s)" if quiesce_s is not None else "")
    for name in names:
        connect.pause(name)
    for name in names:
        connect.wait_for(name, lambda st: st["connector"]["state"] == "PAUSED"
                         and all(t["state"] == "PAUSED" for t in st["tasks"]), "PAUSED with all tasks paused", wait_s)


def sink_group(name: str, config: Mapping[str, str]) -> str:
    """The consumer group a sink connector commits its offsets in."""
    return config.get("consumer.override.group.id") or f"connect-{name}"


def offsets_topic(admin: ClusterAdmin, connect: ConnectClient) -> str:
    """The worker's offsets topic on the source cluster: the one its Connect connection names
    (extra `offsets_topic`), else `connect-offsets`, else the one topic whose name ends so."""
    topics = set(admin.list_topics())
    if connect.offsets_topic:
        if connect.offsets_topic in topics:
            return connect.offsets_topic
        found = f"it does not exist on the source cluster ({admin.cluster.bootstrap_servers})"
    else:
        if DEFAULT_OFFSETS_TOPIC in topics:
            return DEFAULT_OFFSETS_TOPIC
        candidates = sorted(t for t in topics if t.endswith(DEFAULT_OFFSETS_TOPIC))
        if len(candidates) == 1:
            log.info("Kafka Connect at %s: its offsets topic taken to be %s (the only one named *%s)", connect.url,
                     candidates[0], DEFAULT_OFFSETS_TOPIC)
            return candidates[0]
        found = (f"the Connect connection names none, {DEFAULT_OFFSETS_TOPIC!r} does not exist, and "
                 f"{len(candidates) or 'no'} topic{'s' if len(candidates) != 1 else ''} end in it"
                 + (f" ({', '.join(candidates)})" if candidates else ""))
    raise ConfigError(
        f"Kafka Connect {connect.worker_version} at {connect.url} has no offsets REST API, so its source connectors' "
        f"offsets are read from the worker's offsets topic (its offset.storage.topic), and {found}. Name the topic "
        "in the Connect connection's extra: {\"offsets_topic\": \"<offset.storage.topic of the worker>\"}. "
        "Nothing was stopped or written")


def source_offsets(admin: ClusterAdmin, topic: str, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """{connector: [{"partition": ..., "offset": ...}, ...]} of the named source connectors, as the
    worker's offsets topic holds them now."""
    def records() -> Iterator[tuple[bytes | None, bytes | None]]:
        consumer = reader(admin.cluster, **{"isolation.level": "read_uncommitted"})
        try:
            for partition in range(admin.require_partition_count(topic)):
                start, end = admin.watermarks(topic, partition)
                for chunk in iter_range(consumer, topic, partition, start, end):
                    yield from ((msg.key(), msg.value()) for msg in chunk)
        finally:
            consumer.close()
    return fold_offsets(records(), names)


def fold_offsets(records: Iterable[tuple[bytes | None, bytes | None]], names: Sequence[str]
                 ) -> dict[str, list[dict[str, Any]]]:
    """The offsets of the named connectors in offsets-topic records (key, value), read in order
    within each partition: the latest record of a key wins, a null value deletes it; keys of
    other connectors and records that are not JSON are passed over."""
    wanted = set(names)
    latest: dict[str, dict[str, Any]] = {}
    for key_bytes, value_bytes in records:
        key = _json(key_bytes)
        if not (isinstance(key, list) and len(key) == 2 and key[0] in wanted):
            continue
        entry = json.dumps(key, sort_keys=True)
        value = _json(value_bytes)
        if value is None:
            latest.pop(entry, None)
        else:
            latest[entry] = {"connector": key[0], "partition": key[1], "offset": value}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for entry in sorted(latest):
        o = latest[entry]
        out[o["connector"]].append({"partition": o["partition"], "offset": o["offset"]})
    return out


def sink_offsets(admin: ClusterAdmin, name: str, config: Mapping[str, str]) -> list[dict[str, Any]]:
    """The sink connector's committed offsets in the REST API's shape."""
    return [{"partition": {"kafka_topic": t, "kafka_partition": p}, "offset": {"kafka_offset": o}}
            for (t, p), o in sorted(admin.committed_offsets(sink_group(name, config)).items())]


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def connector_offsets(connect: ConnectClient, infos: Mapping[str, Mapping[str, Any]], admin: ClusterAdmin | None
                      ) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """{connector: (offsets, where they were read)} of the connectors whose `info` (GET
    /connectors/{name}) is given: from the REST API on a worker that has it, from Kafka otherwise."""
    if connect.has_offsets_api:
        return {name: (connect.offsets(name), f"GET /connectors/{name}/offsets") for name in infos}
    if admin is None:
        raise ConfigError(f"Kafka Connect {connect.worker_version} at {connect.url} has no offsets REST API; its "
                          "connectors' offsets are read from the source cluster, which was not given")
    out: dict[str, tuple[list[dict[str, Any]], str]] = {}
    sources = [name for name, info in infos.items() if info["type"] == "source"]
    if sources:
        topic = offsets_topic(admin, connect)
        for name, offsets in source_offsets(admin, topic, sources).items():
            out[name] = (offsets, f"offsets topic {topic}")
    for name, info in infos.items():
        if info["type"] != "source":
            group = sink_group(name, info["config"])
            out[name] = (sink_offsets(admin, name, info["config"]), f"consumer group {group}")
    return out
