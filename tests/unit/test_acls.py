"""Which source ACLs a run takes to the target, and how they compare with the target's (pure logic)."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.run.targets.acls import Acl, check_scope, compare, selected


def acl(resource: str, name: str, principal: str, operation: str = "READ", pattern: str = "LITERAL",
        permission: str = "ALLOW") -> Acl:
    return Acl(resource, name, pattern, principal, "*", operation, permission)


SOURCE = [
    acl("TOPIC", "orders", "User:reader"),
    acl("TOPIC", "ord", "User:prefixed", pattern="PREFIXED"),
    acl("TOPIC", "*", "User:everything", operation="DESCRIBE"),
    acl("TOPIC", "payments", "User:other"),                       # not a selected topic
    acl("TOPIC", "pay", "User:other", pattern="PREFIXED"),        # a prefix of no selected topic
    acl("GROUP", "orders-app", "User:reader"),
    acl("GROUP", "orders-", "User:groupie", pattern="PREFIXED"),
    acl("TRANSACTIONAL_ID", "orders-tx", "User:writer", operation="WRITE"),
    acl("TOPIC", "orders", "User:writer", operation="WRITE"),
    acl("CLUSTER", "kafka-cluster", "User:writer", operation="IDEMPOTENT_WRITE"),
    acl("TRANSACTIONAL_ID", "other-tx", "User:other", operation="WRITE"),  # a principal of no selected binding
    acl("TOPIC", "*", "User:migrator", operation="READ"),        # the run's own principal
]


def test_the_bindings_of_the_selected_topics_and_groups_literal_prefixed_and_wildcard():
    taken = selected(SOURCE, ["orders"], ["orders-app"], "resources", own={"User:migrator"})
    assert {(a.resource, a.name, a.principal) for a in taken} == {
        ("TOPIC", "orders", "User:reader"), ("TOPIC", "ord", "User:prefixed"), ("TOPIC", "*", "User:everything"),
        ("GROUP", "orders-app", "User:reader"), ("GROUP", "orders-", "User:groupie"), ("TOPIC", "orders", "User:writer")}
    assert taken == sorted(taken)


def test_the_principals_scope_adds_their_transactional_ids_and_cluster_rights_only():
    taken = selected(SOURCE, ["orders"], ["orders-app"], "principals", own={"User:migrator"})
    extra = set(taken) - set(selected(SOURCE, ["orders"], ["orders-app"], "resources", own={"User:migrator"}))
    assert extra == {acl("TRANSACTIONAL_ID", "orders-tx", "User:writer", operation="WRITE"),
                     acl("CLUSTER", "kafka-cluster", "User:writer", operation="IDEMPOTENT_WRITE")}
    assert selected(SOURCE, ["orders"], [], "off") == []


def test_the_comparison_names_what_to_add_what_is_there_and_what_the_target_denies():
    expected = [acl("TOPIC", "orders", "User:reader"), acl("GROUP", "orders-app", "User:reader"),
                acl("TOPIC", "orders", "User:writer", operation="WRITE")]
    on_target = [acl("TOPIC", "orders", "User:reader"), acl("TOPIC", "orders", "User:writer", operation="WRITE",
                                                           permission="DENY")]
    got = compare(expected, on_target)
    assert got["present"] == [acl("TOPIC", "orders", "User:reader")]
    assert got["to_add"] == [acl("GROUP", "orders-app", "User:reader"),
                             acl("TOPIC", "orders", "User:writer", operation="WRITE")]
    assert got["conflicting"] == [acl("TOPIC", "orders", "User:writer", operation="WRITE", permission="DENY")]


def test_a_binding_survives_its_way_through_confluent_kafka_and_the_manifest():
    for one in SOURCE:
        assert Acl.of(one.binding()) == one == Acl.from_row(one.row())
    assert acl("TOPIC", "ord", "User:x", pattern="PREFIXED").text() == "User:x ALLOW READ on TOPIC prefixed 'ord'"


def test_an_unknown_scope_is_refused_with_the_choices():
    assert check_scope("principals") == "principals"
    with pytest.raises(ConfigError, match="off, resources, principals"):
        check_scope("all")


def test_acls_under_renames_name_the_target_s_topics_and_groups():
    from kmigrate.run.targets.acls import Acl, renamed

    def acl(resource, name, pattern="LITERAL", operation="READ"):
        return Acl(resource, name, pattern, "User:app", "*", operation, "ALLOW")

    topics, groups = ["orders", "orders.eu", "payments"], ["billing"]
    names = {"orders": "a.orders", "orders.eu": "a.orders.eu", "payments": "payments"}
    got = renamed([acl("TOPIC", "orders"), acl("TOPIC", "orders", "PREFIXED"), acl("TOPIC", "payments"),
                   acl("TOPIC", "*"), acl("GROUP", "billing"), acl("GROUP", "bill", "PREFIXED"),
                   acl("TRANSACTIONAL_ID", "orders-tx"), acl("CLUSTER", "kafka-cluster", operation="IDEMPOTENT_WRITE")],
                  topics, groups, names, {"billing": "a.billing"})
    assert got == sorted([acl("TOPIC", "a.orders"), acl("TOPIC", "a.orders", "PREFIXED"), acl("TOPIC", "payments"),
                          acl("TOPIC", "*"), acl("GROUP", "a.billing"), acl("GROUP", "a.bill", "PREFIXED"),
                          acl("TRANSACTIONAL_ID", "orders-tx"),
                          acl("CLUSTER", "kafka-cluster", operation="IDEMPOTENT_WRITE")])
    assert renamed([acl("TOPIC", "pay", "PREFIXED")], topics, groups, names, {}) == [acl("TOPIC", "pay", "PREFIXED")]


def test_a_prefixed_acl_a_rename_splits_is_refused_by_name():
    from kmigrate.run.targets.acls import Acl, renamed

    split = Acl("TOPIC", "o", "PREFIXED", "User:app", "*", "READ", "ALLOW")
    names = {"orders": "a.orders", "other": "other"}  # one renamed by a., one kept: no prefix covers just both
    with pytest.raises(ConfigError, match=r"User:app ALLOW READ on TOPIC prefixed 'o'.*acls=off"):
        renamed([split], ["orders", "other"], [], names, {})
    with pytest.raises(ConfigError, match="prefixed 'o'"):
        renamed([split], ["orders", "other"], [], {"orders": "a.orders", "other": "b.other"}, {})
    with pytest.raises(ConfigError, match="prefixed 'o'"):  # a map entry: not a prefix of the source's name
        renamed([split], ["orders"], [], {"orders": "east.sales"}, {})
