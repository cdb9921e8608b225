"""
### Kafka migration rollback

Puts connectors back where they were before a migration: stops the copies the migration created on
the target Kafka Connect cluster, then resumes the original connectors on the source Connect
cluster, where they continue from their own offsets (the migration never changed them). Topics,
consumer groups and the source cluster are not touched. Every step is idempotent.
"""
from __future__ import annotations

import datetime

from airflow.sdk import Param, dag
from kmigrate_airflow import steps
from kmigrate_airflow.hooks import DEFAULT_ARGS


@dag(
    dag_id="kafka_migration_rollback",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["kafka", "migration", "rollback"],
    default_args={**DEFAULT_ARGS, "execution_timeout": datetime.timedelta(minutes=10)},
    params={
        "source_connect_conn_id": Param("connect_source", type="string", minLength=1,
                                        title="Source Kafka Connect connection", description="HTTP connection"),
        "target_connect_conn_id": Param("connect_target", type="string", minLength=1,
                                        title="Target Kafka Connect connection", description="HTTP connection"),
        "connectors": Param(type="array", items={"type": "string", "minLength": 1}, minItems=1,
                            title="Connectors", description="Names of the migrated connectors to roll back"),
    },
)
def kafka_migration_rollback():
    steps.stop_target_copies() >> steps.resume_on_source()


kafka_migration_rollback()
