"""The names a run gives topics and consumer groups on the target (kmigrate.renames, issue 67): an
explicit map entry wins, else the prefix and the name; the params read with each wrong type
refused naming the param; the rule held to the run's selection, each refusal naming every
offending topic or group; and, over random selections and rules, a map the check returns always
one Kafka can create (one target a source, legal names, no two clashing once '.' is read as '_')."""
from __future__ import annotations

import random
import re
import string

import pytest
from kmigrate import renames as renames_module
from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.errors import ConfigError
from kmigrate.renames import Renames, legal_topic
from kmigrate.run.checks.selection import CLAIMS_TOPIC as SELECTION_CLAIMS_TOPIC


# --- the rule ---------------------------------------------------------------------------------

def test_a_map_entry_wins_else_the_prefix_and_the_name():
    rule = Renames(topic_prefix="a.", topics={"payments": "billing.payments"}, group_prefix="a-",
                   groups={"ledger": "books"})
    assert (rule.topic("orders"), rule.topic("payments")) == ("a.orders", "billing.payments")
    assert (rule.group("app"), rule.group("ledger")) == ("a-app", "books")
    assert rule.topic_names(["orders", "payments"]) == {"orders": "a.orders", "payments": "billing.payments"}
    only_map = Renames(topics={"orders": "a.orders"})
    assert (only_map.topic("orders"), only_map.topic("payments"), only_map.group("app")) == ("a.orders", "payments",
                                                                                            "app")


def test_the_empty_rule_keeps_every_name_and_is_false():
    none = Renames()
    assert not none and none.topic("orders") == "orders" and none.group("app") == "app"
    assert none == Renames.from_params({}) == Renames.from_params(
        {"topic_prefix": None, "topic_renames": None, "group_prefix": "", "group_renames": {}})
    for one in (Renames(topic_prefix="a."), Renames(topics={"o": "p"}), Renames(group_prefix="a."),
                Renames(groups={"g": "h"})):
        assert one


def test_a_rule_is_a_frozen_value_equal_by_its_names():
    one = Renames("a.", {"y": "b.y", "x": "b.x"}, "", {"g": "h"})
    other = Renames("a.", {"x": "b.x", "y": "b.y"}, "", {"g": "h"})
    assert one == other and hash(one) == hash(other) and len({one, other}) == 1
    assert one != Renames("a.", {"x": "b.x"}, "", {"g": "h"})
    assert one.topics == {"x": "b.x", "y": "b.y"} and list(one.topics) == ["x", "y"]
    given = {"x": "b.x"}
    kept = Renames(topics=given)
    given["x"] = "changed"  # the rule holds its own copy
    assert kept.topic("x") == "b.x"
    with pytest.raises(AttributeError):
        kept.topic_prefix = "z."  # type: ignore[misc]
    with pytest.raises(TypeError):
        kept.topics["x"] = "z"  # type: ignore[index]


def test_the_params_are_read_into_the_rule():
    rule = Renames.from_params({"topic_prefix": "team-a.", "topic_renames": {"orders": "a.orders"},
                                "group_prefix": "team-a.", "group_renames": {"billing": "a.billing"},
                                "topics_include": ".*"})
    assert rule == Renames("team-a.", {"orders": "a.orders"}, "team-a.", {"billing": "a.billing"})


def test_a_connectors_keys_naming_topics_are_part_of_the_rule_and_rename_nothing_alone():
    keys = {"orders-sink": ["audit.topic", "audit.topic", "dlq"]}
    rule = Renames.from_params({"connector_topic_keys": keys})
    assert rule.connector_keys == {"orders-sink": ("audit.topic", "dlq")} and not rule
    assert Renames.from_params(rule.as_params()) == rule and rule.as_params() == {
        "connector_topic_keys": {"orders-sink": ["audit.topic", "dlq"]}}
    assert Renames(topic_prefix="a.", connector_keys=keys).only((), ()).connector_keys == rule.connector_keys
    for wrong in ("audit.topic", {"orders-sink": "audit.topic"}, {"orders-sink": []}, {"orders-sink": [""]},
                  {"": ["k"]}, {"orders-sink": [5]}):
        with pytest.raises(ConfigError, match="connector_topic_keys"):
            Renames.from_params({"connector_topic_keys": wrong})


def test_the_claims_topic_named_here_is_the_claims_log_s():
    assert renames_module.CLAIMS_TOPIC == CLAIMS_TOPIC == SELECTION_CLAIMS_TOPIC


# --- the params' types and the prefix -----------------------------------------------------------

@pytest.mark.parametrize("param, value, says", [
    ("topic_prefix", 5, r"topic_prefix is int 5; give a string \(e\.g\. 'team-a\.'\), or leave it empty for none"),
    ("group_prefix", ["a"], r"group_prefix is list \['a'\]; give a string"),
    ("topic_renames", "orders=a.orders", r"topic_renames is str 'orders=a\.orders'; give a JSON object of source "
                                         r"topic names to target topic names \(\{\"orders\": \"a\.orders\"\}\), or "
                                         r"leave it empty for none"),
    ("topic_renames", ["orders"], r"topic_renames is list \['orders'\]; give a JSON object"),
    ("topic_renames", {"orders": 5, "payments": "p", "x": None}, r"topic_renames maps 'orders': 5, 'x': None, not a "
                                                                 r"name to a name; give a JSON object of source topic"),
    ("group_renames", {"billing": ["a"]}, r"group_renames maps 'billing': \['a'\], not a name to a name; give a JSON "
                                          r"object of source group names to target group names, strings \(\{\"bill"),
    ("group_renames", 3, r"group_renames is int 3; give a JSON object of source group names"),
    ("topic_prefix", "__a.", r"topic_prefix '__a\.' begins with '__', which marks Kafka's internal topics; give a "
                             r"prefix that does not"),
    ("topic_prefix", "team a/", r"topic_prefix 'team a/' holds ' ', '/', which no topic name may; give ASCII letters, "
                                r"digits and \. _ - only"),
    ("topic_prefix", "é.", r"topic_prefix 'é\.' holds 'é', which no topic name may"),
    ("topic_prefix", "a" * 249, r"topic_prefix is 249 characters long; a topic name holds at most 249, so give a "
                                r"prefix of at most 248"),
])
def test_a_param_of_the_wrong_kind_is_refused_naming_it_and_what_to_give(param, value, says):
    with pytest.raises(ConfigError, match=says):
        Renames.from_params({param: value})


def test_a_prefix_may_be_any_start_of_a_topic_name():
    for prefix in ("a.", "team_a-", "_", ".", "x" * 248, "a__"):
        assert Renames.from_params({"topic_prefix": prefix}).topic_prefix == prefix
    # a group id has no character rule: a group prefix may hold anything
    assert Renames.from_params({"group_prefix": "__team a/"}).group("g") == "__team a/g"


def test_kafka_s_topic_name_rule():
    for name in ("a", "orders.v1", "a_b-c.D9", "x" * 249, "...", "._", "__consumer_offsets"):
        assert legal_topic(name), name
    for name in ("", ".", "..", "x" * 250, "a b", "a/b", "é", "a\n", "a:b"):
        assert not legal_topic(name), name


# --- the topics held to the selection ------------------------------------------------------------

def test_the_checked_topics_map_every_selected_topic_sorted():
    rule = Renames("a.", {"payments": "billing"})
    assert rule.check_topics(["payments", "orders", "orders"]) == {"orders": "a.orders", "payments": "billing"}
    assert list(Renames("a.").check_topics(["z", "b"])) == ["b", "z"]
    assert Renames().check_topics(["orders"]) == {"orders": "orders"}


def refusal(rule: Renames, topics: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        rule.check_topics(topics)
    return str(caught.value)


def test_a_map_entry_for_a_topic_not_selected_is_refused_naming_each():
    text = refusal(Renames(topics={"zeta": "z", "orders": "o", "alpha": "a"}), ["orders"])
    assert "topic_renames names topics the run does not select (alpha, zeta): select them (topics_include, " \
           "topics_exclude) or drop their entries" in text
    assert "orders" not in text.split("(alpha, zeta)")[0]


def test_only_keeps_the_map_entries_of_the_names_given_and_the_prefixes():
    rule = Renames("a.", {"orders": "o", "payments": "p"}, "g.", {"billing": "b", "audit": "x"})
    only = rule.only(["orders", "refunds"], ["audit"])
    assert only == Renames("a.", {"orders": "o"}, "g.", {"audit": "x"})
    assert only.topic_names(["orders", "refunds"]) == rule.topic_names(["orders", "refunds"])  # the same names
    assert only.check_topics(["orders", "refunds"]) == {"orders": "o", "refunds": "a.refunds"}
    assert only.check_groups(["audit"]) == {"audit": "x"}
    with pytest.raises(ConfigError, match=r"does not select \(payments\)"):  # the rule itself still refuses
        rule.check_topics(["orders", "refunds"])
    assert not Renames(topics={"orders": "o"}).only([], [])  # nothing left: keeps every name
    assert hash(only) == hash(Renames("a.", {"orders": "o"}, "g.", {"audit": "x"}))


def test_two_sources_onto_one_target_are_refused_naming_them():
    text = refusal(Renames(topics={"orders": "all", "payments": "all", "refunds": "x"}), ["orders", "payments",
                                                                                         "refunds", "x"])
    assert "several source topics would become one target topic: orders, payments -> all; refunds, x -> x; give " \
           "each its own name in topic_renames" in text
    # a renamed topic onto an unrenamed one's name
    assert "a.orders, orders -> a.orders" in refusal(Renames("", {"orders": "a.orders"}), ["orders", "a.orders"])


@pytest.mark.parametrize("rule, topics, named", [
    (Renames(topics={"orders": "a b"}), ["orders"], ["orders -> 'a b'"]),
    (Renames(topics={"orders": "", "pay": "."}), ["orders", "pay"], ["orders -> ''", "pay -> '.'"]),
    (Renames(topics={"orders": ".."}), ["orders"], ["orders -> '..'"]),
    (Renames(topics={"orders": "é"}), ["orders"], ["orders -> 'é'"]),
    (Renames("p" * 200), ["o" * 49, "o" * 50], [f"{'o' * 50} -> '{'p' * 200}{'o' * 50}'"]),
])
def test_a_target_name_kafka_refuses_is_refused_naming_it(rule, topics, named):
    text = refusal(rule, topics)
    assert "these target topic names are not topic names Kafka takes (1 to 249 ASCII letters, digits and . _ -, " \
           "neither '.' nor '..'): " + ", ".join(named) + "; give others in topic_renames, or a shorter " \
           "topic_prefix" in text
    assert text.count(" -> ") == len(named)  # no other: a 249-character name is legal


def test_an_internal_target_name_is_refused_unless_it_is_the_source_s_own():
    text = refusal(Renames("_", {"orders": "__orders"}), ["_schemas", "orders", "plain"])
    assert "these target topic names begin with '__', which marks Kafka's internal topics: _schemas -> __schemas, " \
           "orders -> __orders; give others in topic_renames or topic_prefix" in text
    assert "plain" not in text
    assert Renames().check_topics(["__kept"]) == {"__kept": "__kept"}  # never selected, but not renamed either


def test_the_claims_topic_is_no_target_name():
    text = refusal(Renames("kmigrate-", {"x": CLAIMS_TOPIC}), ["claims", "x", "y"])
    assert f"{CLAIMS_TOPIC} is kmigrate's own topic on the target (the runs' claims), no target topic's name: " \
           f"claims -> {CLAIMS_TOPIC}, x -> {CLAIMS_TOPIC}; give another name in topic_renames" in text


def test_target_names_that_collide_once_dots_are_underscores_are_refused_naming_both():
    text = refusal(Renames("a.", {"p": "q.r", "s": "q_r", "t": "q.r2", "u": "q.r.s", "v": "q_r.s", "w": "q.r_s"}),
                   ["p", "s", "t", "u", "v", "w"])
    assert "these target topic names collide once '.' is read as '_' (Kafka refuses to create the second, their " \
           "metrics' names clash): q.r (from p) and q_r (from s); q.r.s (from u) and q.r_s (from w) and q_r.s " \
           "(from v); give one of each another name in topic_renames" in text
    assert "q.r2" not in text
    # two sources onto one name are refused as such, not as a clash of that name with itself
    one = refusal(Renames("a.", {"m_x": "a.m.x"}), ["m.x", "m_x"])
    assert "m.x, m_x -> a.m.x" in one and "collide" not in one
    clash = refusal(Renames("a."), ["m.x", "m_x", "n"])
    assert clash == ("the topic renames are refused: these target topic names collide once '.' is read as '_' (Kafka "
                     "refuses to create the second, their metrics' names clash): a.m.x (from m.x) and a.m_x (from "
                     "m_x); give one of each another name in topic_renames")


def test_every_problem_is_named_in_one_refusal():
    text = refusal(Renames("", {"gone": "x", "a": "b", "c": "b", "d": "__d", "e": "f g", "h": "i.j", "k": "i_j"}),
                   ["a", "c", "d", "e", "h", "k"])
    assert text.startswith("the topic renames are refused, 5 reasons: (1) topic_renames names topics the run does "
                           "not select (gone)")
    for said in ("(2) these target topic names are not topic names Kafka takes", "e -> 'f g'",
                 "(3) these target topic names begin with '__'", "d -> __d",
                 "(4) several source topics would become one target topic: a, c -> b",
                 "(5) these target topic names collide once '.' is read as '_'", "i.j (from h) and i_j (from k)"):
        assert said in text
    assert not text.endswith(".")


# --- the groups held to the selection ------------------------------------------------------------

def test_the_checked_groups_map_every_selected_group():
    assert Renames(group_prefix="a.", groups={"b": "bee"}).check_groups(["c", "b"]) == {"b": "bee", "c": "a.c"}
    assert Renames().check_groups([]) == {}


def test_a_group_rule_that_breaks_is_refused_naming_every_group():
    rule = Renames(group_prefix="a.", groups={"gone": "g", "lost": "l", "app": "a.web", "old": ""})
    with pytest.raises(ConfigError) as caught:
        rule.check_groups(["app", "web", "old", "x"])
    text = str(caught.value)
    assert text.startswith("the consumer group renames are refused, 3 reasons: ")
    assert "(1) group_renames names consumer groups the run does not select (gone, lost): select them (groups) " \
           "or drop their entries" in text
    assert "(2) these consumer groups would have an empty id on the target: 'old'; give each a non-empty id in " \
           "group_renames" in text
    assert "(3) several source consumer groups would become one target group: app, web -> a.web; give each its " \
           "own id in group_renames" in text
    assert "a.x" not in text


# --- over random selections and rules ------------------------------------------------------------

ALPHABET = "ab._-" + "é /"  # '.' and '_' to clash, a few characters no topic name may hold


def random_rule(rng: random.Random, topics: list[str]) -> Renames:
    prefix = rng.choice(["", "", "a.", "a_", "_", ".", "b-", "x" * rng.randrange(200, 249)])
    names = topics + ["".join(rng.choices(ALPHABET[:5], k=rng.randint(1, 4))) for _ in range(2)]  # some not selected
    entries = {}
    for source in rng.sample(names, k=rng.randint(0, len(names))):
        entries[source] = rng.choice([
            "".join(rng.choices(ALPHABET, k=rng.randint(0, 5))),
            rng.choice(names),  # often onto another's name
            "__" + source, ".", "..", CLAIMS_TOPIC, "y" * rng.choice([249, 250]),
            "".join(rng.choices(ALPHABET[:5], k=rng.randint(1, 5)))])
    return Renames(prefix, entries)


def problems(rule: Renames, topics: list[str]) -> bool:
    """Whether an independent reading of the rule finds anything to refuse."""
    mapped = {t: rule.topics[t] if t in rule.topics else rule.topic_prefix + t for t in set(topics)}
    targets = list(mapped.values())
    return (any(k not in mapped for k in rule.topics)
            or len(set(targets)) < len(targets)
            or len({t.replace(".", "_") for t in targets}) < len(targets)
            or any(not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", t) or t in (".", "..") or t == CLAIMS_TOPIC
                   or (t.startswith("__") and t != s) for s, t in mapped.items()))


@pytest.mark.parametrize("seed", [1, 7, 67, 2026, 99991])
def test_a_map_the_check_returns_is_one_kafka_can_create(seed):
    rng = random.Random(seed)
    refused = accepted = 0
    for _ in range(400):
        topics = ["".join(rng.choices(ALPHABET[:5] + string.digits[:2], k=rng.randint(1, 4)))
                  for _ in range(rng.randint(0, 8))]
        rule = random_rule(rng, topics)
        try:
            mapped = rule.check_topics(topics)
        except ConfigError as exc:
            refused += 1
            assert problems(rule, topics), f"refused a rule with no problem: {rule} over {topics}: {exc}"
            assert str(exc).startswith("the topic renames are refused")
            continue
        accepted += 1
        assert not problems(rule, topics), f"accepted {rule} over {topics}"
        assert sorted(mapped) == sorted(set(topics))
        targets = list(mapped.values())
        assert len(set(targets)) == len(targets)  # one target a source
        assert len({t.replace(".", "_") for t in targets}) == len(targets)  # no metric names clash
        for source, target in mapped.items():
            assert legal_topic(target) and target == rule.topic(source)
            assert not target.startswith("__") or target == source
    assert refused > 20 and accepted > 20, (refused, accepted)  # both sides are exercised


def test_one_prefix_is_the_prefix_that_renames_every_source_alike():
    from kmigrate.renames import one_prefix

    names = {"orders": "a.orders", "payments": "a.payments", "kept": "kept", "sales": "east.revenue"}
    assert one_prefix(names, ["orders", "payments"]) == "a."
    assert one_prefix(names, ["kept", "unlisted"]) == ""  # neither renamed
    assert one_prefix(names, ["orders", "kept"]) is None  # renamed and kept: two prefixes
    assert one_prefix(names, ["sales"]) is None  # a map entry that is no prefix of the name
    assert one_prefix(names, []) is None
