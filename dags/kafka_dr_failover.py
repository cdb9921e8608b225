"""
### Kafka disaster-recovery failover (planned, or unplanned)

Moves the applications of a mirrored cluster (`kafka_dr_mirror`, named by `run_name`) to the DR
cluster with **zero records lost**: the connectors stop on the source, the source quiesces (its
producers outside Connect and its consumers are stopped by their owners), the mirror ends its last
round, the window copies and verifies what is left, then the consumer groups, topic configs and
connectors move to the DR cluster and the connectors resume there, with their offsets. The same
steps as a migration's cutover window (one task; a retry continues at the first step not done),
plus `stop_mirror`. The source cluster is never written to.

With `unplanned` (the source is gone, refused while it answers): the mirror is stopped, the
transactions it left open on the DR cluster are aborted, and the DR cluster is promoted with what it
holds, its groups at their last mirrored offsets; the report gives the RPO by partition.
"""
from __future__ import annotations

from airflow.sdk import Param, dag
from kmigrate.run.cutover import course
from kmigrate_airflow import cutover, failover, steps
from kmigrate_airflow.params import (
    acls_param,
    connect_params,
    connector_params,
    dag_args,
    kafka_params,
    quiesce_params,
    run_name_param,
    spark_params,
    stale_after_param,
    state_params,
)


@dag(
    **dag_args("kafka_dr_failover", __doc__, ["kafka", "dr"]),
    params={
        "run_name": run_name_param(required=True, title="Mirror name",
                                   description="The kafka_dr_mirror run to fail over (its run_name)"),
        **kafka_params("DR Kafka connection", "Kafka provider connection of the disaster-recovery cluster"),
        **connect_params(),
        **connector_params(),
        "acls": acls_param(),
        **quiesce_params(5),
        "unplanned": Param(False, type="boolean", title="Unplanned (the source is gone)",
                           description="Promote the DR cluster with what it holds, without the source: what the "
                                       "mirror had not copied is lost (the report names it). Refused while the source "
                                       "answers"),
        "stale_after_s": stale_after_param("Mirror gone after (s)",
                                           "A mirror whose heartbeat is this old counts as stopped (at least what a "
                                           "running mirror's can reach: 10 s plus two status intervals or 4 s)"),
        **spark_params(),
        **state_params(),
    },
)
def kafka_dr_failover():
    preflight = failover.preflight()
    window = failover.failover()
    per_step = cutover.window_step.expand(step=list(course.FAILOVER_STEPS))  # one grid cell per step
    report = steps.report()
    preflight >> window >> [per_step, report]


kafka_dr_failover()
