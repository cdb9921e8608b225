"""What every step task of the DAGs decides the same way, decided here once: the run it works on,
made from the task's `params` and `run_id` (`RunFrame`, from the run's typed request), and the
wrappers around its library call: the step's timing in the run's timeline (`RunFrame.timed`), and
the errors no retry can help, turned into Airflow's failure without retry (`no_retry`). A step of a
finished run skips in the library (kmigrate.run.window.steps.skipped). The tasks in `steps` are
then a library call and its log lines each."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from typing import Any

from airflow.sdk.exceptions import AirflowFailException
from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.checks.selection import Selection
from kmigrate.run.mirror.failback import with_failback_names
from kmigrate.run.mirror.spec import with_mirror_selection
from kmigrate.run.records import timeline

from kmigrate_airflow.hooks import connect_client, kafka_cluster

log = logging.getLogger(__name__)


class RunFrame:
    """The run a task works on, from its params read once (`RunRequest.from_params`: its name is
    `run_name`, else the Airflow run id), its manifest, the two Kafka clusters and the two Connect
    clients (resolved from their Airflow connections when first used, once), and the selection (a
    mirror's where the library says the run moves it: `kmigrate.run.mirror.spec.with_mirror_selection`,
    `failover` for the failover's tasks). The rollback DAG's tasks give no run id: their `run_name`
    names the migration run they roll back. Params that break a rule fail the task without retry."""

    def __init__(self, params: dict[str, Any], run_id: str | None = None, *, failover: bool = False) -> None:
        with no_retry():  # a drill of a mirror, a planned failover (`failover`'s tasks): the mirror's selection
            request = with_failback_names(with_mirror_selection(run_request(params, run_id), failover=failover))
        self.request = request
        self.params = request.params  # as given: what the run records of its request
        self.name: str = request.name

    @cached_property
    def manifest(self) -> Manifest:
        return Manifest(self.request.state_location, self.name)

    @cached_property
    def source(self) -> ClusterConfig:
        return kafka_cluster(self.request.source_kafka_conn_id, "source")

    @cached_property
    def target(self) -> ClusterConfig:
        return kafka_cluster(self.request.target_kafka_conn_id, "target")

    @cached_property
    def selection(self) -> Selection:
        return self.request.selection

    @cached_property
    def connect(self) -> tuple[ConnectClient | None, ConnectClient | None]:
        """(source, target) Connect clients, both built at once; (None, None) when the run selects
        no connector (the DR drill has no Connect connections at all)."""
        if not self.request.connectors:
            return None, None
        return self.connect_client("source"), self.connect_client("target")

    @property
    def source_connect(self) -> ConnectClient | None:
        return self.connect[0]

    @property
    def target_connect(self) -> ConnectClient | None:
        return self.connect[1]

    def connect_client(self, side: str) -> ConnectClient:
        """The `side` ("source" or "target") Connect cluster's client, whether or not connectors are
        selected (a rollback's empty selection means all of the run's connectors)."""
        request = self.request
        return connect_client(request.source_connect_conn_id if side == "source" else request.target_connect_conn_id)

    def timed(self, step: str) -> AbstractContextManager[dict[str, Any]]:
        """The block as `step`'s run in the run's timeline, recorded when it ends without an error."""
        return timeline.timed(self.manifest, step)


def run_request(params: dict[str, Any], run_id: str | None = None) -> RunRequest:
    """The run's typed request from a task's `params` (`RunRequest.from_params`: named by its
    `run_name`, else `run_id`); params that break a rule fail the task without retry."""
    with no_retry():
        return RunRequest.from_params(params, run_id)


@contextmanager
def no_retry(*errors: type[Exception]) -> Iterator[None]:
    """The block's `errors` (any KmigrateError when none are named) fail the task at once, its
    retries left unused: bad input, or a state that only a person can change (a consumer still
    running, another run holding the topics). The failure's message is the error's own."""
    try:
        yield
    except (errors or (KmigrateError,)) as exc:
        raise AirflowFailException(str(exc)) from exc
