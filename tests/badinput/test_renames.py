"""A consolidation's renames refused (issue 67), each by name with the way out, before anything is
claimed, written or stopped: two source topics onto one target name, a target name Kafka does not
take, an internal '__' name, the project's claims topic, two names that clash once '.' is read as
'_', a map entry for what is not selected, a rename onto a target topic that holds other data or
that another run holds, a group renamed onto another application's group, a Kafka Streams
application whose internal topics would not follow its group, a connector whose config names a
renamed topic in a key no rule rewrites, and a prefixed ACL whose topics a rename splits. The
library's checks first, then through the migration DAG's preflight."""
from __future__ import annotations

import uuid

import pytest
from kmigrate.claims.runs import claim_topics, release_topics
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.renames import Renames
from kmigrate.run.checks.selection import Selection
from kmigrate.run.checks.target_data import check_renamed_targets
from kmigrate.run.preflight.checks import check_run
from kmigrate.run.targets.acls import Acl
from kmigrate.run.targets.acls import renamed as renamed_acls
from kmigrate_demo.workload import FILE_SINK

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag
from tests.support.kafka import TxnSeeder, create_topic, produce


def test_renames_that_break_kafka_s_names_or_merge_topics_are_refused_by_the_rule():
    topics = ["orders", "payments", "a.b", "a_c"]
    cases = [
        ("rename: two topics onto one", Renames(topics={"orders": "all", "payments": "all"}),
         ["orders, payments -> all", "give each its own name"]),
        ("rename: not a legal topic name", Renames(topics={"orders": "orders/eu"}), ["orders -> 'orders/eu'", "give others"]),
        ("rename: onto an internal topic", Renames(topics={"orders": "__orders"}), ["orders -> __orders", "internal"]),
        ("rename: onto the claims topic", Renames(topics={"orders": "kmigrate-claims"}), ["orders -> kmigrate-claims", "another name"]),
        ("rename: names that clash as metrics", Renames(topics={"a.b": "x.y", "a_c": "x_y"}), ["x.y (from a.b) and x_y (from a_c)"]),
        ("rename: an entry for a topic not selected", Renames(topics={"refunds": "a.refunds"}), ["(refunds)", "drop their entries"]),
    ]
    for kind, renames, words in cases:
        refused(kind, lambda r=renames: r.check_topics(topics), *words)
    refused("rename: two groups onto one", lambda: Renames(groups={"g1": "g", "g2": "g"}).check_groups(["g1", "g2"]),
            "g1, g2 -> g", "give each its own id")


@pytest.fixture
def topic(stack):
    name = f"badrename-{uuid.uuid4().hex[:8]}"
    create_topic(stack.source, name, 1)
    produce(stack.source, name, [(b"k%d" % i, b"v%d" % i) for i in range(5)], 0)
    return name


def test_what_a_renaming_run_cannot_move_is_refused_by_the_preflight(stack, topic):
    # a sink whose key of its own (the file sink ignores it) names a topic the run renames: a key no rule rewrites
    sink, audit = f"{topic}-sink", f"{topic}-audit"
    create_topic(stack.source, audit, 1)
    stack.source_connect.create(sink, {"connector.class": FILE_SINK, "tasks.max": "1", "topics": topic,
                                       "file": f"/tmp/{sink}.txt", "audit.topics": audit})
    both = Selection(topics_include=f"{topic}(-audit)?", connectors=(sink,), acls="off")
    try:
        refused("rename: a connector key naming a renamed topic", lambda: check_run(
            stack.source, stack.target, stack.source_connect, stack.target_connect, both, Renames(topic_prefix="a.")),
            f"connector '{sink}'", f"audit.topics names {audit}", "connector_topic_keys", "connector_overrides")
        refused("rename: connector_topic_keys naming a connector the run does not move", lambda: check_run(
            stack.source, stack.target, stack.source_connect, stack.target_connect, both,
            Renames(topic_prefix="a.", connector_keys={sink: ["audit.topics"], "elsewhere": ["k"]})),
            "connector_topic_keys names connectors the run does not move: elsewhere")
        # named in connector_topic_keys, or set on the target by the run's overrides: the connector moves
        for renames, overrides in ((Renames(topic_prefix="a.", connector_keys={sink: ["audit.topics"]}), None),
                                   (Renames(topic_prefix="a."), {sink: {"audit.topics": f"a.{audit}"}})):
            plan = check_run(stack.source, stack.target, stack.source_connect, stack.target_connect, both, renames,
                             overrides=overrides)
            assert [c["name"] for c in plan["connectors"]] == [sink]
    finally:
        stack.source_connect.delete(sink)
    split = Acl("TOPIC", "o", "PREFIXED", "User:app", "*", "READ", "ALLOW")  # the secure profile's stack has ACLs
    refused("rename: a prefixed ACL the renames split", lambda: renamed_acls(
        [split], ["orders", "other"], [], {"orders": "a.orders", "other": "other"}, {}),
        "User:app ALLOW READ on TOPIC prefixed 'o'", "rename those topics or groups alike", "acls=off")
    app = f"{topic}-app"
    internal = f"{app}-store-changelog"
    create_topic(stack.source, internal, 1)
    with ClusterAdmin(stack.source) as admin:
        admin.alter_group_offsets(app, {(internal, 0): 0})
    refused("rename: a Streams app's topics without its group", lambda: check_run(
        stack.source, stack.target, None, None,
        Selection(topics_include=f"{topic}.*", groups=app, acls="off"), Renames(topic_prefix="a.")),
        f"topic '{internal}' is named for consumer group '{app}'", "rename the topic and the group alike")
    # the same prefix for both: the application finds its topics under its new id
    plan = check_run(stack.source, stack.target, None, None, Selection(topics_include=f"{topic}.*", groups=app,
                                                                       acls="off"),
                     Renames(topic_prefix="a.", group_prefix="a."))
    assert plan["renames"]["topics"][internal] == f"a.{internal}" and plan["renames"]["groups"] == {app: f"a.{app}"}


def test_a_rename_onto_a_target_topic_with_other_data_or_held_by_another_run_is_refused(stack, dagbag, topic,
                                                                                         tmp_path, capfd):
    state = tmp_path / "state"
    taken = f"taken.{topic}"
    create_topic(stack.target, taken, 1)
    produce(stack.target, taken, [(b"other", b"data")], 0)  # another team's records at offset 0
    run = run_dag(dagbag, topics_include=topic, connectors=[], acls="off", topic_prefix="taken.",
                  state_location=str(state), run_name="badrename")
    captured = capfd.readouterr()
    refused_by_dag("rename: onto a target topic with other data", run, captured.out + captured.err,
                   f"{topic} -> {taken}[0]", "hold other data", "choose another target name",
                   written=nothing_at(state))
    with ClusterAdmin(stack.target) as admin:
        assert admin.watermarks(taken, 0) == (0, 1)  # untouched

    # a group renamed onto a target group of another application (offsets for a topic not the run's)
    group = f"{topic}-readers"
    with ClusterAdmin(stack.source) as admin:
        admin.alter_group_offsets(group, {(topic, 0): 2})
    with ClusterAdmin(stack.target) as admin:
        admin.alter_group_offsets(f"taken.{group}", {(taken, 0): 1})
    refused("rename: a group onto another application's group", lambda: check_run(
        stack.source, stack.target, None, None, Selection(topics_include=topic, groups=group, acls="off"),
        Renames(topic_prefix="ours.", group_prefix="taken.")),
        f"{group} -> taken.{group}", f"offsets for {taken}", "ids of their own")

    # another team's topic whose last offsets are aborted transactions, as the source's are: read back past them
    ended = f"{topic}-aborts"
    for cluster, name, tag in ((stack.source, ended, "ours"), (stack.target, f"marks.{ended}", "theirs")):
        create_topic(cluster, name, 1)
        seeder = TxnSeeder(cluster, name)
        seeder.records(5, tag)
        for i in range(15):
            seeder.transaction(1, f"{tag}-aborted-{i}", commit=False)
    refused("rename: onto a topic with other data behind its aborted transactions", lambda: check_renamed_targets(
        stack.source, stack.target, {ended: f"marks.{ended}"}),
        f"{ended} -> marks.{ended}[0]'s records before its end 35 are not those of {ended}[0]")

    held = f"held.{topic}"
    claim_topics(stack.target, "another-run", [held], deployment=str(tmp_path / "other"))
    try:
        run = run_dag(dagbag, topics_include=topic, connectors=[], acls="off", topic_prefix="held.",
                      state_location=str(state), run_name="badrename2")
        captured = capfd.readouterr()
        refused_by_dag("rename: onto a topic another run holds", run, captured.out + captured.err,
                       held, "another-run", written=nothing_at(state))
    finally:
        release_topics(stack.target, "another-run", deployment=str(tmp_path / "other"), force=True)
