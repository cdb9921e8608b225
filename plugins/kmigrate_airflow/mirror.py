"""kafka_dr_mirror's tasks: `start_mirror` starts the mirror job (spark_jobs/mirror.py) apart from
the task, and `MirrorFollower`, a deferrable sensor, follows the heartbeat the job writes in the
run manifest from the triggerer (no worker held), starts the job again when the heartbeat is older
than `stale_after_s` (the job died, or hangs: it is stopped first), and ends when the mirror has
stopped on request (a failover, or `kmigrate.run.mirror.term.request_stop`). A job that keeps dying
before its first round (`MAX_STARTS_WITHOUT_ROUND` starts) fails the task, naming its output file."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from airflow.sdk import BaseOperator, task
from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent
from kmigrate.manifest import Manifest
from kmigrate.run.checks import identity
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.failback import failed_over_connectors, prepare_failback
from kmigrate.run.mirror.driver import STARTS
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import STOP
from kmigrate_spark.job_args import request_command

from kmigrate_airflow.frame import RunFrame, no_retry
from kmigrate_airflow.launch import SPARK_JOBS, SparkJob, start_detached

log = logging.getLogger(__name__)
MAX_STARTS_WITHOUT_ROUND = 3
OUTPUT_DIR = Path(os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")) / "logs" / "kmigrate-mirror"


@task(retries=2)
def start(params: dict[str, Any] | None = None, run_id: str | None = None) -> int | None:
    """The DAG's start task: `start_mirror` for the run named by `run_name`."""
    return start_mirror(RunFrame(params, run_id), log)


class MirrorHeartbeatTrigger(BaseTrigger):
    """Fires "stopped" once a stop was requested and the mirror stopped (or beats no more), "stale"
    once its last heartbeat (or its start, `since`, if later) is older than `stale_after_s`."""

    def __init__(self, state_location: str, run_name: str, stale_after_s: float, since: float,
                 poll_s: float = 2.0) -> None:
        super().__init__()
        self.state_location, self.run_name = state_location, run_name
        self.stale_after_s, self.since, self.poll_s = stale_after_s, since, poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.MirrorHeartbeatTrigger",
                {"state_location": self.state_location, "run_name": self.run_name,
                 "stale_after_s": self.stale_after_s, "since": self.since, "poll_s": self.poll_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        manifest = Manifest(self.state_location, self.run_name)
        while True:
            status = await asyncio.to_thread(mirror_status.read, manifest)
            stop = await asyncio.to_thread(manifest.exists, STOP)
            now = time.time()
            age = min(now - self.since, mirror_status.heartbeat_age(status, now) or float("inf"))
            if stop and (age > self.stale_after_s or (status or {}).get("stopped")):
                yield TriggerEvent({"state": "stopped", "round": (status or {}).get("round", 0)})
                return
            if age > self.stale_after_s:
                yield TriggerEvent({"state": "stale", "age_s": round(age, 1), "round": (status or {}).get("round", 0)})
                return
            await asyncio.sleep(self.poll_s)


def mirror_job(request: RunRequest) -> SparkJob:
    return SparkJob.of(request, str(SPARK_JOBS / "mirror.py"), request_command(request),
                       source_connect_conn_id=request.source_connect_conn_id if request.connectors else "")


def start_mirror(run: RunFrame, log: Any) -> int | None:
    """The run's mirror spec from its request (refused without retry: another selection for this
    run), then the job started, unless a stop was requested or a mirror of the run beats already (a
    retry, a second trigger). Returns the process id started, if one was."""
    request, manifest, run_name = run.request, run.manifest, run.name
    spec = MirrorSpec(request.topics_include, request.topics_exclude, request.groups, float(request.interval_s),
                      float(request.refresh_s), connectors=request.connectors or (), renames=request.renames)
    with no_retry():
        write_spec(manifest, spec)
        if request.failback_of:  # a mirror back to the original: its clusters proven, what diverged named,
            failed_over = Manifest(request.state_location, request.failback_of)  # rebuilt only if asked now
            prepare_failback(failed_over, manifest, run.source, run.target, rebuild=request.rebuild_diverged,
                             original_connect=run.connect_client("target") if failed_over_connectors(failed_over)
                             else None, say=log.info)
        else:  # the clusters it mirrors between, recorded (or held to those recorded) before the job starts
            identity.begin(manifest, run.source, run.target, what="mirror")
    if manifest.exists(STOP):
        log.info("run %s: a stop of its mirror was requested; not started", run_name)
        return None
    status = mirror_status.read(manifest)
    age = mirror_status.heartbeat_age(status)
    if status and not status["stopped"] and age is not None and age < float(request.stale_after_s):
        log.info("run %s: its mirror beats already (round %d, %.1fs ago, process %s on %s): not started again",
                 run_name, status["round"], age, status["pid"], status["host"])
        return None
    return start_detached(mirror_job(request), log, OUTPUT_DIR / f"{run_name}.log")


def stop_stale(manifest: Manifest, log: Any, wait_s: float = 10.0) -> None:
    """Stop the run's last started mirror process if it still lives on this host (it beats no more:
    hung), SIGTERM then SIGKILL. One on another host is named; its heartbeat says it is not
    mirroring, and the partitions' leases keep two copiers of one partition apart."""
    starts = [p for p in manifest.parts() if p.startswith(f"{STARTS}/")]
    if not starts:
        return
    last = manifest.read(starts[-1])
    if last["host"] != socket.gethostname():
        log.warning("the mirror's last process (%s on %s) beats no more; it runs on another host: stop it there if "
                    "it still lives", last["pid"], last["host"])
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _alive(last["pid"]):
            return
        log.info("stopping the mirror's process %d (%s)", last["pid"], sig.name)
        if _leads_group(last["pid"]):  # started in a session of its own: its children go with it
            os.killpg(last["pid"], sig)
        else:
            os.kill(last["pid"], sig)
        deadline = time.monotonic() + wait_s
        while _alive(last["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited and not reaped yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


class MirrorFollower(BaseOperator):
    """Follows the run's mirror by its heartbeat, deferred; starts it again when it is stale."""

    template_fields: Sequence[str] = ("run_name",)

    def __init__(self, *, run_name: str, poll_s: float = 2.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_name, self.poll_s = run_name, poll_s

    def execute(self, context: Any) -> None:
        manifest = RunFrame(context["params"], self.run_name).manifest
        self._follow(context, starts_without_round=1, round_at_start=(mirror_status.read(manifest) or {}).get("round", 0))

    def _follow(self, context: Any, *, starts_without_round: int, round_at_start: int) -> NoReturn:
        """Defer to the heartbeat trigger (raises TaskDeferred); `resume` runs when it fires."""
        request = RunFrame(context["params"], self.run_name).request
        self.defer(trigger=MirrorHeartbeatTrigger(request.state_location, self.run_name,
                                                  float(request.stale_after_s), time.time(), self.poll_s),
                   method_name="resume",
                   kwargs={"starts_without_round": starts_without_round, "round_at_start": round_at_start})

    def resume(self, context: Any, event: dict[str, Any], starts_without_round: int = 1,
               round_at_start: int = 0) -> dict[str, Any]:
        if event["state"] == "stopped":
            self.log.info("run %s: the mirror stopped on request at round %d", self.run_name, event["round"])
            return event
        if event["round"] > round_at_start:  # it mirrored after its last start, then stopped beating
            starts_without_round = 0
        if starts_without_round >= MAX_STARTS_WITHOUT_ROUND:
            raise AirflowFailException(
                f"the mirror of run {self.run_name} was started {starts_without_round} times in a row and ran no "
                f"round; its output is in {OUTPUT_DIR / (self.run_name + '.log')} on {socket.gethostname()}")
        self.log.warning("run %s: the mirror's heartbeat is %.0fs old (round %d): starting it again", self.run_name,
                         event["age_s"], event["round"])
        run = RunFrame(context["params"], self.run_name)
        stop_stale(run.manifest, self.log)
        start_mirror(run, self.log)
        self._follow(context, starts_without_round=starts_without_round + 1, round_at_start=event["round"])
