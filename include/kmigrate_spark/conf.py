"""Spark settings for the kmigrate jobs that only take effect when Spark starts, so they go on the
launch (spark-submit's --conf, a Spark Connect server's properties file), not in the job's code:
the DAG's operators, stack/spark_cluster.py's Connect server, the benches and the tests pass them.
Imports nothing but the standard library, kmigrate.errors and kmigrate.secrets (which import
nothing else): stack/spark_cluster.py runs outside the project's venv."""
from __future__ import annotations

import socket

from kmigrate.errors import ConfigError
from kmigrate.secrets import redact_url

# The driver JVM's options; under local[N] that JVM also runs the executor. Two costs of its own
# that compete with the copy for the machine's cores (measured with JFR, spark-submit on local[2]):
# - every finished task's result is serialized into a 1 MiB buffer, which under G1's 1 MiB
#   regions (any heap under 2 GiB) is a humongous object, and each one started a young collection
#   and a concurrent cycle: 13 of them in one 12-task copy. 4 MiB regions make it an ordinary one;
# - every Spark job makes the closure cleaner parse whole class files (RDD's among them) with ASM,
#   and C2 then compiles ASM's 62 kB ClassReader.readCode: 0.7-1.4 s of a core at the copy job's
#   start. Above this node limit C2 gives the method up, and it runs as C1 compiled it.
# Side by side (bench workload, 12 partitions), the JVM's CPU during a copy fell from 0.62-1.96
# CPU-s (median 1.38, 15 copies) to 0.43-0.95 (median 0.61, 11 copies); either option alone left
# it at a median of 1.26 (5) and 1.09 (10).
DRIVER_JAVA_OPTIONS = ("-XX:G1HeapRegionSize=4m -XX:CompileCommand=quiet "
                       "-XX:CompileCommand=MaxNodeLimit,org.apache.xbean.asm9.ClassReader::readCode,1000")

LAUNCH_CONF = {"spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}

# The Spark Connect server (sc://HOST:PORT) the jobs run on when no --remote is given. The Airflow
# launcher hands the jobs their server this way (the URL of the DAGs' Spark Connect connection),
# never in --remote: a URL may hold a token (sc://HOST:PORT/;token=...), which no command line
# shows (another user's `ps` does) and no log line either (`shown_remote`).
REMOTE_ENV = "KMIGRATE_SPARK_REMOTE"
# a job's exit code when it refuses to go on and a retry cannot help (the source moved after the
# snapshot): the Airflow operator fails the task without retrying it
FINAL_EXIT = 3


def submit_args(conf: dict[str, str] | None = None) -> list[str]:
    """`--conf key=value` arguments for spark-submit: LAUNCH_CONF, then `conf`."""
    return [arg for key, value in {**LAUNCH_CONF, **(conf or {})}.items() for arg in ("--conf", f"{key}={value}")]


def shown_remote(remote: str) -> str:
    """A Spark Connect URL as a log line or an error shows it: its token (and any other secret
    parameter, or a password in it) replaced by ***."""
    return redact_url(remote)


def check_connect_server(remote: str, option: str = "--remote", timeout_s: float = 10) -> None:
    """Fail fast, naming `option` as the way out, unless `remote` is a Spark Connect URL whose port
    answers (the Spark Connect client would retry an unreachable server for minutes)."""
    if not remote.startswith("sc://"):
        raise ConfigError(f"{option} {shown_remote(remote)!r} is not a Spark Connect URL; give sc://HOST:PORT "
                          "(or leave it out to run the jobs with spark-submit)")
    host, _, port = remote[len("sc://"):].split("/", 1)[0].rpartition(":")
    try:
        socket.create_connection((host or "localhost", int(port or 15002)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise unreachable(remote, str(exc), option) from None


def unreachable(remote: str, cause: str, option: str = "--remote") -> ConfigError:
    return ConfigError(f"cannot reach the Spark Connect server at {shown_remote(remote)} ({redact_url(cause)}); "
                       f"start it (make spark-connect-up) or give the right {option}")
