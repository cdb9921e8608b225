"""Driver-side helpers shared by the Spark entry points (never shipped to executors).

`run_units` runs one Spark job per work unit from a small thread pool, in plan order (largest
first), with as many jobs in flight as the application has task slots (plus one queued). One job per
unit gives a person something to follow: each job carries the unit's name as its description in the
Spark UI, and the driver log gets a line as each unit finishes plus a status line while it waits.
A job whose task failed more times than Spark retries becomes a failed row, not an aborted run.

The jobs run under `spark-submit` (a Spark application of their own: local, standalone, YARN,
Kubernetes; units go through the RDD API) or, with --remote sc://HOST:PORT, as a plain Python
client of a running Spark Connect server (no JVM in this process; the server's executors run the
tasks; units go through DataFrame.mapInArrow, the Connect client having no RDDs).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import SparkSession

from kmigrate.copier import WorkUnit
from kmigrate.errors import ConfigError
from kmigrate.tasks import on_arrow_batches, ready


def job_arguments(doc: str, action: str) -> argparse.ArgumentParser:
    """The arguments every job takes: where the run manifest is, which run, the clients, parallelism."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="local path or fsspec URL of the run manifests")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", help="JSON file of client configs, mode 600 (default: $KMIGRATE_CLIENTS_JSON)")
    parser.add_argument("--parallelism", type=int, help=f"partitions {action} at once (default: the task slots)")
    parser.add_argument("--remote", default=os.environ.get("KMIGRATE_SPARK_REMOTE") or None,
                        help="run on a running Spark Connect server, sc://HOST:PORT (default: $KMIGRATE_SPARK_REMOTE); "
                             "run the job with python, not spark-submit")
    return parser


def run_on_spark(app_name: str, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
                 job: str, action: str, describe: Callable[[dict[str, Any]], str],
                 parallelism: int | None, remote: str | None = None) -> tuple[list[dict[str, Any]], float, float]:
    """Start the session, warm it up, run `task` over `units`, stop the session. Returns the rows,
    the seconds from the warmed-up executors to the last row, and the warm-up's seconds."""
    begun = time.monotonic()
    spark = start_spark(app_name, remote)
    try:
        slots = task_slots(spark)
        say(job, f"Spark session {'on ' + remote if remote else 'started'} in {time.monotonic() - begun:.1f}s, "
                 f"{slots} task slots")
        warm_up_s = warm_up(spark, slots)
        say(job, f"Python workers ready in {warm_up_s:.1f}s")
        started = time.monotonic()
        rows = run_units(spark, units, task, job=job, action=action, describe=describe,
                         parallelism=parallelism or slots)
        return rows, round(time.monotonic() - started, 3), round(warm_up_s, 3)
    finally:
        if _is_connect(spark):
            spark.client.close()  # leaves the shared session (and its warm workers) on the server
        else:
            spark.stop()


def start_spark(app_name: str, remote: str | None = None) -> SparkSession:
    if not remote:
        return SparkSession.builder.appName(app_name).getOrCreate()
    # the client warns at import that pandas 3 is not fully supported; the jobs use no pandas
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    if not remote.startswith("sc://"):
        raise ConfigError(f"--remote {remote!r} is not a Spark Connect URL; give sc://HOST:PORT "
                          "(or leave it out and run the job with spark-submit)")
    host, _, port = remote[len("sc://"):].split("/", 1)[0].rpartition(":")
    try:  # the client would retry an unreachable server for minutes: try its port once first
        socket.create_connection((host or "localhost", int(port or 15002)), timeout=10).close()
    except (OSError, ValueError) as exc:
        raise _unreachable(remote, str(exc)) from None
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
        raise _unreachable(remote, _cause(exc)) from None
    return spark


def _unreachable(remote: str, cause: str) -> ConfigError:
    return ConfigError(f"cannot reach the Spark Connect server at {remote} ({cause}); start it "
                       "(make spark-connect-up) or give the right --remote")


def _connect(url: str, app_name: str) -> SparkSession:
    spark = SparkSession.builder.remote(url).appName(app_name).create()  # also the active session
    # the client connects lazily: fail here, naming the server (a closed session fails config
    # calls, while a plan may still run)
    spark.conf.get("spark.master")
    spark.range(1).collect()
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
    """The application's task slots. A Spark Connect client has no SparkContext: there it is the
    number of partitions spark.range gets by default, which is the default parallelism."""
    if not _is_connect(spark):
        return spark.sparkContext.defaultParallelism
    from pyspark.sql import functions as F

    return spark.range(1 << 16).select(F.spark_partition_id().alias("p")).distinct().count()


def map_units(spark: SparkSession, units: Sequence[WorkUnit | None], task: Callable[[Any], Any]) -> list[Any]:
    """`task` over `units` on the executors, one partition (one Spark task) per unit, results in
    order. A unit of None is handed to the task as None (the warm-up)."""
    if not _is_connect(spark):
        # the RDD API: no SQL engine to start (a first DataFrame query costs seconds in a new application)
        return spark.sparkContext.parallelize(units, max(1, len(units))).map(task).collect()
    # a Spark Connect client has DataFrames only; a local relation of n rows is scanned as
    # min(n, task slots) partitions of even size
    payload = [(None if u is None else json.dumps(dataclasses.asdict(u)),) for u in units]
    frame = spark.createDataFrame(payload, "unit string")
    rows = frame.mapInArrow(functools.partial(on_arrow_batches, task=task), "row string").collect()
    return [json.loads(r.row) for r in rows]


def _cause(exc: Exception) -> str:
    """The line of a Spark/py4j/Spark Connect error that names the cause, not py4j's "An error
    occurred while calling ..." header."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return next((line for line in lines if "Exception:" in line or "Error:" in line),
                lines[0] if lines else type(exc).__name__)[:500]


def warm_up(spark: SparkSession, slots: int) -> float:
    """Start a Python worker on every task slot and import the library there, before the timed
    work: it fails fast when executors cannot import kmigrate. Returns the seconds it took."""
    started = time.monotonic()
    _describe(spark, "start Python workers and import kmigrate")
    try:
        # a library function, pickled by name: unpickling it imports kmigrate on the executor
        map_units(spark, [None] * slots, ready)
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


def _run_one(spark: SparkSession, action: str, task: Callable[[WorkUnit], dict[str, Any]],
             unit: WorkUnit) -> dict[str, Any]:
    _describe(spark, f"{action} {unit.topic}[{unit.partition}] up to offset {unit.end_offset}")
    try:
        [row] = map_units(spark, [unit], task)
        return row
    except Exception as exc:  # noqa: BLE001 - Spark gave up on the task after its retries
        error = f"the Spark task failed after its retries: {_cause(exc)}"
        # a failed row for either job: the copy reads "ok"/"error", the verification "equal"/"problems"
        return {"ok": False, "equal": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode,
                "error": error, "problems": [error]}


def run_units(spark: SparkSession, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
              job: str, action: str, describe: Callable[[dict[str, Any]], str], parallelism: int,
              status_every_s: float = 10.0) -> list[dict[str, Any]]:
    """Rows of `task` over `units`, in plan order, `parallelism` units at a time."""
    started = time.monotonic()
    rows: dict[int, dict[str, Any]] = {}
    say(job, f"{len(units)} partitions to {action}, {parallelism} at a time")
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallelism + 1, thread_name_prefix=action) as pool:
        pending = {pool.submit(_run_one, spark, action, task, unit): index for index, unit in enumerate(units)}
        while pending:
            done, _ = concurrent.futures.wait(pending, timeout=status_every_s,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                rows[index] = row = future.result()
                unit = units[index]
                say(job, f"[{len(rows)}/{len(units)}] {unit.topic}[{unit.partition}] {describe(row)}")
            if not done:
                say(job, f"{len(rows)}/{len(units)} partitions done after {time.monotonic() - started:.0f}s")
    return [rows[i] for i in range(len(units))]


if __name__ == "__main__":  # python spark_jobs/driver.py sc://HOST:PORT: prepare that server
    say("spark-connect", f"{sys.argv[1]} ready for kmigrate jobs after {prepare_server(sys.argv[1]):.1f}s")
