"""
### Kafka migration

Moves the selected topics, consumer groups and Kafka Connect connectors from the source cluster to
the target cluster so that **every record keeps its offset** and every consumer and connector
continues exactly where it stopped (docs/DESIGN.md §3):

preflight → (dry run stops here) → pre-copy while the source is live, in rounds until the source's
writes during one stay small, each round's copy verified → wait for `cutover_at` if set (a catch-up
round every 30 s meanwhile, no worker held in between) → **cutover**: stop connectors → quiesce →
snapshot → final copy and verify of what came since → restore topic configs → replicate groups →
migrate connectors → resume → report (and one cell per window step and per topic, mapped, showing
each one's outcome).

The cutover window (connectors stopped to resumed) holds only what the source wrote since the last
pre-copy round, not the data's size, and its steps run back to back in the one `cutover` task, with
no scheduler gap between them: a retry continues at the first step not done. The report shows the
window step by step. A source written to after the snapshot fails the run before anything resumes
on the target, naming each partition.

Quiesce waits until the source's end offsets stand still and no selected consumer group has members;
a group still consuming after the quiesce window fails the run there, naming it. Each connector ends
on the target in the state it had on the source (running, paused or stopped).

A consolidation renames what it moves (`topic_prefix`, `topic_renames`, `group_prefix`,
`group_renames`): each topic is created on the target under its new name with every record at its
source offset, each group's offsets are set in its new group for the renamed topics, each
connector's topics (a sink's list, pattern and dead letter queue, the file source's topic, and
the keys `connector_topic_keys` names for a connector) and each ACL's topic or group are
rewritten; what cannot be rewritten is refused by name in the preflight.

Every step is idempotent: retry it, or re-run the whole DAG run, and it continues or confirms; a
finished run run again changes nothing. A `run_name` names one migration: triggered again with other
params, it is refused before anything is done. The run's record (snapshot, plans, copy results, verification table, report) is the run manifest under
`state_location/<run id>`. The source cluster is never written to.
"""
from __future__ import annotations

from airflow.sdk import Param, dag
from kmigrate.run.cutover import course
from kmigrate_spark.job_args import pre_copy_command

from kmigrate_airflow import cutover, steps
from kmigrate_airflow.operators import cutover_sensor, spark_job
from kmigrate_airflow.params import (
    acls_param,
    connect_params,
    connector_params,
    cutover_param,
    dag_args,
    kafka_params,
    pattern_param,
    pre_copy_params,
    quiesce_params,
    rename_params,
    run_name_param,
    selection_params,
    spark_params,
    state_params,
)


@dag(
    **dag_args("kafka_migration", __doc__, ["kafka", "migration"]),
    params={
        **kafka_params(),
        **connect_params(),
        **selection_params(),
        **connector_params(),
        "acls": acls_param(),
        "translate_topics": pattern_param("Topics copied in translate mode",
                                          "Regular expression; these get an offset map instead of preserved offsets "
                                          "(for a target that already holds data)"),
        **rename_params(),
        **pre_copy_params(),
        "cutover_at": cutover_param(),
        **quiesce_params(10, "A selected group whose offsets stand still may keep members this long after its "
                             "consumer stopped (Kafka Streams does not leave its group on close): its group's "
                             "session.timeout.ms"),
        **spark_params(),
        **state_params(),
        "run_name": run_name_param(),
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Compute and show the plan, write nothing anywhere"),
    },
)
def kafka_migration():
    preflight = steps.preflight()
    go = steps.unless_dry_run(preflight)
    pre_copy_plan = steps.pre_copy_plan()
    # in rounds while the source is live, each round's copy verified live
    pre_copy = spark_job("pre_copy", "pre_copy.py", pre_copy_command)  # its rounds as the request says
    # until cutover_at (if set), a catch-up round a poke; no worker is held in between
    wait = cutover_sensor("wait_for_cutover", "catch_up.py")
    # the window in one task, its steps back to back (a retry continues at the first step not done):
    # stop, quiesce, snapshot, one Spark job (copy, then verify), restore configs, groups, connectors, resume
    window = cutover.cutover()
    per_step = cutover.window_step.expand(step=list(course.STEPS))  # one grid cell per step of the window
    topics = steps.run_topics()
    per_topic = steps.topic_result.expand(topic=topics)  # one grid cell per topic
    report = steps.report()

    go >> pre_copy_plan >> pre_copy >> wait >> window
    go >> window >> report
    window >> [per_step, topics]  # after the window (they also run when it failed)
    topics >> per_topic


kafka_migration()
