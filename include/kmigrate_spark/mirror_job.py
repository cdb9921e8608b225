"""The continuous mirror's driver side (docs/DESIGN.md §12): one long-running Spark application
whose copy runs in terms, each a Spark job of long-running tasks (`mirror_tasks`: a task that
waited for a slot would wait a whole term), each task copying its partitions for the term
(kmigrate.run.mirror.task) while the driver writes the status and copies the groups' offsets
(kmigrate.run.mirror.driver). A lost task is retried by Spark and its copies resume from the DR
cluster's ends; a partition that fails is named and tried again. The job runs until a stop is
requested (the run manifest's mirror-stop-requested event: a failover, or
`kmigrate.run.mirror.term.request_stop`), SIGTERM, or --max-seconds; a restarted job resumes from
the DR cluster's ends, with every resume check.

Exit 0 once stopped, 2 when it could not start (bad input)."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.model import WorkUnit
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import ConnectorWatch
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, read_spec, write_spec
from kmigrate.run.mirror.task import mirror_task
from kmigrate.run.mirror.term import Term
from kmigrate.run.records import timeline

from kmigrate_spark.clients import load_clients_from, load_source_connect
from kmigrate_spark.guards import check_clusters, run_job
from kmigrate_spark.session import SessionSoon, describe_jobs, error_cause, is_connect, patient_client, task_slots
from kmigrate_spark.units import failed_row, map_units, pack, say

JOB = "mirror"


def said(message: str, *, err: bool = False) -> None:
    """A line of the job's output with its time (UTC): the mirror runs for days, its output file with it."""
    say(JOB, f"{timeline.iso(time.time())} {message}", err=err)


def mirror_tasks(slots: int, parallelism: int | None, shared: bool) -> int:
    """The mirror's tasks on an application of `slots` task slots: `parallelism` (at most the slots),
    else on a `shared` one (a Spark Connect server) half the slots, at least one, else all. Each task
    runs for a whole term, so the slots it leaves are all a drill's verify job or a migration sent to
    the same server gets. Each task copies its partitions with threads of its own: two tasks kept
    `make bench-dr`'s lag as four did (docs/BENCHMARKS.md)."""
    if parallelism:
        return min(parallelism, slots)
    return max(1, slots // 2) if shared else slots


def copy_term_on_spark(spark: Any, units: Sequence[WorkUnit], extras: Mapping, task: Any,
                       parallelism: int | None = None, held: Callable[[int, int], None] = lambda tasks, slots: None
                       ) -> list[dict[str, Any]]:
    """A term's units copied as one Spark job of `mirror_tasks` long-running tasks (a task must not
    wait for another to end), balanced by partition count; a row each. `held` is told the tasks and
    the slots first. A job Spark stopped (a task failed past its retries) gives the units without a
    row a failed one."""
    slots = task_slots(spark)
    bins = pack([1] * len(units), slots, tasks=mirror_tasks(slots, parallelism, is_connect(spark)))
    held(len(bins), slots)
    describe_jobs(spark, f"mirror {len(units)} partitions in {len(bins)} long-running tasks")
    rows: dict[int, dict[str, Any]] = {}
    try:
        for index, row in map_units(spark, [[(i, units[i], extras[(units[i].topic, units[i].partition)])
                                             for i in b] for b in bins], task):
            rows[index] = row
    except Exception as exc:  # noqa: BLE001 - the next term copies them again
        said(f"the term's Spark job stopped ({error_cause(exc)})", err=True)
    return [rows.get(i) or {**failed_row(u, RuntimeError("the term's Spark job stopped")), "records": 0,
                            "own_end": None, "verified": None} for i, u in enumerate(units)]


def cancel_jobs(session: SessionSoon) -> None:
    """Stop the session's running Spark jobs (their Python workers are stopped with their tasks); a
    session gone took its jobs with it."""
    if session.gone():
        return
    spark = session.get()
    try:
        if is_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
    except Exception as exc:  # noqa: BLE001 - the server went meanwhile; the next term renews the session
        said(f"the term's tasks could not be cancelled ({error_cause(exc)})", err=True)


def mirror(args: argparse.Namespace) -> int:
    """Mirror the run's selection (--topics the first time; the run's mirror spec after) until stopped."""
    stopping = threading.Event()
    if threading.current_thread() is threading.main_thread():  # the job's own process (a test may call it in a thread)
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def work(manifest: Any) -> int:
        spec = write_spec(manifest, MirrorSpec(args.topics, args.exclude_topics or "", args.groups or "", args.interval_s,
                                               args.refresh_s, args.verify_every_s, args.term_s)
                          ) if args.topics else read_spec(manifest)
        clients = load_clients_from(args.clients)
        # its client tries a server that went away every 2 s (a new session after a restart gets it too)
        with SessionSoon(f"kmigrate-mirror-{args.run_id}", args.remote, prepare=patient_client) as session:
            check_clusters(clients)  # both answer and are two clusters: nothing written to a source taken for a DR cluster
            task = functools.partial(mirror_task, clients=clients,
                                     **({"fetch_max_bytes": args.fetch_max_bytes} if args.fetch_max_bytes else {}))

            def held(tasks: int, slots: int) -> None:  # what a drill on the same server checks
                if args.remote:
                    manifest.replace(mirror_status.SPARK_PART, {"server": mirror_status.server_address(args.remote),
                                                                "tasks": tasks, "slots": slots})

            def copy_term(units: Sequence[WorkUnit], extras: Mapping, term: Term) -> list[dict[str, Any]]:
                why = session.gone()
                if why:  # the server restarted, or was away: a new session, or the term fails and the next tries again
                    said(f"the Spark session is gone ({why}); term {term.number} starts a new one")
                    session.renew()
                return copy_term_on_spark(session.get(), units, extras,
                                          functools.partial(task, term=dataclasses.asdict(term)), args.parallelism, held)

            # the source's connectors read as the mirror goes, for an unplanned failover (a worker gone is
            # said, not waited for: 5 s a request)
            watch = ConnectorWatch(manifest, *clients, load_source_connect(args.clients, request_timeout_s=5.0),
                                   list(spec.connectors), say=said) if spec.connectors else None
            runner = Mirror(manifest, *clients, spec, copy_term, cancel=lambda: cancel_jobs(session),
                            connectors=watch, say=said)
            said(f"run {args.run_id}: mirroring topics {spec.topics_include!r}"
                 + (f" but {spec.topics_exclude!r}" if spec.topics_exclude else "")
                 + (f" and groups {spec.groups!r}" if spec.groups else "")
                 + f", in terms of {spec.term_s:g}s, "
                 + (f"{args.parallelism} tasks at most" if args.parallelism else
                    "tasks on half the server's task slots" if args.remote else "one task a slot")
                 + f"; status every {spec.interval_s:g}s in {manifest.location}")
            last = runner.run(stopping.is_set, args.max_seconds)
            said(f"stopped at status {last}; {runner.totals['records']} records mirrored in the run's "
                 f"{runner.totals['terms']} terms")
        return 0

    return run_job(JOB, args, work, finished=": the mirror has nothing more to do ({location})")
