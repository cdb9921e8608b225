"""Bad input the project already refused before issue 33's audit, each tried again against the real
stack so that `make test-bad-input` counts it: the error is a KmigrateError naming the thing and the
way out, and nothing is written first."""
from __future__ import annotations

import json
import os
import uuid

import pytest
from kmigrate.claims.runs import check_topics_free, claim_topics, release_topics
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.offsets import OffsetTranslator
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate_spark.clients import CLIENTS_ENV, load_clients, load_clients_from
from kmigrate.run.connectors.secrets import restored
from kmigrate.run.copying.plan import plan_from_topics, read_plan
from kmigrate.run.checks.request import check_request, record_request
from kmigrate.run.checks.selection import Selection
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.run.preflight.checks import check_distinct, check_run
from kmigrate.run.records.snapshot import read_snapshot
from kmigrate_spark.conf import check_connect_server

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag


@pytest.fixture
def topic(stack):
    name = f"badknown-{uuid.uuid4().hex[:8]}"
    with ClusterAdmin(stack.source) as admin:
        admin.create_topic(name, 1, {})
    return name


def test_selections_that_are_not_regular_expressions(stack, tmp_path):
    for kind, selection, words in [
        ("topic include not a regular expression", Selection("orders("), ("topic include", "orders(")),
        ("topic exclude not a regular expression", Selection("x", topics_exclude="[a-"), ("topic exclude",)),
        ("group pattern not a regular expression", Selection("x", groups="*g"), ("consumer group",)),
        ("translate pattern not a regular expression", Selection("x", translate="(t"), ("translate",)),
    ]:
        refused(kind, lambda s=selection: check_run(stack.source, stack.target, None, None, s), *words)


def test_clusters_that_cannot_serve_as_a_pair(stack, topic):
    refused("no topic matches the selection",
            lambda: check_run(stack.source, stack.target, None, None, Selection("nothing-matches-this-\\d{9}")),
            "no topic on the source cluster", "fix the selection")
    refused("target is the source (same address)", lambda: check_distinct(stack.source, stack.source),
            "same cluster", "pick another target")
    port = stack.source.bootstrap_servers.rsplit(":", 1)[1]
    other_name = ClusterConfig.from_bootstrap("target", f"127.0.0.1:{port}")
    refused("target is the source (another address)", lambda: check_distinct(stack.source, other_name),
            "same cluster", "id")
    refused("connectors selected without Connect connections",
            lambda: check_run(stack.source, stack.target, None, None, Selection(topic, connectors=("c",))),
            "both Connect connection ids")


def test_connect_clusters_and_connectors_that_are_not_there(stack, topic):
    refused("connector not on the source worker",
            lambda: check_run(stack.source, stack.target, stack.source_connect, stack.target_connect,
                              Selection(topic, connectors=(f"no-such-{topic}",))), f"no-such-{topic}")
    closed = ConnectClient("http://127.0.0.1:1")
    refused("Connect worker not answering",
            lambda: check_run(stack.source, stack.target, stack.source_connect, closed,
                              Selection(topic, connectors=("c",))), "127.0.0.1:1")


def test_spark_connect_servers_that_are_not_one(stack):
    from kmigrate_airflow.hooks import spark_connect_url

    refused("Spark Connect connection of another type", lambda: spark_connect_url("kafka_source"),
            "'kafka_source'", "not a Spark Connect connection", "spark_connect_conn_id")
    refused("Spark Connect server not answering", lambda: check_connect_server("sc://127.0.0.1:1", timeout_s=2),
            "sc://127.0.0.1:1")


def test_run_names_and_manifests_refused(stack, tmp_path, topic):
    state = tmp_path / "state"
    refused("run name not a folder name", lambda: Manifest(str(state), "has spaces/and slashes"),
            "has spaces/and slashes", written=nothing_at(state))
    refused("manifest part name invalid", lambda: Manifest(str(state), "ok").read("../up"), "../up",
            written=nothing_at(state))
    refused("state location of an unknown file system", lambda: Manifest("nosuchfs://bucket/x", "ok"),
            "nosuchfs://bucket/x")
    manifest = Manifest(str(state), "taken")
    record_request(manifest, {"topics_include": topic, "groups": None})
    before = sorted(p.name for p in (state / "taken").rglob("*"))
    refused("run name reused with other params",
            lambda: check_request(manifest, {"topics_include": topic + "x", "groups": None}),
            "topics_include", "new run_name")
    assert sorted(p.name for p in (state / "taken").rglob("*")) == before
    refused("a step before the snapshot", lambda: read_snapshot(Manifest(str(state), "fresh")),
            "no snapshot", "snapshot step first", written=nothing_at(state / "fresh"))
    refused("a copy before the plan", lambda: read_plan(Manifest(str(state), "fresh")), "snapshot step first",
            written=nothing_at(state / "fresh"))
    refused("a rollback of a run that stopped nothing",
            lambda: connector_steps.states_before(Manifest(str(state), "fresh")), "no connector states",
            written=nothing_at(state / "fresh"))
    refused("a snapshot with modes for topics not selected",
            lambda: take_snapshot(Manifest(str(state), "modes"), stack.source, topics_include=topic,
                                  modes={"not-selected": "translate"}), "not-selected",
            written=nothing_at(state / "modes"))
    refused("a copy mode that is not one", lambda: plan_from_topics({topic: {"partitions": []}}, {topic: "mirror"}),
            "'mirror'", "preserve")


def test_topics_held_by_another_run(stack, topic):
    claim_topics(stack.target, f"holder-{topic}", [topic])
    try:
        refused("topics held by another run", lambda: check_topics_free(stack.target, f"other-{topic}", [topic]),
                f"holder-{topic}", "release")
    finally:
        release_topics(stack.target, f"holder-{topic}")


def test_offsets_of_topics_outside_the_run(stack):
    translator = OffsetTranslator({"in-run": "translate"}, {})
    refused("a group offset on a topic not in the run", lambda: translator.target_offset("elsewhere", 0, 5),
            "elsewhere[0]", "not part of this run's plan")
    refused("a translated offset before the copy", lambda: translator.target_offset("in-run", 0, 5),
            "in-run[0]", "run the copy step first")


def test_client_config_files_refused(stack, tmp_path, monkeypatch):
    missing = tmp_path / "nope.json"
    refused("clients file missing", lambda: load_clients(missing), str(missing), "check the path")
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps({"source": {}, "target": {}}))
    os.chmod(shared, 0o644)
    refused("clients file readable by others", lambda: load_clients(shared), "readable by others", "chmod 600")
    one_sided = tmp_path / "one.json"
    one_sided.write_text(json.dumps({"source": {"bootstrap.servers": "localhost:1"}}))
    os.chmod(one_sided, 0o600)
    refused("clients file without a target", lambda: load_clients(one_sided), "'source' and 'target'")
    monkeypatch.delenv(CLIENTS_ENV, raising=False)
    refused("no clients given to a Spark job", lambda: load_clients_from(None), "--clients", CLIENTS_ENV)


def test_connector_secrets_without_their_source_worker(stack):
    entry = {"config": {"connector.class": "X", "db.password": "[kmigrate: secret not stored]"},
             "secret_keys": ["db.password"]}
    refused("connector secrets with no source worker to read them from", lambda: restored(entry, "c", None),
            "'c'", "db.password", "Connect connection")


@pytest.mark.parametrize("bad, words", [
    ({"topics_include": "orders("}, ("is not a valid regular expression",)),
    ({"source_kafka_conn_id": "no_such_connection"}, ("'no_such_connection' is not defined in Airflow",)),
    ({"target_kafka_conn_id": "kafka_source"}, ("source and target are the same cluster",)),
    ({"spark_connect_conn_id": "spark_connect_unreachable"},
     ("cannot reach the Spark Connect server at sc://127.0.0.1:1", "'spark_connect_unreachable'")),
    ({"spark_connect_conn_id": "kafka_source"}, ("'kafka_source' is of type 'kafka', not a Spark Connect connection",
                                                 "spark_connect_conn_id")),
], ids=["bad-regex", "unknown-connection", "same-cluster", "unreachable-spark-connect",
        "spark-connect-of-another-type"])
def test_bad_params_are_refused_by_the_preflight(stack, dagbag, tmp_path, capfd, monkeypatch, bad, words):
    # a Spark Connect connection whose server does not answer (nothing listens on port 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_UNREACHABLE",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}))
    state = tmp_path / "state"
    run = run_dag(dagbag, **{"topics_include": "anything", "state_location": str(state), "run_name": "bad", **bad})
    captured = capfd.readouterr()
    refused_by_dag(f"form: {next(iter(bad))} {next(iter(bad.values()))}", run, captured.out + captured.err, *words,
                   written=nothing_at(state))


def test_the_trigger_form_refuses_a_run_name_that_is_no_folder_name(dagbag, tmp_path):
    refused("form: run_name with a slash",
            lambda: run_dag(dagbag, topics_include="x", run_name="has spaces/and slashes",
                            state_location=str(tmp_path / "state")), "run_name", written=nothing_at(tmp_path / "state"))
