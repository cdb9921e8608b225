"""The non-Spark steps of the migration DAGs as Airflow tasks; those that are steps of the cutover
window too (a DR drill's snapshot, topic configs and groups) are the library's
(kmigrate.run.window.steps), which the cutover task runs back to back (kmigrate_airflow.cutover).
Each is a few lines: the run's frame from the params (`frame.RunFrame`: its typed request, manifest,
clusters, selection, Connect clients), one call of the kmigrate library, what it did in the log. The
frame also skips the steps of a finished run, times the step in the run's timeline, and fails without
retry on what no retry can help (`frame.no_retry`). Nothing here decides anything the library does not."""
from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from airflow.sdk import get_current_context, task
from kmigrate.claims.runs import check_topics_free, claim_topics, release_topics
from kmigrate.errors import TopicsHeld
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks import identity
from kmigrate.run.checks.request import record_request
from kmigrate.run.checks.selection import selected_topics
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate.run.copying.plan import write_pre_copy_plan
from kmigrate.run.mirror.failback import plan_failback
from kmigrate.run.preflight.checks import check_params, check_run
from kmigrate.run.records.events import finished
from kmigrate.run.targets.prepare import created_topics
from kmigrate.run.records.snapshot import read_snapshot
from kmigrate.run.report.markdown import topic_result as topic_outcome
from kmigrate.run.report.markdown import write_report
from kmigrate.run.window import steps as window_steps
from kmigrate.run.window.steps import Window
from kmigrate_spark.conf import check_connect_server, shown_remote

from kmigrate_airflow.frame import RunFrame, no_retry
from kmigrate_airflow.hooks import SPARK_CONNECT_PARAM, spark_connect_url

log = logging.getLogger(__name__)


@task(retries=0)
def preflight(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Read-only: the params' own checks (connector overrides, cutover time) and the run name not
    used before with other params; connections, clusters, selections, connectors, the server of
    the Spark Connect connection if it exists. Bad input fails here, before any write (and before a
    migration stops its connectors)."""
    return check_before(RunFrame(params, run_id))


def check_before(run: RunFrame) -> dict[str, Any]:
    """The preflight's checks of `run` (its params as the frame has them); the plan."""
    request = run.request
    with no_retry():
        cutover = check_params(request, run.manifest)
    if cutover is not None:
        log.info("cutover at %s (UTC %s)", cutover.isoformat(), cutover.astimezone(datetime.timezone.utc).isoformat())
    spark_connect = request.spark.connect_conn_id
    remote = spark_connect_url(spark_connect)  # ConfigError: a connection of another type
    if remote:
        check_connect_server(remote, option=f"host and port in the Airflow connection {spark_connect!r} (or empty "
                                            f"the {SPARK_CONNECT_PARAM} param to run the Spark jobs with spark-submit)")
        log.info("the Spark jobs run on the Spark Connect server %s (connection %r)", shown_remote(remote),
                 spark_connect)
    else:
        log.info("the Spark jobs run with spark-submit on spark_default%s",
                 f" (no Airflow connection {spark_connect!r})" if spark_connect else "")
    plan = check_run(run.source, run.target, run.source_connect, run.target_connect, run.selection, request.renames,
                     # a finished run's topics are in use on the target, and a failback's original holds its own
                     check_targets=not finished(run.manifest) and not request.failback_of,
                     overrides=request.connector_overrides, created=created_topics(run.manifest),
                     mirrored=bool(request.mirror_selection))
    with no_retry():  # the clusters are the run's (a retry, a failover), a failback's the failover's reversed
        identity.check_begun(run.manifest, run.source, run.target, plan["identity"],
                             reversing=bool(request.failback_of))
        if request.failback_of:
            plan["failback"] = plan_failback(Manifest(request.state_location, request.failback_of),
                                             plan["identity"], run.target, run.selection.topics_include,
                                             run.selection.topics_exclude, request.renames)
            log.info("failback of run %s: deletes on the original %s, stops there %s", request.failback_of,
                     plan["failback"]["delete_topics"] if request.rebuild_diverged else "nothing (rebuild_diverged "
                     f"off; diverged: {len(plan['failback']['diverged'])} partitions)", plan["failback"]["stop_connectors"])
    if request.mirror_run:  # a drill of a running mirror writes none of the mirror's topics
        log.info("drill of the mirror of run %s: its topics %s", request.mirror_run, plan["topics"])
    else:
        with no_retry(TopicsHeld):  # another run over the same topics: refused here already (the claim comes next)
            check_topics_free(run.target, run.name, plan["target_topics"],
                              deployment=run.manifest.state_location)
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
    run = RunFrame(params, run_id)
    if run.request.dry_run:
        log.info("dry run: the plan above is what a run would do; nothing was written")
        return False
    record_request(run.manifest, run.params)
    with no_retry():  # the clusters the run began on: every later step is held to them
        identity.begin(run.manifest, run.source, run.target, seen=plan["identity"])
    with no_retry(TopicsHeld):  # the run's topics are its own from now until its report (docs/DESIGN.md §4.7)
        claim_topics(run.target, run.name, plan["target_topics"], dag=get_current_context()["dag"].dag_id,
                     deployment=run.manifest.state_location,
                     source_id=plan["identity"]["source"]["cluster_id"])  # the target's log: received from it
    return True


@task.short_circuit(ignore_downstream_trigger_rules=False)
def pre_copy_plan(params: dict[str, Any] | None = None, run_id: str | None = None) -> bool:
    """The pre-copy's plan (topics up to their ends now); skips the pre-copy when it is off."""
    run = RunFrame(params, run_id)
    if not run.request.pre_copy or run.manifest.exists(Part.SNAPSHOT):
        return False  # off, or the run is past its snapshot: the final copy does the rest
    topics = selected_topics(run.source, run.selection)
    plan = write_pre_copy_plan(run.manifest, run.source, topics, run.selection.modes(topics),
                               run.request.renames.check_topics(topics))
    log.info("pre-copy plan: %d partitions in %s", len(plan["units"]), run.manifest.location)
    return True


@task
def snapshot(drill: bool = False, params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, int]:
    """The run's snapshot (`kmigrate.run.window.steps.snapshot`)."""
    return window_steps.snapshot(Window(RunFrame(params, run_id), final=no_retry), drill)


@task(trigger_rule="one_done")
def run_topics(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[str]:
    """The snapshot's topics: the per-topic tasks are mapped over them (none before the snapshot).
    It runs once the cutover task succeeded or failed, and is skipped when that never ran."""
    manifest = RunFrame(params, run_id).manifest
    return sorted(read_snapshot(manifest)["topics"]) if manifest.exists(Part.SNAPSHOT) else []


@task(retries=0, trigger_rule="all_done", map_index_template="{{ topic_name }}")
def topic_result(topic: str, params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """One grid cell per topic after the verification (also when it failed): the topic's
    partitions, what was copied and whether each verified equal; fails when one did not."""
    get_current_context()["topic_name"] = topic  # the map index shown in the grid
    outcome = topic_outcome(RunFrame(params, run_id).manifest, topic)
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
    """The target topics' configs the copy set, back to the source's
    (`kmigrate.run.window.steps.restore_topic_configs`)."""
    return window_steps.restore_topic_configs(Window(RunFrame(params, run_id), final=no_retry))


@task
def replicate_groups(drill: bool = False, params: dict[str, Any] | None = None, run_id: str | None = None) -> int:
    """The snapshot groups' offsets on the target (`kmigrate.run.window.steps.replicate_consumer_groups`)."""
    return window_steps.replicate_consumer_groups(Window(RunFrame(params, run_id), final=no_retry), drill)


@task
def report(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The run's report (markdown, charts) in its manifest folder; then the run's topics on the
    target are released for other runs."""
    run = RunFrame(params, run_id)
    path, summary = write_report(run.manifest)
    if release_topics(run.target, run.name, deployment=run.manifest.state_location):  # whichever DAG of the run claimed
        log.info("the run's topics on the target are released: another run may take them")
    log.info("report: %s", path)
    if summary.get("chart_path"):
        log.info("chart of the copy time per partition: %s", summary["chart_path"])
    log.info("summary: %s", json.dumps(summary))
    return summary


@task
def stop_target_copies(params: dict[str, Any] | None = None) -> list[str]:
    """Rollback, first half: stop the migrated connectors on the target (absent ones are fine). A
    connector the run did not stop is refused here, before anything is stopped."""
    run = RunFrame(params)  # run_name: the migration run rolled back
    with no_retry():
        wanted = connector_steps.rollback_states(connector_steps.states_before(run.manifest),
                                                 run.request.connectors, run.name)
        # both Connect sides the run's, before anything is stopped (swapped, this would stop the originals)
        for side in ("target", "source"):
            identity.check_connect(run.manifest, f"{side}_connect", run.connect_client(side))
    stopped = connector_steps.stop_target_copies(run.connect_client("target"), sorted(wanted))
    log.info("stopped on the target Connect cluster: %s", stopped)
    return stopped


@task
def resume_on_source(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rollback, second half: the original connectors on the source back in the states they had
    before the migration run (recorded in its manifest)."""
    run = RunFrame(params)  # run_name: the migration run rolled back
    states = connector_steps.states_before(run.manifest)
    with no_retry():  # a connector that run did not stop; a Connect cluster that is not the run's source's
        wanted = connector_steps.rollback_states(states, run.request.connectors, run.name)
        identity.check_connect(run.manifest, "source_connect", run.connect_client("source"))
    restored = connector_steps.restore_states(run.connect_client("source"), wanted)
    log.info("back on the source Connect cluster: %s", restored)
    return restored
