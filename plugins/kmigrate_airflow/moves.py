"""The tasks of kafka_move_consumers and kafka_move_producers: an application's consumer groups moved
onto the DR cluster of a running mirror (kmigrate.run.mirror.moves), one after another, or its topics
promoted there (kmigrate.run.mirror.producer_moves); the rest of the workload keeps running on the
source. A retry moves again what is not moved yet (a group moved already is read back and left, a
topic promoted already is left). The move that leaves nothing on the source ends the mirror and
releases its claims (kmigrate.run.mirror.completion)."""
from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException
from kmigrate.errors import ConfigError
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.board import write_board
from kmigrate.run.mirror.completion import end_if_complete
from kmigrate.run.mirror.connector_moves import move_sinks
from kmigrate.run.mirror.moves import move_group, move_group_back
from kmigrate.run.mirror.producer_moves import VerificationFailed, promote_topics

from kmigrate_airflow.frame import RunFrame, no_retry

log = logging.getLogger(__name__)


@task(retries=2)
def move_consumers(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Each group of `move_groups` moved: waited for on the source, its offsets written on the DR
    cluster exactly; bad input (no mirror under that run name, a group reading topics the mirror
    does not hold, other clusters than the mirror's) fails at once, without retry."""
    run = RunFrame(params, run_id)
    sinks = list(run.request.connectors or ())
    if not run.request.move_groups and not sinks:
        raise AirflowFailException("name the application's consumer groups (move_groups) or its sink connectors "
                                   "(connectors): nothing to move")
    rows = []
    move = move_group_back if run.request.move_back else move_group
    if run.request.move_back and sinks:
        raise AirflowFailException("move_back moves consumer groups only; a sink connector moves back with a "
                                   "failback of the mirror")
    for group in run.request.move_groups:
        with no_retry(ConfigError):
            rows.append(move(run.manifest, run.source, run.target, group, wait_s=run.request.move_wait_s,
                             say=log.info))
    if sinks:
        with no_retry(ConfigError):
            rows += move_sinks(run.manifest, run.source, run.target, run.connect_client("source"), run.connect_client("target"),
                               sinks, mirrored=lambda: mirror_status.mirrored_topics(mirror_status.read(run.manifest) or {}),
                               target_bootstrap=run.target.bootstrap_servers,
                               overrides=run.request.connector_overrides, wait_s=run.request.move_wait_s)
    return {"moved": rows, **_board_and_end(run)}


@task(retries=2)
def move_producers(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The topics of `move_topics` promoted together on the DR cluster, once their writers stopped on
    the source and the mirror drained them; bad input (no mirror under that run name, a topic it does
    not hold, other clusters than the mirror's) and a difference found fail at once, without retry."""
    run = RunFrame(params, run_id)
    sources = list(run.request.connectors or ())
    connect = (run.connect_client("source"), run.connect_client("target")) if sources else (None, None)
    with no_retry(ConfigError, VerificationFailed):
        row = promote_topics(run.manifest, run.source, run.target, run.request.move_topics,
                             quiet_s=run.request.move_quiet_s, wait_s=run.request.move_wait_s,
                             connectors=sources, connect=connect, overrides=run.request.connector_overrides,
                             say=log.info)
    return {"moved": row, **_board_and_end(run)}


def _board_and_end(run: RunFrame) -> dict[str, Any]:
    """The board written; the mirror ended and its claims released when nothing is left on the source.
    What the task returns besides its moves (its XCom, in the task's XCom tab of the Airflow UI): the
    board's file, what is left on the source, whether the migration is complete."""
    path = write_board(run.manifest)
    log.info("where every topic, group and connector of the run stands: %s", path)
    ended = end_if_complete(run.manifest, run.target, wait_s=run.request.move_wait_s, say=log.info)
    if ended["complete"]:
        write_board(run.manifest)
    return {"board": path, **ended}
