"""The Spark session of a kmigrate job: its own application under spark-submit, or a client of a
running Spark Connect server (--remote sc://HOST:PORT), started while the job checks its input."""
from __future__ import annotations

import concurrent.futures
import re
import time
import uuid
import warnings
from collections.abc import Callable

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from kmigrate_spark.conf import DRIVER_JAVA_OPTIONS, check_connect_server, unreachable


class SessionSoon:
    """The job's Spark session, started in a thread while the job checks its input (the Spark
    Connect client's import and a new SparkContext take a second or more; the checks, half a
    second of waiting on the clusters). `with SessionSoon(...) as session:` stops the session on
    the way out, once it has started, whatever happened meanwhile."""

    def __init__(self, app_name: str, remote: str | None, started: SparkSession | None = None,
                 prepare: Callable[[SparkSession], None] = lambda spark: None) -> None:
        self.app_name, self.remote, self.prepare = app_name, remote, prepare
        self.begun = time.monotonic()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-session")
        # `started`: a session the caller started before (the cutover task's, while the source quiesced)
        self._future = self._pool.submit(lambda: started) if started is not None else self._pool.submit(self._start)

    def get(self) -> SparkSession:
        return self._future.result()

    def gone(self) -> str | None:
        """Why the session cannot be used any more, if it cannot: it did not start (a server away),
        or its Spark Connect client closed itself (its server restarted: the client saw another
        server-side session and refuses every call after, with NO_ACTIVE_SESSION). None while it
        is starting or usable."""
        if not self._future.done():
            return None
        if self._future.exception() is not None:
            return f"it could not start: {error_cause(self._future.exception())}"
        spark = self._future.result()
        return "its server no longer has it (restarted?)" if is_connect(spark) and spark.client.is_closed else None

    def renew(self) -> None:
        """A new session for the next `get` (after `gone`): a restarted Spark Connect server knows
        none of its sessions, and a server that was away may be back."""
        old = self._future
        self._future = self._pool.submit(self._start)
        if old.done() and old.exception() is None and is_connect(old.result()):
            try:
                old.result().client.close()  # its channel only: the session's id is the shared one, not released
            except Exception:  # noqa: BLE001 - a client of a server gone
                pass

    def _start(self) -> SparkSession:
        spark = start_spark(self.app_name, self.remote)
        self.prepare(spark)  # what the job sets on each session it starts
        return spark

    def __enter__(self) -> SessionSoon:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)
        if self._future.exception() is None:
            spark = self._future.result()
            if is_connect(spark):
                spark.client.close()  # leaves the shared session (and its warm workers) on the server
            else:
                spark.stop()


# Executors fork their Python workers from this daemon module, which has imported kmigrate already
# (include/kmigrate_spark/daemon.py), unless the user's Spark conf names another; the Spark Connect
# server sets it too (stack/spark_cluster.py).
DAEMON_MODULE = "spark.python.daemon.module"


def start_spark(app_name: str, remote: str | None = None) -> SparkSession:
    if not remote:
        builder = SparkSession.builder.appName(app_name)
        # the JVM first: before it, SparkConf() is an empty Python dict, blind to spark-submit's --conf
        SparkContext._ensure_initialized()
        if not SparkConf().contains(DAEMON_MODULE):
            builder = builder.config(DAEMON_MODULE, "kmigrate_spark.daemon")
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
        raise unreachable(remote, error_cause(exc)) from None
    return spark


def patient_client(spark: SparkSession, wait_s: float = 2.0, calls_s: float = 120.0) -> None:
    """A Spark Connect client that tries a server that went away again every `wait_s` at most, for
    about `calls_s` a call (the client's own policy backs off to a minute between tries, for ten:
    a long-running job would resume up to a minute after its server came back)."""
    if is_connect(spark):
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark.client.set_retry_policies([DefaultPolicy(max_retries=int(calls_s / wait_s) + 5,
                                                       max_backoff=int(wait_s * 1000))])


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


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def task_slots(spark: SparkSession) -> int:
    """The application's task slots. A Spark Connect client has no SparkContext: there it is N of
    a local[N] or local[N,F] master, else the number of partitions spark.range gets by default,
    which is the default parallelism (a query: 0.3 s)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    local = re.fullmatch(r"local(?:\[(\d+)(?:,\d+)?\])?", spark.conf.get("spark.master") or "")
    if local:
        return int(local.group(1) or 1)
    from pyspark.sql import functions as F

    return spark.range(1 << 16).select(F.spark_partition_id().alias("p")).distinct().count()


def driver_jvm_options(spark: SparkSession) -> str:
    """Whether this driver's JVM was launched with kmigrate's options (they can only be given at
    launch: spark.driver.extraJavaOptions, kmigrate_spark/conf.py), and how to add them if not."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    if set(DRIVER_JAVA_OPTIONS.split()) <= set(runtime.getInputArguments()):
        return "driver JVM with kmigrate's JIT and GC options"
    return ("driver JVM without kmigrate's JIT and GC options (measured, they halve its CPU during a copy: "
            f"spark-submit --conf 'spark.driver.extraJavaOptions={DRIVER_JAVA_OPTIONS}')")


def describe_jobs(spark: SparkSession, text: str) -> None:
    """The Spark UI's description of the jobs this thread starts next (a Spark Connect server
    describes them itself)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(text)


def error_cause(exc: Exception) -> str:
    """The line of a Spark/py4j/Spark Connect error that names the cause, not py4j's "An error
    occurred while calling ..." header."""
    lines = [line.strip().lstrip(": ") for line in str(exc).splitlines() if line.strip().lstrip(": ")]
    return next((line for line in lines if "Exception:" in line or "Error:" in line),
                lines[0] if lines else type(exc).__name__)[:500]
