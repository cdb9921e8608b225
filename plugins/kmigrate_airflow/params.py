"""What the DAGs share: task defaults and their trigger-form params, each defined once (the form
validates them before a run exists). Their names, defaults and rules are the run request's
(kmigrate.run.checks.request.RunRequest, which reads and checks them again when a task runs) and
the library's where it states them (the run-name rule, the mirror's timings)."""
from __future__ import annotations

import datetime
import os

from airflow.sdk import Param
from kmigrate.manifest import RUN_ID_PATTERN
from kmigrate.renames import PREFIX_PATTERN, TOPIC_CHARACTERS, TOPIC_MAX
from kmigrate.run.checks.request import (
    INTERVAL_S,
    MEMBER_TIMEOUT_S,
    MOVE_MAX_S,
    MOVE_WAIT_MIN_S,
    MOVE_WAIT_S,
    PRE_COPY,
    PRE_COPY_CONVERGED_RECORDS,
    PRE_COPY_MAX_ROUNDS,
    PRE_COPY_ROUNDS_MOST,
    QUIESCE_MAX_S,
    REFRESH_S,
    STALE_AFTER_S,
)
from kmigrate.run.checks.selection import DEFAULT_SCOPE, SCOPES
from kmigrate.run.mirror.timings import MAX_INTERVAL_S, MAX_PERIOD_S, MIN_INTERVAL_S, MIN_STALE_AFTER_S

DEFAULT_STATE = os.environ.get("KMIGRATE_STATE_LOCATION") or os.path.join(  # the Airflow user's, not /tmp's
    os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow"), "kmigrate-state")
RUN_NAME = RUN_ID_PATTERN  # a folder name: kmigrate.manifest's RUN_ID_RULE
# The library's rules the form can state too (each value refused here is refused by the library, which
# checks again for a caller that bypasses the form; tests/badinput/test_form_schema.py):
# a regular expression with no lone surrogate (RE2 matches UTF-8: kmigrate.run.checks.selection)
PATTERN_TEXT = r"^[^\ud800-\udfff]*$"
# a state location: an absolute path, file:///path or a supported store's URL, no fsspec chain (::) and no
# control character (kmigrate.manifest's _check_location)
STATE_LOCATION = (r"^(?!.*::)(/|file:///|(s3|s3a|gs|gcs|abfs|az|hdfs|memory)://)[^\x00-\x1f\x7f]*$")
# a target topic prefix: Kafka's topic-name characters, one left for a name after it, not '__' (kmigrate.renames)
TOPIC_PREFIX = f"^{PREFIX_PATTERN}$"
# a target topic name, as a map's values: Kafka's rule (kmigrate.renames.legal_topic)
TOPIC_NAME = rf"^(?!\.\.?$)[{TOPIC_CHARACTERS}]{{1,{TOPIC_MAX}}}$"
# a connector name Connect can hold and serve by its REST path: no / or %, no control character, no space
# around it, not . or .. (kmigrate.kafka.connect.check_connector_name)
CONNECTOR_NAME = r"^(?!\.\.?$)[^\s/%\x00-\x1f\x7f-\x9f]([^/%\x00-\x1f\x7f-\x9f]*[^\s/%\x00-\x1f\x7f-\x9f])?$"

# every DAG's task defaults: retried with backoff, never unbounded
DEFAULT_ARGS = {
    "retries": 2,
    "retry_delay": datetime.timedelta(seconds=10),
    "retry_exponential_backoff": True,
    "execution_timeout": datetime.timedelta(minutes=30),
}


def dag_args(dag_id: str, doc: str | None, tags: list[str], *, schedule: str | None = None,
             default_args: dict | None = None) -> dict:
    """What every kmigrate DAG sets the same way: triggered (or on `schedule`), no catch-up of missed
    runs, one run at a time, the shared task defaults; the DAG's module docstring as its doc."""
    return {"dag_id": dag_id, "doc_md": doc, "schedule": schedule, "start_date": datetime.datetime(2026, 1, 1),
            "catchup": False, "max_active_runs": 1, "tags": tags, "default_args": default_args or DEFAULT_ARGS}


def kafka_params(target_title: str = "Target Kafka connection",
                 target_description: str = "Kafka provider connection of the target cluster") -> dict[str, Param]:
    """The two Kafka clusters' connection ids."""
    return {
        "source_kafka_conn_id": Param("kafka_source", type="string", minLength=1, title="Source Kafka connection",
                                      description="Kafka provider connection of the source cluster"),
        "target_kafka_conn_id": Param("kafka_target", type="string", minLength=1, title=target_title,
                                      description=target_description),
    }


def connect_params() -> dict[str, Param]:
    """The two Kafka Connect clusters' connection ids."""
    return {
        "source_connect_conn_id": Param("connect_source", type="string", minLength=1,
                                        title="Source Kafka Connect connection", description="HTTP connection"),
        "target_connect_conn_id": Param("connect_target", type="string", minLength=1,
                                        title="Target Kafka Connect connection", description="HTTP connection"),
    }


def selection_params(topics_title: str = "Topics to migrate", topics_default: str | None = None,
                     groups_description: str = "Regular expression over group ids; empty migrates no group"
                     ) -> dict[str, Param]:
    """Which topics and consumer groups a run moves."""
    return {
        "topics_include": Param(**({"default": topics_default} if topics_default else {}), type="string",
                                minLength=1, pattern=PATTERN_TEXT, title=topics_title,
                                description="Regular expression, fully matched against topic names"),
        "topics_exclude": Param(None, type=["null", "string"], pattern=PATTERN_TEXT, title="Topics to leave out",
                                description="Regular expression; empty leaves none out"),
        "groups": Param(None, type=["null", "string"], pattern=PATTERN_TEXT, title="Consumer groups",
                        description=groups_description),
    }


def pattern_param(title: str, description: str) -> Param:
    """An optional regular expression (empty: none)."""
    return Param(None, type=["null", "string"], pattern=PATTERN_TEXT, title=title, description=description)


def acls_param() -> Param:
    """Which of the source's ACLs the run creates on the target (kmigrate.run.targets.acls)."""
    return Param(DEFAULT_SCOPE, type="string", enum=list(SCOPES), title="ACLs to copy",
                 description="The source's ACLs that let the applications in, created on the target before the "
                             "connectors resume. resources: the bindings of the selected topics and groups (literal, "
                             "prefixed and * patterns that match them); principals: also the transactional-id and "
                             "cluster bindings of the principals that hold those; off: none. Reading them needs "
                             "Describe on the source cluster, creating them Alter on the target cluster")


def rename_params() -> dict[str, Param]:
    """The names a consolidation gives the migrated topics and consumer groups on the target
    (kmigrate.renames.Renames): a map entry wins, else the prefix and the source's name. The
    preflight holds them to the selection (entries for what is selected, no two sources onto one
    target, names Kafka creates)."""
    return {
        # optional strings: None, as the form sends a field left empty (a type "string" alone would block it)
        "topic_prefix": Param(None, type=["null", "string"], pattern=TOPIC_PREFIX, title="Target topic prefix",
                              description="e.g. team-a. : every migrated topic is created as team-a.<name> on the "
                                          "target; offsets unchanged. Letters, digits and . _ - (not beginning with "
                                          "__); empty: the source's names"),
        "topic_renames": Param({}, type="object", propertyNames={"minLength": 1},
                               additionalProperties={"type": "string", "pattern": TOPIC_NAME},
                               title="Target topic names",
                               description='{"source topic": "target topic"}, e.g. {"orders": "a.orders"}: wins over '
                                           "the prefix for the topics it names, each of them selected; offsets "
                                           "unchanged"),
        "group_prefix": Param(None, type=["null", "string"], title="Target consumer group prefix",
                              description="e.g. team-a. : every migrated consumer group is set as team-a.<id> on the "
                                          "target, with the source's offsets; empty: the source's ids"),
        "group_renames": Param({}, type="object", additionalProperties={"type": "string", "minLength": 1},
                               title="Target consumer group ids",
                               description='{"source group": "target group"}, e.g. {"billing": "a.billing"}: wins '
                                           "over the prefix for the groups it names, each of them selected"),
        "connector_topic_keys": Param({}, type="object", propertyNames={"minLength": 1},
                                      additionalProperties={"type": "array", "minItems": 1,
                                                            "items": {"type": "string", "minLength": 1}},
                                      title="Connector keys naming topics",
                                      description='{"connector": ["key", ...]}, e.g. {"orders-sink": ["audit.topic"]}: '
                                                  "config keys beyond those known (a sink's topics, topics.regex and "
                                                  "dead letter queue, the file source's topic) whose values list "
                                                  "topics, rewritten with the renames on the target"),
    }


def spark_params() -> dict[str, Param]:
    """Where and how wide the Spark jobs run."""
    return {
        "spark_parallelism": Param(0, type="integer", minimum=0, title="Spark tasks at once",
                                   description="The Spark tasks a job runs at once: a copy's or a verification's "
                                               "task takes its partitions one after another, a mirror's long-running "
                                               "task follows several together. "
                                               "0: the Spark application's task slots (kafka_dr_mirror's tasks, "
                                               "which run for hours: half a Spark Connect server's, the other "
                                               "half left to the jobs of drills and migrations there)"),
        # the URL is resolved when a job launches (kmigrate_airflow.hooks.spark_connect_url): a token
        # stays in the connection, out of the run's conf
        "spark_connect_conn_id": Param("spark_connect_default", type=["null", "string"], pattern=r"^([\w.-]+)?$",
                                       title="Spark Connect connection",
                                       description="Airflow connection (type Spark Connect) of a long-running Spark "
                                                   "Connect server: the Spark jobs run as its clients, without a "
                                                   "spark-submit start-up each. No connection of this name, or "
                                                   "empty: spark-submit on the spark_default connection"),
    }


def state_params() -> dict[str, Param]:
    """Where run manifests are kept."""
    return {"state_location": Param(DEFAULT_STATE, type="string", minLength=1, pattern=STATE_LOCATION,
                                    title="State location",
                                    description="Absolute local path, or a URL of s3://, s3a://, gs://, gcs://, "
                                                "abfs://, az:// or hdfs://, of the run manifests")}


def run_name_param(*, required: bool = False, **texts: str) -> Param:
    """The name of a run's manifest: optional in a migration (default: the Airflow run id),
    required where an earlier run is named (the rollback)."""
    if required:
        return Param(type="string", pattern=f"^{RUN_NAME}$", **texts)
    return Param(None, type=["null", "string"], pattern=f"^({RUN_NAME})?$", **{
        "title": "Run name", "description": "Names the run manifest; empty: the Airflow run id", **texts})


# an ISO 8601 date-time with its zone (Z or an offset), as the form's date-time picker gives it
# (2026-11-23T22:00:00.000Z): JSON Schema's `format: date-time` is not enforced when a run is
# triggered, a pattern is; the preflight checks the rest (a real date, ahead of now)
DATE_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)"


def cutover_param() -> Param:
    """When a migration stops its connectors: a date-time with its zone, or empty."""
    return Param(None, type=["null", "string"], format="date-time", pattern=f"^({DATE_TIME})?$", title="Cut over at",
                 description="Stop the connectors at this time (a maintenance window), an ISO 8601 date-time with its "
                             "zone, like 2026-11-23T22:00:00+00:00 or ...Z for UTC; until then pre-copy rounds keep "
                             "the target close to the live source. Empty: as soon as the pre-copy converges")


def connectors_param(description: str = "Names of source Connect connectors to move", *,
                     unique: bool = True) -> Param:
    """Names of Connect connectors, each one Connect can serve (CONNECTOR_NAME)."""
    return Param([], type=["null", "array"], items={"type": "string", "minLength": 1, "pattern": CONNECTOR_NAME},
                 **({"uniqueItems": True} if unique else {}), title="Connectors", description=description)


def overrides_param(description: str = '{"connector": {"key": "value"}} applied on the target to those of the '
                                       "connectors above; values are strings, numbers or booleans (a Connect config "
                                       "is flat)") -> Param:
    """Config overrides by connector: flat objects of non-blank keys (kmigrate.run.connectors.migrate.check_overrides)."""
    # values often hold a password: the run records them only as digests (kmigrate.run.checks.request);
    # the preflight also refuses a connector not among those the run moves
    return Param({}, type="object", propertyNames={"minLength": 1, "pattern": CONNECTOR_NAME},
                 additionalProperties={"type": "object", "propertyNames": {"minLength": 1, "pattern": r"\S"},
                                       "additionalProperties": {"type": ["string", "number", "boolean"]}},
                 title="Connector config overrides", description=description)


def quiesce_params(quiesce_s: int, member_description: str | None = None) -> dict[str, Param]:
    """How long the source stands still before the snapshot (`quiesce_s` by default), and how long a
    selected group's members may linger after its consumer stopped."""
    return {
        "quiesce_seconds": Param(quiesce_s, type="integer", minimum=0, maximum=QUIESCE_MAX_S, title="Quiesce window",
                                 description="Source end offsets must stay still (and selected groups empty) this "
                                             "long before the snapshot"),
        "member_session_timeout_s": Param(MEMBER_TIMEOUT_S, type="integer", minimum=0, maximum=QUIESCE_MAX_S,
                                          title="Wait for members that stopped without leaving",
                                          **({"description": member_description} if member_description else {})),
    }


def pre_copy_params() -> dict[str, Param]:
    """Whether a migration copies while the source is live, and when its rounds stop
    (kmigrate.run.copying.precopy)."""
    return {
        "pre_copy": Param(PRE_COPY, type="boolean", title="Pre-copy while the source is live"),
        "pre_copy_max_rounds": Param(PRE_COPY_MAX_ROUNDS, type="integer", minimum=1, maximum=PRE_COPY_ROUNDS_MOST,
                                     title="Pre-copy rounds at most",
                                     description="Each round copies up to the source's end when it begins"),
        "pre_copy_converged_records": Param(PRE_COPY_CONVERGED_RECORDS, type="integer", minimum=0,
                                            title="Pre-copy converged at",
                                            description="No further round once the source wrote at most this many "
                                                        "records during one: what is left is copied in the window"),
    }


def connector_params() -> dict[str, Param]:
    """The connectors a migration moves, and their config overrides on the target."""
    return {"connectors": connectors_param(), "connector_overrides": overrides_param()}


def mirror_params() -> dict[str, Param]:
    """A continuous mirror's name (the failover names it too) and pace."""
    return {
        "run_name": Param("dr-mirror", type="string", pattern=f"^{RUN_NAME}$", title="Mirror name",
                          description="Names the mirror's run manifest; a failover or drill of this mirror names it"),
        # the ranges of kmigrate.run.mirror.timings; the preflight checks them against each other
        "interval_s": Param(INTERVAL_S, type="number", minimum=MIN_INTERVAL_S, maximum=MAX_INTERVAL_S,
                            title="Status interval (s)",
                            description="The mirror's lag and heartbeat, and the groups' offsets, this often"),
        "refresh_s": Param(REFRESH_S, type="number", minimum=MIN_INTERVAL_S, maximum=MAX_PERIOD_S,
                           title="Selection refresh (s)",
                           description="New topics and partitions matching the selection are picked up this often "
                                       "(at least the status interval)"),
        "failback_of": Param(None, type=["null", "string"], pattern=f"^{RUN_NAME}$", title="Failback of",
                             description="A failback: the run_name of the mirror that was failed over (this mirror's "
                                         "source is then that DR cluster, its target the original cluster)"),
        "rebuild_diverged": Param(False, type="boolean", title="Rebuild diverged topics",
                                  description="A failback after an unplanned failover: delete on the original the "
                                              "topics whose partitions hold offsets the DR cluster never got, and "
                                              "copy them again (those offsets are discarded, listed in the report)"),
        "stale_after_s": stale_after_param("Restart after (s)",
                                           "The mirror is started again when its heartbeat is this old: at least "
                                           "10 s plus twice the status interval or 4 s, whichever is longer "
                                           f"({MIN_STALE_AFTER_S:g} s at the shortest)"),
    }


def stale_after_param(title: str, description: str) -> Param:
    """The age of a mirror's heartbeat past which it is taken for gone (by its follower, by a failover): at least
    the shortest any valid status interval allows (kmigrate.run.mirror.timings; the preflight checks it against
    the mirror's own)."""
    return Param(STALE_AFTER_S, type="number", minimum=MIN_STALE_AFTER_S, title=title, description=description)


def move_params(what: str, connectors: str, wait: str, **own: Param) -> dict[str, Param]:
    """An application's move onto a mirror's DR cluster (kafka_move_consumers, kafka_move_producers): the
    mirror's run name and clusters, what moves (`own`, the `what` of the run name's description), how
    long the move waits (`wait`), the Connect clusters and the application's `connectors`, the state
    location."""
    return {
        "run_name": run_name_param(required=True, title="Mirror name",
                                   description=f"The kafka_dr_mirror run whose DR cluster the {what} move to"),
        **kafka_params("DR Kafka connection", "Kafka provider connection of the disaster-recovery cluster"),
        **own,
        "move_wait_s": Param(MOVE_WAIT_S, type="number", minimum=MOVE_WAIT_MIN_S, maximum=MOVE_MAX_S,
                             title="Wait at most (s)", description=wait),
        **connect_params(),
        "connectors": connectors_param(connectors),
        "connector_overrides": overrides_param(),
        **state_params(),
    }
