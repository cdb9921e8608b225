"""The steps of a migration run that are not Spark jobs, as plain functions over plain values, so
that the Airflow DAGs stay thin and everything here is testable without Airflow (DESIGN 3)."""
from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig
from kmigrate.connect import ConnectClient
from kmigrate.errors import ConfigError, GroupActive
from kmigrate.manifest import Manifest
from kmigrate.plan import created_topics, new_attempt, plan_from_topics, reconcile_topics, topic_partitions
from kmigrate.snapshot import SNAPSHOT_PART, compile_pattern, read_snapshot, select, selected_groups
from kmigrate.topics import reconcile_target_topic, restore_target_topic

PRE_COPY_PLAN = "pre-copy-plan"


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a run moves: topics (include/exclude regexes), consumer groups (regex, empty: none),
    connectors (names; empty: none), and the topics copied in translate mode (regex, empty: none)."""

    topics_include: str
    topics_exclude: str = ""
    groups: str = ""
    connectors: tuple[str, ...] = ()
    translate: str = ""

    def check(self) -> None:
        compile_pattern(self.topics_include, "topic include")
        for pattern, what in ((self.topics_exclude, "topic exclude"), (self.groups, "consumer group"),
                              (self.translate, "translate topics")):
            if pattern:
                compile_pattern(pattern, what)

    def modes(self, topics: Sequence[str]) -> dict[str, str]:
        pattern = compile_pattern(self.translate, "translate topics") if self.translate else None
        return {t: "translate" if pattern and pattern.fullmatch(t) else "preserve" for t in topics}


def selected_topics(source: ClusterConfig, selection: Selection) -> list[str]:
    with ClusterAdmin(source) as admin:
        return select(admin.list_topics(), selection.topics_include, selection.topics_exclude)


def check_distinct(source: ClusterConfig, target: ClusterConfig) -> None:
    """Source and target must be different clusters: compared by the cluster id each reports."""
    if set(source.bootstrap_servers.split(",")) == set(target.bootstrap_servers.split(",")):
        raise ConfigError(f"source and target are the same cluster ({source.bootstrap_servers}); pick another target")
    ids = []
    for cluster in (source, target):
        with ClusterAdmin(cluster, timeout_s=10) as admin:
            ids.append(admin.cluster_id())
    if ids[0] == ids[1]:
        raise ConfigError(f"source ({source.bootstrap_servers}) and target ({target.bootstrap_servers}) are the same "
                          f"cluster (id {ids[0]}); pick another target")


def preflight(source: ClusterConfig, target: ClusterConfig, source_connect: ConnectClient | None,
              target_connect: ConnectClient | None, selection: Selection) -> dict[str, Any]:
    """Read-only checks before anything is written, and the plan a dry run shows: both clusters
    answer and differ, the selections are valid and match something, the connectors exist and
    both Connect clusters answer. Returns topics, partitions, offsets, bytes estimate, groups and
    connectors."""
    selection.check()
    check_distinct(source, target)
    with ClusterAdmin(source, timeout_s=10) as admin:
        topics = select(admin.list_topics(), selection.topics_include, selection.topics_exclude)
        if not topics:
            raise ConfigError(f"no topic on the source cluster ({source.bootstrap_servers}) matches include "
                              f"{selection.topics_include!r} and exclude {selection.topics_exclude!r}; fix the selection")
        partitions = {t: topic_partitions(admin, t) for t in topics}
        groups = select(admin.list_groups(), selection.groups, what="consumer group") if selection.groups else []
    connectors = []
    if selection.connectors:
        if source_connect is None or target_connect is None:
            raise ConfigError("connectors are selected: both Connect connection ids are needed")
        target_connect.connectors()  # answers, or ConnectUnreachable naming it
        for name in selection.connectors:
            info = source_connect.info(name)  # ConnectorNotFound names it
            connectors.append({"name": name, "type": info["type"], "state": source_connect.state(name)})
    offsets = sum(p["end"] - p["log_start"] for parts in partitions.values() for p in parts)
    return {
        "topics": {t: {"partitions": len(p), "offsets": sum(x["end"] - x["log_start"] for x in p)}
                   for t, p in partitions.items()},
        "modes": selection.modes(topics),
        "partitions": sum(len(p) for p in partitions.values()),
        "offsets": offsets,
        "groups": groups,
        "connectors": connectors,
        # a rough figure for a person to read: the copier's measured whole-batch rate on the
        # development machine is far above this, but verification reads both sides
        "estimated_copy_s": round(offsets / 150_000, 1),
    }


def write_pre_copy_plan(manifest: Manifest, source: ClusterConfig, topics: Sequence[str],
                        modes: Mapping[str, str]) -> dict[str, Any]:
    """The pre-copy's plan: the topics up to their ends now, while the source is still live."""
    def compute() -> dict[str, Any]:
        with ClusterAdmin(source) as admin:
            return plan_from_topics({t: {"partitions": topic_partitions(admin, t)} for t in topics}, modes)
    return manifest.get_or_create(PRE_COPY_PLAN, compute)


def quiesce_sample(manifest: Manifest, source: ClusterConfig, topics: Sequence[str], stable_for_s: float,
                   groups: str = "") -> bool:
    """One poke of the quiesce sensor: record the source's end offsets and the selected groups that
    have members (part quiesce/<n>); True when the ends equal the first sample of an unbroken run of
    equal samples at least `stable_for_s` old and no selected group has members. A group that has
    had members for `stable_for_s` once the ends are still is refused (GroupActive, naming it and its
    members): its consumer is running, and its offsets would be copied from under it. The samples
    live in the manifest, so the sensor holds no worker between pokes."""
    if manifest.exists(SNAPSHOT_PART):
        return True  # the snapshot is taken: quiescing is behind this run
    with ClusterAdmin(source) as admin:
        ends = {f"{t}:{p['partition']}": p["end"] for t in topics for p in topic_partitions(admin, t)}
        live = {group: members for group in selected_groups(admin, groups, set(topics))
                if (members := admin.live_members(group))}
    samples = sorted((p for p in manifest.parts() if p.startswith("quiesce/")), key=lambda p: int(p.split("/")[1]))
    now = time.time()
    manifest.write_once(f"quiesce/{len(samples)}", {"at": now, "ends": ends, "live_groups": live})
    stable_since = now
    live_since = dict.fromkeys(live, now)
    previous = [manifest.read(part) for part in reversed(samples)]
    for sample in previous:
        if sample["ends"] != ends:
            break
        stable_since = sample["at"]
    for group in live:
        for sample in previous:
            if group not in sample.get("live_groups", {}):
                break
            live_since[group] = sample["at"]
    if now - stable_since < stable_for_s:
        return False
    refused = sorted(g for g, since in live_since.items() if now - since >= stable_for_s)
    if refused:
        detail = "; ".join(f"{g!r} (members {', '.join(live[g])})" for g in refused)
        raise GroupActive(
            f"consumer group{'s' if len(refused) > 1 else ''} {detail} still consume{'' if len(refused) > 1 else 's'} "
            f"on the source cluster ({source.bootstrap_servers}) after {stable_for_s:.0f}s of quiesce; their offsets "
            "would be copied from under a running consumer. Nothing was copied for them. Stop those consumers, then "
            "clear this task to quiesce again (or run the rollback DAG to resume the source connectors)",
            group=refused[0])
    return not live


TOPIC_CONFIGS = "topic-configs"


def check_target_topics(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, topics: Sequence[str]) -> None:
    """Before the connectors stop: a target topic this run did not create must still agree with its
    source topic (partitions, configs), since the run will not change it; TopicMismatch otherwise,
    while the source is still live and nothing is stopped. Topics the run created are brought in
    line at the snapshot (`reconcile_target_topics`)."""
    mine = created_topics(manifest)
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        for topic in topics:
            if topic not in mine:
                reconcile_target_topic(source_admin, target_admin, topic, created_by_run=False)


def reconcile_target_topics(manifest: Manifest, source: ClusterConfig, target: ClusterConfig) -> dict[str, Any]:
    """At the snapshot, before the copy: what the source changed since the pre-copy (partitions
    added, configs altered) on the snapshot's topics, applied to the target topics this run
    created and refused for the others (`plan.reconcile_topics`)."""
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        return reconcile_topics(manifest, source_admin, target_admin, sorted(read_snapshot(manifest)["topics"]))


def restore_topic_configs(manifest: Manifest, source: ClusterConfig, target: ClusterConfig) -> dict[str, Any]:
    """After the verification, before anything else writes to the target topics: the configs the
    copy set (COPY_SETTINGS) back to the source's values on every snapshot topic. Idempotent (a
    setting already right is not touched); each attempt is recorded (part topic-configs/<attempt>)."""
    restored = {}
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        for topic in sorted(read_snapshot(manifest)["topics"]):
            restored[topic] = restore_target_topic(source_admin, target_admin, topic)
    result = {"topics": restored}
    manifest.write_once(f"{TOPIC_CONFIGS}/{new_attempt()}", result)
    return result


def mark(manifest: Manifest, event: str) -> dict[str, Any]:
    """The first time `event` happened in this run (a re-run keeps the first)."""
    return manifest.get_or_create(f"events/{event}", lambda: {
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")})


def downtime_s(manifest: Manifest) -> float | None:
    stopped, resumed = manifest.read("events/connectors-stopped"), manifest.read("events/connectors-resumed")
    if not stopped or not resumed:
        return None
    parse = datetime.datetime.fromisoformat
    return round((parse(resumed["at"]) - parse(stopped["at"])).total_seconds(), 3)




def measure_drill(manifest: Manifest, source: ClusterConfig, triggered_at: datetime.datetime) -> dict[str, Any]:
    """A DR drill's recovery figures, once its copy is verified: RPO as the records the source has
    beyond the snapshot now (and the seconds since the snapshot), RTO as the seconds from the
    trigger to now. Recorded once per run (part drill)."""
    def compute() -> dict[str, Any]:
        snapshot = manifest.read(SNAPSHOT_PART)
        if snapshot is None:
            raise ConfigError(f"the run manifest at {manifest.location} has no snapshot; run the snapshot step first")
        now = datetime.datetime.now(datetime.timezone.utc)
        behind = 0
        with ClusterAdmin(source) as admin:
            for topic, entry in snapshot["topics"].items():
                for p in entry["partitions"]:
                    behind += admin.watermarks(topic, p["partition"])[1] - p["end"]
        taken = datetime.datetime.fromisoformat(snapshot["taken_at"])
        return {"rpo_records": behind, "rpo_seconds": round((now - taken).total_seconds(), 3),
                "rto_seconds": round((now - triggered_at).total_seconds(), 3), "measured_at": now.isoformat()}
    return manifest.get_or_create("drill", compute)
