"""
### Move producer applications onto the DR cluster of a running mirror

One application at a time, while the rest of the workload keeps running on the source: its owner
stops its producers (and source connectors) on the source, this DAG waits until the topics' ends
stand still with every transaction decided, lets the mirror (`kafka_dr_mirror`, named by `run_name`)
copy them to the source's ends, verifies them record by record, and promotes them on the DR cluster:
the mirror copies them no more, and the producers start there, each partition at its next offset.
Source connectors named in `connectors` are stopped by this DAG first, and placed on the DR Connect
cluster with their offsets once the topics are promoted. Consumers moved already
(`kafka_move_consumers`) read the new records where they are. A record
written on the source to a promoted topic afterwards is named in the mirror's status as split brain,
never copied. The source cluster is never written to.
"""
from __future__ import annotations

from airflow.sdk import Param, dag
from kmigrate.run.checks.request import MOVE_MAX_S, MOVE_QUIET_S
from kmigrate_airflow import moves
from kmigrate_airflow.params import dag_args, move_params


@dag(
    **dag_args("kafka_move_producers", __doc__, ["kafka", "dr"]),
    params=move_params(
        "topics", "Names of the application's source connectors on the source Connect cluster, stopped there by the "
                  "move and started on the DR Connect cluster once its topics are promoted",
        "How long to wait for the writers to stop on the source, and for the mirror to copy what they wrote",
        move_topics=Param(type="array", items={"type": "string", "minLength": 1}, minItems=1, uniqueItems=True,
                          title="Topics", description="The topics the application's producers write, one a line"),
        move_quiet_s=Param(MOVE_QUIET_S, type="number", minimum=0, maximum=MOVE_MAX_S, title="Still for (s)",
                           description="How long the topics' ends stand still on the source before their writers "
                                       "count as stopped"),
    ),
)
def kafka_move_producers():
    moves.move_producers()


kafka_move_producers()
