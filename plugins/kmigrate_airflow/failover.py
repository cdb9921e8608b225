"""kafka_dr_failover's tasks: a planned failover of a mirrored run is the migration's cutover window
(kmigrate_airflow.cutover) on the mirror's run, its topics and groups the mirror's, with the mirror
stopped after the snapshot (`course.FAILOVER_STEPS`): the connectors stop on the source, the source
quiesces, the mirror ends its last round, the window copies what is left (a second or so of
writes), verifies, and the groups, configs and connectors move to the DR cluster and resume there.
One course, one set of steps, for a migration and a failover. An unplanned failover (the source
gone) promotes the DR cluster with what it holds instead (kmigrate.run.mirror.promote)."""
from __future__ import annotations

import datetime
import logging
from typing import Any

from airflow.sdk import task
from kmigrate.run.cutover import course
from kmigrate.run.mirror.connectors import CONNECTORS
from kmigrate.run.mirror.failover import PLANNED, check_stale_after, stop_mirror
from kmigrate.run.mirror.promote import check_unplanned, unplanned_failover

from kmigrate_airflow import steps
from kmigrate_airflow.cutover import cutover_run
from kmigrate_airflow.frame import RunFrame, no_retry
from kmigrate_airflow.operators import COPY_POOL

log = logging.getLogger(__name__)


@task(retries=0)
def preflight(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The migration's preflight on the mirror's run and selection (unplanned: the run's mirror, the DR
    cluster answering, the source not): read-only, bad input fails here."""
    run = RunFrame(params, run_id, failover=True)
    if run.request.unplanned:
        with no_retry():
            check_stale_after(run.manifest, run.request.stale_after_s)
            check_unplanned(run.manifest, run.source, run.target, stale_after_s=run.request.stale_after_s)
        log.info("unplanned failover of run %s: the source does not answer, the DR cluster does", run.name)
        return {"unplanned": True}
    with no_retry():
        check_stale_after(run.manifest, run.request.stale_after_s)
    return steps.check_before(run)


@task(trigger_rule="none_failed_min_one_success", pool=COPY_POOL, retries=3,
      execution_timeout=datetime.timedelta(hours=12))
def failover(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
    """The window's course with the mirror stopped after the snapshot; a retry continues at the
    first step not done."""
    run = RunFrame(params, run_id, failover=True)
    if run.request.unplanned:  # the source gone: the DR cluster promoted with what it holds
        kept = run.manifest.exists(CONNECTORS)  # the mirror kept connectors: they move to the DR Connect cluster
        promoted = unplanned_failover(run.manifest, run.source, run.target, stale_after_s=run.request.stale_after_s,
                                      dr_connect=run.connect_client("target") if kept else None,
                                      overrides=run.request.connector_overrides, say=log.info)
        return promoted["partitions"]

    def stop() -> None:
        with run.timed("stop_mirror"):  # a row of the window's table
            stop_mirror(run.manifest, PLANNED, stale_after_s=run.request.stale_after_s, say=log.info)

    return cutover_run(run, stop, course.FAILOVER_STEPS)
