"""What the Spark entry points share: their command-line arguments. The session and the running of
work units live in the kmigrate_spark package (include/kmigrate_spark/).

The jobs run under `spark-submit` (a Spark application of their own: local, standalone, YARN,
Kubernetes) or, with --remote sc://HOST:PORT, as a plain Python client of a running Spark Connect
server (no JVM in this process; the server's executors run the tasks).

    python spark_jobs/driver.py sc://HOST:PORT    prepares that server for the jobs (warm workers)
"""
from __future__ import annotations

import argparse
import os
import sys

from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.run.checks.preflight import check_distinct
from kmigrate_spark.conf import REMOTE_ENV
from kmigrate_spark.units import prepare_server, say


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


def check_clusters(clients: tuple[ClusterConfig, ClusterConfig]) -> None:
    """Before a job writes anything: both clusters answer (ClusterUnavailable naming the one that does
    not), and they are two clusters, by bootstrap servers and cluster id (ConfigError "the same cluster"):
    whoever starts a job, it does not take the source for the target."""
    for cluster in clients:
        with ClusterAdmin(cluster, timeout_s=10) as admin:
            admin.check_reachable()
    check_distinct(*clients)


if __name__ == "__main__":  # python spark_jobs/driver.py sc://HOST:PORT: prepare that server
    say("spark-connect", f"{sys.argv[1]} ready for kmigrate jobs after {prepare_server(sys.argv[1]):.1f}s")
