"""The params' own checks (issue 33): user patterns compiled by RE2 through one helper, cutover_at
a zoned date-time ahead of now, connector_overrides flat and for selected connectors only, and
no override value kept or shown in clear by the run's recorded request."""
from __future__ import annotations

import datetime
import json
import time

import pytest
from kmigrate.errors import ConfigError, RunConflict
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks import schedule
from kmigrate.run.checks import selection
from kmigrate.run.connectors.migrate import check_overrides, target_config
from kmigrate.run.checks.request import RunRequest, check_request, record_request
from kmigrate.run.checks.selection import Selection, compile_pattern, select
from kmigrate.run.preflight.checks import check_params

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)


# --- patterns ---------------------------------------------------------------------------------

def test_a_runaway_pattern_matches_a_249_character_name_in_linear_time():
    name = "a" * 248 + "!"  # Python's re backtracks 2**248 ways before it gives up on this one
    began = time.perf_counter()
    assert select([name, "aaa"], "(a+)+") == ["aaa"]
    assert compile_pattern("(a+)+", "topic include").fullmatch(name) is None
    assert Selection("(a+)+", translate="(a+)+").modes([name]) == {name: "preserve"}
    assert time.perf_counter() - began < 0.1


def test_names_are_fully_matched():
    assert select(["orders", "orders.v2", "xorders", "__consumer_offsets"], r"orders.*|__.*",
                  exclude=r".*\.v2") == ["orders"]
    assert Selection("t.*", translate="t1").modes(["t1", "t10"]) == {"t1": "translate", "t10": "preserve"}


@pytest.mark.parametrize("pattern, says", [
    (r"(orders)\.\1", "backreference"),
    (r"(?P<x>a)(?P=x)", "backreference"),
    (r"orders(?!\.dlq).*", "lookahead or lookbehind"),
    (r"(?<=x)y", "lookahead or lookbehind"),
    (r"(?>a+)", "atomic group"),
    (r"a*+", "possessive"),
    (r"a{1001}", "repetition count over 1000"),
])
def test_a_pattern_re2_cannot_run_is_refused_with_how_to_rewrite_it(pattern, says):
    with pytest.raises(ConfigError) as caught:
        Selection("orders", groups=pattern).check()
    text = str(caught.value)
    assert f"consumer group pattern {pattern!r}" in text and says in text and "RE2" in text and "; " in text


def test_an_invalid_pattern_is_refused():
    with pytest.raises(ConfigError, match=r"topic exclude pattern '\(a' is not a valid regular expression"):
        Selection("a", topics_exclude="(a").check()


def test_check_select_and_modes_all_compile_through_one_helper(monkeypatch):
    seen = []
    real = selection.compile_pattern

    def spy(pattern, what):
        seen.append((pattern, what))
        return real(pattern, what)

    monkeypatch.setattr(selection, "compile_pattern", spy)
    Selection("t.*", topics_exclude="x", groups="g", translate="tr").check()
    assert [p for p, _ in seen] == ["t.*", "x", "g", "tr"]
    seen.clear()
    select(["t1"], "t.*", "x")
    Selection("t.*", translate="tr").modes(["t1"])
    assert [p for p, _ in seen] == ["t.*", "x", "tr"]
    assert type(real("a", "x")).__module__.startswith("re2")


# --- cutover_at -------------------------------------------------------------------------------

def _checked(value, **kwargs):
    """`value` read as the run's request reads it (`read_cutover_at`), then checked as the preflight checks it."""
    at, zoned = schedule.read_cutover_at(value, now=NOW)
    return schedule.check_cutover_at(at, zoned=zoned, now=NOW, **kwargs)


@pytest.mark.parametrize("value, read, says", [  # read: the time as the message names it
    ("tomorrow at 5", "tomorrow at 5",
     "is not a date-time; give an ISO 8601 date-time with its zone, like 2026-11-26T22:00:00+00:00"),
    ("2026-11-26T22:00:00", "2026-11-26T22:00:00", "has no time zone, so it is ambiguous; add +00:00 or Z"),
    ("2026-11-25T11:59:00Z", "2026-11-25T11:59:00+00:00",
     "is in the past (now is 2026-11-25T12:00:00+00:00); give a time ahead"),
    ("2027-01-30T00:00:00+00:00", "2027-01-30T00:00:00+00:00", "more than 30 days ahead"),
])
def test_a_bad_cutover_at_is_refused_naming_it(value, read, says):
    with pytest.raises(ConfigError) as caught:
        _checked(value)
    assert f"cutover_at {read!r}" in str(caught.value) and says in str(caught.value)


def test_a_good_cutover_at_and_a_started_runs_past_one_pass():
    assert _checked("2026-11-25T23:00:00.000Z") == NOW.replace(hour=23)
    assert _checked("2026-11-26T00:00:00+01:00") == NOW.replace(hour=23)
    assert _checked(None) is None and _checked("") is None
    # re-triggered after its time, a run started before continues to its cutover
    assert _checked("2026-11-25T11:00:00Z", started=True) == NOW.replace(hour=11)
    with pytest.raises(ConfigError, match="no time zone"):
        _checked("2026-11-25T11:00:00", started=True)


def test_check_params_refuses_a_past_cutover_only_for_a_new_run(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    params = {"topics_include": "t", "cutover_at": "2026-11-25T11:00:00Z", "connectors": [],
              "connector_overrides": {}}
    with pytest.raises(ConfigError, match="in the past"):
        check_params(RunRequest.from_params(params, "run"), manifest, now=NOW)
    assert not (tmp_path / "run").exists()
    record_request(manifest, params)  # as if started before its time
    assert check_params(RunRequest.from_params(params, "run"), manifest, now=NOW) == NOW.replace(hour=11)


# --- connector_overrides ----------------------------------------------------------------------

@pytest.mark.parametrize("overrides, says", [
    ("notadict", "connector_overrides is a str, not an object"),
    ({"sink": "notadict"}, "connector_overrides['sink'] is a str, not an object of config keys"),
    ({"other": {"file": "/x"}}, "connector_overrides names connector 'other', which is not among the selected "
                                "connectors ('sink')"),
    ({"sink": {"transforms": {"a": 1}}}, "connector_overrides['sink']['transforms'] is a nested object"),
    ({"sink": {"topics": ["a", "b"]}}, "connector_overrides['sink']['topics'] is a nested list"),
    ({"sink": {"file": None}}, "connector_overrides['sink']['file'] is null"),
    ({"sink": {"": "x"}}, "connector_overrides['sink'] has an empty config key"),
    ({"sink": {"name": "other"}}, "renames the connector"),
])
def test_bad_overrides_are_refused_naming_connector_and_key(overrides, says):
    with pytest.raises(ConfigError) as caught:
        check_overrides(overrides, ["sink"])
    assert says in str(caught.value)


def test_an_override_value_is_never_in_the_refusal():
    with pytest.raises(ConfigError) as caught:
        check_overrides({"db": {"connection.password": "hunter2"}}, [])
    assert "hunter2" not in str(caught.value) and "none" in str(caught.value)


def test_the_preflight_takes_overrides_of_a_runs_own_connectors_or_of_a_drilled_mirrors(tmp_path):
    """A run with a connectors param, null or empty included, selects them; a drill (no such param)
    places those of the mirror it drills, none without one."""
    manifest = Manifest(str(tmp_path), "run")
    overrides = {"connector_overrides": {"db": {"file": "/x"}}, "state_location": str(tmp_path)}
    check_params(RunRequest.from_params({**overrides, "connectors": ["db"]}, "run"), manifest)
    for connectors in (None, []):
        with pytest.raises(ConfigError, match=r"not among the selected connectors \(none\)"):
            check_params(RunRequest.from_params({**overrides, "connectors": connectors}, "run"), manifest)
    with pytest.raises(ConfigError, match="not among the connectors a drill without mirror_run places"):
        check_params(RunRequest.from_params(overrides, "run"), manifest)
    assert not (tmp_path / "run").exists()


def test_flat_overrides_apply_as_connect_strings():
    check_overrides({"sink": {"file": "/x", "tasks.max": 2, "errors.log.enable": True}}, ["sink"])
    check_overrides({}, []) or check_overrides(None, None)
    assert target_config({"file": "/a", "name": "sink"}, overrides={"file": "/x", "tasks.max": 2, "b": False}) == {
        "file": "/x", "name": "sink", "tasks.max": "2", "b": "false"}


# --- the recorded request ---------------------------------------------------------------------

def test_the_recorded_request_keeps_no_override_value_in_clear(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    params = {"topics_include": "t", "connectors": ["db"], "dry_run": False,
              "spark_connect_conn_id": "spark_connect_default",
              "connector_overrides": {"db": {"connection.password": "hunter2", "file": "/x"}},
              "state_location": "sftp://bob:pw123@host/state"}
    assert check_request(manifest, params) is False
    record_request(manifest, params)
    text = json.dumps(manifest.read(Part.PARAMS))
    assert "hunter2" not in text and "/x" not in text and "pw123" not in text and "tok" not in text
    assert check_request(manifest, params) is True  # the same overrides compare equal
    assert "spark_connect_conn_id" not in text  # how the run executes, not what it does: may change between tries
    assert check_request(manifest, {**params, "spark_connect_conn_id": ""}) is True
    # the param before spark_connect_conn_id, a Spark Connect URL (maybe with a token): never recorded either
    assert check_request(manifest, {**params, "spark_remote": "sc://h:1/;token=tok"}) is True
    other = {**params, "connector_overrides": {"db": {"connection.password": "hunter3", "file": "/x"}}}
    with pytest.raises(RunConflict) as caught:
        check_request(manifest, other)
    text = str(caught.value)
    assert "connector_overrides['db']['connection.password']: <value differs>" in text
    assert "hunter" not in text and "'file'" not in text
    with pytest.raises(RunConflict, match=r"connector_overrides\['db'\]\['file'\]: set then, not set now"):
        check_request(manifest, {**params, "connector_overrides": {"db": {"connection.password": "hunter2"}}})


def test_a_request_recorded_in_clear_before_still_compares(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    params = {"topics_include": "t", "connector_overrides": {"db": {"connection.password": "hunter2"}}}
    manifest.get_or_create(Part.PARAMS, lambda: {"params": params})  # as recorded before digests
    assert check_request(manifest, params) is True
    with pytest.raises(RunConflict) as caught:
        check_request(manifest, {**params, "connector_overrides": {"db": {"connection.password": "x"}}})
    assert "hunter2" not in str(caught.value) and "<value differs>" in str(caught.value)
