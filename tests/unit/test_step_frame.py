"""The step tasks' frame (plugins/kmigrate_airflow/frame.py), from params and a run manifest alone:
which run a task works on, that connections are looked up only when used, the finished-run guard,
the step's timing, and which errors fail a task without retry. Also the bits of step logic that moved
from the tasks into the library (a rollback's states, the quiesce's start)."""
from __future__ import annotations

import logging

import pytest
from airflow.sdk.exceptions import AirflowFailException
from kmigrate.errors import ConfigError, GroupActive, KmigrateError, TopicsHeld
from kmigrate.manifest import Manifest, Part
from kmigrate.run.connectors.migrate import rollback_states
from kmigrate.run.cutover import window
from kmigrate.run.cutover.quiesce import quiesce_began
from kmigrate.run.records import events, timeline
from kmigrate.run.window import steps as window_steps

from kmigrate_airflow import frame
from kmigrate_airflow.frame import RunFrame, no_retry


def params(tmp_path, **more):
    return {"state_location": str(tmp_path), "topics_include": "orders\\..*", "source_kafka_conn_id": "src",
            "target_kafka_conn_id": "tgt", **more}


def test_the_run_is_named_by_run_name_else_by_the_airflow_run_id(tmp_path):
    assert RunFrame(params(tmp_path, run_name="nightly"), "manual__2026").name == "nightly"
    run = RunFrame(params(tmp_path, run_name=None), "manual__2026")
    assert run.name == "manual__2026"
    assert run.manifest.location == f"{tmp_path}/manual__2026"
    assert run.manifest is run.manifest  # one per task


def test_the_selection_takes_absent_and_empty_optional_params_as_none(tmp_path):
    drill = RunFrame(params(tmp_path), "r").selection  # the DR drill has no connectors or translate params
    assert (drill.topics_exclude, drill.groups, drill.connectors, drill.translate) == ("", "", (), "")
    form = RunFrame(params(tmp_path, topics_exclude=None, groups="g.*", connectors=["a", "b"],
                           translate_topics=None), "r").selection
    assert (form.topics_exclude, form.groups, form.connectors, form.translate) == ("", "g.*", ("a", "b"), "")


def test_a_drill_of_a_mirror_and_a_planned_failover_move_the_mirrors_selection(tmp_path):
    """The library decides which runs move a mirror's topics and groups instead of their own
    (kmigrate.run.mirror.spec.selection_mirror); the frame takes that request."""
    from kmigrate.run.checks.request import RunRequest
    from kmigrate.run.mirror.spec import MirrorSpec, selection_mirror, write_spec

    write_spec(Manifest(str(tmp_path), "m"), MirrorSpec("mirrored\\..*", "mirrored\\.tmp", "app-.*"))
    mirrored = ("mirrored\\..*", "mirrored\\.tmp", "app-.*")
    drill = RunFrame(params(tmp_path, mirror_run="m"), "drill")
    assert (drill.name, drill.request.mirror_run) == ("drill", "m")
    assert (drill.selection.topics_include, drill.selection.topics_exclude, drill.selection.groups) == mirrored
    assert drill.params["topics_include"] == "mirrored\\..*"  # what the drill records of its request
    failover = RunFrame(params(tmp_path, run_name="m"), "manual__2026", failover=True)
    assert (failover.name, failover.selection.topics_include, failover.selection.groups) == ("m", *mirrored[::2])
    for own in (RunFrame(params(tmp_path, run_name="m"), "r"),  # a migration, or the failover's later tasks
                RunFrame(params(tmp_path, run_name="m", unplanned=True), "r", failover=True),  # the source gone
                RunFrame(params(tmp_path, mirror_run=""), "drill")):  # a drill of its own copy
        assert (own.selection.topics_include, own.selection.groups) == ("orders\\..*", "")
    assert selection_mirror(RunRequest.from_params(params(tmp_path, mirror_run="m"), "d"), failover=True) == "m"
    with pytest.raises(AirflowFailException, match="has no mirror spec"):  # a mirror never started: no retry
        RunFrame(params(tmp_path, mirror_run="never"), "drill")


def test_connections_are_looked_up_when_first_used_and_once(tmp_path, monkeypatch):
    looked_up = []
    monkeypatch.setattr(frame, "kafka_cluster", lambda conn_id, name: looked_up.append(conn_id) or name)
    monkeypatch.setattr(frame, "connect_client", lambda conn_id: looked_up.append(conn_id) or conn_id)
    run = RunFrame(params(tmp_path), "r")
    assert run.connect == (None, None) and looked_up == []  # no connector selected: no Connect lookup
    assert (run.target, run.target) == ("target", "target") and looked_up == ["tgt"]
    with_connectors = RunFrame(params(tmp_path, connectors=["c"], source_connect_conn_id="sc",
                                      target_connect_conn_id="tc"), "r")
    assert with_connectors.target_connect == "tc" and looked_up[1:] == ["sc", "tc"]  # the pair, at once
    assert with_connectors.source_connect == "sc" and looked_up[1:] == ["sc", "tc"]
    rollback = RunFrame({"state_location": str(tmp_path), "run_name": "migrated", "connectors": [],
                         "target_connect_conn_id": "tc"})
    assert rollback.name == "migrated" and rollback.connect_client("target") == "tc"


def test_a_finished_run_skips_its_step_with_one_line_saying_why(tmp_path, caplog):
    run = RunFrame(params(tmp_path), "r")
    with caplog.at_level(logging.INFO, logger=window_steps.__name__):
        assert not window_steps.skipped(run, "its groups are left as they are")
        assert caplog.messages == []
        events.mark(run.manifest, events.RESUMED)
        assert window_steps.skipped(run, "its groups are left as they are")
    assert caplog.messages == ["the run resumed on the target already: its groups are left as they are"]


def test_a_step_is_timed_in_the_runs_timeline_when_it_succeeds(tmp_path):
    run = RunFrame(params(tmp_path), "r")
    with pytest.raises(RuntimeError), run.timed("snapshot"):
        raise RuntimeError("broker down")
    assert timeline.steps(run.manifest) == []
    with run.timed("snapshot"):
        pass
    timeline.record(run.manifest, "quiesce", 1_800_000_000.0)
    assert sorted(r["step"] for r in timeline.steps(run.manifest)) == ["quiesce", "snapshot"]


def test_only_the_named_errors_fail_without_retry_with_their_own_message():
    with pytest.raises(AirflowFailException, match="run 'x' holds t") as failed, no_retry(TopicsHeld):
        raise TopicsHeld("run 'x' holds t", holders=["x"])
    assert isinstance(failed.value.__cause__, TopicsHeld)
    with pytest.raises(GroupActive), no_retry(TopicsHeld):  # another library error: retried as before
        raise GroupActive("consumer group 'g' has members", group="g")
    with pytest.raises(AirflowFailException, match="bad param"), no_retry():  # default: any library error
        raise ConfigError("bad param")
    with pytest.raises(ValueError), no_retry():
        raise ValueError("not ours")
    assert issubclass(ConfigError, KmigrateError)


def test_a_rollback_restores_the_named_connectors_or_all_and_refuses_others():
    states = {"a": "RUNNING", "b": "PAUSED"}
    assert rollback_states(states, [], "m") == rollback_states(states, None, "m") == states
    assert rollback_states(states, ["b"], "m") == {"b": "PAUSED"}
    with pytest.raises(ConfigError, match="connectors c, d were not stopped by migration run 'm'"):
        rollback_states(states, ["a", "d", "c"], "m")


def test_the_quiesce_begins_at_its_first_sample_and_nothing_is_resumed_before_the_end(tmp_path):
    manifest = Manifest(str(tmp_path), "r")
    assert quiesce_began(manifest, 100.0) == 100.0
    manifest.write_once(f"{Part.QUIESCE}/0", {"at": 40.0})
    assert quiesce_began(manifest, 100.0) == 40.0
    assert window.resumed(manifest) == []
    manifest.write_once(Part.RESUMED, {"connectors": [{"name": "c", "state": "RUNNING"}]})
    assert window.resumed(manifest) == [{"name": "c", "state": "RUNNING"}]
