"""An outside audit's wrong or missing checks, and the inputs that ended in a bare traceback: each is
now a KmigrateError naming the thing and the way out, before anything is written. A drill of a mirror
takes its connectors from the mirror, so `connector_overrides` of those are accepted and the advice
for another is one a drill can follow; a mirror's timings fit each other (`timings`); `.*` leaves out
kmigrate's claims topic and Kafka Connect's storage topics. Pure checks, but for the two on the stack."""
from __future__ import annotations

import json
import os

from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.request import RunRequest, check_request
from kmigrate.run.checks.selection import Selection, selected_topics
from kmigrate.run.connectors.migrate import check_overrides
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.preflight.checks import check_params
from kmigrate_spark.clients import CLIENTS_ENV, load_clients, load_clients_from

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag

DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON, nested deeper than Python's recursion limit


def _part_file(state, run: str, part: str, text: str):
    folder = state / run
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(state, 0o700)
    (folder / f"{part}.json").write_text(text)
    return folder / f"{part}.json"


# --- bare tracebacks ----------------------------------------------------------------------------

def test_a_lone_surrogate_in_a_pattern():
    refused("regex with a lone surrogate", lambda: Selection("orders\ud800").check(), "topic include",
            "surrogate", "not a character", "remove it")


def test_state_locations_that_cannot_be_opened(tmp_path, monkeypatch):
    refused("state location with a NUL", lambda: Manifest(f"{tmp_path}/state\x00x", "r"), "state location",
            "control character", written=nothing_at(tmp_path / "state"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jvm"))  # pyarrow's libhdfs finds no JVM there
    refused("hdfs:// without a JVM", lambda: Manifest("hdfs://127.0.0.1:1/kmigrate-state", "r"),
            "'hdfs://127.0.0.1:1/kmigrate-state' cannot be opened", "needs a JVM", "JAVA_HOME")


def test_json_nested_too_deep(tmp_path, monkeypatch):
    state = tmp_path / "state"
    part = _part_file(state, "r", Part.SNAPSHOT, DEEP)
    refused("manifest part nested too deep", lambda: Manifest(str(state), "r").read(Part.SNAPSHOT),
            "nested too deep", str(part), "delete")
    clients = tmp_path / "clients.json"
    clients.write_text(DEEP)
    os.chmod(clients, 0o600)
    refused("clients file nested too deep", lambda: load_clients(clients), str(clients), "nested too deep")
    monkeypatch.setenv(CLIENTS_ENV, DEEP)
    refused("clients env nested too deep", lambda: load_clients_from(None), CLIENTS_ENV, "nested too deep")


def test_a_recorded_request_of_the_wrong_shape(tmp_path):
    state = tmp_path / "state"
    for run, recorded in [("list", {"params": ["orders"], "salt": "ab"}), ("salt", {"params": {}, "salt": 5}),
                          ("none", {"other": 1})]:
        manifest = Manifest(str(state), run)
        manifest.write_once(Part.PARAMS, recorded)
        refused(f"recorded request of the wrong shape ({run})",
                lambda m=manifest: check_request(m, {"topics_include": "orders"}), "part 'params'",
                "is not a recorded request", "new run_name")


def test_connectors_that_are_no_list():
    for kind, connectors in [("connectors a number", 5), ("connectors a string", "db"), ("connectors of numbers", [1])]:
        refused(kind, lambda c=connectors: check_overrides({"db": {"k": "v"}}, c), "connectors is",
                "not a list of connector names")


def test_a_connect_connection_whose_extra_is_a_list(monkeypatch):
    from kmigrate_airflow.hooks import connect_client

    monkeypatch.setenv("AIRFLOW_CONN_CONNECT_EXTRA_LIST", json.dumps(
        {"conn_type": "http", "host": "localhost", "port": 18083, "extra": ["verify", False]}))
    refused("Connect connection extra a list", lambda: connect_client("connect_extra_list"),
            "'connect_extra_list'", "extra is a list", "JSON object")


# --- a mirror's timings -------------------------------------------------------------------------

def test_mirror_timings_out_of_range_or_not_fitting_each_other(tmp_path):
    state = tmp_path / "state"
    for kind, spec, words in [
        ("mirror interval_s a string", MirrorSpec("x", interval_s="1"), ("interval_s", "str '1'", "not a number")),
        ("mirror interval_s 1e-300", MirrorSpec("x", interval_s=1e-300), ("interval_s", "between 0.01")),
        ("mirror interval_s NaN", MirrorSpec("x", interval_s=float("nan")), ("interval_s", "not a number")),
        ("mirror refresh_s below interval_s", MirrorSpec("x", interval_s=5, refresh_s=1),
         ("refresh_s", "between its status interval")),
    ]:
        refused(kind, lambda s=spec: write_spec(Manifest(str(state), "m"), s), *words, written=nothing_at(state))
    params = {"topics_include": "x", "connectors": [], "state_location": str(state), "run_name": "m",
              "interval_s": 1.0, "refresh_s": 10.0}
    refused("mirror stale_after_s below its intervals and the status timeout",
            lambda: check_params(request({**params, "stale_after_s": 5.0}), Manifest(str(state), "m")),
            "stale_after_s (5.0 s) is too short", "at least 14", "kill", written=nothing_at(state))
    refused("mirror stale_after_s below a long interval",
            lambda: check_params(request({**params, "interval_s": 60.0, "refresh_s": 60.0, "stale_after_s": 100.0}),
                                 Manifest(str(state), "m")), "at least 130", written=nothing_at(state))
    assert check_params(request({**params, "stale_after_s": 60.0}), Manifest(str(state), "m")) is None


# --- a drill's connector_overrides ---------------------------------------------------------------

def request(params):
    """The run request of `params`, as the preflight task reads them (its run name theirs)."""
    return RunRequest.from_params(params)


def _drill(state, **params):
    return {"topics_include": "x", "mirror_run": "", "state_location": str(state), "run_name": "drill", **params}


def test_a_drill_of_a_mirror_takes_overrides_of_the_mirrors_connectors(tmp_path):
    state = tmp_path / "state"
    write_spec(Manifest(str(state), "m"), MirrorSpec("x", connectors=("db-source", "file-sink")))
    before = sorted(p for p in state.rglob("*"))
    accepted = _drill(state, mirror_run="m", connector_overrides={"file-sink": {"file": "/dr/out.txt"}})
    assert check_params(request(accepted), Manifest(str(state), "drill")) is None
    refused("drill override for a connector its mirror does not keep",
            lambda: check_params(request(_drill(state, mirror_run="m", connector_overrides={"other": {"file": "/x"}})),
                                 Manifest(str(state), "drill")),
            "names connector 'other'", "the connectors the mirror of run 'm' keeps", "'db-source', 'file-sink'",
            "start a kafka_dr_mirror run with it in connectors", written=lambda: sorted(
                str(p) for p in set(state.rglob("*")) - set(before)))
    refused("override in a drill without mirror_run",
            lambda: check_params(request(_drill(state, connector_overrides={"db-source": {"k": "v"}})),
                                 Manifest(str(state), "drill")),
            "a drill without mirror_run", "drop connector_overrides", "mirror_run")


def test_the_drill_preflight_says_what_to_do_with_an_override_for_another_connector(stack, dagbag, tmp_path, capfd):
    state = tmp_path / "state"
    write_spec(Manifest(str(state), "m"), MirrorSpec("x", connectors=("db-source",)))
    run = run_dag(dagbag, "kafka_dr_drill", topics_include="x", mirror_run="m", state_location=str(state),
                  connector_overrides={"no-such": {"file": "/x"}})
    captured = capfd.readouterr()
    refused_by_dag("drill: override for a connector its mirror does not keep", run, captured.out + captured.err,
                   "connector_overrides names connector 'no-such'", "the connectors the mirror of run 'm' keeps",
                   "start a kafka_dr_mirror run with it in connectors")


# --- what .* selects ----------------------------------------------------------------------------

def test_a_wildcard_leaves_out_connects_storage_topics_and_the_claims_topic(stack):
    """The stack's Connect workers keep their storage in _connect-configs, _connect-offsets and
    _connect-status on both clusters; the target holds kmigrate-claims."""
    for cluster in (stack.source, stack.target):
        every = selected_topics(cluster, Selection(".*"))
        assert not [t for t in every if t.startswith("_connect-") or t == "kmigrate-claims"], every
    assert selected_topics(stack.source, Selection(r"_connect-offsets")) == ["_connect-offsets"]
