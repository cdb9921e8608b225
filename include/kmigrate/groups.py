"""Consumer-group replication (DESIGN 3 and 5): each selected group's committed offsets from the
snapshot, translated through the offset map of their partition (identity under preservation,
exact under translation), written on the target cluster and read back.

Everything is checked before anything is written: a group with members on the target, or a
committed offset for a partition the target lacks, stops the step with nothing changed.
Re-running writes the same offsets again, which changes nothing."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig
from kmigrate.copier import PRESERVE, translate_offset
from kmigrate.errors import ConfigError, GroupActive, GroupError, OffsetsNotApplied
from kmigrate.manifest import Manifest
from kmigrate.plan import latest_copy_rows, new_attempt, offset_map_of, read_plan
from kmigrate.snapshot import read_snapshot

GROUP_RESULTS = "group-replication"
INACTIVE_STATES = frozenset({"EMPTY", "DEAD"})


class OffsetTranslator:
    """Source offset -> target offset for the partitions of one run, from its plan and copy results."""

    def __init__(self, modes: Mapping[str, str], copy_rows: Mapping[tuple[str, int], Mapping[str, Any]]) -> None:
        self.modes = dict(modes)
        self.copy_rows = copy_rows

    @classmethod
    def for_run(cls, manifest: Manifest) -> OffsetTranslator:
        modes = {unit["topic"]: unit["mode"] for unit in read_plan(manifest)["units"]}
        return cls(modes, latest_copy_rows(manifest))

    def target_offset(self, topic: str, partition: int, offset: int) -> int:
        mode = self.modes.get(topic)
        if mode is None:
            raise ConfigError(f"{topic}[{partition}] is not part of this run's plan; select the topic or leave the "
                              "group or connector that reads it out of the migration")
        if mode == PRESERVE:
            return offset
        row = self.copy_rows.get((topic, partition))
        if row is None:
            raise ConfigError(f"{topic}[{partition}] is copied in translate mode but has no copy result with its "
                              "offset map; run the copy step first")
        return translate_offset(offset_map_of(row), offset, row["target_end"])


def replicate_groups(manifest: Manifest, target: ClusterConfig) -> list[dict[str, Any]]:
    """Write every snapshot group's translated offsets on `target`, verify them, record the result
    in the manifest (part group-replication/<attempt>) and return it."""
    snapshot = read_snapshot(manifest)
    translator = OffsetTranslator.for_run(manifest)
    wanted: dict[str, dict[tuple[str, int], int]] = {}
    with ClusterAdmin(target) as admin:
        partitions: dict[str, int | None] = {}
        for group, entry in sorted(snapshot["groups"].items()):
            described = admin.describe_group(group)
            if described["members"] or described["state"] not in INACTIVE_STATES:
                raise GroupActive(
                    f"consumer group {group!r} is {described['state']} on the target cluster "
                    f"({target.bootstrap_servers}) with members {', '.join(described['members']) or 'joining'}; its "
                    "offsets cannot be set under running consumers. Stop those consumers, then re-run this step "
                    "(no group was changed)", group=group)
            offsets = {}
            for committed in entry["offsets"]:
                topic, partition = committed["topic"], committed["partition"]
                if topic not in partitions:
                    partitions[topic] = admin.partition_count(topic)
                if partitions[topic] is None or partition >= partitions[topic]:
                    raise GroupError(
                        f"consumer group {group!r} has a committed offset for {topic}[{partition}], which the target "
                        f"cluster ({target.bootstrap_servers}) does not have; copy the topic first (no group was "
                        "changed)", group=group)
                offsets[(topic, partition)] = translator.target_offset(topic, partition, committed["offset"])
            wanted[group] = offsets

        results = []
        for group, offsets in wanted.items():
            before = admin.committed_offsets(group)
            changed = {key: offset for key, offset in offsets.items() if before.get(key) != offset}
            if changed:
                admin.alter_group_offsets(group, offsets)
            after = admin.committed_offsets(group)
            wrong = {key: (after.get(key), offset) for key, offset in offsets.items() if after.get(key) != offset}
            if wrong:
                detail = ", ".join(f"{t}[{p}] has {have}, expected {want}" for (t, p), (have, want) in sorted(wrong.items()))
                raise OffsetsNotApplied(f"consumer group {group!r} on the target: {detail}; re-run this step")
            source = {(o["topic"], o["partition"]): o["offset"] for o in snapshot["groups"][group]["offsets"]}
            results.append({
                "group": group, "written": len(changed),
                "offsets": [{"topic": t, "partition": p, "source_offset": source[(t, p)], "target_offset": o}
                            for (t, p), o in sorted(offsets.items())],
            })
    manifest.write_once(f"{GROUP_RESULTS}/{new_attempt()}", {"groups": results})
    return results
