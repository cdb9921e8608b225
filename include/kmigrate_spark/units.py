"""Running work units as Spark tasks, several partitions a task, and following their results.

`run_units` runs the units as one Spark job. They are packed into tasks (`pack`): at least two a
task slot and at most MAX_UNITS_PER_TASK units a task, balanced by size, largest first; a task
copies its units one after another in one Python worker, whose pooled clients they share. Each
task carries its own units and their extras (`unit extras`: what a unit needs of the run, such as
its offset map), never the whole plan, so what a job ships grows with the partitions, not with
their square. The driver log gets a line as each unit's result arrives and a status line while it
waits (for the copy: the offsets on the target so far); each executor logs its units' progress. A
task that fails is retried by Spark, and its copiers resume from the target's end. If a task fails
more times than Spark retries, Spark stops the whole job: the units without a result then run
again one Spark job each, so that the failing ones become failed rows, not an aborted run. A
--parallelism below the task slots runs one job a unit from the start, that many at a time (each
job costs the scheduler 0.1-0.4 s: measured, 28 jobs made a 6.5 s copy take 8-10 s).

Under spark-submit units go through the RDD API; on a Spark Connect server (which has no RDDs)
through a Python UDF over a DataFrame of one row a task."""
from __future__ import annotations

import concurrent.futures
import functools
import heapq
import json
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.model import WorkUnit
from pyspark.sql import SparkSession

from kmigrate_spark.adapters import Item, RowsParam, bin_json, by_bin, indexed, ready
from kmigrate_spark.conf import shown_remote
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

MAX_UNITS_PER_TASK = 512  # a Spark task costs about 0.1 s; a small partition a few ms in a task of many
UNIT_WEIGHT = 1_000       # a unit's fixed cost in offsets, for balancing tasks by size

Extras = Callable[[WorkUnit], dict[str, Any]]


def run_on_spark(session: SessionSoon, units: Sequence[WorkUnit], task: Callable[..., dict[str, Any]], *,
                 job: str, action: str, describe: Callable[[dict[str, Any]], str],
                 parallelism: int | None, progress: Callable[[], str] | None = None,
                 settle: Callable[[], str] | None = None,
                 extras: Extras | None = None, quiet: bool = False) -> tuple[list[dict[str, Any]], float, float]:
    """Warm the session up and run `task` over `units` (`task(unit, **extras(unit))`). Returns the
    rows, the seconds from the warmed-up executors to the last row, and the warm-up's seconds.
    `quiet`: no line about the session and a line a unit only for a failed one (a mirror's rounds)."""
    spark = session.get()
    slots = task_slots(spark)
    if not quiet:
        say(job, f"Spark session {'on ' + shown_remote(session.remote) if session.remote else 'started'} "
                 f"{time.monotonic() - session.begun:.1f}s after the job's start, {slots} task slots, "
                 f"Python workers from {spark.conf.get(DAEMON_MODULE, 'pyspark.daemon')}"
                 + ("" if is_connect(spark) else f", {driver_jvm_options(spark)}"))
    since = _warm.get(id(spark))
    if since is not None and time.monotonic() - since < WARM_FOR_S:
        warm_up_s = 0.0
        if not quiet:
            say(job, f"Python workers used {time.monotonic() - since:.1f}s ago in this session: no warm-up")
    else:
        warm_up_s = warm_up(spark, slots)
        say(job, f"Python workers ready in {warm_up_s:.1f}s")
    started = time.monotonic()
    rows = run_units(spark, units, task, job=job, action=action, describe=describe,
                     slots=slots, parallelism=parallelism or slots, progress=progress, settle=settle, extras=extras,
                     quiet=quiet)
    _warm[id(spark)] = time.monotonic()
    return rows, round(time.monotonic() - started, 3), round(warm_up_s, 3)


# When each session last had its Python workers started or used: within WARM_FOR_S a job needs no
# warm-up (Spark stops a Python worker idle for a minute). The window's copy and verification run
# one after the other in one session, its workers started while the source quiesced. By the
# session's id (a classic session as a weak dictionary key fails in PySpark 4.3: the lookup asks
# for a Spark Connect session); a later session given a freed one's id only skips a warm-up.
_warm: dict[int, float] = {}
WARM_FOR_S = 30.0


def pack(weights: Sequence[int], slots: int, max_units: int = MAX_UNITS_PER_TASK, tasks: int | None = None
         ) -> list[list[int]]:
    """The indexes of `weights` packed into tasks: as many tasks as it takes to hold at most
    `max_units` units each, and at least two a task slot (so that a slow task leaves the others
    work), or `tasks`; each unit to the lightest task so far, heaviest first; the tasks heaviest first."""
    n = len(weights)
    if not n:
        return []
    count = min(n, tasks or max(2 * slots, math.ceil(n / max_units)))
    heap = [(0, i, []) for i in range(count)]  # (weight, tie-break, indexes)
    for index in sorted(range(n), key=lambda i: -weights[i]):
        weight, order, members = heapq.heappop(heap)
        members.append(index)
        heapq.heappush(heap, (weight + weights[index], order, members))
    return [sorted(members) for _, _, members in sorted(heap, key=lambda t: (-t[0], t[1])) if members]


def map_units(spark: SparkSession, bins: Sequence[Sequence[Item]], task: Callable[..., Any]) -> Iterator[tuple[int, Any]]:
    """`task` over the units of `bins` on the executors as one Spark job, one Spark task a bin
    (`run_bin`: its units one after another), scheduled in order; yields (index, result) pairs as
    they arrive: under spark-submit as each task ends, on Spark Connect in order (a result waits
    for those before it). A unit of None is handed to the task as None (the warm-up)."""
    if not bins:
        return iter(())
    if not is_connect(spark):
        # the RDD API: no SQL engine to start (a first DataFrame query costs seconds in a new application)
        return _rdd_units(spark, bins, task)
    # a Spark Connect client has DataFrames only: one row a task, holding its items as JSON, in as
    # many partitions as rows (a local relation is cut into that many), through a Python UDF that
    # Spark must not run more than once a row, its rows pickled (an Arrow UDF, the default, makes
    # every Python worker import pyarrow and pandas)
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    spark.conf.set("spark.sql.leafNodeDefaultParallelism", str(len(bins)))
    run = F.udf(functools.partial(by_bin, task=task), StringType(), useArrow=False).asNondeterministic()
    frame = spark.createDataFrame([(i, bin_json(b)) for i, b in enumerate(bins)], "bin long, items string")
    rows = frame.select(run("items").alias("pairs"))
    return (tuple(pair) for r in rows.toLocalIterator() for pair in json.loads(r.pairs))


def _rdd_units(spark: SparkSession, bins: Sequence[Sequence[Item]], task: Callable[..., Any]) -> Iterator[tuple[int, Any]]:
    """map_units on the RDD API: the job runs in a thread, and each task's pairs are yielded from an
    accumulator as it ends, the rest (if any) from the job's result."""
    sc = spark.sparkContext
    rows = sc.accumulator([], RowsParam())
    job = sc.parallelize([list(b) for b in bins], len(bins)).map(functools.partial(indexed, task=task, rows=rows))
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
        yield from (pair for pairs in collected.result() for pair in pairs if pair[0] not in told)


def warm_up(spark: SparkSession, slots: int) -> float:
    """Start a Python worker on every task slot and import the library there, before the timed
    work: it fails fast when executors cannot import kmigrate. Returns the seconds it took."""
    started = time.monotonic()
    describe_jobs(spark, "start Python workers and import kmigrate")
    try:
        # a library function, pickled by name: unpickling it imports kmigrate on the executor
        list(map_units(spark, [[(i, None, {})] for i in range(slots)], ready))
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"the Spark executors cannot run the kmigrate library ({error_cause(exc)}); "
                          "install the project (pip install .) in the executors' Python") from None
    _warm[id(spark)] = time.monotonic()
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


def failed_row(unit: WorkUnit, exc: Exception) -> dict[str, Any]:
    error = f"the Spark task failed after its retries: {error_cause(exc)}"
    # a failed row for either job: the copy reads "ok"/"error", the verification "equal"/"problems"
    return {"ok": False, "equal": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode,
            "error": error, "problems": [error]}


def _items(units: Sequence[WorkUnit], indexes: Sequence[int], extras: Extras | None) -> list[Item]:
    return [(i, units[i], extras(units[i]) if extras else {}) for i in indexes]


def _in_one_job(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                task: Callable[..., dict[str, Any]], put: Callable[[int, dict[str, Any]], None], *, slots: int,
                extras: Extras | None) -> None:
    bins = [[indexes[j] for j in members]
            for members in pack([units[i].end_offset + UNIT_WEIGHT for i in indexes], slots)]
    describe_jobs(spark, f"{action} {len(indexes)} partitions in {len(bins)} tasks")
    for index, row in map_units(spark, [_items(units, b, extras) for b in bins], task):
        put(index, row)


def _one_job_each(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                  task: Callable[..., dict[str, Any]], put: Callable[[int, dict[str, Any]], None],
                  parallelism: int, extras: Extras | None) -> None:
    def run_one(index: int) -> dict[str, Any]:
        unit = units[index]
        describe_jobs(spark, f"{action} {unit.topic}[{unit.partition}] up to offset {unit.end_offset}")
        try:
            [(_, row)] = map_units(spark, [_items(units, [index], extras)], task)
            return row
        except Exception as exc:  # noqa: BLE001 - Spark gave up on the task after its retries
            return failed_row(unit, exc)

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallelism + 1, thread_name_prefix=action) as pool:
        futures = {pool.submit(run_one, index): index for index in indexes}
        for future in concurrent.futures.as_completed(futures):
            put(futures[future], future.result())


def run_units(spark: SparkSession, units: Sequence[WorkUnit], task: Callable[..., dict[str, Any]], *,
              job: str, action: str, describe: Callable[[dict[str, Any]], str], slots: int, parallelism: int,
              progress: Callable[[], str] | None = None, settle: Callable[[], str] | None = None,
              status_every_s: float = 10.0, extras: Extras | None = None, quiet: bool = False) -> list[dict[str, Any]]:
    """Rows of `task` over `units` (with `extras` of each), in plan order: one Spark job when
    `parallelism` covers the task slots, else one job a unit, `parallelism` at a time. `progress`
    adds to the status lines.
    `settle` returns once what the stopped job's tasks were doing has ended (Spark stops a job
    without waiting for its Python workers, which may still be writing): it runs before the units
    without a result run again, and its answer is logged."""
    started = time.monotonic()
    rows: dict[int, dict[str, Any]] = {}
    everything = range(len(units))

    def run_watched(work: Callable[[Callable[[int, dict[str, Any]], None]], None]) -> None:
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
        said = time.monotonic()
        while (item := _next(arrived, status_every_s)) is not None:
            if isinstance(item, Exception):
                raise item
            if item is not _WAITING:
                index, row = item
                rows[index] = row
                unit = units[index]
                if not quiet or not row.get("ok", True):
                    say(job, f"[{len(rows)}/{len(units)}] {unit.topic}[{unit.partition}] {describe(row)}")
            # every status_every_s, rows arriving or not: how far, how fast, how long still
            if item is _WAITING or (time.monotonic() - said >= status_every_s and len(rows) < len(units)):
                say(job, done_line(len(rows), len(units), time.monotonic() - started)
                    + (f"; {progress()}" if progress else ""))
                said = time.monotonic()

    if parallelism >= slots:
        if not quiet:
            say(job, f"{len(units)} partitions to {action} in one Spark job, {slots} tasks at a time")
        try:
            run_watched(functools.partial(_in_one_job, spark, units, everything, action, task, slots=slots,
                                          extras=extras))
        except Exception as exc:  # noqa: BLE001 - Spark stopped the job: a task failed past its retries
            left = [i for i in everything if i not in rows]
            say(job, f"the Spark job stopped ({error_cause(exc)}); the {len(left)} partitions without a result "
                     "run again, one Spark job each, to tell the failing ones from the rest", err=True)
            if settle is not None:
                say(job, settle())
            run_watched(functools.partial(_one_job_each, spark, units, left, action, task, parallelism=slots,
                                          extras=extras))
    else:
        say(job, f"{len(units)} partitions to {action}, one Spark job each, {parallelism} at a time")
        run_watched(functools.partial(_one_job_each, spark, units, everything, action, task,
                                      parallelism=parallelism, extras=extras))
    return [rows[i] for i in everything]


_WAITING = object()


def done_line(done: int, total: int, elapsed_s: float) -> str:
    """'N/M partitions done after Xs', with the rate so far and the time left at that rate once some
    are done (a step of many partitions: what its user follows)."""
    line = f"{done}/{total} partitions done after {elapsed_s:.0f}s"
    if 0 < done < total and elapsed_s > 0:
        rate = done / elapsed_s
        line += f" ({rate:.1f} a second, about {(total - done) / rate:.0f}s left at that rate)"
    return line


def _next(arrived: queue.Queue, timeout_s: float) -> Any:
    try:
        return arrived.get(timeout=timeout_s)
    except queue.Empty:
        return _WAITING
