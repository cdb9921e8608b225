"""Topic configs across Kafka versions: what a source of 2.x or 3.x sets that a Kafka 4 target no longer
knows, mapped to its successor where there is one and dropped otherwise. A Kafka 4 broker refuses
a topic created with an unknown config, so every copy of such a topic would fail; the preflight
and the dry run list each change, the copy applies them, and the report shows them."""
from __future__ import annotations

from collections.abc import Mapping

from kmigrate.config import ClusterConfig
from kmigrate.kafka.pool import identity
from kmigrate.run.checks import versions

FETCH = 1
# {config: (successors, why)}: removed by Kafka 4.0. A successor takes the removed config's value
# unless the source sets the successor itself.
REMOVED_IN_KAFKA_4: dict[str, tuple[tuple[str, ...], str]] = {
    "message.format.version": ((), "Kafka 4 writes every batch in format v2 (KIP-724); the copy converts older ones"),
    "message.downconversion.enable": ((), "Kafka 4 no longer down-converts for consumers older than 0.11 (KIP-896)"),
    "message.timestamp.difference.max.ms": (
        ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"),
        "replaced by message.timestamp.before.max.ms and message.timestamp.after.max.ms (KIP-937)"),
}


def is_kafka_4(cluster: ClusterConfig) -> bool:
    """Whether the cluster runs Kafka 4.0 or later: its brokers no longer answer Fetch below v4
    (KIP-896). A cluster whose versions cannot be read counts as Kafka 4 (the configs it removed
    are then mapped: harmless on 3.x, where the first two are ignored for format v2 and the
    successors of the third exist since 3.6)."""
    key = identity(cluster)
    if key not in _kafka_4:
        supported = versions.api_versions(cluster)
        _kafka_4[key] = supported is None or FETCH not in supported or supported[FETCH][0] >= 4
    return _kafka_4[key]


_kafka_4: dict[object, bool] = {}


def for_target(configs: Mapping[str, str], kafka_4: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(`configs` as a Kafka 4 target takes them, {removed config: what became of it}); unchanged
    for an older target."""
    if not kafka_4:
        return dict(configs), {}
    out = {k: v for k, v in configs.items() if k not in REMOVED_IN_KAFKA_4}
    changes = {}
    for name, value in sorted(configs.items()):
        if name not in REMOVED_IN_KAFKA_4:
            continue
        successors, why = REMOVED_IN_KAFKA_4[name]
        taken = [s for s in successors if s not in configs]
        for successor in taken:
            out[successor] = value
        if taken:
            changes[name] = f"{name}={value} mapped to {', '.join(f'{s}={value}' for s in taken)}: {why}"
        elif successors:
            changes[name] = f"{name}={value} dropped: the source sets its successors itself; {why}"
        else:
            changes[name] = f"{name}={value} dropped: {why}"
    return out, changes


def changes_for(explicit: Mapping[str, Mapping[str, str]], target: ClusterConfig) -> dict[str, dict[str, str]]:
    """{topic: {removed config: what becomes of it}} for the topics whose explicit source configs
    (`explicit`, by topic) hold configs the target's version removed."""
    kafka_4 = is_kafka_4(target)
    out = {}
    for topic, configs in sorted(explicit.items()):
        _, changes = for_target(configs, kafka_4)
        if changes:
            out[topic] = changes
    return out
