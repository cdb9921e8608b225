"""The kafka_migration DAG on the secure stack (SASL_SSL with SCRAM, ACLs, HTTPS Connect with basic
authentication): a mixed workload moves exactly while the source is read as the `migrator`
principal, which may only Describe and Read there, and no secret of the run is left in a log, the
manifest, the report or a process's command line."""
from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
import requests
from kmigrate.manifest import Manifest
from kmigrate.run.report import summarize
from kmigrate.workload import seed_mixed

from tests.dags.conftest import AIRFLOW_HOME
from tests.dags.test_kafka_migration import (
    all_watermarks,
    assert_migrated_exactly,
    delete_connectors,
    run_dag,
    task_states,
)
from tests.secure.results import record

CONN_IDS = {"source_kafka_conn_id": "kafka_secure_source", "target_kafka_conn_id": "kafka_secure_target",
            "source_connect_conn_id": "connect_secure_source", "target_connect_conn_id": "connect_secure_target"}
CONNECTOR_SECRET = f"connector-literal-{uuid.uuid4().hex}"  # a literal secret in a connector's config


@pytest.fixture
def secure_connections(secure_stack, monkeypatch):
    """The run's Airflow connections: Kafka as `migrator` (SCRAM-SHA-512 over TLS, the CA file),
    Connect over HTTPS with basic authentication."""
    security = secure_stack.security
    for role, cluster in zip(("source", "target"), secure_stack.clusters):
        monkeypatch.setenv(f"AIRFLOW_CONN_KAFKA_SECURE_{role.upper()}", json.dumps(
            {"conn_type": "kafka", "extra": security.client(cluster, "migrator", "SCRAM-SHA-512")}))
        user, password = security.connect_auth
        monkeypatch.setenv(f"AIRFLOW_CONN_CONNECT_SECURE_{role.upper()}", json.dumps(
            {"conn_type": "http", "host": "localhost", "port": cluster.connect_port, "schema": "https",
             "login": user, "password": password, "extra": {"verify": str(security.ca)}}))


class CommandLineWatch:
    """Reads every process's command line while the run goes on, keeping those that hold a secret."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets, self.found, self.samples = secrets, set(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.samples += 1
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = cmdline.read_bytes().decode(errors="replace")
                except OSError:
                    continue
                self.found.update(s for s in self.secrets if s in text)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def files_holding(roots: list[Path], secrets: list[str]) -> dict[str, list[str]]:
    found = {}
    for root in roots:
        for path in (p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            hits = [s for s in secrets if s.encode() in data]
            if hits:
                found[str(path)] = hits
    return found


def test_a_mixed_workload_moves_exactly_as_a_read_only_source_principal_and_no_secret_is_left(
        secure_stack, secure_connections, dagbag, tmp_path, capfd):
    prefix = f"secure{uuid.uuid4().hex[:6]}"
    w = seed_mixed(secure_stack.source, secure_stack.source_connect, prefix, tmp_path / "workload", records=300)
    connect = secure_stack.source_connect
    config = {**connect.config(w.sink_connector), "x.api.password": CONNECTOR_SECRET}
    requests.put(f"{connect.url}/connectors/{w.sink_connector}/config", json=config, auth=secure_stack.security.connect_auth,
                 verify=str(secure_stack.security.ca), timeout=30).raise_for_status()
    state = tmp_path / "state"
    source_before = all_watermarks(secure_stack.source, w.topics)
    secrets = [*secure_stack.passwords(), CONNECTOR_SECRET]
    try:
        with CommandLineWatch(secrets) as watch:
            run = run_dag(dagbag, **CONN_IDS, topics_include=w.topic_pattern, groups=w.group_pattern,
                          connectors=[w.source_connector, w.sink_connector],
                          connector_overrides={w.sink_connector: {"file": str(w.sink_file_target)}},
                          quiesce_seconds=2, state_location=str(state), run_name="secure")
        output = "".join(capfd.readouterr())
        assert str(run.state) == "success", task_states(run)
        summary = summarize(Manifest(str(state), "secure"))
        assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        manifest = Manifest(str(state), "secure")
        rows = [row for part in manifest.parts() for row in (manifest.read(part) or {}).get("rows", [])
                if isinstance(row, dict)]
        assert sum(row.get("whole_batches", 0) for row in rows) > 0  # the raw path ran over SASL_SSL
        assert_migrated_exactly(secure_stack.source, secure_stack.target, w.topics, w.groups, source_before)
        # the target's copy of the sink connector has its literal secret, read again from the source worker
        assert secure_stack.target_connect.config(w.sink_connector)["x.api.password"] == CONNECTOR_SECRET

        in_files = files_holding([state, AIRFLOW_HOME / "logs"], secrets)
        in_output = [s for s in secrets if s in output]
        record(partitions=summary["partitions"], partitions_equal=summary["partitions_equal"],
               groups_exact=summary["groups_exact"], connectors_resumed=summary["connectors_resumed"],
               secrets_found=len(watch.found) + len(in_output) + sum(len(v) for v in in_files.values()))
        assert watch.samples > 10 and not watch.found, f"secrets in a command line: {len(watch.found)}"
        assert not in_output, "a secret in the run's output"
        assert in_files == {}
    finally:
        delete_connectors((secure_stack.source_connect, secure_stack.target_connect),
                          (w.source_connector, w.sink_connector))
