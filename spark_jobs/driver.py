"""Driver-side helpers shared by the Spark entry points (never shipped to executors).

`run_units` runs the work units as one Spark job, one task a unit in plan order (largest first),
as many at a time as the application has task slots. The driver log gets a line as each unit's
result arrives and a status line while it waits (for the copy: the offsets on the target so far);
each executor logs its units' progress. A task that fails is retried by Spark, and its copier
resumes from the target's end. If a task fails more times than Spark retries, Spark stops the
whole job: the units without a result then run again one Spark job each, so that the failing
ones become failed rows, not an aborted run. A --parallelism below the task slots runs one job a
unit from the start, that many at a time (each job costs the scheduler 0.1-0.4 s: measured,
28 jobs made a 6.5 s copy take 8-10 s).

The jobs run under `spark-submit` (a Spark application of their own: local, standalone, YARN,
Kubernetes; units go through the RDD API) or, with --remote sc://HOST:PORT, as a plain Python
client of a running Spark Connect server (no JVM in this process; the server's executors run the
tasks; units go through a Python UDF over a DataFrame, the Connect client having no RDDs).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import queue
import re
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from kmigrate.copier import WorkUnit
from kmigrate.errors import ConfigError
from kmigrate.sparkconf import DRIVER_JAVA_OPTIONS, REMOTE_ENV, check_connect_server, unreachable
from kmigrate.tasks import RowsParam, by_index, indexed, ready


def job_arguments(doc: str, action: str) -> argparse.ArgumentParser:
    """The arguments every job takes: where the run manifest is, which run, the clients, parallelism."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="local path or fsspec URL of the run manifests")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", help="JSON file of client configs, mode 600 (default: $KMIGRATE_CLIENTS_JSON)")
    parser.add_argument("--parallelism", type=int, help=f"partitions {action} at once (default: the task slots)")
    parser.add_argument("--remote", default=os.environ.get(REMOTE_ENV) or None,
                        help=f"run on a running Spark Connect server, sc://HOST:PORT (default: ${REMOTE_ENV}); "
                             "run the job with python, not spark-submit")
    return parser


class SessionSoon:
    """The job's Spark session, started in a thread while the job checks its input (the Spark
    Connect client's import and a new SparkContext take a second or more; the checks, half a
    second of waiting on the clusters). `with SessionSoon(...) as session:` stops the session on
    the way out, once it has started, whatever happened meanwhile."""

    def __init__(self, app_name: str, remote: str | None) -> None:
        self.remote = remote
        self.begun = time.monotonic()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-session")
        self._future = self._pool.submit(start_spark, app_name, remote)

    def get(self) -> SparkSession:
        return self._future.result()

    def __enter__(self) -> SessionSoon:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)
        if self._future.exception() is None:
            spark = self._future.result()
            if _is_connect(spark):
                spark.client.close()  # leaves the shared session (and its warm workers) on the server
            else:
                spark.stop()


def run_on_spark(session: SessionSoon, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
                 job: str, action: str, describe: Callable[[dict[str, Any]], str],
                 parallelism: int | None, progress: Callable[[], str] | None = None
                 ) -> tuple[list[dict[str, Any]], float, float]:
    """Warm the session up and run `task` over `units`. Returns the rows, the seconds from the
    warmed-up executors to the last row, and the warm-up's seconds."""
    spark = session.get()
    slots = task_slots(spark)
    say(job, f"Spark session {'on ' + session.remote if session.remote else 'started'} "
             f"{time.monotonic() - session.begun:.1f}s after the job's start, {slots} task slots, "
             f"Python workers from {spark.conf.get(DAEMON_MODULE, 'pyspark.daemon')}"
             + ("" if _is_connect(spark) else f", {_driver_jvm_options(spark)}"))
    warm_up_s = warm_up(spark, slots)
    say(job, f"Python workers ready in {warm_up_s:.1f}s")
    started = time.monotonic()
    rows = run_units(spark, units, task, job=job, action=action, describe=describe,
                     slots=slots, parallelism=parallelism or slots, progress=progress)
    return rows, round(time.monotonic() - started, 3), round(warm_up_s, 3)


def _driver_jvm_options(spark: SparkSession) -> str:
    """Whether this driver's JVM was launched with kmigrate's options (they can only be given at
    launch: spark.driver.extraJavaOptions, kmigrate/sparkconf.py), and how to add them if not."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    if set(DRIVER_JAVA_OPTIONS.split()) <= set(runtime.getInputArguments()):
        return "driver JVM with kmigrate's JIT and GC options"
    return ("driver JVM without kmigrate's JIT and GC options (measured, they halve its CPU during a copy: "
            f"spark-submit --conf 'spark.driver.extraJavaOptions={DRIVER_JAVA_OPTIONS}')")


# Executors fork their Python workers from this daemon module, which has imported kmigrate already
# (include/kmigrate/spark_daemon.py), unless the user's Spark conf names another; the Spark Connect
# server sets it too (stack/spark_cluster.py).
DAEMON_MODULE = "spark.python.daemon.module"


def start_spark(app_name: str, remote: str | None = None) -> SparkSession:
    if not remote:
        builder = SparkSession.builder.appName(app_name)
        # the JVM first: before it, SparkConf() is an empty Python dict, blind to spark-submit's --conf
        SparkContext._ensure_initialized()
        if not SparkConf().contains(DAEMON_MODULE):
            builder = builder.config(DAEMON_MODULE, "kmigrate.spark_daemon")
        return builder.getOrCreate()
    # the client warns at import that pandas 3 is not fully supported; the jobs use no pandas
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    check_connect_server(remote)
    try:
        try:
            spark = _connect(connect_url(remote), app_name)
        except Exception as exc:  # noqa: BLE001
            if "SESSION_CLOSED" not in str(exc):
                raise
            # the shared session expired on the server (idle past its timeout): a session of our own
            closed = SparkSession.getActiveSession()
            if closed is not None:
                closed.client.close()
            spark = _connect(connect_url(remote, str(uuid.uuid4())), app_name)
    except Exception as exc:  # noqa: BLE001 - grpc's errors carry the cause in their text
        raise unreachable(remote, _cause(exc)) from None
    return spark


def _connect(url: str, app_name: str) -> SparkSession:
    spark = SparkSession.builder.remote(url).appName(app_name).create()  # also the active session
    # the client connects lazily: fail here, naming the server (a closed session fails config
    # calls, while a plan may still run)
    spark.conf.get("spark.master")
    return spark


# The Spark Connect session every kmigrate job joins unless its URL names another: a server keeps
# one pool of Python workers a session, so jobs in one session find workers that have imported
# kmigrate already (a new session pays for starting them, seconds on a small machine). The jobs
# never release it; the server drops it after its idle timeout, and a job then opens a session of its own.
SHARED_SESSION = str(uuid.uuid5(uuid.NAMESPACE_URL, "kmigrate:spark-connect-session"))


def connect_url(remote: str, session: str = SHARED_SESSION) -> str:
    """`remote` with a session id (the shared session's), unless it names a session_id of its own."""
    if "session_id=" in remote:
        return remote
    return f"{remote};session_id={session}" if "/;" in remote else f"{remote.rstrip('/')}/;session_id={session}"


def _is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def task_slots(spark: SparkSession) -> int:
    """The application's task slots. A Spark Connect client has no SparkContext: there it is N of
    a local[N] or local[N,F] master, else the number of partitions spark.range gets by default,
    which is the default parallelism (a query: 0.3 s)."""
    if not _is_connect(spark):
        return spark.sparkContext.defaultParallelism
    local = re.fullmatch(r"local(?:\[(\d+)(?:,\d+)?\])?", spark.conf.get("spark.master") or "")
    if local:
        return int(local.group(1) or 1)
    from pyspark.sql import functions as F

    return spark.range(1 << 16).select(F.spark_partition_id().alias("p")).distinct().count()


def map_units(spark: SparkSession, units: Sequence[WorkUnit | None], task: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """`task` over `units` on the executors as one Spark job, one partition (one Spark task) a
    unit, scheduled in order; yields (index, result) pairs as they arrive: under spark-submit as
    each task ends, on Spark Connect in order (a result waits for those before it). A unit of None
    is handed to the task as None (the warm-up)."""
    if not units:
        return iter(())
    if not _is_connect(spark):
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


def _cause(exc: Exception) -> str:
    """The line of a Spark/py4j/Spark Connect error that names the cause, not py4j's "An error
    occurred while calling ..." header."""
    lines = [line.strip().lstrip(": ") for line in str(exc).splitlines() if line.strip().lstrip(": ")]
    return next((line for line in lines if "Exception:" in line or "Error:" in line),
                lines[0] if lines else type(exc).__name__)[:500]


def warm_up(spark: SparkSession, slots: int) -> float:
    """Start a Python worker on every task slot and import the library there, before the timed
    work: it fails fast when executors cannot import kmigrate. Returns the seconds it took."""
    started = time.monotonic()
    _describe(spark, "start Python workers and import kmigrate")
    try:
        # a library function, pickled by name: unpickling it imports kmigrate on the executor
        list(map_units(spark, [None] * slots, ready))
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"the Spark executors cannot run the kmigrate library ({_cause(exc)}); "
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


def _describe(spark: SparkSession, text: str) -> None:
    """The Spark UI's description of the jobs this thread starts next (a Spark Connect server
    describes them itself)."""
    if not _is_connect(spark):
        spark.sparkContext.setJobDescription(text)


def _failed_row(unit: WorkUnit, exc: Exception) -> dict[str, Any]:
    error = f"the Spark task failed after its retries: {_cause(exc)}"
    # a failed row for either job: the copy reads "ok"/"error", the verification "equal"/"problems"
    return {"ok": False, "equal": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode,
            "error": error, "problems": [error]}


def _in_one_job(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                task: Callable[[WorkUnit], dict[str, Any]], put: Callable[[int, dict[str, Any]], None]) -> None:
    _describe(spark, f"{action} {len(indexes)} partitions, one task each")
    for position, row in map_units(spark, [units[i] for i in indexes], task):
        put(indexes[position], row)


def _one_job_each(spark: SparkSession, units: Sequence[WorkUnit], indexes: Sequence[int], action: str,
                  task: Callable[[WorkUnit], dict[str, Any]], put: Callable[[int, dict[str, Any]], None],
                  parallelism: int) -> None:
    def run_one(index: int) -> dict[str, Any]:
        unit = units[index]
        _describe(spark, f"{action} {unit.topic}[{unit.partition}] up to offset {unit.end_offset}")
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
              progress: Callable[[], str] | None = None, status_every_s: float = 10.0) -> list[dict[str, Any]]:
    """Rows of `task` over `units`, in plan order: one Spark job when `parallelism` covers the task
    slots, else one job a unit, `parallelism` at a time. `progress` adds to the status lines."""
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
            say(job, f"the Spark job stopped ({_cause(exc)}); the {len(left)} partitions without a result "
                     "run again, one Spark job each, to tell the failing ones from the rest", err=True)
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


if __name__ == "__main__":  # python spark_jobs/driver.py sc://HOST:PORT: prepare that server
    say("spark-connect", f"{sys.argv[1]} ready for kmigrate jobs after {prepare_server(sys.argv[1]):.1f}s")
