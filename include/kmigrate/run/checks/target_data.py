"""Whether a renamed topic's target already holds other data, or a group's target id is another
application's, asked before a run stops or writes anything (a consolidation renames onto a target
that may hold a topic or a group of that name already).

A target partition that ends past the source's end holds records the source never had; one that
ends within the source holds this source's records only if its last records are the source's at
the same offsets (the copy's own resume check, docs/DESIGN.md §4.3, asked here early: an earlier
try of the same run leaves exactly such a prefix); read back from the end until a visible record is
found, as markers and aborted records tell nothing. Empty partitions, and ones holding no visible
record at all, pass: the copy checks them again."""
from __future__ import annotations

from collections.abc import Mapping

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range, record_of

# the offsets before a target partition's end read on both sides: its last records
LAST_OFFSETS = 20


def check_renamed_targets(source: ClusterConfig, target: ClusterConfig, names: Mapping[str, str]) -> None:
    """ConfigError naming each renamed topic ({source topic: target topic}) whose target topic
    exists with other data than the source's at the same offsets, and the way out."""
    found = other_data(source, target, {t: n for t, n in names.items() if t != n})
    if found:
        raise ConfigError(
            "the run renames topics onto target topics that hold other data: " + "; ".join(found)
            + ". A rename must not merge two topics: choose another target name (topic_prefix, topic_renames), "
              "or delete the target topic if nothing uses it. Nothing was done")


def check_target_groups(target: ClusterConfig, group_names: Mapping[str, str], names: Mapping[str, str]) -> None:
    """ConfigError naming each group whose id on the target (`group_names`: {source group: target
    group}) is a group there with offsets committed for topics other than the run's (`names`: their
    target names): another application's group, which the run's offsets would join (two
    consolidated sources' groups of one id, say)."""
    ours = set(names.values())
    found = []
    with ClusterAdmin(target) as admin:
        existing = set(admin.list_groups())
        for group, there in sorted(group_names.items()):
            if there not in existing:
                continue
            others = sorted({t for t, _ in admin.committed_offsets(there)} - ours)
            if others:
                found.append(f"{group} -> {there} (it has offsets for {', '.join(others[:5])}"
                             f"{', ...' if len(others) > 5 else ''})")
    if found:
        raise ConfigError(
            "the run's consumer groups would join groups of other applications on the target: " + "; ".join(found)
            + ". Give them ids of their own there (group_prefix, group_renames), or leave them out of the run. "
              "Nothing was done")


def other_data(source: ClusterConfig, target: ClusterConfig, pairs: Mapping[str, str]) -> list[str]:
    """For each (source topic, target topic) of `pairs` whose target exists: what shows it holds
    other data, one line a topic (its first partition found)."""
    with ClusterAdmin(target) as target_admin:
        existing = set(target_admin.list_topics())
        pairs = {t: n for t, n in pairs.items() if n in existing}
        if not pairs:
            return []
        target_counts = target_admin.partition_counts(pairs.values())
        with ClusterAdmin(source) as source_admin:
            source_counts = source_admin.partition_counts(pairs)
            keys = [(t, p) for t in pairs for p in range(min(source_counts[t], target_counts[pairs[t]]))]
            on_source = source_admin.watermarks_of(keys)
        on_target = target_admin.watermarks_of((pairs[t], p) for t, p in keys)
    found = {}
    for topic, partition in keys:
        there = pairs[topic]
        if there in found:
            continue
        (_, source_high), (target_low, target_high) = on_source[(topic, partition)], on_target[(there, partition)]
        if target_high <= target_low:
            continue
        if target_high > source_high:
            found[there] = (f"{there}[{partition}] ends at offset {target_high}, past the end {source_high} of "
                            f"{topic}[{partition}]")
            continue
        window = LAST_OFFSETS
        while True:  # back from the end until a visible record is read (markers and aborted records tell nothing)
            start = max(target_low, target_high - window)
            theirs = list(map(record_of, read_range(target, there, partition, start, target_high)))
            ours = list(map(record_of, read_range(source, topic, partition, start, target_high)))
            if theirs != ours:
                found[there] = (f"{there}[{partition}]'s records before its end {target_high} are not those of "
                                f"{topic}[{partition}] at the same offsets")
            if theirs != ours or theirs or start == target_low:
                break
            window *= 8
    return [f"{topic} -> {line}" for topic, there in sorted(pairs.items()) if (line := found.get(there))]
