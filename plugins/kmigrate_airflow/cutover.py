"""The cutover window of kafka_migration as one task (`cutover`): stop the connectors, quiesce,
snapshot, copy and verify, restore topic configs, replicate groups, migrate connectors, resume,
back to back: the library's course (kmigrate.run.window.steps.run_window, in the order of
kmigrate.run.cutover.course), which marks each step done in the run manifest: a retry continues at
the first step not done. The task supplies the window's Spark job and its failures without retry.
Measured through a real scheduler (LocalExecutor), one task a step spent 6.1 s of a 17.3 s window
starting the eight tasks one after another.

After the window, `window_step` is mapped over the course's steps: one grid cell per step (done,
failed or not reached), as the per-step tasks gave."""
from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException
from kmigrate.claims.runs import check_topics_free
from kmigrate.run.cutover import course
from kmigrate.run.window.steps import Window, run_window
from kmigrate.run.records import timeline
from kmigrate_spark.conf import shown_remote
from kmigrate_spark.job_args import copy_arguments, request_command

from kmigrate_airflow.frame import RunFrame, no_retry
from kmigrate_airflow.hooks import spark_connect_url
from kmigrate_airflow.launch import SPARK_JOBS, SparkJob, check_exit, launch
from kmigrate_airflow.operators import COPY_POOL

log = logging.getLogger(__name__)


@task(trigger_rule="none_failed_min_one_success", pool=COPY_POOL, retries=3,
      execution_timeout=datetime.timedelta(hours=12))
def cutover(params: dict[str, Any] | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
    """The window's steps back to back (`course.STEPS`), each marked done as it ends; a retry
    continues at the first step not done, and each step of a run that has resumed already skips
    (a finished run, run again, changes nothing). Its errors are the steps' own: a consumer still
    running, a transaction left open or a source written to after the snapshot fail it without retry."""
    return cutover_run(RunFrame(params, run_id))


def cutover_run(run: RunFrame, stop_mirror: Callable[[], Any] | None = None,
                outcome_steps: Sequence[str] = course.STEPS) -> list[dict[str, Any]]:
    """The window's course for `run` (kmigrate.run.window.steps.run_window), with `stop_mirror` between the snapshot
    and the copy (a failover's); the outcomes of `outcome_steps`. This task supplies what the course
    leaves to it: the errors no retry helps failing it without retry, and the window's Spark job."""
    run.source, run.target, run.connect  # resolved here once: steps run side by side use them  # noqa: B018
    remote = spark_connect_url(run.request.spark.connect_conn_id)
    with connect_mode_contained():
        warm = warm_up(run, remote) if remote else None
        try:
            run_window(Window(run, final=no_retry, copy_and_verify=lambda: copy_and_verify(run, remote, warm)),
                       log.info, stop_mirror)
        finally:
            if warm is not None:
                concurrent.futures.wait([warm], timeout=60)
    return course.outcomes(run.manifest, outcome_steps)


# what PySpark sets in the environment once a process has a Spark Connect session: a process started
# from it afterwards (a spark-submit job of a later task, under dag.test) would take it for a client
CONNECT_MODE_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@contextlib.contextmanager
def connect_mode_contained() -> Iterator[None]:
    """The process's environment as it was before the block, as far as PySpark's Spark Connect mode
    goes: the window's job (a Spark Connect client in this process) leaves no trace in it."""
    before = {name: os.environ.get(name) for name in CONNECT_MODE_ENV}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@task(retries=0, trigger_rule="one_done", map_index_template="{{ step_name }}")
def window_step(step: str, params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """One grid cell per step of the window, once the cutover task has succeeded or failed (skipped
    when it never ran): success when the step is done, failed when it failed (its errors in the
    log), skipped when the course did not reach it."""
    get_current_context()["step_name"] = step  # the map index shown in the grid
    run = RunFrame(params, run_id)
    if run.request.unplanned:
        raise AirflowSkipException(f"{step}: an unplanned failover has no cutover window (the source is gone)")
    row = next(r for r in course.outcomes(run.manifest, course.FAILOVER_STEPS) if r["step"] == step)
    for error in row["errors"]:
        log.info("%s failed once: %s", step, error)
    if row["state"] == course.FAILED:
        raise RuntimeError(f"{step} failed ({row['failures']} attempts): {row['errors'][-1]}")
    if row["state"] == course.NOT_REACHED:
        raise AirflowSkipException(f"{step}: not reached (a step before it failed)")
    log.info("%s: done in %.2fs%s", step, row["seconds"],
             f" (after {row['failures']} failed attempts)" if row["failures"] else "")
    return row


def warm_up(run: RunFrame, remote: str) -> concurrent.futures.Future:
    """While the connectors stop and the source quiesces: the window job's imports (the Spark Connect
    client), its session on the server, and the run's claims read up to now, in this process, so that
    the job starts with none of them to do (measured: 1.2 s of a 6.6 s window as a client process,
    and a session that took 3.4 s once, after a large pre-copy). The future's result: the session,
    or None when warming up failed (the job then does it all itself, and says what fails)."""
    def warm() -> Any:
        try:
            from kmigrate_spark.session import start_spark, task_slots
            from kmigrate_spark.units import warm_up as start_workers

            session = start_spark(f"kmigrate-copy-{run.name}", remote)
            start_workers(session, task_slots(session))  # a Python worker a task slot, kmigrate imported
            check_topics_free(run.target, run.name, [])  # the claims log, read once in this process
            return session
        except Exception as exc:  # noqa: BLE001
            log.info("warming up the window's Spark job failed (%s); the job starts cold", exc)
            return None

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kmigrate-warm-up")
    warmed = pool.submit(warm)
    pool.shutdown(wait=False)
    return warmed


def copy_and_verify(run: RunFrame, remote: str | None, warm: concurrent.futures.Future | None) -> None:
    """The window's Spark job (window_copy: copy, then verify in the same session). On the Spark
    Connect connection's server it runs in this task's process, a client of the server warmed up
    during the quiesce (`warm_up`); else spark-submit starts it as the Spark tasks' jobs are."""
    request = run.request
    job_args = request_command(request)
    began = time.time()
    if remote:
        try:
            session = warm.result(60) if warm is not None else None
        except concurrent.futures.TimeoutError:
            session = None
        from kmigrate_spark.copy_job import window_copy

        log.info("running window_copy in this task as a client of the Spark Connect server %s", shown_remote(remote))
        code = window_copy(copy_arguments(None).parse_args([*job_args, "--remote", remote]), (run.source, run.target),
                           session)
        check_exit("window_copy", code, shown_remote(remote))
    else:
        launch(SparkJob.of(request, str(SPARK_JOBS / "window_copy.py"), job_args, spark_connect_conn_id=""), log)
    returned = time.time()
    # the job's start up to its copy, and its exit after its verification (a whole Spark
    # application under spark-submit): in the window's table as rows of their own
    ran = [r for r in timeline.steps(run.manifest) if r["step"] in ("copy", "verify") and _epoch(r["started"]) >= began]
    if ran:
        timeline.record(run.manifest, "job_start", began, _epoch(ran[0]["started"]))
        timeline.record(run.manifest, "job_exit", _epoch(ran[-1]["ended"]), returned)


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at).timestamp()

