"""
### Kafka disaster-recovery drill

Copies the selected topics (and, optionally, consumer groups) to the DR cluster while the source
stays live, verifies the copy at the snapshot, and measures how far behind a failover would be:
**RPO** (records the source has beyond the verified snapshot, and seconds since it) and **RTO**
(seconds from the trigger to a verified copy). Writes a drill report into the run's folder.
Connectors are not touched and the source cluster is never written to. A later drill resumes from
what the earlier ones copied: only new records travel.

With `mirror_run` (a running `kafka_dr_mirror`), the drill drills that mirror instead of copying: its
selection is the mirror's, its snapshot is a consistent cut that the DR cluster is waited for
(records committed up to it, groups at least at it), the verify job compares every partition up to
the cut, and the connectors the mirror keeps are placed on the DR Connect cluster stopped with their
offsets, then removed (a dry failover). RPO is the mirror's lag at the cut; RTO the trigger to all
of that. Nothing is written to the mirror's topics or groups.

Scheduled by the cron expression in the environment variable `KMIGRATE_DR_DRILL_SCHEDULE` (read
when the file is parsed; unset: manual only), with `KMIGRATE_DR_DRILL_TOPICS` as the default topic
selection of scheduled runs.
"""
from __future__ import annotations

import os

from airflow.sdk import Param, dag
from kmigrate_airflow import drill, steps
from kmigrate_airflow.operators import spark_job
from kmigrate_airflow.params import (
    RUN_NAME,
    connect_params,
    dag_args,
    kafka_params,
    overrides_param,
    selection_params,
    spark_params,
    state_params,
)


@dag(
    **dag_args("kafka_dr_drill", __doc__, ["kafka", "dr-drill"],
               schedule=os.environ.get("KMIGRATE_DR_DRILL_SCHEDULE") or None),
    params={
        **kafka_params("DR Kafka connection", "Kafka provider connection of the disaster-recovery cluster"),
        **selection_params("Topics to copy", os.environ.get("KMIGRATE_DR_DRILL_TOPICS"),
                           "Regular expression; their offsets are carried to the DR cluster too"),
        "mirror_run": Param("", type="string", pattern=f"^({RUN_NAME})?$", title="Mirror to drill",
                            description="A running kafka_dr_mirror's run_name: drill it (its selection; no copy of "
                                        "the drill's own); empty: the drill copies"),
        **connect_params(),
        "connector_overrides": overrides_param('{"connector": {"key": "value"}} for the dry failover of the '
                                               "connectors the mirror keeps (the secrets it does not keep, another "
                                               "output file); only with mirror_run"),
        **spark_params(),
        **state_params(),
    },
)
def kafka_dr_drill():
    preflight = steps.preflight()
    snapshot = steps.snapshot(drill=True)
    route = drill.route()
    copy = spark_job("copy", "drill_copy.py")  # no digest a partition: the verify job follows
    cut = drill.mirror_cut()
    verify = spark_job("verify", "verify_partitions.py")
    verify.trigger_rule = "none_failed_min_one_success"  # after the copy, or after the mirror reached the cut
    restore = steps.restore_topic_configs()
    groups = steps.replicate_groups(drill=True)  # as of the snapshot: the source stays live
    measure = drill.measure()
    report = steps.report()
    preflight >> snapshot >> route >> [copy, cut] >> verify >> restore >> [groups, measure] >> report


kafka_dr_drill()
