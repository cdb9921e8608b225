"""The consumer groups moved and the topics promoted onto a mirror's DR cluster one application at a
time (the moves themselves: kmigrate.run.mirror.moves and kmigrate.run.mirror.producer_moves),
recorded in the mirror's run manifest: a part a group and a part a topic, so that two moves at once
never write one part. Read by the mirror's driver (it syncs a moved group no more, and copies a
promoted topic no more) and by a failover's snapshot (a moved group's consumers run on the DR
cluster already: the failover leaves the group as it is there)."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from kmigrate.manifest import Manifest

# a part a group: {"group", "state": "moving" | "moved" | "back", "began", "ended", "offsets"}; "back": moved
# back to the source (kmigrate.run.mirror.moves.move_group_back), synced by the mirror again
MOVED = "moved-groups"
BACK = "back"
# a part a topic: {"topic", "state": "promoting" | "promoted", "began", "ends": {partition: end}, "ended"};
# "promoted": the mirror copies it no more (an "ended" one: its producers may write on the DR cluster)
PROMOTED = "promoted-topics"
# a part a connector moved with its application (kmigrate.run.mirror.connector_moves):
# {"connector", "type", "state_before", "state": "moving" | "moved", "began", "ended", "offsets"}
CONNECTORS_MOVED = "moved-connectors"
PROMOTING, IS_PROMOTED = "promoting", "promoted"


def _part(kind: str, name: str) -> str:
    return f"{kind}/{hashlib.blake2b(name.encode(), digest_size=12).hexdigest()}"


def part(group: str) -> str:
    """The part of the run manifest that records `group`'s move."""
    return _part(MOVED, group)


def connector_part(name: str) -> str:
    """The part of the run manifest that records connector `name`'s move."""
    return _part(CONNECTORS_MOVED, name)


def topic_part(topic: str) -> str:
    """The part of the run manifest that records `topic`'s promotion."""
    return _part(PROMOTED, topic)


def records_of(manifest: Manifest, kind: str, field: str, parts: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The records of one kind of part (MOVED, PROMOTED, CONNECTORS_MOVED) by their `field` (the
    group, topic or connector), whatever their state; among `parts` when given (the manifest's parts,
    listed once for several readings), else the manifest's listed now."""
    out = {}
    for name in manifest.parts() if parts is None else parts:
        if name.startswith(f"{kind}/"):
            record = manifest.read(name) or {}
            if record.get(field) is not None:
                out[record[field]] = record
    return out


def moved_groups(manifest: Manifest, parts: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The groups whose move has begun or ended (and that were not moved back), by name."""
    return {g: r for g, r in records_of(manifest, MOVED, "group", parts).items() if r.get("state") != BACK}


def promotions(manifest: Manifest, parts: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The topics whose promotion has begun or ended, by name."""
    return records_of(manifest, PROMOTED, "topic", parts)


def promoted_topics(manifest: Manifest, parts: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The topics the mirror copies no more (state "promoted"), by name."""
    return {t: r for t, r in promotions(manifest, parts).items() if r.get("state") == IS_PROMOTED}
