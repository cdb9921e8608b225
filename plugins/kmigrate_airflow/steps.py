"""The non-Spark steps of the migration DAGs as Airflow tasks. Each is a few lines: resolve the
connections named by the params, call the kmigrate library, log what it did. Nothing here decides
anything the library does not."""
from __future__ import annotations

import datetime
import json
import logging
import time
from typing import Any

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException
from kmigrate.claims import check_topics_free, claim_topics, release_topics
from kmigrate.errors import GroupActive, KmigrateError, TopicsHeld, TransactionOpen
from kmigrate.manifest import Manifest, Part
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate.run.cutover import events
from kmigrate.run.targets import prepare as targets
from kmigrate.run.report import timeline
from kmigrate.run.report.drill import measure_drill as drill_figures
from kmigrate.run.cutover.groups import check_groups_unchanged
from kmigrate.run.cutover.groups import replicate_groups as replicate
from kmigrate.run.copying.plan import write_pre_copy_plan
from kmigrate.run.checks.preflight import check_params, check_run
from kmigrate.run.cutover.quiesce import quiesce_poke
from kmigrate.run.report.markdown import topic_result as topic_outcome
from kmigrate.run.report.markdown import write_report
from kmigrate.run.checks.request import record_request
from kmigrate.run.checks.selection import Selection, selected_topics
from kmigrate.run.cutover.snapshot import check_source_at_snapshot, read_snapshot, take_snapshot
from kmigrate_spark.conf import check_connect_server

from kmigrate_airflow.hooks import connect_client, kafka_cluster

log = logging.getLogger(__name__)


def _run_name(params: dict[str, Any], run_id: str) -> str:
    return params.get("run_name") or run_id


def _manifest(params: dict[str, Any], run_id: str) -> Manifest:
    return Manifest(params["state_location"], _run_name(params, run_id))


def _selection(params: dict[str, Any]) -> Selection:
    # the DR drill has no connectors and no translate mode: its params leave them out; the optional
    # params are null when the trigger form leaves them empty
    return Selection(params["topics_include"], params.get("topics_exclude") or "", params.get("groups") or "",
                              tuple(params.get("connectors") or ()), params.get("translate_topics") or "")


def _clusters(params: dict[str, Any]):
    return kafka_cluster(params["source_kafka_conn_id"], "source"), kafka_cluster(params["target_kafka_conn_id"], "target")


def _connect(params: dict[str, Any]):
    if not params.get("connectors"):
        return None, None
    return connect_client(params["source_connect_conn_id"]), connect_client(params["target_connect_conn_id"])


@task(retries=0)
def preflight(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Read-only: the params' own checks (connector overrides, cutover time) and the run name not
    used before with other params; connections, clusters, selections, connectors, the Spark
    Connect server if one is named. Bad input fails here, before any write (and before a migration
    stops its connectors)."""
    try:
        cutover = check_params(params, _manifest(params, run_id))
    except KmigrateError as exc:
        raise AirflowFailException(str(exc)) from exc
    if cutover is not None:
        log.info("cutover at %s (UTC %s)", cutover.isoformat(), cutover.astimezone(datetime.timezone.utc).isoformat())
    if params.get("spark_remote"):
        check_connect_server(params["spark_remote"], option="spark_remote param (or leave it empty: spark-submit)")
    source, target = _clusters(params)
    source_connect, target_connect = _connect(params)
    plan = check_run(source, target, source_connect, target_connect, _selection(params))
    try:  # another run over the same topics: refused here already (the claim itself comes next)
        check_topics_free(target, _run_name(params, run_id), plan["topics"])
    except TopicsHeld as exc:
        raise AirflowFailException(str(exc)) from exc
    log.info("plan: %d topics, %d partitions, %d offsets, groups %s, connectors %s, estimated copy %.0fs",
             len(plan["topics"]), plan["partitions"], plan["offsets"], plan["groups"],
             [c["name"] for c in plan["connectors"]], plan["estimated_copy_s"])
    for step, method in plan["methods"].items():
        log.info("%s: %s", step, method)
    for topic, changes in plan["config_changes"].items():
        for text in changes.values():
            log.warning("%s: %s", topic, text)
    log.info("plan details: %s", json.dumps(plan, indent=1))
    return plan


@task.short_circuit
def unless_dry_run(plan: dict[str, Any], params: dict[str, Any] | None = None, run_id: str | None = None) -> bool:
    """Stops a dry run here; a run goes on with its params recorded (the run name is theirs now)."""
    if params["dry_run"]:
        log.info("dry run: the plan above is what a run would do; nothing was written")
        return False
    record_request(_manifest(params, run_id), params)
    _, target = _clusters(params)
    try:  # the run's topics are its own from now until its report (docs/DESIGN.md §4.7)
        claim_topics(target, _run_name(params, run_id), plan["topics"], dag=get_current_context()["dag"].dag_id)
    except TopicsHeld as exc:
        raise AirflowFailException(str(exc)) from exc
    return True


@task.short_circuit(ignore_downstream_trigger_rules=False)
def pre_copy_plan(params: dict[str, Any] | None = None, run_id: str | None = None) -> bool:
    """The pre-copy's plan (topics up to their ends now); skips the pre-copy when it is off."""
    manifest = _manifest(params, run_id)
    if not params["pre_copy"] or manifest.exists(Part.SNAPSHOT):
        return False  # off, or the run is past its snapshot: the final copy does the rest
    source, _ = _clusters(params)
    topics = selected_topics(source, _selection(params))
    plan = write_pre_copy_plan(manifest, source, topics, _selection(params).modes(topics))
    log.info("pre-copy plan: %d partitions in %s", len(plan["units"]), manifest.location)
    return True


@task(trigger_rule="none_failed_min_one_success")
def stop_connectors(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, str]:
    """Target topics the run did not create are checked against the source first (nothing is
    stopped when one conflicts); then each connector's state is recorded and it is stopped."""
    source, target = _clusters(params)
    manifest = _manifest(params, run_id)
    if not manifest.exists(Part.SNAPSHOT):
        targets.check_target_topics(manifest, source, target, selected_topics(source, _selection(params)))
    source_connect, _ = _connect(params)
    if events.finished(manifest):
        log.info("the run resumed on the target already: the source connectors are left as they are")
        return {}
    with timeline.timed(manifest, "stop_connectors"):
        events.mark(manifest, events.STOPPED)
        if source_connect is None:
            return {}
        states = connector_steps.stop_connectors(source_connect, params["connectors"], manifest,
                                                 quiesce_s=params["quiesce_seconds"])
    log.info("stopped on the source Connect cluster (state before: %s)", states)
    return states


@task.sensor(poke_interval=5, timeout=3600, mode="reschedule")
def quiesce(params: dict[str, Any] | None = None, run_id: str | None = None) -> bool:
    """Source end offsets unchanged for quiesce_seconds (producers outside Connect are stopped by
    their owners) with no transaction left open on them, and no selected consumer group with members
    (those whose offsets stand still are waited for up to member_session_timeout_s): a transaction
    still open or a group still consuming fails the task, naming it (no retry: its producer or
    consumers must be stopped first). A poke samples for up to a minute, so that a quiet source
    passes right after its quiesce window."""
    manifest = _manifest(params, run_id)
    if events.finished(manifest):
        return True  # a re-run of a finished run: its source may be in use again
    source, _ = _clusters(params)
    topics = selected_topics(source, _selection(params))
    began = time.time()
    try:
        quiet = quiesce_poke(manifest, source, topics, params["quiesce_seconds"], params.get("groups") or "",
                             member_timeout_s=params.get("member_session_timeout_s", 45))
    except (GroupActive, TransactionOpen) as exc:
        raise AirflowFailException(str(exc)) from exc
    if quiet:  # from the first sample (an earlier poke's) to now
        first = manifest.read(f"{Part.QUIESCE}/0")
        timeline.record(manifest, "quiesce", min(began, first["at"]) if first else began)
    return quiet


@task
def snapshot(drill: bool = False, params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, int]:
    """The run's snapshot; in a migration, what the source changed since the pre-copy is then
    applied to the target topics the run created (a DR drill's source stays live: it does not)."""
    source, target = _clusters(params)
    source_connect, _ = _connect(params)
    selection = _selection(params)
    manifest = _manifest(params, run_id)
    with timeline.timed(manifest, "snapshot"):
        taken = take_snapshot(manifest, source, topics_include=selection.topics_include,
                              topics_exclude=selection.topics_exclude or None, groups=selection.groups or None,
                              source_connect=source_connect, connectors=list(selection.connectors) or None,
                              modes=selection.modes, live=drill)
        if not drill:
            for topic, change in targets.reconcile_target_topics(manifest, source, target).items():
                log.info("target topic %s changed like the source since the pre-copy: %s", topic, change)
    counts = {"topics": len(taken["topics"]), "groups": len(taken["groups"]), "connectors": len(taken["connectors"])}
    log.info("snapshot (taken at %s) in %s: %s", taken["taken_at"], manifest.location, counts)
    return counts


@task
def run_topics(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[str]:
    """The snapshot's topics: the per-topic tasks are mapped over them."""
    return sorted(read_snapshot(_manifest(params, run_id))["topics"])


@task(retries=0, trigger_rule="all_done", map_index_template="{{ topic_name }}")
def topic_result(topic: str, params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """One grid cell per topic after the verification (also when it failed): the topic's
    partitions, what was copied and whether each verified equal; fails when one did not."""
    get_current_context()["topic_name"] = topic  # the map index shown in the grid
    outcome = topic_outcome(_manifest(params, run_id), topic)
    for row in outcome["rows"]:
        log.info("%s[%d]: offsets %d..%d, %d records copied in %.2fs (%d attempts), %s", topic, row["partition"],
                 row["log_start"], row["end"], row["records"], row["seconds"], row["attempts"], row["verified"])
    log.info("%s: %d of %d partitions verified equal, %d records, %d bytes copied", topic, outcome["equal"],
             outcome["partitions"], outcome["records"], outcome["bytes"])
    if outcome["equal"] < outcome["partitions"]:
        raise RuntimeError(f"{topic}: {outcome['partitions'] - outcome['equal']} of {outcome['partitions']} partitions "
                           "are not verified equal (see the lines above and the verify task's log)")
    return {k: v for k, v in outcome.items() if k != "rows"}


@task
def restore_topic_configs(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The target topics' configs that the copy set (timestamps kept as CreateTime, no bound on old
    or future timestamps) back to the source's values, before anything else writes to them."""
    source, target = _clusters(params)
    manifest = _manifest(params, run_id)
    if events.finished(manifest):
        log.info("the run resumed on the target already: its topics' configs there are left as they are")
        return {"topics": {}}
    with timeline.timed(manifest, "restore_topic_configs"):
        restored = targets.restore_topic_configs(manifest, source, target)
    for topic, configs in restored["topics"].items():
        log.info("%s: %s", topic, ", ".join(f"{k} {old} -> {new}" for k, (old, new) in configs.items()))
    return restored


@task
def replicate_groups(drill: bool = False, params: dict[str, Any] | None = None, run_id: str | None = None) -> int:
    """Each snapshot group's offsets and metadata on the target. A migration first checks that each
    group is still stopped on the source with the snapshot's offsets; a DR drill copies them as of
    its snapshot. A migration that has resumed on the target leaves its groups alone."""
    source, target = _clusters(params)
    manifest = _manifest(params, run_id)
    if not drill and events.finished(manifest):
        log.info("the run resumed on the target already: its consumer groups are left as they are there")
        return 0
    with timeline.timed(manifest, "replicate_groups"):
        results = replicate(manifest, target, None if drill else source)
    for group in results:
        log.info("group %s: %d offsets, %d written", group["group"], len(group["offsets"]), group["written"])
    return len(results)


@task
def migrate_connectors(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[str]:
    _, target = _clusters(params)
    source_connect, target_connect = _connect(params)
    manifest = _manifest(params, run_id)
    if target_connect is None:
        return []
    if events.finished(manifest):
        log.info("the run resumed on the target already: its connectors there are left as they are")
        return []
    with timeline.timed(manifest, "migrate_connectors"):
        results = connector_steps.migrate_connectors(manifest, target_connect, target_bootstrap=target.bootstrap_servers,
                                                     overrides=params["connector_overrides"],
                                                     source_connect=source_connect)
    for c in results:
        log.info("connector %s (%s): %s on the target, offsets written: %s", c["name"], c["type"], c["state"],
                 c["offsets_written"])
    return [c["name"] for c in results]


@task
def resume_connectors(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
    """Each connector on the target in the state it had on the source before the run (RUNNING,
    PAUSED or STOPPED), once the consumer groups are confirmed still stopped on the source."""
    manifest = _manifest(params, run_id)
    source, _ = _clusters(params)
    _, target_connect = _connect(params)
    if events.finished(manifest):
        log.info("the run resumed on the target already: its connectors there are left as they are")
        return (manifest.read(Part.RESUMED) or {"connectors": []})["connectors"]
    started = time.time()
    try:
        check_source_at_snapshot(manifest, source)
    except KmigrateError as exc:
        raise AirflowFailException(str(exc)) from exc
    check_groups_unchanged(manifest, source)
    names = sorted(read_snapshot(manifest)["connectors"])
    states = connector_steps.states_before(manifest) if target_connect and names else {}
    resumed = connector_steps.restore_states(target_connect, {n: states[n] for n in names}) if states else []
    manifest.get_or_create(Part.RESUMED, lambda: {"connectors": resumed})
    events.mark(manifest, events.RESUMED)
    timeline.record(manifest, "resume_connectors", started)
    log.info("resumed on the target Connect cluster: %s", resumed)
    return resumed


@task
def measure_drill(params: dict[str, Any] | None = None, run_id: str | None = None,
                  dag_run: Any = None) -> dict[str, Any]:
    """DR drill: RPO (how far the verified copy is behind the live source) and RTO (trigger to verified)."""
    source, _ = _clusters(params)
    measured = drill_figures(_manifest(params, run_id), source, dag_run.start_date)
    log.info("drill: RPO %d records / %.1f s behind the source, RTO %.1f s", measured["rpo_records"],
             measured["rpo_seconds"], measured["rto_seconds"])
    return measured


@task
def report(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    path, summary = write_report(_manifest(params, run_id))
    _, target = _clusters(params)
    if release_topics(target, _run_name(params, run_id)):
        log.info("the run's topics on the target are released: another run may take them")
    log.info("report: %s", path)
    if summary.get("chart_path"):
        log.info("chart of the copy time per partition: %s", summary["chart_path"])
    log.info("summary: %s", json.dumps(summary))
    return summary


@task
def stop_target_copies(params: dict[str, Any] | None = None) -> list[str]:
    """Rollback, first half: stop the migrated connectors on the target (absent ones are fine)."""
    target_connect = connect_client(params["target_connect_conn_id"])
    names = params.get("connectors") or sorted(
        connector_steps.states_before(Manifest(params["state_location"], params["run_name"])))
    stopped = connector_steps.stop_target_copies(target_connect, names)
    log.info("stopped on the target Connect cluster: %s", stopped)
    return stopped


@task
def resume_on_source(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rollback, second half: the original connectors on the source back in the states they had
    before the migration run (recorded in its manifest)."""
    states = connector_steps.states_before(Manifest(params["state_location"], params["run_name"]))
    names = params.get("connectors") or sorted(states)
    unknown = sorted(set(names) - set(states))
    if unknown:
        raise AirflowFailException(f"connectors {', '.join(unknown)} were not stopped by migration run "
                                   f"{params['run_name']!r}; name only connectors of that run (nothing was changed)")
    restored = connector_steps.restore_states(connect_client(params["source_connect_conn_id"]),
                                              {n: states[n] for n in names})
    log.info("back on the source Connect cluster: %s", restored)
    return restored
