"""The trigger form refuses what the library refuses, where the library's rule can be written as a
JSON schema (outside audit: 20 of 35 hostile values passed the form and failed only in a task): each
value here is refused by the library check that guards it, and by the param's schema in every DAG
that has the param (`Param.resolve`, what a trigger validates). Rules a schema cannot state (a regular
expression RE2 cannot run, a cutover time in the past, stale_after_s against interval_s) stay the
preflight's. The DAGs are parsed, not run: no stack, no Airflow database."""
from __future__ import annotations

import copy

import pytest
from kmigrate.errors import KmigrateError
from kmigrate.kafka.connect import check_connector_name
from kmigrate.manifest import Manifest
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.checks.selection import compile_pattern
from kmigrate.run.connectors.migrate import check_overrides
from kmigrate.run.mirror.timings import check_timings

from tests.support.badinput import refused

_STATE = "/tmp/kmigrate-form-schema-never-written"


def _state(value):
    return lambda: Manifest(value, "r")


def _run(value):
    return lambda: Manifest(_STATE, value)


def _pattern(value):
    return lambda: compile_pattern(value, "topic include")


def _names(value):
    return lambda: [check_connector_name(n) for n in value]


def _overrides(value):
    return lambda: (check_overrides(value, list(value)), [check_connector_name(n) for n in value])


def _request(**given):
    return lambda: RunRequest.from_params({"run_name": "r", **given})


def _timings(**given):
    return lambda: check_timings(**{"interval_s": 1.0, "refresh_s": 10.0, **given})


# (param, hostile value, the library check that refuses it)
HOSTILE = [
    ("state_location", "relative/state", _state("relative/state")),
    ("state_location", " /tmp/state", _state(" /tmp/state")),
    ("state_location", "/tmp/state\x00x", _state("/tmp/state\x00x")),
    ("state_location", "/tmp/state\nx", _state("/tmp/state\nx")),
    ("state_location", "http://host/state", _state("http://host/state")),
    ("state_location", "https://host/state", _state("https://host/state")),
    ("state_location", "ftp://host/state", _state("ftp://host/state")),
    ("state_location", "s3://bucket/x::file:///y", _state("s3://bucket/x::file:///y")),
    ("state_location", "file://relative", _state("file://relative")),
    ("run_name", "../other", _run("../other")),
    ("run_name", "a/b", _run("a/b")),
    ("run_name", ".hidden", _run(".hidden")),
    ("run_name", "a::b", _run("a::b")),
    ("run_name", "x" * 201, _run("x" * 201)),
    ("mirror_run", "../m", _run("../m")),
    ("failback_of", "m/../n", _run("m/../n")),
    ("topics_include", "orders\ud800", _pattern("orders\ud800")),
    ("topics_exclude", "\udfff", _pattern("\udfff")),
    ("groups", "g\ud83d", _pattern("g\ud83d")),
    ("translate_topics", "\ud800x", _pattern("\ud800x")),
    ("connectors", ["a/../b"], _names(["a/../b"])),
    ("connectors", ["db%2Fx"], _names(["db%2Fx"])),
    ("connectors", [" db"], _names([" db"])),
    ("connectors", ["db\x00"], _names(["db\x00"])),
    ("connectors", [".."], _names([".."])),
    ("connector_overrides", {"a/b": {"file": "/x"}}, _overrides({"a/b": {"file": "/x"}})),
    ("connector_overrides", {"db": {" ": "x"}}, _overrides({"db": {" ": "x"}})),
    ("interval_s", 1e-300, _timings(interval_s=1e-300)),
    ("interval_s", 0.001, _timings(interval_s=0.001)),
    ("interval_s", 3601, _timings(interval_s=3601)),
    ("refresh_s", 0.001, _timings(refresh_s=0.001)),
    ("refresh_s", 86401, _timings(refresh_s=86401)),
    ("stale_after_s", 5, _timings(stale_after_s=5)),
    ("stale_after_s", 13.9, _timings(stale_after_s=13.9)),
    ("pre_copy_max_rounds", 0, _request(pre_copy_max_rounds=0)),
    ("pre_copy_max_rounds", 101, _request(pre_copy_max_rounds=101)),
    ("pre_copy_converged_records", -1, _request(pre_copy_converged_records=-1)),
    ("move_wait_s", 0, _request(move_wait_s=0)),
    ("move_wait_s", 3601, _request(move_wait_s=3601)),
    ("move_quiet_s", 3601, _request(move_quiet_s=3601)),
]


def form(dag, **values) -> dict:
    """The DAG's params validated as a trigger validates them (ParamValidationError names the param), with
    `values` over an ordinary trigger's (a topic pattern and a run name where the DAG has no default)."""
    params = copy.deepcopy(dag.params)
    for name, value in {**{k: v for k, v in ORDINARY.items() if k in params}, **values}.items():
        params[name] = value
    return params.validate()


ORDINARY = {"topics_include": "orders", "run_name": "m", "move_groups": ["app"], "move_topics": ["orders"]}


@pytest.fixture(scope="module")
def dags():
    from airflow.dag_processing.dagbag import DagBag

    from tests.support.airflow import PROJECT_DIR

    bag = DagBag(dag_folder=str(PROJECT_DIR / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags


@pytest.mark.parametrize(("param", "value", "library"), HOSTILE, ids=[f"{p}={v!r}"[:60] for p, v, _ in HOSTILE])
def test_each_value_the_library_refuses_the_form_refuses(dags, param, value, library):
    with pytest.raises(KmigrateError):
        library()
    having = sorted(d for d, dag in dags.items() if param in dag.params)
    if param == "stale_after_s":  # the mirror DAG's (the failover's is its own: a mirror gone after so long)
        having = ["kafka_dr_mirror"]
    assert having, f"no DAG has a param {param}"
    for dag_id in having:
        refused(f"form: {dag_id} {param}={value!r}"[:120], lambda d=dag_id: form(dags[d], **{param: value}),
                f"invalid input for param {param}")


def test_the_defaults_and_ordinary_values_still_pass(dags):
    for dag in dags.values():
        form(dag)
    for name, value in [("state_location", "/var/lib/kmigrate"), ("state_location", "s3://bucket/kmigrate"),
                        ("state_location", "file:///srv/state"), ("interval_s", 0.01), ("refresh_s", 0.5),
                        ("stale_after_s", 14), ("connectors", ["db-source", "sink #2", "déjà vu"]),
                        ("topics_include", r"orders\..*|payments"), ("groups", "app-.*")]:
        form(dags["kafka_dr_mirror"], **{name: value})
    form(dags["kafka_migration"], connectors=["db"], connector_overrides={"db": {"connection.url": "x", "n": 2}})
    form(dags["kafka_dr_drill"], mirror_run="m", connector_overrides={"sink #2": {"file": "/dr/out.txt"}})
