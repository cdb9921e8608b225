"""The continuous mirror's driver side (docs/DESIGN.md §12): one long-running Spark job whose
rounds (kmigrate.run.mirror.loop) each copy the partitions behind on the DR cluster as one Spark
job of copy tasks in the live mode, on one Spark session kept for the mirror's life (a Spark
Connect server's, or its own application's under spark-submit). A lost task is retried by Spark
and its copier resumes from the DR cluster's end; a partition that still fails is named in the
status and tried again next round. The job runs until a stop is requested (the run manifest's
mirror-stop-requested event: a failover, or `kmigrate.run.mirror.loop.request_stop`), SIGTERM,
or --max-seconds; a restarted job resumes from the DR cluster's ends, with every resume check.

Exit 0 once stopped, 2 when it could not start (bad input)."""
from __future__ import annotations

import argparse
import functools
import signal
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kmigrate.model import WorkUnit
from kmigrate.run.copying.precopy import compacted_topics
from kmigrate.run.copying.tasks import copy_extras, copy_task
from kmigrate.run.mirror.loop import Mirror, MirrorSpec, read_spec, write_spec

from kmigrate_spark.clients import load_clients_from
from kmigrate_spark.copy_job import verify_live
from kmigrate_spark.guards import check_clusters, run_job
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say

JOB = "mirror"


def mirror(args: argparse.Namespace) -> int:
    """Mirror the run's selection (--topics the first time; the run's mirror spec after) until stopped."""
    stopping = threading.Event()
    if threading.current_thread() is threading.main_thread():  # the job's own process (a test may call it in a thread)
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def work(manifest: Any) -> int:
        spec = write_spec(manifest, MirrorSpec(args.topics, args.exclude_topics or "", args.groups or "", args.interval_s,
                                               args.refresh_s, args.verify_every_s)) if args.topics else read_spec(manifest)
        clients = load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-mirror-{args.run_id}", args.remote) as session:
            check_clusters(clients)  # both answer and are two clusters: nothing written to a source taken for a DR cluster
            task = functools.partial(copy_task, clients=clients, run_id=args.run_id, verify=False, live=True,
                                     **({"fetch_max_bytes": args.fetch_max_bytes} if args.fetch_max_bytes else {}))

            def copy_round(units: Sequence[WorkUnit], own_ends: Mapping) -> list[dict[str, Any]]:
                return run_on_spark(session, units, task, job=JOB, action="copy", parallelism=args.parallelism,
                                    describe=lambda r: "ok" if r["ok"] else f"FAILED: {r['error']}", quiet=True,
                                    extras=copy_extras({}, own_ends))[0]

            def verify_round(units: Sequence[WorkUnit], previous: Mapping) -> list[dict[str, Any]]:
                return verify_live(session, units, previous, clients=clients, job=JOB, parallelism=args.parallelism,
                                   compacted=compacted_topics(clients[0], {u.topic for u in units}), quiet=True)

            runner = Mirror(manifest, *clients, spec, copy_round, verify_round=verify_round,
                            say=lambda line: say(JOB, line))
            say(JOB, f"run {args.run_id}: mirroring topics {spec.topics_include!r}"
                     + (f" but {spec.topics_exclude!r}" if spec.topics_exclude else "")
                     + (f" and groups {spec.groups!r}" if spec.groups else "")
                     + f", a round every {spec.interval_s:g}s at most; status in {manifest.location}")
            last = runner.run(stopping.is_set, args.max_seconds)
            say(JOB, f"stopped at round {last}; {runner.totals['records']} records mirrored in the run's "
                     f"{runner.totals['rounds']} rounds")
        return 0

    return run_job(JOB, args, work, finished=": the mirror has nothing more to do ({location})")
