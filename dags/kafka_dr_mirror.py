"""
### Kafka disaster-recovery mirror

Keeps the selected topics on the DR cluster **continuously**, at the source's offsets, while the
source is live: records, transactions as transactions, compaction gaps, log start moves, topics
created and partitions added on the source that match the selection; the selected consumer
groups' offsets follow (as they are: the offsets are the source's), never past what the DR
cluster holds, for groups with no members there. The source cluster is never written to.

`start` starts the mirror, a long-running Spark job (on the Spark Connect connection's server, or
spark-submit in client mode); `follow` waits in the triggerer for the mirror's heartbeat and starts
it again when the heartbeat is older than `stale_after_s`. The run ends when the mirror is asked
to stop (a failover). Its status, with each partition's lag (records, seconds), is the part
`mirror-status` of the run manifest named `run_name`. The `connectors` named are read as the mirror
goes (config, state, offsets); each reading is kept once the DR cluster holds what the source did
when it was taken, for an unplanned failover to start them on the DR Connect cluster.

A DR cluster that is a consolidation target keeps the topics and groups under other names
(`topic_prefix`, `topic_renames`, `group_prefix`, `group_renames`, `connector_topic_keys`, as
`kafka_migration` takes them; offsets unchanged): the failovers, drills and moves of applications
one at a time onto this mirror follow them. A failback of it (`failback_of`) takes them reversed
by itself (each DR name back to the original's) and refuses rename params of its own.
"""
from __future__ import annotations

import datetime

from airflow.sdk import dag
from kmigrate_airflow import mirror, steps
from kmigrate_airflow.params import (
    connect_params,
    connectors_param,
    dag_args,
    kafka_params,
    mirror_params,
    rename_params,
    selection_params,
    spark_params,
    state_params,
)


@dag(
    **dag_args("kafka_dr_mirror", __doc__, ["kafka", "dr"]),
    params={
        **mirror_params(),
        **kafka_params("DR Kafka connection", "Kafka provider connection of the disaster-recovery cluster"),
        **selection_params("Topics to mirror", groups_description="Regular expression over group ids whose offsets "
                                                                  "follow; empty: none"),
        **rename_params(),
        **connect_params(),
        "connectors": connectors_param("Names of source Connect connectors whose configs, states and offsets the "
                                       "mirror keeps for an unplanned failover (placed on the target Connect "
                                       "connection's cluster then)"),
        **spark_params(),
        **state_params(),
    },
)
def kafka_dr_mirror():
    preflight = steps.preflight()
    started = mirror.start()
    # deferred in the triggerer for as long as the mirror runs: bounded, never unbounded; a retry follows on
    follow = mirror.MirrorFollower(task_id="follow", run_name="{{ params.run_name }}",
                                   execution_timeout=datetime.timedelta(days=365),
                                   retries=10, retry_delay=datetime.timedelta(seconds=30))
    preflight >> started >> follow


kafka_dr_mirror()
