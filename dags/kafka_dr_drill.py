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

import datetime
import os

from airflow.sdk import Param, dag
from kmigrate_airflow import steps
from kmigrate_airflow.hooks import DEFAULT_ARGS, spark_job, spark_remote_param

DEFAULT_STATE = os.environ.get("KMIGRATE_STATE_LOCATION", "/tmp/kmigrate-state")


@dag(
    dag_id="kafka_dr_drill",
    doc_md=__doc__,
    schedule=os.environ.get("KMIGRATE_DR_DRILL_SCHEDULE") or None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["kafka", "dr-drill"],
    default_args=DEFAULT_ARGS,
    params={
        "source_kafka_conn_id": Param("kafka_source", type="string", minLength=1, title="Source Kafka connection"),
        "target_kafka_conn_id": Param("kafka_target", type="string", minLength=1, title="DR Kafka connection",
                                      description="Kafka provider connection of the disaster-recovery cluster"),
        "topics_include": Param(**({"default": os.environ["KMIGRATE_DR_DRILL_TOPICS"]}
                                   if os.environ.get("KMIGRATE_DR_DRILL_TOPICS") else {}),
                                type="string", minLength=1, title="Topics to copy",
                                description="Regular expression, fully matched"),
        "topics_exclude": Param(None, type=["null", "string"], title="Topics to leave out"),
        "groups": Param(None, type=["null", "string"], title="Consumer groups",
                        description="Regular expression; their offsets are carried to the DR cluster too"),
        "spark_parallelism": Param(0, type="integer", minimum=0, title="Partitions copied at once"),
        "spark_remote": spark_remote_param(),
        "state_location": Param(DEFAULT_STATE, type="string", minLength=1, title="State location"),
    },
)
def kafka_dr_drill():
    preflight = steps.preflight()
    snapshot = steps.snapshot()
    copy = spark_job("copy", "copy_partitions.py", "{{ run_id }}", "--no-verify")  # the verify job follows
    verify = spark_job("verify", "verify_partitions.py", "{{ run_id }}")
    restore = steps.restore_topic_configs()
    groups = steps.replicate_groups(drill=True)  # as of the snapshot: the source stays live
    measure = steps.measure_drill()
    report = steps.report()
    preflight >> snapshot >> copy >> verify >> restore >> [groups, measure] >> report


kafka_dr_drill()
