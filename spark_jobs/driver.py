"""Driver-side helpers shared by the Spark entry points (never shipped to executors).

`run_units` runs one Spark job per work unit from a small thread pool, in plan order (largest
first), with as many jobs in flight as the application has task slots (plus one queued). One job per
unit gives a person something to follow: each job carries the unit's name as its description in the
Spark UI, and the driver log gets a line as each unit finishes plus a status line while it waits.
A job whose task failed more times than Spark retries becomes a failed row, not an aborted run.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import SparkSession

from kmigrate.copier import WorkUnit
from kmigrate.errors import ConfigError
from kmigrate.tasks import ready


def job_arguments(doc: str, action: str) -> argparse.ArgumentParser:
    """The arguments every job takes: where the run manifest is, which run, the clients, parallelism."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="local path or fsspec URL of the run manifests")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", help="JSON file of client configs, mode 600 (default: $KMIGRATE_CLIENTS_JSON)")
    parser.add_argument("--parallelism", type=int, help=f"partitions {action} at once (default: the task slots)")
    return parser


def run_on_spark(app_name: str, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
                 job: str, action: str, describe: Callable[[dict[str, Any]], str],
                 parallelism: int | None) -> tuple[list[dict[str, Any]], float, float]:
    """Start the session, warm it up, run `task` over `units`, stop the session. Returns the rows,
    the seconds from the warmed-up executors to the last row, and the warm-up's seconds."""
    spark = start_spark(app_name)
    try:
        warm_up_s = warm_up(spark)
        started = time.monotonic()
        rows = run_units(spark, units, task, job=job, action=action, describe=describe, parallelism=parallelism)
        return rows, round(time.monotonic() - started, 3), round(warm_up_s, 3)
    finally:
        spark.stop()


def start_spark(app_name: str) -> SparkSession:
    return SparkSession.builder.appName(app_name).getOrCreate()


def _cause(exc: Exception) -> str:
    """The line of a Spark/py4j error that names the cause, not py4j's "An error occurred while
    calling ..." header."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return next((line for line in lines if "Exception:" in line or "Error:" in line),
                lines[0] if lines else type(exc).__name__)[:500]


def warm_up(spark: SparkSession) -> float:
    """Start a Python worker on every task slot and import the library there, before the timed
    work: it fails fast when executors cannot import kmigrate. Returns the seconds it took."""
    started = time.monotonic()
    sc = spark.sparkContext
    sc.setJobDescription("start Python workers and import kmigrate")
    slots = sc.defaultParallelism
    try:
        # a library function, pickled by name: unpickling it imports kmigrate on the executor
        sc.parallelize(range(slots), slots).map(ready).collect()
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"the Spark executors cannot run the kmigrate library ({_cause(exc)}); "
                          "install the project (pip install .) in the executors' Python") from None
    return time.monotonic() - started


def say(job: str, message: str, *, err: bool = False) -> None:
    print(f"{job}: {message}", file=sys.stderr if err else sys.stdout, flush=True)


def _run_one(spark: SparkSession, action: str, task: Callable[[WorkUnit], dict[str, Any]],
             unit: WorkUnit) -> dict[str, Any]:
    sc = spark.sparkContext
    sc.setJobDescription(f"{action} {unit.topic}[{unit.partition}] up to offset {unit.end_offset}")
    try:
        [row] = sc.parallelize([unit], 1).map(task).collect()
        return row
    except Exception as exc:  # noqa: BLE001 - Spark gave up on the task after its retries
        error = f"the Spark task failed after its retries: {_cause(exc)}"
        # a failed row for either job: the copy reads "ok"/"error", the verification "equal"/"problems"
        return {"ok": False, "equal": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode,
                "error": error, "problems": [error]}


def run_units(spark: SparkSession, units: Sequence[WorkUnit], task: Callable[[WorkUnit], dict[str, Any]], *,
              job: str, action: str, describe: Callable[[dict[str, Any]], str], parallelism: int | None = None,
              status_every_s: float = 10.0) -> list[dict[str, Any]]:
    """Rows of `task` over `units`, in plan order."""
    slots = parallelism or spark.sparkContext.defaultParallelism
    started = time.monotonic()
    rows: dict[int, dict[str, Any]] = {}
    say(job, f"{len(units)} partitions to {action}, {slots} at a time")
    with concurrent.futures.ThreadPoolExecutor(max_workers=slots + 1, thread_name_prefix=action) as pool:
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
