"""
### Kafka migration rollback

Puts connectors back where they were before a migration run: stops the copies the run created on the
target Kafka Connect cluster, then brings the original connectors on the source Connect cluster back
to the state each had before the run (running, paused or stopped, as recorded in the run's
manifest), where they continue from their own offsets (the migration never changed them). Topics,
consumer groups and the source cluster are not touched. Every step is idempotent.
"""
from __future__ import annotations

import datetime

from airflow.sdk import dag
from kmigrate_airflow import steps
from kmigrate_airflow.params import DEFAULT_ARGS, connect_params, connectors_param, dag_args, run_name_param, state_params


@dag(
    **dag_args("kafka_migration_rollback", __doc__, ["kafka", "migration", "rollback"],
               default_args={**DEFAULT_ARGS, "execution_timeout": datetime.timedelta(minutes=10)}),
    params={
        **connect_params(),
        "run_name": run_name_param(required=True, title="Migration run",
                                   description="The run name (or Airflow run id) of the migration"),
        **state_params(),
        "connectors": connectors_param("Those of the run's connectors to roll back; empty: all", unique=False),
    },
)
def kafka_migration_rollback():
    steps.stop_target_copies() >> steps.resume_on_source()


kafka_migration_rollback()
