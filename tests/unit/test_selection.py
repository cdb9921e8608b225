"""Which topics a pattern selects (kmigrate.run.checks.selection.select): never Kafka's internal
topics nor kmigrate's claims topic; Kafka Connect's storage topics only when named exactly."""
from __future__ import annotations

import logging

import pytest
from kmigrate.errors import ConfigError
from kmigrate.run.checks.selection import CLAIMS_TOPIC, compile_pattern, named_exactly, select

NAMES = ["orders", "connect-orders", "kmigrate-claims", "connect-offsets", "connect-configs", "connect-status",
         "_connect-offsets", "docker-connect-status", "mm2-configs.src.internal", "__consumer_offsets"]


def test_the_claims_topic_is_the_claims_modules():
    from kmigrate.claims.log import CLAIMS_TOPIC as claims

    assert CLAIMS_TOPIC == claims


@pytest.mark.parametrize(("include", "selected"), [
    (".*", ["connect-orders", "orders"]),
    (".+", ["connect-orders", "orders"]),
    ("connect-.*", ["connect-orders"]),
    (".*offsets", []),
    ("connect.offsets", []),
    ("kmigrate-claims", []),
    ("connect-offsets", ["connect-offsets"]),
    (r"orders|connect-offsets|_connect-offsets", ["_connect-offsets", "connect-offsets", "orders"]),
    (r"connect\-(offsets|configs)", ["connect-configs", "connect-offsets"]),
])
def test_what_a_pattern_selects(include, selected):
    assert select(NAMES, include) == selected


def test_groups_and_connectors_are_not_held_to_the_topic_rules():
    assert select(["connect-offsets", "kmigrate-claims"], ".*", what="consumer group") == \
        ["connect-offsets", "kmigrate-claims"]


def test_what_was_left_out_is_said_once(caplog):
    caplog.set_level(logging.INFO, "kmigrate.run.checks.selection")
    names = ["a-said-once", "connect-status", CLAIMS_TOPIC]
    select(names, "(a-said-once|.*)")
    select(names, "(a-said-once|.*)")
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 1 and "connect-status, kmigrate-claims" in said[0]


def test_named_exactly():
    assert named_exactly(compile_pattern("connect-offsets", "t"), "connect-offsets")
    assert not named_exactly(compile_pattern("connect-offset.", "t"), "connect-offsets")
    assert not named_exactly(compile_pattern("orders", "t"), "connect-offsets")


@pytest.mark.parametrize("pattern", ["orders\ud800", "\udfff", "a|\ud83d"])
def test_a_lone_surrogate_is_a_config_error(pattern):
    with pytest.raises(ConfigError, match="surrogate"):
        compile_pattern(pattern, "topic include")
