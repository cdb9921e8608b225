"""The rename params' trigger form (kmigrate_airflow.params.rename_params) refuses what the library
refuses where a JSON schema can state the rule, as tests/badinput/test_form_schema.py holds for the
DAGs' params (no DAG takes these yet: their Params are validated here as a trigger would, with
`Param.resolve`). The rules a schema cannot state (a map entry for a topic not selected, two topics
onto one, names that clash once '.' is read as '_') stay kmigrate.renames's check."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.definitions.param import ParamValidationError
from kmigrate.errors import ConfigError
from kmigrate.renames import PARAMS, Renames

from kmigrate_airflow.params import rename_params


def _read(param: str, value: Any) -> Callable[[], object]:
    return lambda: Renames.from_params({param: value})


def _topics(value: Any) -> Callable[[], object]:
    return lambda: Renames.from_params({"topic_renames": value}).check_topics(["orders"])


def _groups(value: Any) -> Callable[[], object]:
    return lambda: Renames.from_params({"group_renames": value}).check_groups(["billing"])


# (param, hostile value, the library check that refuses it)
HOSTILE = [
    ("topic_prefix", "__a.", _read("topic_prefix", "__a.")),
    ("topic_prefix", "team a/", _read("topic_prefix", "team a/")),
    ("topic_prefix", "é.", _read("topic_prefix", "é.")),
    ("topic_prefix", "a" * 249, _read("topic_prefix", "a" * 249)),
    ("topic_prefix", 5, _read("topic_prefix", 5)),
    ("topic_renames", "orders", _read("topic_renames", "orders")),
    ("topic_renames", {"orders": 5}, _read("topic_renames", {"orders": 5})),
    ("topic_renames", {"orders": "a b"}, _topics({"orders": "a b"})),
    ("topic_renames", {"orders": ".."}, _topics({"orders": ".."})),
    ("topic_renames", {"orders": "."}, _topics({"orders": "."})),
    ("topic_renames", {"orders": ""}, _topics({"orders": ""})),
    ("topic_renames", {"orders": "x" * 250}, _topics({"orders": "x" * 250})),
    ("topic_renames", {"": "x"}, _topics({"": "x"})),  # no topic is named ''
    ("group_prefix", 5, _read("group_prefix", 5)),
    ("group_renames", {"billing": ""}, _groups({"billing": ""})),
    ("group_renames", {"billing": 1}, _read("group_renames", {"billing": 1})),
    ("group_renames", ["billing"], _read("group_renames", ["billing"])),
    ("connector_topic_keys", {"sink": "audit.topic"}, _read("connector_topic_keys", {"sink": "audit.topic"})),
    ("connector_topic_keys", {"sink": []}, _read("connector_topic_keys", {"sink": []})),
    ("connector_topic_keys", {"sink": [""]}, _read("connector_topic_keys", {"sink": [""]})),
    ("connector_topic_keys", {"": ["k"]}, _read("connector_topic_keys", {"": ["k"]})),
    ("connector_topic_keys", ["sink"], _read("connector_topic_keys", ["sink"])),
]


def resolve(param: str, value: Any) -> Any:
    return copy.deepcopy(rename_params()[param]).resolve(value)


@pytest.mark.parametrize(("param", "value", "library"), HOSTILE, ids=[f"{p}={v!r}"[:60] for p, v, _ in HOSTILE])
def test_each_value_the_library_refuses_the_form_refuses(param, value, library):
    with pytest.raises(ConfigError):
        library()
    with pytest.raises(ParamValidationError):
        resolve(param, value)


def test_the_defaults_and_ordinary_values_pass_both():
    params = rename_params()
    assert set(params) == set(PARAMS)  # the form's params are those the rule reads (and the request record drops empty)
    assert {name: copy.deepcopy(p).resolve() for name, p in params.items()} == {
        "topic_prefix": None, "topic_renames": {}, "group_prefix": None, "group_renames": {}, "connector_topic_keys": {}}
    assert not Renames.from_params({name: p.value for name, p in params.items()})
    ordinary = {"topic_prefix": "team-a.", "topic_renames": {"orders": "a.orders", "pay": "x" * 249},
                "group_prefix": "team a/", "group_renames": {"billing": "a.billing"},
                "connector_topic_keys": {"orders-sink": ["audit.topic"]}}
    for name, value in ordinary.items():
        assert resolve(name, value) == value
    rule = Renames.from_params(ordinary)
    assert rule.check_topics(["orders", "pay", "refunds"]) == {"orders": "a.orders", "pay": "x" * 249,
                                                              "refunds": "team-a.refunds"}
    assert rule.check_groups(["billing", "app"]) == {"app": "team a/app", "billing": "a.billing"}


def test_the_form_says_what_the_rule_does():
    params = rename_params()
    assert params["topic_prefix"].schema["title"] == "Target topic prefix"
    assert "team-a.<name>" in params["topic_prefix"].description
    assert all("offsets" in params[name].description for name in ("topic_prefix", "topic_renames",
                                                                            "group_prefix"))
