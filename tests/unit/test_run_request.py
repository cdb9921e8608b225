"""The run's request read once from its params (kmigrate.run.checks.request.RunRequest): the run
named by run_name else the run id, each optional param's default when it is left out or empty, one
meaning of the Spark parallelism, and each param that breaks its rule refused naming it and what to
give instead. The params stay as given: the run records those."""
from __future__ import annotations

import datetime

import pytest
from kmigrate.errors import ConfigError
from kmigrate.manifest import ManifestError
from kmigrate.run.checks.request import (
    MEMBER_TIMEOUT_S,
    MOVE_QUIET_S,
    MOVE_WAIT_S,
    PRE_COPY,
    PRE_COPY_CONVERGED_RECORDS,
    PRE_COPY_MAX_ROUNDS,
    STALE_AFTER_S,
    RunRequest,
    run_name,
)
from kmigrate.renames import Renames
from kmigrate.run.checks.selection import Selection


def test_the_run_is_named_by_run_name_else_by_the_run_id():
    assert RunRequest.from_params({"run_name": "nightly"}, "manual__2026").name == "nightly"
    for empty in ({}, {"run_name": None}, {"run_name": ""}):
        assert RunRequest.from_params(empty, "manual__2026").name == "manual__2026"
        assert run_name(empty, "manual__2026") == "manual__2026"
    assert RunRequest.from_params({"run_name": "migrated"}).name == "migrated"  # a rollback names the run


def test_a_name_no_folder_can_hold_is_refused_naming_the_rule():
    with pytest.raises(ManifestError, match=r"run name 'a::b' is refused: .* never '::'.*Choose another run_name"):
        RunRequest.from_params({"run_name": "a::b"}, "r")
    with pytest.raises(ManifestError, match="Choose another run_name"):
        RunRequest.from_params({}, None)  # neither a run_name nor a run id


def test_optional_params_left_out_or_empty_take_their_defaults():
    given = RunRequest.from_params({"state_location": "/s", "topics_include": "t.*"}, "r")
    assert (given.quiesce_seconds, given.member_session_timeout_s, given.stale_after_s) == (None, MEMBER_TIMEOUT_S,
                                                                                            STALE_AFTER_S)
    assert (given.spark.tasks_at_once, given.spark.connect_conn_id, given.cutover_at) == (0, "", None)
    assert (given.pre_copy, given.dry_run, given.unplanned, given.mirror_run, given.connectors) == (
        PRE_COPY, False, False, "", None)
    assert (given.pre_copy_max_rounds, given.pre_copy_converged_records) == (PRE_COPY_MAX_ROUNDS,
                                                                              PRE_COPY_CONVERGED_RECORDS)
    assert given.selection == Selection("t.*")
    form = {"state_location": "/s", "topics_include": "t.*", "topics_exclude": None, "groups": "g.*",
            "connectors": ["a", "b"], "translate_topics": None, "acls": None, "spark_parallelism": "",
            "cutover_at": "", "quiesce_seconds": "", "spark_connect_conn_id": None, "pre_copy_max_rounds": None,
            "pre_copy_converged_records": "", "pre_copy": None}
    empty = RunRequest.from_params(form, "r")
    assert empty.selection == Selection("t.*", "", "g.*", ("a", "b"), "", "principals")
    assert (empty.spark.tasks_at_once, empty.cutover_at, empty.quiesce_seconds, empty.pre_copy) == (0, None, None,
                                                                                                    PRE_COPY)
    assert RunRequest.from_params({**form, "pre_copy": False}, "r").pre_copy is False  # turned off: off
    assert (empty.pre_copy_max_rounds, empty.pre_copy_converged_records) == (PRE_COPY_MAX_ROUNDS,
                                                                              PRE_COPY_CONVERGED_RECORDS)


def test_the_fields_are_typed_and_the_params_kept_as_given():
    params = {"state_location": "/s", "run_name": "move", "quiesce_seconds": 10, "spark_parallelism": 4,
              "spark_connect_conn_id": "spark_connect_default", "cutover_at": "2026-11-25T22:00:00Z",
              "pre_copy": True, "dry_run": False, "connectors": ["sink"], "connector_overrides": {"sink": {"k": "v"}},
              "pre_copy_max_rounds": 3, "pre_copy_converged_records": 0}
    request = RunRequest.from_params(params, "manual__2026")
    assert request.params is params
    assert request.cutover_at == datetime.datetime(2026, 11, 25, 22, tzinfo=datetime.timezone.utc)
    assert (request.quiesce_seconds, request.spark.tasks_at_once, request.spark.connect_conn_id) == (
        10, 4, "spark_connect_default")
    assert (request.pre_copy, request.connectors) == (True, ("sink",))
    assert (request.pre_copy_max_rounds, request.pre_copy_converged_records) == (3, 0)
    assert request.connector_overrides == {"sink": {"k": "v"}}
    mirrored = request.with_params(topics_include="m.*", groups=None)  # a failover's: its mirror's selection
    assert (mirrored.name, mirrored.selection.topics_include, mirrored.selection.groups) == ("move", "m.*", "")


@pytest.mark.parametrize("param, value, says", [
    ("quiesce_seconds", -1, r"quiesce_seconds is -1; give a whole number from 0 to 3600"),
    ("quiesce_seconds", 3601, r"quiesce_seconds is 3601; give a whole number from 0 to 3600"),
    ("quiesce_seconds", "10", r"quiesce_seconds is '10'; give a whole number"),
    ("member_session_timeout_s", True, r"member_session_timeout_s is True; give a whole number .* default \(45\)"),
    ("pre_copy_max_rounds", 0, r"pre_copy_max_rounds is 0; give a whole number from 1 to 100, or leave it out for "
                               r"its default \(5\)"),
    ("pre_copy_max_rounds", 101, r"pre_copy_max_rounds is 101; give a whole number from 1 to 100"),
    ("pre_copy_converged_records", -1, r"pre_copy_converged_records is -1; give a whole number from 0 up, or leave "
                                       r"it out for its default \(10000\)"),
    ("spark_parallelism", 1.5, r"spark_parallelism is 1.5; give a whole number from 0 up, or leave it out for its "
                               r"default \(0\)"),
    ("stale_after_s", "soon", r"stale_after_s is 'soon'; give a number of seconds, 0 or more, or leave it out for "
                              r"its default \(60\)"),
    ("interval_s", -2, r"interval_s is -2; give a number of seconds, 0 or more$"),
    ("cutover_at", "tomorrow", r"cutover_at 'tomorrow' is not a date-time; give an ISO 8601 date-time with its zone"),
    ("connectors", "db", r"connectors is str 'db', not a list of connector names; give \[\"name\", ...\]"),
    ("connectors", 5, r"connectors is int 5, not a list of connector names"),
    ("connectors", ["db", 1], r"connectors is list \['db', 1\], not a list of connector names"),
])
def test_a_param_that_breaks_its_rule_is_refused_naming_it_and_the_way_out(param, value, says):
    with pytest.raises(ConfigError, match=says):
        RunRequest.from_params({"state_location": "/s", param: value}, "r")


def test_connectors_left_out_are_none_and_given_empty_or_null_are_none_selected():
    """A DAG without a connectors param (a drill: its mirror's connectors, if any) is told from a run
    that selects none."""
    assert RunRequest.from_params({}, "r").connectors is None
    assert RunRequest.from_params({"connectors": None}, "r").connectors == ()
    assert RunRequest.from_params({"connectors": ""}, "r").connectors == ()
    assert RunRequest.from_params({"connectors": []}, "r").connectors == ()
    assert RunRequest.from_params({"connectors": ["a", "b"]}, "r").connectors == ("a", "b")


def test_a_cutover_at_without_zone_is_read_as_utc_for_a_run_started_before_zones_were_required():
    # the preflight refuses it in a new run (schedule.check_cutover_at, told by cutover_zoned); a started run continues
    request = RunRequest.from_params({"cutover_at": "2026-11-25T22:00:00"}, "r")
    assert request.cutover_at == datetime.datetime(2026, 11, 25, 22, tzinfo=datetime.timezone.utc)
    assert not request.cutover_zoned
    assert RunRequest.from_params({"cutover_at": "2026-11-25T22:00:00Z"}, "r").cutover_zoned


def test_the_groups_of_a_move_are_a_list_of_names_each_once():
    given = RunRequest.from_params({"run_name": "mirror", "move_groups": ["app-a", "app-b"]})
    assert (given.move_groups, given.move_wait_s) == (("app-a", "app-b"), MOVE_WAIT_S)
    assert RunRequest.from_params({"run_name": "mirror"}).move_groups == ()
    for bad in ("app-a", ["app-a", "app-a"], ["app-a", ""], [3]):
        with pytest.raises(ConfigError, match="move_groups is .*give a list of names, each once"):
            RunRequest.from_params({"run_name": "mirror", "move_groups": bad})
    with pytest.raises(ConfigError, match="move_wait_s is -1; give a number of seconds"):
        RunRequest.from_params({"run_name": "mirror", "move_wait_s": -1})
    for bad in (0, 0.5, 3601):
        with pytest.raises(ConfigError, match=rf"move_wait_s is {bad}; give a number of seconds, from 1 to 3600, or "):
            RunRequest.from_params({"run_name": "mirror", "move_wait_s": bad})


def test_the_topics_of_a_producers_move_are_a_list_of_names_each_once_still_for_a_number_of_seconds():
    given = RunRequest.from_params({"run_name": "mirror", "move_topics": ["orders"]})
    assert (given.move_topics, given.move_quiet_s) == (("orders",), MOVE_QUIET_S)
    assert RunRequest.from_params({"run_name": "mirror", "move_quiet_s": 0}).move_quiet_s == 0
    with pytest.raises(ConfigError, match="move_topics is .*give a list of names, each once"):
        RunRequest.from_params({"run_name": "mirror", "move_topics": ["orders", "orders"]})
    with pytest.raises(ConfigError, match="move_quiet_s is 'x'; give a number of seconds"):
        RunRequest.from_params({"run_name": "mirror", "move_quiet_s": "x"})
    with pytest.raises(ConfigError, match="move_quiet_s is 3601; give a number of seconds, from 0 to 3600"):
        RunRequest.from_params({"run_name": "mirror", "move_quiet_s": 3601})


def test_the_renames_are_read_from_their_four_params_and_a_bad_one_refused():
    params = {"run_name": "consolidate", "topic_prefix": "team-a.", "topic_renames": {"orders": "a.orders"},
              "group_prefix": "team-a.", "group_renames": {"billing": "a.billing"}}
    request = RunRequest.from_params(params)
    assert request.renames == Renames("team-a.", {"orders": "a.orders"}, "team-a.", {"billing": "a.billing"})
    assert (request.renames.topic("orders"), request.renames.topic("pay"), request.renames.group("app")) == (
        "a.orders", "team-a.pay", "team-a.app")
    assert request.with_params(topics_include="o.*").renames == request.renames
    assert not RunRequest.from_params({"run_name": "plain"}).renames  # no DAG gives them yet: none
    assert not RunRequest.from_params({"run_name": "form", "topic_prefix": "", "topic_renames": {},
                                       "group_prefix": None, "group_renames": None}).renames
    with pytest.raises(ConfigError, match=r"topic_renames is str 'orders'; give a JSON object of source topic names"):
        RunRequest.from_params({**params, "topic_renames": "orders"})
    with pytest.raises(ConfigError, match=r"topic_prefix '__a\.' begins with '__'"):
        RunRequest.from_params({**params, "topic_prefix": "__a."})
    with pytest.raises(ConfigError, match=r"group_renames maps 'billing': 1, not a name to a name"):
        RunRequest.from_params({**params, "group_renames": {"billing": 1}})
