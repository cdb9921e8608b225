"""What the DAGs share: task defaults and their trigger-form params, each defined once (the form
validates them before a run exists)."""
from __future__ import annotations

import datetime
import os

from airflow.sdk import Param
from kmigrate_spark.conf import REMOTE_ENV

DEFAULT_STATE = os.environ.get("KMIGRATE_STATE_LOCATION", "/tmp/kmigrate-state")
RUN_NAME = "[A-Za-z0-9][A-Za-z0-9._:+-]*"  # a folder name of the state location

# every DAG's task defaults: retried with backoff, never unbounded
DEFAULT_ARGS = {
    "retries": 2,
    "retry_delay": datetime.timedelta(seconds=10),
    "retry_exponential_backoff": True,
    "execution_timeout": datetime.timedelta(minutes=30),
}


def kafka_params(target_title: str = "Target Kafka connection",
                 target_description: str = "Kafka provider connection of the target cluster") -> dict[str, Param]:
    """The two Kafka clusters' connection ids."""
    return {
        "source_kafka_conn_id": Param("kafka_source", type="string", minLength=1, title="Source Kafka connection",
                                      description="Kafka provider connection of the source cluster"),
        "target_kafka_conn_id": Param("kafka_target", type="string", minLength=1, title=target_title,
                                      description=target_description),
    }


def connect_params() -> dict[str, Param]:
    """The two Kafka Connect clusters' connection ids."""
    return {
        "source_connect_conn_id": Param("connect_source", type="string", minLength=1,
                                        title="Source Kafka Connect connection", description="HTTP connection"),
        "target_connect_conn_id": Param("connect_target", type="string", minLength=1,
                                        title="Target Kafka Connect connection", description="HTTP connection"),
    }


def selection_params(topics_title: str = "Topics to migrate", topics_default: str | None = None,
                     groups_description: str = "Regular expression over group ids; empty migrates no group"
                     ) -> dict[str, Param]:
    """Which topics and consumer groups a run moves."""
    return {
        "topics_include": Param(**({"default": topics_default} if topics_default else {}), type="string",
                                minLength=1, title=topics_title,
                                description="Regular expression, fully matched against topic names"),
        "topics_exclude": Param(None, type=["null", "string"], title="Topics to leave out",
                                description="Regular expression; empty leaves none out"),
        "groups": Param(None, type=["null", "string"], title="Consumer groups", description=groups_description),
    }


def spark_params() -> dict[str, Param]:
    """Where and how wide the Spark jobs run."""
    return {
        "spark_parallelism": Param(0, type="integer", minimum=0, title="Partitions copied at once",
                                   description="0: the Spark application's task slots"),
        "spark_remote": Param(os.environ.get(REMOTE_ENV) or None, type=["null", "string"], pattern=r"^(sc://\S+)?$",
                              title="Spark Connect server",
                              description="sc://HOST:PORT: the Spark jobs run as clients of this server, without a "
                                          "spark-submit start-up each; empty: spark-submit on the spark_default "
                                          f"connection (default: ${REMOTE_ENV})"),
    }


def state_params() -> dict[str, Param]:
    """Where run manifests are kept."""
    return {"state_location": Param(DEFAULT_STATE, type="string", minLength=1, title="State location",
                                    description="Local path or fsspec URL of the run manifests")}


def run_name_param(*, required: bool = False, **texts: str) -> Param:
    """The name of a run's manifest: optional in a migration (default: the Airflow run id),
    required where an earlier run is named (the rollback)."""
    if required:
        return Param(type="string", pattern=f"^{RUN_NAME}$", **texts)
    return Param(None, type=["null", "string"], pattern=f"^({RUN_NAME})?$", **{
        "title": "Run name", "description": "Names the run manifest; empty: the Airflow run id", **texts})
