"""kafka_dr_drill's tasks of a drill of a running mirror (`mirror_run`; kmigrate.run.mirror.drill):
the mirror's copy stands in for the drill's own, the DR cluster is waited for up to the drill's cut,
verified there by the drill's verify job, and the connectors the mirror keeps are placed on the DR
Connect cluster stopped, then removed. Without `mirror_run` the drill copies on its own."""
from __future__ import annotations

import datetime
import logging
from typing import Any

from airflow.sdk import task
from kmigrate.manifest import Manifest, Part
from kmigrate.run.mirror.connectors import CONNECTORS
from kmigrate.run.mirror.drill import CUT, check_slots_left, cut_ends, dry_connectors, reach_cut
from kmigrate.run.report.drill import measure_drill as drill_figures

from kmigrate_airflow.frame import RunFrame, no_retry, run_request
from kmigrate_airflow.hooks import SPARK_CONNECT_PARAM, spark_connect_url

log = logging.getLogger(__name__)


def mirror_of(run: RunFrame) -> Manifest | None:
    request = run.request
    return Manifest(request.state_location, request.mirror_run) if request.mirror_run else None


@task.branch
def route(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
    """The drill's own copy, or (a mirror named) the wait for the mirror to reach the cut."""
    return "mirror_cut" if run_request(params, run_id).mirror_run else "copy"


@task(retries=2)
def mirror_cut(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The DR cluster holding the drill's cut: every partition up to its snapshot end, the groups'
    offsets at least the snapshot's (`reach_cut`)."""
    run = RunFrame(params, run_id)
    with run.timed("mirror_cut"), no_retry():
        mirror = mirror_of(run)
        check_slots_left(mirror, spark_connect_url(run.request.spark.connect_conn_id), SPARK_CONNECT_PARAM)
        return reach_cut(run.manifest, mirror, run.target, say=log.info)


@task
def measure(params: dict[str, Any] | None = None, run_id: str | None = None, dag_run: Any = None) -> dict[str, Any]:
    """RPO and RTO. The drill's own copy: how far the verified copy is behind the live source, and
    the trigger to verified. A mirror's: its lag at the cut, and the trigger to the cut verified on
    the DR cluster and its connectors placed there (a dry failover of them)."""
    run = RunFrame(params, run_id)
    mirror = mirror_of(run)
    if mirror is None:
        measured = drill_figures(run.manifest, run.source, dag_run.start_date)
    else:
        def figures() -> dict[str, Any]:
            cut = run.manifest.read(CUT)
            ends = cut_ends(run.manifest.read(Part.SNAPSHOT))
            with no_retry():
                connectors = dry_connectors(mirror, run.connect_client("target") if mirror.exists(CONNECTORS)
                                            else None, ends, dr_bootstrap=run.target.bootstrap_servers,
                                            overrides=run.request.connector_overrides, say=log.info)
            now = datetime.datetime.now(datetime.timezone.utc)
            return {"rpo_records": cut["rpo_records"], "rpo_seconds": cut["rpo_seconds"],
                    "rto_seconds": round((now - dag_run.start_date).total_seconds(), 3), "measured_at": now.isoformat(),
                    "mirror_run": run.request.mirror_run, "cut_waited_s": cut["waited_s"], "connectors": connectors}
        measured = run.manifest.get_or_create(Part.DRILL, figures)
    log.info("drill: RPO %d records / %.1f s behind the source, RTO %.1f s", measured["rpo_records"],
             measured["rpo_seconds"], measured["rto_seconds"])
    return measured
