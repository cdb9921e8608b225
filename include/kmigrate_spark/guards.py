"""What every kmigrate Spark job does on its driver around its own work: nothing once its run has
finished (resumed on the target: a re-run of a task, a re-run of the DAG), exit code 2 with one
line naming the cause when it cannot start (bad input: the clients file, the state location, a
plan missing, a cluster that does not answer), and, before it writes anything, the check that both
clusters answer and are two clusters."""
from __future__ import annotations

import argparse
from collections.abc import Callable

from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.preflight.checks import check_distinct
from kmigrate.run.records import events

from kmigrate_spark.units import say

BAD_INPUT = 2  # the job could not start: a retry without a fix fails the same way


def run_job(job: str, args: argparse.Namespace, work: Callable[[Manifest], int], *, finished: str) -> int:
    """The exit code of `work(manifest)` on the run of `args` (--state-location, --run-id), unless
    that run resumed on the target already: then 0, saying so (`finished` goes on the line after
    "resumed on the target already", with {location} for the run's folder). Bad input (a
    KmigrateError) is said on stderr and exits BAD_INPUT."""
    try:
        manifest = Manifest(args.state_location, args.run_id)
        if events.finished(manifest):
            say(job, f"run {args.run_id} resumed on the target already" + finished.format(location=manifest.location))
            return 0
        return work(manifest)
    except KmigrateError as exc:
        say(job, f"error: {exc}", err=True)
        return BAD_INPUT


def check_clusters(clients: tuple[ClusterConfig, ClusterConfig]) -> None:
    """Before a job writes anything: both clusters answer (ClusterUnavailable naming the one that does
    not), and they are two clusters, by bootstrap servers and cluster id (ConfigError "the same cluster"):
    whoever starts a job, it does not take the source for the target."""
    for cluster in clients:
        with ClusterAdmin(cluster, timeout_s=10) as admin:
            admin.check_reachable()
    check_distinct(*clients)
