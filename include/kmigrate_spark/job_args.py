"""The command-line arguments of the Spark entry points (spark_jobs/), one parser a kind of job.

Every job takes where the run manifest is, which run, the client configs and its parallelism; a
job runs under `spark-submit` (a Spark application of its own: local, standalone, YARN,
Kubernetes) or, with --remote sc://HOST:PORT, as a plain Python client of a running Spark Connect
server (no JVM in its process; the server's executors run the tasks). What a kind of job does is
fixed by the kind (kmigrate_spark.copy_job, kmigrate_spark.verify_job), not by its arguments."""
from __future__ import annotations

import argparse
import os

from kmigrate.run.checks.request import INTERVAL_S, REFRESH_S, RunRequest
from kmigrate.run.mirror.timings import TERM_S, VERIFY_EVERY_S

from kmigrate_spark.conf import REMOTE_ENV


def request_command(request: RunRequest, *more: str) -> list[str]:
    """The arguments a job of every kind is launched with (those `job_arguments` parses), from a
    run's typed request: where the run manifest is, which run, the Spark tasks it runs at once (0:
    the task slots); then `more` of its kind."""
    return ["--state-location", request.state_location, "--run-id", request.name,
            "--parallelism", str(request.spark.tasks_at_once), *more]


def pre_copy_command(request: RunRequest) -> list[str]:
    """The pre-copy's arguments (those `pre_copy_arguments` parses) of a run's typed request:
    `request_command`'s, then when its rounds stop (its pre_copy_max_rounds and
    pre_copy_converged_records)."""
    return request_command(request, "--rounds", str(request.pre_copy_max_rounds),
                           "--converged-records", str(request.pre_copy_converged_records))


def job_arguments(doc: str | None, action: str, slots: str = "the task slots") -> argparse.ArgumentParser:
    """The arguments every job takes: where the run manifest is, which run, the clients, parallelism.
    `doc` (the script's docstring) is the help's description; `action` says what is done to the
    partitions ("copied", "verified"); `slots`, how many tasks run at once when not told."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="local path or fsspec URL of the run manifests")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", help="JSON file of client configs, mode 600 (default: $KMIGRATE_CLIENTS_JSON)")
    parser.add_argument("--parallelism", type=int, help=f"Spark tasks run at once over the partitions {action} "
                        f"(default: {slots})")
    parser.add_argument("--remote", default=os.environ.get(REMOTE_ENV) or None,
                        help=f"run on a running Spark Connect server, sc://HOST:PORT (default: ${REMOTE_ENV}); "
                             "run the job with python, not spark-submit")
    return parser


def copy_arguments(doc: str | None, slots: str = "the task slots") -> argparse.ArgumentParser:
    """A copy job's arguments: job_arguments' and the size of its fetches. The plain copy, the DR
    drill's copy, the catch-up round and the window copy take these."""
    parser = job_arguments(doc, "copied", slots)
    parser.add_argument("--fetch-max-bytes", type=int, help="bytes per fetch of whole record batches")
    return parser


def pre_copy_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The pre-copy's arguments: copy_arguments' and when its rounds stop."""
    parser = copy_arguments(doc)
    parser.add_argument("--rounds", type=int, default=1, help="copy rounds at most, each up to the source's end when "
                        "it begins")
    parser.add_argument("--converged-records", type=int, default=0,
                        help="no further round once the source wrote at most this many offsets during one")
    return parser


def verify_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The verification's arguments: job_arguments'."""
    return job_arguments(doc, "verified")


def server_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of the preparation of a Spark Connect server: its URL."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("remote", help="the Spark Connect server, sc://HOST:PORT")
    return parser


def mirror_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The mirror's arguments: copy_arguments', what it selects (the first time), its pace, how long."""
    # its long-running tasks leave the other half of a server's slots to drills and migrations
    parser = copy_arguments(doc, "the task slots; on a Spark Connect server, half of them")
    parser.add_argument("--topics", help="regular expression of the topics to mirror (the first start of the run; "
                        "a restart keeps the run's selection)")
    parser.add_argument("--exclude-topics", help="regular expression of topics not mirrored")
    parser.add_argument("--groups", help="regular expression of the consumer groups whose offsets follow")
    parser.add_argument("--interval-s", type=float, default=INTERVAL_S,
                        help="the status (lag, heartbeat) and the groups' offsets this often")
    parser.add_argument("--refresh-s", type=float, default=REFRESH_S, help="the topic selection read again this often")
    parser.add_argument("--verify-every-s", type=float, default=VERIFY_EVERY_S,
                        help="what was mirrored is verified while live this often (a failover then reads the rest)")
    parser.add_argument("--term-s", type=float, default=TERM_S,
                        help="the copy's long-running tasks start again this often (they report as they go)")
    parser.add_argument("--max-seconds", type=float, help="stop after this long (default: until asked to stop)")
    return parser
