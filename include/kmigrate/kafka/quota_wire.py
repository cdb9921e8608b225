"""Client quotas over a raw connection: DescribeClientQuotas v0 and AlterClientQuotas v0 (KIP-546),
which confluent-kafka's admin client does not offer. A quota entity is a tuple of (type, name)
components, type "user", "client-id" or "ip", name None for the type's default entity; its values
map a quota key (producer_byte_rate, consumer_byte_rate, request_percentage, ...) to a number.
Describing needs DescribeConfigs on the cluster, altering AlterConfigs; any broker answers (a KRaft
broker forwards an alteration to the controller)."""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, MissingAcls
from kmigrate.kafka import leaders, wire
from kmigrate.client_settings import addresses

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
CLUSTER_AUTHORIZATION_FAILED = 31

Entity = tuple[tuple[str, str | None], ...]


def _nullable(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else wire._string(text)


def _entity(data: memoryview, pos: int) -> tuple[Entity, int]:
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    parts = []
    for _ in range(count):
        kind, pos = wire.read_string(data, pos)
        name, pos = wire.read_string(data, pos)
        parts.append((kind, name))
    return tuple(sorted(parts)), pos


def _refused(code: int, message: str | None, what: str, cluster: ClusterConfig, right: str) -> Exception:
    if code == CLUSTER_AUTHORIZATION_FAILED:
        return MissingAcls(f"{what} on the {cluster.name} cluster was refused: the run's principal needs {right} on the "
                           f"{cluster.name} cluster for the applications' client quotas; grant it, or run with "
                           "acls=off")
    return ConfigError(f"{what} on the {cluster.name} cluster failed: {wire.error_name(code)} {message or ''}".strip())


def describe(cluster: ClusterConfig, entity_type: str = "user") -> dict[Entity, dict[str, float]]:
    """Every quota entry with a component of `entity_type` (any name, default included)."""
    body = struct.pack(">i", 1) + wire._string(entity_type) + struct.pack(">bh", MATCH_ANY, -1) + struct.pack(">?", False)
    with leaders.connection(cluster, addresses(cluster.name, cluster.bootstrap_servers)[0]) as conn:
        conn.send(DESCRIBE_CLIENT_QUOTAS, 0, body)
        _, data = conn.receive()
    _throttle, code = struct.unpack_from(">ih", data, 0)
    message, pos = wire.read_string(data, 6)
    if code:
        raise _refused(code, message, "reading the client quotas", cluster, "DescribeConfigs")
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out: dict[Entity, dict[str, float]] = {}
    for _ in range(max(count, 0)):
        entity, pos = _entity(data, pos)
        (values,) = struct.unpack_from(">i", data, pos)
        pos += 4
        quota = {}
        for _ in range(values):
            key, pos = wire.read_string(data, pos)
            (quota[key],) = struct.unpack_from(">d", data, pos)
            pos += 8
        out[entity] = quota
    return out


def alter(cluster: ClusterConfig, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
    """Set each entity's values (others of the entity are left as they are)."""
    if not quotas:
        return
    parts = [struct.pack(">i", len(quotas))]
    for entity, values in quotas.items():
        parts.append(struct.pack(">i", len(entity)))
        parts += [wire._string(kind) + _nullable(name) for kind, name in entity]
        parts.append(struct.pack(">i", len(values)))
        parts += [wire._string(key) + struct.pack(">d?", float(value), False) for key, value in values.items()]
    parts.append(struct.pack(">?", False))
    with leaders.connection(cluster, addresses(cluster.name, cluster.bootstrap_servers)[0]) as conn:
        conn.send(ALTER_CLIENT_QUOTAS, 0, b"".join(parts))
        _, data = conn.receive()
    (count,) = struct.unpack_from(">i", data, 4)
    pos = 8
    for _ in range(count):
        (code,) = struct.unpack_from(">h", data, pos)
        message, pos = wire.read_string(data, pos + 2)
        entity, pos = _entity(data, pos)
        if code:
            raise _refused(code, message, f"setting the client quotas of {shown(entity)}", cluster, "AlterConfigs")


def shown(entity: Sequence[tuple[str, str | None]]) -> str:
    return ", ".join(f"{kind} {name if name is not None else '<default>'}" for kind, name in entity)
