"""
### Kafka disaster-recovery drill

Copies the selected topics (and, optionally, consumer groups) to the DR cluster while the source
stays live, verifies the copy at the snapshot, and measures how far behind a failover would be:
**RPO** (records the source has beyond the verified snapshot, and seconds since it) and **RTO**
(seconds from the trigger to a verified copy). Writes a drill report into the run's folder.
Connectors are not touched and the source cluster is never written to. A later drill resumes from
what the earlier ones copied: only new records travel.

Scheduled by the cron expression in the environment variable `KMIGRATE_DR_DRILL_SCHEDULE` (read
when the file is parsed; unset: manual only), with `KMIGRATE_DR_DRILL_TOPICS` as the default topic
selection of scheduled runs.
"""
from __future__ import annotations

import os

from airflow.sdk import dag
from kmigrate_airflow import steps
from kmigrate_airflow.operators import spark_job
from kmigrate_airflow.params import dag_args, kafka_params, selection_params, spark_params, state_params


@dag(
    **dag_args("kafka_dr_drill", __doc__, ["kafka", "dr-drill"],
               schedule=os.environ.get("KMIGRATE_DR_DRILL_SCHEDULE") or None),
    params={
        **kafka_params("DR Kafka connection", "Kafka provider connection of the disaster-recovery cluster"),
        **selection_params("Topics to copy", os.environ.get("KMIGRATE_DR_DRILL_TOPICS"),
                           "Regular expression; their offsets are carried to the DR cluster too"),
        **spark_params(),
        **state_params(),
    },
)
def kafka_dr_drill():
    preflight = steps.preflight()
    snapshot = steps.snapshot(drill=True)
    copy = spark_job("copy", "drill_copy.py", "{{ run_id }}")  # no digest a partition: the verify job follows
    verify = spark_job("verify", "verify_partitions.py", "{{ run_id }}")
    restore = steps.restore_topic_configs()
    groups = steps.replicate_groups(drill=True)  # as of the snapshot: the source stays live
    measure = steps.measure_drill()
    report = steps.report()
    preflight >> snapshot >> copy >> verify >> restore >> [groups, measure] >> report


kafka_dr_drill()
