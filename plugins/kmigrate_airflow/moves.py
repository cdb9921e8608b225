"""kafka_move_consumers' task: an application's consumer groups moved onto the DR cluster of a running
mirror (kmigrate.run.mirror.moves), one after another; the rest of the workload keeps running on the
source. A retry moves again what is not moved yet (a group moved already is read back and left)."""
from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import task
from kmigrate.errors import ConfigError
from kmigrate.run.mirror.moves import move_group

from kmigrate_airflow.frame import RunFrame, no_retry

log = logging.getLogger(__name__)


@task(retries=2)
def move_consumers(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
    """Each group of `move_groups` moved: waited for on the source, its offsets written on the DR
    cluster exactly; bad input (no mirror under that run name, a group reading topics the mirror
    does not hold, other clusters than the mirror's) fails at once, without retry."""
    run = RunFrame(params, run_id)
    rows = []
    for group in run.request.move_groups:
        with no_retry(ConfigError):
            rows.append(move_group(run.manifest, run.source, run.target, group, wait_s=run.request.move_wait_s,
                                   say=log.info))
    return rows
