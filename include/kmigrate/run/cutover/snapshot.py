"""The snapshot step (docs/DESIGN.md §3 and §6): the selected topics, consumer groups and connectors as they
are at the cut-over, written into the run manifest once. A re-run reads the stored snapshot back;
it is never taken again or overwritten. The run's plan (one work unit per partition) is derived
from it."""
from __future__ import annotations

import datetime
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, SourceMoved, TransactionOpen
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.connectors import old_connect
from kmigrate.run.checks import versions
from kmigrate.run.connectors.secrets import redacted
from kmigrate.run.copying.plan import plan_from_topics, topics_partitions
from kmigrate.run.checks.selection import select
from kmigrate.run.records.moves import moved_groups, promoted_topics
from kmigrate.run.records.snapshot import read_snapshot


def snapshot_topics(admin: ClusterAdmin, topics: Sequence[str], live: bool = False) -> dict[str, Any]:
    """Each topic's partitions (log start and end) and explicit configs. Every transaction on them
    must be decided (last stable offset = end): the snapshot ends are what the window copies, and a
    transaction open there would leave its records' fate unknown (TransactionOpen, naming it).
    `live` (a DR drill, whose source keeps writing): the ends are the last stable offsets instead."""
    if live:
        partitions = topics_partitions(admin, topics, stable=True)
        return {topic: {"partitions": partitions[topic], "configs": configs}
                for topic, configs in admin.topics_configs(topics, explicit_only=True).items()}
    partitions = topics_partitions(admin, topics)
    ends = {(t, p["partition"]): p["end"] for t in topics for p in partitions[t]}
    stable = admin.stable_ends(ends, retry=True)
    open_at = {key: stable[key] for key, end in ends.items() if stable[key] < end}
    if open_at:
        names = "; ".join(f"{t}[{p}]: {phrase}"
                          for (t, p), phrase in sorted(txn_wire.describe_all_open(admin.cluster, open_at).items()))
        raise TransactionOpen(
            f"a transaction is open on the source at the snapshot ({names}): a producer outside Connect still writes. "
            "Nothing was recorded or copied. Stop it (its transaction committed or aborted), then clear the snapshot "
            "task; or run the rollback DAG to resume the source connectors")
    configs = admin.topics_configs(topics, explicit_only=True)
    return {topic: {"partitions": partitions[topic], "configs": configs[topic]} for topic in topics}


def group_offsets(admin: ClusterAdmin, group: str, topics: Collection[str]) -> list[dict[str, Any]]:
    """What `group` committed on `topics`: offset and metadata of each partition, sorted."""
    return [{"topic": t, "partition": p, "offset": c.offset, "metadata": c.metadata}
            for (t, p), c in sorted(admin.committed(group).items()) if t in topics]


def selected_groups(admin: ClusterAdmin, pattern: str | None, topics: Collection[str]) -> dict[str, list[dict[str, Any]]]:
    """{group: group_offsets} of each group matching `pattern` with offsets committed on `topics`."""
    if not pattern:
        return {}
    out = {}
    for group in select(admin.list_groups(), pattern, what="consumer group"):
        offsets = group_offsets(admin, group, topics)
        if offsets:
            out[group] = offsets
    return out


def snapshot_groups(admin: ClusterAdmin, pattern: str | None, topics: Sequence[str],
                    leave: Collection[str] = ()) -> dict[str, Any]:
    """Each selected group with committed offsets on the selected topics, but those of `leave`: its
    state and members at the snapshot, and those offsets with their metadata."""
    return {group: {**admin.describe_group(group), "offsets": offsets}
            for group, offsets in selected_groups(admin, pattern, set(topics)).items() if group not in leave}


def snapshot_connectors(connect: ConnectClient | None, selection: Sequence[str] | str | None,
                        admin: ClusterAdmin | None = None) -> dict[str, Any]:
    """Each selected connector of the source Connect cluster: type, config (its literal secrets
    left out, `connector_secrets`), state, offsets and where they were read (the REST API, or on a
    worker older than Kafka 3.5 the source cluster `admin` answers for: `old_connect`).
    `selection`: a list of names (each must exist) or a regular expression over the names."""
    if not selection:
        return {}
    if connect is None:
        raise ConfigError("connectors are selected but no source Connect cluster is given; add its URL or "
                          "select no connectors")
    if isinstance(selection, str):
        names = select(connect.connectors(), selection, what="connector")
    else:
        names = sorted(selection)
    infos = {name: connect.info(name) for name in names}  # ConnectorNotFound names the connector and the cluster
    offsets = old_connect.connector_offsets(connect, infos, admin)
    out = {}
    for name, info in infos.items():
        config, secrets = redacted(connect, name, info["config"])
        out[name] = {"type": info["type"], "config": config, "secret_keys": secrets, "state": connect.state(name),
                     "offsets": offsets[name][0], "offsets_from": offsets[name][1],
                     "stopped_by": "stop" if connect.has_offsets_api else "pause", "worker": connect.worker_version}
    return out


def take_snapshot(manifest: Manifest, source: ClusterConfig, *, topics_include: str, topics_exclude: str | None = None,
                  groups: str | None = None, source_connect: ConnectClient | None = None,
                  connectors: Sequence[str] | str | None = None,
                  modes: Mapping[str, str] | Callable[[Sequence[str]], Mapping[str, str]] | None = None,
                  live: bool = False, renames: Renames = Renames(), mirrored: bool = False) -> dict[str, Any]:
    """The run's snapshot, taken now or read back when the run already has one; the plan part
    is written from it. `modes`: each topic's copy mode, or a function of the selected topics
    that gives them (the topics are then listed once, here). Nothing is written when any
    selection is invalid or anything named is missing. `live`: the source keeps writing (a DR drill):
    each partition ends at its last stable offset, a transaction open there left out. `renames`: the
    run's (the plan's units name each topic's partition on the target), held to the snapshot's topics
    (`Renames.check_topics`); `mirrored` (they are a mirror's: a planned failover, a drill of a mirror),
    an entry for a topic not in the snapshot (promoted or deleted since) is left out, not refused."""

    def take() -> dict[str, Any]:
        with ClusterAdmin(source) as admin:
            admin.check_reachable()
            # a topic promoted on a mirror's DR cluster is written there already: a failover leaves it out
            promoted = promoted_topics(manifest)
            topics = [t for t in select(admin.list_topics(), topics_include, topics_exclude) if t not in promoted]
            if not topics:
                raise ConfigError(f"no topic on the source cluster ({source.bootstrap_servers}) matches include "
                                  f"{topics_include!r}" + (f" and exclude {topics_exclude!r}" if topics_exclude else "")
                                  + (f" but those promoted on the DR cluster ({', '.join(sorted(promoted))})"
                                     if promoted else "") + "; check the topic selection")
            unknown = sorted(set(modes or {}) - set(topics)) if not callable(modes) else []
            if unknown:
                raise ConfigError(f"modes are given for topics that are not selected: {', '.join(unknown)}; "
                                  "fix the topic selection or the modes")
            connector_entries = snapshot_connectors(source_connect, connectors, admin)
            return {
                "taken_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "source": source.bootstrap_servers,
                "topics": snapshot_topics(admin, topics, live),
                # a group moved onto a mirror's DR cluster runs there already: a failover leaves it as it is
                "groups": snapshot_groups(admin, groups, topics, leave=moved_groups(manifest)),
                "connectors": connector_entries,
                "versions": {"source_kafka": versions.kafka_release(admin)},
            }

    snapshot = manifest.get_or_create(Part.SNAPSHOT, take)
    topic_modes = modes(sorted(snapshot["topics"])) if callable(modes) else modes
    rule = renames.only(snapshot["topics"], snapshot["groups"]) if mirrored else renames
    manifest.write_once(Part.PLAN, plan_from_topics(snapshot["topics"], topic_modes,
                                                    rule.check_topics(snapshot["topics"])))
    return snapshot


def source_behind(manifest: Manifest, source: ClusterConfig) -> dict[str, int]:
    """{"topic[partition]": records} the source holds past the snapshot end of each partition now."""
    units = read_snapshot(manifest)["topics"]
    with ClusterAdmin(source) as admin:
        ends = admin.end_offsets((t, p["partition"]) for t, entry in units.items() for p in entry["partitions"])
    return {f"{t}[{p['partition']}]": ends[(t, p["partition"])] - p["end"]
            for t, entry in sorted(units.items()) for p in entry["partitions"] if ends[(t, p["partition"])] > p["end"]}


def check_source_at_snapshot(manifest: Manifest, source: ClusterConfig) -> None:
    """Refuse to go on when the source was written to after the snapshot: the copy ends at the
    snapshot, so those records would be left behind once the connectors resume on the target."""
    behind = source_behind(manifest, source)
    if behind:
        listed = ", ".join(f"{name}: {n} record{'s' if n > 1 else ''}" for name, n in sorted(behind.items()))
        raise SourceMoved(
            f"the source was written to after the snapshot of run {manifest.run_id}; the target would miss "
            f"{sum(behind.values())} records ({listed}). Nothing was resumed on the target. Stop the writer, then "
            "either run the rollback DAG (the source connectors resume there) or trigger a new run with a new run_name "
            "to migrate what the source holds now")
