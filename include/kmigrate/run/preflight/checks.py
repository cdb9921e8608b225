"""The read-only checks before a run writes or stops anything, and the plan a dry run shows."""
from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.model import TRANSLATE
from kmigrate.renames import Renames
from kmigrate.run.targets import acls, config_versions
from kmigrate.run.checks import schedule
from kmigrate.run.checks import identity, versions
from kmigrate.run.connectors.migrate import check_overrides
from kmigrate.run.connectors.renamed import renamed_config
from kmigrate.run.copying.plan import topics_partitions
from kmigrate.run.checks.request import REFRESH_S, RunRequest, check_request
from kmigrate.run.checks.rights import check_rights
from kmigrate.run.checks.target_data import check_renamed_targets, check_target_groups
from kmigrate.run.checks.selection import Selection, select
from kmigrate.run.mirror import drill, timings


def check_params(request: RunRequest, manifest: Manifest,
                 now: datetime.datetime | None = None) -> datetime.datetime | None:
    """The request's own checks, read-only, before any cluster is asked: `connector_overrides` (an
    object per selected connector of flat values, `connectors.check_overrides`), `cutover_at` (a
    date-time with its zone, `schedule.check_cutover_at`), the run name not used before with other
    params (`request.check_request`); a new run's cutover_at must lie ahead (a run started before
    and re-triggered after its time continues to its cutover). The selections' patterns are
    checked by `check_run`. Returns the cutover time (None: none set). A DAG without one of these
    params (the DR drill) skips its check; a drill of a mirror's overrides name the mirror's
    connectors (`drill.overridable`); the mirror DAG's timings fit each other (`timings`)."""
    connectors, said = drill.overridable(request)  # a drill of a mirror: the mirror's connectors
    check_overrides(request.connector_overrides, connectors, **said)
    if request.interval_s is not None:  # the mirror DAG: its timings, the follower's stale_after_s against them
        timings.check_timings(request.interval_s, REFRESH_S if request.refresh_s is None else request.refresh_s,
                              stale_after_s=request.stale_after_s)
    # the request reads a time without a zone as UTC (a run recorded before zones were required goes on), and
    # says so (cutover_zoned): the preflight refuses one
    at, zoned = request.cutover_at, request.cutover_zoned
    schedule.check_cutover_at(at, zoned=zoned, started=True)  # its zone, before the request check
    started = check_request(manifest, request.params)
    return schedule.check_cutover_at(at, zoned=zoned, started=started, now=now)


def check_distinct(source: ClusterConfig, target: ClusterConfig) -> None:
    """Source and target must be different clusters: compared by the cluster id each reports."""
    identity.observe(source, target)


def check_renames(renames: Renames, selection: Selection, topics: Sequence[str], groups: Sequence[str]
                  ) -> tuple[dict[str, str], dict[str, str]]:
    """The run's renames held to what it selects (`Renames.check_topics`, `check_groups`): {source
    topic: target topic} and {source group: target group} of all of them. ConfigError naming each
    Kafka Streams application whose topics would not follow its group (its internal topics are
    named `<application.id>-...`, its group is its application id: both renamed alike, or neither).
    The connectors' configs (`connectors.renamed`) and the ACLs (`acls.renamed`) are checked with
    them in `check_run`."""
    names, group_names = renames.check_topics(topics), renames.check_groups(groups)
    if not renames:
        return names, group_names
    refused = []
    for group in groups:
        for topic in topics:
            if topic.startswith(f"{group}-") and names[topic] != group_names[group] + topic[len(group):]:
                refused.append(
                    f"topic {topic!r} is named for consumer group {group!r} (a Kafka Streams application's internal "
                    f"topic: <application.id>-...): it would become {names[topic]!r} while the group becomes "
                    f"{group_names[group]!r}, and the application would not find it under its id; rename the topic and "
                    f"the group alike (e.g. the same topic_prefix and group_prefix), or neither")
    if refused:
        raise ConfigError("the run renames what it moves, and: " + "; ".join(refused) + ". Nothing was done")
    return names, group_names


def check_run(source: ClusterConfig, target: ClusterConfig, source_connect: ConnectClient | None,
              target_connect: ConnectClient | None, selection: Selection, renames: Renames = Renames(),
              check_targets: bool = True, overrides: Mapping[str, Any] | None = None,
              created: Collection[str] = (), mirrored: bool = False) -> dict[str, Any]:
    """Read-only checks before anything is written, and the plan a dry run shows: both clusters
    answer and differ, the selections are valid and match something, the principal has the rights
    the run needs on both (`rights`), the connectors exist, both Connect clusters answer and can do
    what the run needs of them (`versions.check_workers`), the two Connect clusters are two
    (`identity.observe`). Returns topics, partitions, offsets, bytes estimate, groups, connectors,
    the versions and the method of each step (`versions.methods`), and the ids of the clusters the
    connections reach (`identity`: the run records them and holds later steps to them). With
    `renames`, the names each topic and group gets on the target (`check_renames`): "target_topics"
    lists the target's names of all the topics, "renames" those that differ. With `check_targets`
    (a run not yet resumed on the target) and renames, a renamed preserve-mode topic's target that
    exists must hold this source's data at the same offsets (but those in `created`, the target
    topics the run created: its copy checks them as it resumes), and a group's target id must not
    be a group there with offsets for other topics (`target_data`). `mirrored`: the selection and
    renames are a mirror's (a planned failover, a drill of a mirror): a map entry for a topic or group
    not selected now is left out (`Renames.only`), not refused as a typo."""
    selection.check()
    versions.check_apis(source, "source")
    versions.check_apis(target, "target")
    seen = identity.observe(source, target, source_connect if selection.connectors else None,
                            target_connect if selection.connectors else None)
    with ClusterAdmin(source, timeout_s=10) as admin, ClusterAdmin(target, timeout_s=10) as target_admin:
        topics = select(admin.list_topics(), selection.topics_include, selection.topics_exclude)
        if not topics:
            raise ConfigError(f"no topic on the source cluster ({source.bootstrap_servers}) matches include "
                              f"{selection.topics_include!r} and exclude {selection.topics_exclude!r}; fix the selection")
        partitions = topics_partitions(admin, topics)
        groups = select(admin.list_groups(), selection.groups, what="consumer group") if selection.groups else []
        if mirrored:
            renames = renames.only(topics, groups)
        names, group_names = check_renames(renames, selection, topics, groups)
        check_rights(admin, target_admin, topics, groups, names, group_names)
        connectors, infos = [], {}
        if selection.connectors:
            if source_connect is None or target_connect is None:
                raise ConfigError("connectors are selected: both Connect connection ids are needed")
            target_connect.connectors()  # answers, or ConnectUnreachable naming it
            for name in selection.connectors:
                infos[name] = info = source_connect.info(name)  # ConnectorNotFound names it
                connectors.append({"name": name, "type": info["type"], "state": source_connect.state(name)})
            versions.check_workers(source_connect, target_connect, infos, admin)
            for name, info in infos.items():  # what each names of the renamed topics, rewritten or refused
                renamed_config(name, info["type"], info["config"], names, overridden=(overrides or {}).get(name) or {},
                               keys=renames.connector_keys.get(name, ()))
        if not mirrored and (unknown := sorted(set(renames.connector_keys) - set(selection.connectors))):
            raise ConfigError(f"connector_topic_keys names connectors the run does not move: {', '.join(unknown)}; "
                              "select them (connectors) or drop their entries")
        methods = versions.methods(admin, target_admin, source_connect, target_connect, infos)
        acl_plan = acls.plan(source, target, topics, groups, selection.acls, names, group_names)
        if check_targets and renames:
            modes = selection.modes(topics)
            check_renamed_targets(source, target, {t: n for t, n in names.items()
                                                   if modes.get(t) != TRANSLATE and n not in created})
            check_target_groups(target, group_names, names)
        across = config_versions.changes_for(admin.topics_configs(topics, explicit_only=True), target)
    offsets = sum(p["end"] - p["log_start"] for parts in partitions.values() for p in parts)
    return {
        "topics": {t: {"partitions": len(p), "offsets": sum(x["end"] - x["log_start"] for x in p)}
                   for t, p in partitions.items()},
        "modes": selection.modes(topics),
        "partitions": sum(len(p) for p in partitions.values()),
        "offsets": offsets,
        "groups": groups,
        "connectors": connectors,
        "methods": methods,
        # source configs the target's Kafka version removed: mapped to their successors or dropped
        "config_changes": across,
        # the applications' ACLs the run copies to the target before the connectors resume
        "acls": acls.shown(acl_plan),
        # a rough figure for a person to read: the copier's measured whole-batch rate on the
        # development machine is far above this, but verification reads both sides
        "estimated_copy_s": round(offsets / 150_000, 1),
        "identity": seen,
        "target_topics": sorted(names.values()),
        "renames": {"topics": {t: n for t, n in names.items() if t != n},
                    "groups": {g: n for g, n in group_names.items() if g != n}},
    }
