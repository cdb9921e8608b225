"""Bad params (issue 33), refused before anything is claimed, written or stopped: a `cutover_at`
that is no date-time, has no zone, lies in the past or beyond the run's wait; `connector_overrides`
that are no object, name a connector the run does not move, or hold nested or null values; patterns
RE2 cannot run (and a runaway one, which RE2 answers at once); and a re-run whose overrides differ,
refused without showing the values. The trigger form's schema refuses what it can (the cases
marked "form"), the preflight the rest, and the library refuses each again for a caller that
bypasses the form."""
from __future__ import annotations

import datetime
import json
import time
import uuid

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.request import RunRequest, check_request, record_request
from kmigrate.run.checks.selection import Selection
from kmigrate.run.preflight.checks import check_params, check_run
from kmigrate_demo.workload import FILE_SOURCE

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag


def _utc(**delta) -> str:
    return (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(**delta)).isoformat(timespec="seconds")


def _preflight(state, **params):
    """The preflight's param checks, as the preflight task calls them."""
    full = {"topics_include": "anything", "connectors": [], "connector_overrides": {}, "state_location": str(state),
            "run_name": "bad", **params}
    return lambda: check_params(RunRequest.from_params(full), Manifest(str(state), "bad"))


@pytest.fixture
def connector(stack, tmp_path):
    """A running connector on the source Connect cluster; the cases check it is still running."""
    name = file_source(stack.source, stack.source_connect, tmp_path, "badparams")
    yield name
    stack.source_connect.delete(name)


def file_source(cluster, connect, folder, prefix: str) -> str:
    """A file source connector running on `connect` into a new topic of `cluster`; its name."""
    name, topic = f"{prefix}-{uuid.uuid4().hex[:8]}", f"{prefix}-{uuid.uuid4().hex[:8]}.lines"
    with ClusterAdmin(cluster) as admin:
        admin.create_topic(topic, 1, {})
    data = folder / f"{name}.txt"
    data.write_text("line\n")
    connect.create(name, {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(data), "topic": topic})
    connect.wait_for(name, lambda st: st["connector"]["state"] == "RUNNING", "RUNNING", 60)
    return name


def untouched(stack, state, name):
    """`written`: the state folder and the connector: not stopped on the source, not on the target."""
    def left():
        out = nothing_at(state)()
        if stack.source_connect.state(name) != "RUNNING":
            out.append(f"{name} {stack.source_connect.state(name)} on the source")
        if name in stack.target_connect.connectors():
            out.append(f"{name} created on the target")
        return out
    return left


# --- cutover_at -------------------------------------------------------------------------------

def test_cutover_at_that_is_no_date_time_or_has_no_zone_is_refused_by_the_form(dagbag, tmp_path):
    state = tmp_path / "state"
    for kind, value in [("form: cutover_at not a date-time", "tomorrow at 5"),
                        ("form: cutover_at without a zone", "2026-12-01T22:00:00")]:
        refused(kind, lambda v=value: run_dag(dagbag, topics_include="x", cutover_at=v, state_location=str(state)),
                "cutover_at", value, written=nothing_at(state))


def test_cutover_at_in_the_past_is_refused_by_the_preflight(stack, dagbag, tmp_path, capfd):
    state = tmp_path / "state"
    past = _utc(hours=-1)
    run = run_dag(dagbag, topics_include="anything", cutover_at=past, state_location=str(state), run_name="bad")
    captured = capfd.readouterr()
    refused_by_dag("cutover_at in the past", run, captured.out + captured.err, f"cutover_at '{past}' is in the past",
                   "give a time ahead", "leave it empty", written=nothing_at(state))


def test_bad_cutover_at_is_refused_by_the_library(tmp_path):
    state = tmp_path / "state"
    refused("cutover_at not a date-time", _preflight(state, cutover_at="tomorrow at 5"),
            "cutover_at 'tomorrow at 5' is not a date-time", "with its zone", written=nothing_at(state))
    refused("cutover_at without a zone", _preflight(state, cutover_at="2026-12-01T22:00:00"),
            "cutover_at '2026-12-01T22:00:00' has no time zone", "add +00:00 or Z", written=nothing_at(state))
    far = _utc(days=45)
    refused("cutover_at beyond the run's wait", _preflight(state, cutover_at=far),
            f"cutover_at '{far}' is more than 30 days ahead", "within 30 days", written=nothing_at(state))


# --- connector_overrides ----------------------------------------------------------------------

def test_overrides_that_are_no_flat_object_are_refused_by_the_form(dagbag, tmp_path):
    state = tmp_path / "state"
    for kind, overrides, word in [("form: override not an object", {"c": "notadict"}, "notadict"),
                                  ("form: override nested value", {"c": {"file": {"path": "/x"}}}, "'path'")]:
        refused(kind, lambda o=overrides: run_dag(dagbag, topics_include="x", connectors=["c"], connector_overrides=o,
                                                  state_location=str(state)),
                "connector_overrides", word, written=nothing_at(state))


def test_override_for_a_connector_not_selected_is_refused_before_any_connector_stops(stack, dagbag, tmp_path, capfd,
                                                                                     connector):
    state = tmp_path / "state"
    run = run_dag(dagbag, topics_include="anything", connectors=[connector], state_location=str(state),
                  run_name="bad", connector_overrides={connector: {"tasks.max": "1"}, "no-such": {"file": "/x"}})
    captured = capfd.readouterr()
    refused_by_dag("override for a connector not selected", run, captured.out + captured.err,
                   "connector_overrides names connector 'no-such'", f"selected connectors ('{connector}')",
                   "add it to connectors", written=untouched(stack, state, connector))


def test_bad_overrides_are_refused_by_the_library(stack, tmp_path, connector):
    state = tmp_path / "state"
    for kind, overrides, words in [
        ("override not an object", {connector: "notadict"},
         (f"connector_overrides['{connector}'] is a str, not an object", '"key": "value"')),
        ("overrides not an object at all", "notadict", ("connector_overrides is a str, not an object",)),
        ("override nested value", {connector: {"transforms": {"a": "b"}}},
         (f"connector_overrides['{connector}']['transforms'] is a nested object", "as one string")),
        ("override list value", {connector: {"topics": ["a", "b"]}}, ("['topics'] is a nested list", "comma-separated")),
        ("override null value", {connector: {"file": None}}, ("['file'] is null", "cannot remove a key")),
        ("override renames the connector", {connector: {"name": "other"}}, ("renames the connector", "drop")),
        ("override with an empty key", {connector: {"": "x"}}, ("empty config key",)),
    ]:
        refused(kind, _preflight(state, connectors=[connector], connector_overrides=overrides), *words,
                written=untouched(stack, state, connector))


def test_a_rerun_with_another_override_value_names_the_key_not_the_value(tmp_path):
    state = tmp_path / "state"
    manifest = Manifest(str(state), "db-move")
    params = {"topics_include": "orders", "connectors": ["db"], "state_location": str(state), "run_name": "db-move",
              "connector_overrides": {"db": {"connection.password": "hunter2-first", "topics": "orders"}}}
    record_request(manifest, params)  # the run's first trigger
    recorded = json.dumps(manifest.read(Part.PARAMS))
    assert "hunter2" not in recorded
    before = {p: manifest.read(p) for p in manifest.parts()}
    again = {**params, "connector_overrides": {"db": {"connection.password": "hunter2-second", "topics": "orders"}}}
    exc = refused("re-run with another override value", lambda: check_request(manifest, again),
                  "run 'db-move' was started with other params",
                  "connector_overrides['db']['connection.password']: <value differs>",
                  written=lambda: [p for p in manifest.parts() if manifest.read(p) != before.get(p)])
    assert "hunter2" not in str(exc)


# --- regular expressions ----------------------------------------------------------------------

def test_patterns_re2_cannot_run_are_refused_with_how_to_rewrite_them(stack):
    for kind, selection, words in [
        ("regex with a backreference", Selection(r"(orders)\.\1"), ("topic include", "backreference", "with |")),
        ("regex with a lookahead", Selection("orders.*", topics_exclude=r"(?!x).*"),
         ("topic exclude", "lookahead", "exclude pattern")),
        ("regex with a lookbehind", Selection("x", groups=r".*(?<!-test)"), ("consumer group", "lookbehind")),
        ("regex with a possessive quantifier", Selection("x", translate=r"t.*+"),
         ("translate topics", "possessive", "drop it")),
        ("regex with verbose mode", Selection(r"(?x) orders \. v1"), ("verbose mode", "without spaces")),
    ]:
        refused(kind, lambda s=selection: check_run(stack.source, stack.target, None, None, s), *words, "RE2")


def test_a_runaway_pattern_is_answered_at_once(stack):
    """`(x+)+` against a 249-character topic name that ends in another character: Python's re
    would try 2**248 ways; RE2 says no match at once, so the run is refused for matching nothing."""
    name = "x" * 248 + "-"
    with ClusterAdmin(stack.source) as admin:
        if name not in admin.list_topics():
            admin.create_topic(name, 1, {})
    began = time.monotonic()
    try:
        refused("runaway regex", lambda: check_run(stack.source, stack.target, None, None, Selection("(x+)+")),
                "no topic on the source cluster", "'(x+)+'", "fix the selection")
        assert time.monotonic() - began < 30  # the clusters' round trips; the match itself takes microseconds
    finally:
        with ClusterAdmin(stack.source) as admin:
            for future in admin.client.delete_topics([name], operation_timeout=30).values():
                future.result()


def test_a_pattern_re2_cannot_run_is_refused_by_the_drill_preflight(stack, dagbag, tmp_path, capfd):
    run = run_dag(dagbag, "kafka_dr_drill", topics_include=r"(orders)\.\1", state_location=str(tmp_path / "state"))
    captured = capfd.readouterr()
    refused_by_dag("drill: regex RE2 cannot run", run, captured.out + captured.err,
                   r"topic include pattern '(orders)\\.\\1' uses a backreference", "list the names with |",
                   written=nothing_at(tmp_path / "state"))


def test_a_rollback_naming_a_connector_its_run_did_not_stop_changes_nothing(stack, dagbag, tmp_path, capfd):
    """The rollback DAG given a connector its migration run did not stop, beside one it did: refused by
    its first task before the run's own copy on the target is stopped (nothing half rolled back)."""
    name = file_source(stack.target, stack.target_connect, tmp_path, "badrollback")  # the run's copy on the target
    try:
        state = tmp_path / "state"
        Manifest(str(state), "m").write_once(Part.CONNECTOR_STATES, {"states": {name: "RUNNING"}})
        run = run_dag(dagbag, "kafka_migration_rollback", run_name="m", state_location=str(state),
                      connectors=[name, "not-stopped"])
        captured = capfd.readouterr()
        refused_by_dag("rollback: a connector the run did not stop", run, captured.out + captured.err,
                       "not-stopped were not stopped by migration run 'm'", failed_task="stop_target_copies",
                       written=lambda: [] if stack.target_connect.state(name) == "RUNNING" else [f"{name} stopped"])
    finally:
        stack.target_connect.delete(name)
