"""
### Move consumer applications onto the DR cluster of a running mirror

One application at a time, while the rest of the workload keeps running on the source: its owner
stops it on the source, this DAG waits until its consumer groups have no member there and the mirror
(`kafka_dr_mirror`, named by `run_name`) holds every record below their offsets, writes their offsets
on the DR cluster exactly as the source has them, and says "start it on the DR cluster". The mirror
keeps the source's offsets, so the application goes on where it stopped: no record skipped or read
twice, while its producers still write on the source. The mirror syncs a moved group no more. Sink
connectors named in `connectors` move the same way: stopped on the source by this DAG, placed on the
DR Connect cluster with their offsets, in the state they had. With `move_back`, moved groups go back
to the source the same way (the only write on the source: the groups' own offsets).
"""
from __future__ import annotations

from airflow.sdk import Param, dag
from kmigrate_airflow import moves
from kmigrate_airflow.params import dag_args, move_params


@dag(
    **dag_args("kafka_move_consumers", __doc__, ["kafka", "dr"]),
    params=move_params(
        "groups", "Names of the application's sink connectors on the source Connect cluster, moved with its consumers",
        "How long to wait for the application to stop on the source, and for the mirror to hold its records",
        move_groups=Param([], type="array", items={"type": "string", "minLength": 1}, uniqueItems=True,
                          title="Consumer groups",
                          description="The application's consumer group ids, one a line (or its sink connectors "
                                      "below)"),
        move_back=Param(False, type="boolean", title="Move back",
                        description="Move the groups back to the source instead (while none of their topics is "
                                    "promoted): stop the application on the DR cluster first"),
    ),
)
def kafka_move_consumers():
    moves.move_consumers()


kafka_move_consumers()
