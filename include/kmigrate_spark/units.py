"""Running work units as Spark tasks, one task a partition, and following their results.

`run_units` runs the units as one Spark job, one task a unit in plan order (largest first), as
many at a time as the application has task slots. The driver log gets a line as each unit's
result arrives and a status line while it waits (for the copy: the offsets on the target so far);
each executor logs its units' progress. A task that fails is retried by Spark, and its copier
resumes from the target's end. If a task fails more times than Spark retries, Spark stops the
whole job: the units without a result then run again one Spark job each, so that the failing
ones become failed rows, not an aborted run. A --parallelism below the task slots runs one job a
unit from the start, that many at a time (each job costs the scheduler 0.1-0.4 s: measured,
28 jobs made a 6.5 s copy take 8-10 s).

Under spark-submit units go through the RDD API; on a Spark Connect server (which has no RDDs)
through a Python UDF over a DataFrame."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.model import WorkUnit
from pyspark.sql import SparkSession

from kmigrate_spark.adapters import RowsParam, by_index, indexed, ready
from kmigrate_spark.session import (
    DAEMON_MODULE,
    SessionSoon,
    describe_jobs,
    driver_jvm_options,
    error_cause,
    is_connect,
    start_spark,
    task_slots,
)


def run_on_spark(session: SessionSoon, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
                 job: str, action: str, describe: Callable[[dict[str, Any]], str],
                 parallelism: int | None, progress: Callable[[], str] | None = None,
                 settle: Callable[[], str] | None = None) -> tuple[list[dict[str, Any]], float, float]:
    """Warm the session up and run `task` over `units`. Returns the rows, the seconds from the
    warmed-up executors to the last row, and the warm-up's seconds."""
    spark = session.get()
    slots = task_slots(spark)
    say(job, f"Spark session {'on ' + session.remote if session.remote else 'started'} "
             f"{time.monotonic() - session.begun:.1f}s after the job's start, {slots} task slots, "
             f"Python workers from {spark.conf.get(DAEMON_MODULE, 'pyspark.daemon')}"
             + ("" if is_connect(spark) else f", {driver_jvm_options(spark)}"))
    warm_up_s = warm_up(spark, slots)
    say(job, f"Python workers ready in {warm_up_s:.1f}s")
    started = time.monotonic()
    rows = run_units(spark, units, task, job=job, action=action, describe=describe,
                     slots=slots, parallelism=parallelism or slots, progress=progress, settle=settle)
    return rows, round(time.monotonic() - started, 3), round(warm_up_s, 3)


def map_units(spark: SparkSession, units: Sequence[WorkUnit | None], task: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """`task` over `units` on the executors as one Spark job, one partition (one Spark task) a
    unit, scheduled in order; yields (index, result) pairs as they arrive: under spark-submit as
    each task ends, on Spark Connect in order (a result waits for those before it). A unit of None
    is handed to the task as None (the warm-up)."""
    if not units:
        return iter(())
    if not is_connect(spark):
        # the RDD API: no SQL engine to start (a first DataFrame query costs seconds in a new application)
        return _rdd_units(spark, units, task)
    # a Spark Connect client has DataFrames only: a range of n numbers in n partitions, each
    # number the index of its unit (the units travel with the function), through a Python UDF
    # that Spark must not run more than once a row, its rows pickled (an Arrow UDF, the default,
    # makes every Python worker import pyarrow and pandas)
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    payload = [None if u is None else json.dumps(dataclasses.asdict(u)) for u in units]
    run = F.udf(functools.partial(by_index, task=task, units=payload), StringType(), useArrow=False).asNondeterministic()
    rows = spark.range(0, len(units), 1, len(units)).select(run("id").alias("row"))
    return (tuple(json.loads(r.row)) for r in rows.toLocalIterator())


def _rdd_units(spark: SparkSession, units: Sequence[WorkUnit | None], task: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """map_units on the RDD API: the job runs in a thread, and each unit's pair is yielded from an
    accumulator as its task ends, the rest (if any) from the job's result."""
    sc = spark.sparkContext
    rows = sc.accumulator([], RowsParam())
    job = sc.parallelize(list(enumerate(units)), len(units)).map(functools.partial(indexed, task=task, rows=rows))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-job") as pool:
        collected = pool.submit(job.collect)
        seen = 0
        while True:
            ended = collected.done()  # before reading: what arrived until the job's end is then all read
            arrived = rows.value
            yield from arrived[seen:]
            seen = len(arrived)
            if ended:
                break
            concurrent.futures.wait([collected], timeout=0.5)
        told = {index for index, _ in arrived}
        yield from (pair for pair in collected.result() if pair[0] not in told)


def warm_up(spark: SparkSession, slots: int) -> float:
    """Start a Python worker on every task slot and import the library there, before the timed
    work: it fails fast when executors cannot import kmigrate. Returns the seconds it took."""
    started = time.monotonic()
    describe_jobs(spark, "start Python workers and import kmigrate")
    try:
        # a library function, pickled by name: unpickling it imports kmigrate on the executor
        list(map_units(spark, [None] * slots, ready))
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"the Spark executors cannot run the kmigrate library ({error_cause(exc)}); "
                          "install the project (pip install .) in the executors' Python") from None
    return time.monotonic() - started


def prepare_server(remote: str) -> float:
    """Make a Spark Connect server ready for the jobs: its first query (which loads its SQL engine)
    and a Python worker a task slot, with kmigrate imported, in the jobs' shared session. Run once
    when the server starts (stack/spark_cluster.py connect-up). Returns the seconds it took."""
    started = time.monotonic()
    spark = start_spark("kmigrate-prepare", remote)
    try:
        warm_up(spark, task_slots(spark))
    finally:
        spark.client.close()
    return time.monotonic() - started


def say(job: str, message: str, *, err: bool = False) -> None:
    print(f"{job}: {message}", file=sys.stderr if err else sys.stdout, flush=True)


def _failed_row(unit: WorkUnit, exc: Exception) -> dict[str, Any]:
    error = f"the Spark task failed after its retries: {error_cause(exc)}"
    # a failed row for either job: the copy reads "ok"/"error", the verification "equal"/"problems"
    return {"ok": False, "equal": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode,
            "error": error, "problems": [error]}


def _in_one_job(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                task: Callable[[WorkUnit], dict[str, Any]], put: Callable[[int, dict[str, Any]], None]) -> None:
    describe_jobs(spark, f"{action} {len(indexes)} partitions, one task each")
    for position, row in map_units(spark, [units[i] for i in indexes], task):
        put(indexes[position], row)


def _one_job_each(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                  task: Callable[[WorkUnit], dict[str, Any]], put: Callable[[int, dict[str, Any]], None],
                  parallelism: int) -> None:
    def run_one(index: int) -> dict[str, Any]:
        unit = units[index]
        describe_jobs(spark, f"{action} {unit.topic}[{unit.partition}] up to offset {unit.end_offset}")
        try:
            [(_, row)] = map_units(spark, [unit], task)
            return row
        except Exception as exc:  # noqa: BLE001 - Spark gave up on the task after its retries
            return _failed_row(unit, exc)

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallelism + 1, thread_name_prefix=action) as pool:
        futures = {pool.submit(run_one, index): index for index in indexes}
        for future in concurrent.futures.as_completed(futures):
            put(futures[future], future.result())


def run_units(spark: SparkSession, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
              job: str, action: str, describe: Callable[[dict[str, Any]], str], slots: int, parallelism: int,
              progress: Callable[[], str] | None = None, settle: Callable[[], str] | None = None,
              status_every_s: float = 10.0) -> list[dict[str, Any]]:
    """Rows of `task` over `units`, in plan order: one Spark job when `parallelism` covers the task
    slots, else one job a unit, `parallelism` at a time. `progress` adds to the status lines.
    `settle` returns once what the stopped job's tasks were doing has ended (Spark stops a job
    without waiting for its Python workers, which may still be writing): it runs before the units
    without a result run again, and its answer is logged."""
    started = time.monotonic()
    rows: dict[int, dict[str, Any]] = {}
    everything = range(len(units))

    def follow(work: Callable[[Callable[[int, dict[str, Any]], None]], None]) -> None:
        """Run `work` in a thread, printing a line as each unit's row arrives and a status line
        when none arrived for `status_every_s`; raises what `work` raised."""
        arrived: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                work(lambda index, row: arrived.put((index, row)))
                arrived.put(None)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
                arrived.put(exc)

        threading.Thread(target=run, name=f"{action}-units", daemon=True).start()
        while (item := _next(arrived, status_every_s)) is not None:
            if isinstance(item, Exception):
                raise item
            if item is _WAITING:
                say(job, f"{len(rows)}/{len(units)} partitions done after {time.monotonic() - started:.0f}s"
                         + (f"; {progress()}" if progress else ""))
                continue
            index, row = item
            rows[index] = row
            unit = units[index]
            say(job, f"[{len(rows)}/{len(units)}] {unit.topic}[{unit.partition}] {describe(row)}")

    if parallelism >= slots:
        say(job, f"{len(units)} partitions to {action} in one Spark job, {slots} at a time")
        try:
            follow(functools.partial(_in_one_job, spark, units, everything, action, task))
        except Exception as exc:  # noqa: BLE001 - Spark stopped the job: a task failed past its retries
            left = [i for i in everything if i not in rows]
            say(job, f"the Spark job stopped ({error_cause(exc)}); the {len(left)} partitions without a result "
                     "run again, one Spark job each, to tell the failing ones from the rest", err=True)
            if settle is not None:
                say(job, settle())
            follow(functools.partial(_one_job_each, spark, units, left, action, task, parallelism=slots))
    else:
        say(job, f"{len(units)} partitions to {action}, one Spark job each, {parallelism} at a time")
        follow(functools.partial(_one_job_each, spark, units, everything, action, task, parallelism=parallelism))
    return [rows[i] for i in everything]


_WAITING = object()


def _next(arrived: queue.Queue, timeout_s: float) -> Any:
    try:
        return arrived.get(timeout=timeout_s)
    except queue.Empty:
        return _WAITING
