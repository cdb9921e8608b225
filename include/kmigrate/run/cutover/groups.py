"""Consumer-group replication (docs/DESIGN.md §3 and §5): each selected group's committed offsets from the
snapshot, translated through the offset map of their partition (identity under preservation,
exact under translation), written on the target cluster and read back.

Everything is checked before anything is written: a group with members on the target, or a
committed offset for a partition the target lacks, stops the step with nothing changed.
Re-running writes the same offsets again, which changes nothing."""
from __future__ import annotations

from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import GroupActive, GroupError, OffsetsNotApplied
from kmigrate.kafka.admin import ClusterAdmin, Committed
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.copying.plan import translator_for_run
from kmigrate.run.cutover.snapshot import group_offsets
from kmigrate.run.records.snapshot import read_snapshot


def check_groups_unchanged(manifest: Manifest, source: ClusterConfig) -> None:
    """A migration's groups on the source, now: each snapshot group has no members and the same
    offsets and metadata as at the snapshot. GroupActive naming the group otherwise: a consumer came
    back on the source, and what the target has would not be where it stopped."""
    snapshot = read_snapshot(manifest)
    with ClusterAdmin(source) as admin:
        for group, entry in sorted(snapshot["groups"].items()):
            members = admin.live_members(group)
            if members:
                raise GroupActive(
                    f"consumer group {group!r} has members on the source cluster again ({', '.join(members)}); its "
                    "consumers must stay stopped until the migration has resumed on the target. Stop them, then "
                    "re-run this step", group=group)
            now = group_offsets(admin, group, {o["topic"] for o in entry["offsets"]})
            if _positions(now) != _positions(entry["offsets"]):
                raise GroupActive(
                    f"consumer group {group!r} committed on the source after the snapshot ({_moved(entry['offsets'], now)}); "
                    "a consumer of it is still running somewhere. Stop it, then run the migration again under a new "
                    "run name (this run's snapshot is behind the group)", group=group)


def _named(group: str, there: str) -> str:
    """A group as a message names it: with its name on the target where the run renames it."""
    return repr(group) if group == there else f"{group!r} ({there!r} on the target)"


def _positions(offsets: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[int, str]]:
    return {(o["topic"], o["partition"]): (o["offset"], o.get("metadata", "")) for o in offsets}


def _moved(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    old, new = _positions(before), _positions(after)

    def change(was: tuple[int, str] | None, now: tuple[int, str] | None) -> str:
        if was and now and was[0] == now[0]:
            return f"{was[0]}, metadata {was[1]!r} -> {now[1]!r}"
        return f"{(was or (None,))[0]} -> {(now or (None,))[0]}"
    return ", ".join(f"{t}[{p}] {change(old.get((t, p)), new.get((t, p)))}"
                     for (t, p) in sorted(set(old) | set(new)) if old.get((t, p)) != new.get((t, p)))


def replicate_groups(manifest: Manifest, target: ClusterConfig, source: ClusterConfig | None = None,
                     renames: Renames = Renames()) -> list[dict[str, Any]]:
    """Write every snapshot group's translated offsets, with their metadata, on `target`, read them
    back, record the result in the manifest (part group-replication/<attempt>) and return it. Under
    `renames` (the run's), a group's offsets are written in its renamed group, for its renamed topics
    (a preserved partition's offsets are the source's: they carry over by name alone).
    With `source` (a migration), each group is first checked to be still stopped there with the
    offsets of the snapshot (`check_groups_unchanged`); without it (a DR drill), the groups are
    copied as of the snapshot, whatever they did since."""
    if source is not None:
        check_groups_unchanged(manifest, source)
    snapshot = read_snapshot(manifest)
    translator = translator_for_run(manifest)
    # {source group: {source (topic, partition): the offset and metadata for the target}}
    wanted: dict[str, dict[tuple[str, int], Committed]] = {}
    with ClusterAdmin(target) as admin:
        partitions: dict[str, int | None] = {}
        for group, entry in sorted(snapshot["groups"].items()):
            there = renames.group(group)
            members = admin.live_members(there)
            if members:
                raise GroupActive(
                    f"consumer group {_named(group, there)} has members on the target cluster "
                    f"({target.bootstrap_servers}): {', '.join(members)}; its offsets cannot be set under running "
                    "consumers. Stop those consumers, then re-run this step (no group was changed)", group=group)
            offsets = {}
            for committed in entry["offsets"]:
                topic, partition = committed["topic"], committed["partition"]
                on_target = renames.topic(topic)
                if on_target not in partitions:
                    partitions[on_target] = admin.partition_count(on_target)
                if partitions[on_target] is None or partition >= partitions[on_target]:
                    raise GroupError(
                        f"consumer group {group!r} has a committed offset for {topic}[{partition}], which the target "
                        f"cluster ({target.bootstrap_servers}) does not have"
                        + ("" if on_target == topic else f" as {on_target}[{partition}]")
                        + "; copy the topic first (no group was changed)", group=group)
                offsets[(topic, partition)] = Committed(translator.target_offset(topic, partition, committed["offset"]),
                                                        committed.get("metadata", ""))
            wanted[group] = offsets

        results = []
        for group, offsets in wanted.items():
            there = renames.group(group)
            named = {(renames.topic(t), p): value for (t, p), value in offsets.items()}  # as the target names them
            before = admin.committed(there)
            changed = {key: value for key, value in named.items() if before.get(key) != value}
            if changed:
                admin.alter_group_offsets(there, named)
            after = admin.committed(there)
            wrong = {key: (after.get(key), value) for key, value in named.items() if after.get(key) != value}
            if wrong:
                detail = ", ".join(f"{t}[{p}] has {tuple(have) if have else None}, expected {tuple(want)}"
                                   for (t, p), (have, want) in sorted(wrong.items()))
                raise OffsetsNotApplied(f"consumer group {_named(group, there)} on the target: {detail}; re-run this "
                                        "step")
            source_offsets = {(o["topic"], o["partition"]): o for o in snapshot["groups"][group]["offsets"]}
            results.append({
                "group": group, **({"target_group": there} if there != group else {}), "written": len(changed),
                "state_at_snapshot": snapshot["groups"][group].get("state"),
                "members_at_snapshot": snapshot["groups"][group].get("members", []),
                "offsets": [{"topic": t, "partition": p,
                             **({"target_topic": renames.topic(t)} if renames.topic(t) != t else {}),
                             "source_offset": source_offsets[(t, p)]["offset"],
                             "target_offset": value.offset, "metadata": value.metadata,
                             "metadata_equal": after[(renames.topic(t), p)].metadata
                             == source_offsets[(t, p)].get("metadata", "")}
                            for (t, p), value in sorted(offsets.items())],
            })
    manifest.write_once(Part.attempt(Part.GROUP_RESULTS), {"groups": results, "as_of_snapshot": source is None})
    return results
