"""Destructive DR steps pointed at the wrong cluster, on the real stack (docs/DESIGN.md §14): each
must be refused by name before anything is deleted, stopped or written, on either cluster; and what
a failback may delete is only what its own selection holds, on the call that asks for it.

The failed-over run is a real mirror's (its rounds copy the stack's source to the stack's target and
record the clusters' ids); its promotion is recorded as an unplanned failover records it (the DR ends
it promoted), and the source then writes past them, so that the source holds offsets the DR cluster
never got: the state a failback meets after an unplanned failover. The stack's source plays the
original, its target the DR cluster."""
from __future__ import annotations

import re
import threading

import pytest
from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.claims.runs import claim_topics, release_topics
from kmigrate.config import ClusterConfig
from kmigrate.errors import WrongCluster
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.checks import identity
from kmigrate.run.checks.selection import Selection
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.failback import DISCARDED, back_names, plan_failback, prepare_failback
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import STOP, request_stop
from kmigrate.run.mirror.promote import check_unplanned, unplanned_failover
from kmigrate.run.preflight.checks import check_run

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag
from tests.support.connect import delete_connectors, file_source_config
from tests.support.kafka import all_watermarks, create_topic, produce
from tests.support.waiting import wait_until


def topics_on(cluster: ClusterConfig) -> set[str]:
    with ClusterAdmin(cluster) as admin:
        return set(admin.list_topics())


@pytest.fixture
def failed_over(stack, unique_name, tmp_path):
    """A mirror of two topics (`a`, `b`, 2 partitions each) from the stack's source to its target, one
    round; its run recorded as promoted at the DR ends of that round; 5 records more on the source
    in each partition since (what the failover lost); a connector the failover started on the DR
    Connect cluster, running. Its connectors deleted at the end."""
    a, b = f"{unique_name}.a", f"{unique_name}.b"
    for topic in (a, b):
        create_topic(stack.source, topic, 2)
        for partition in (0, 1):
            produce(stack.source, topic, [(b"k", b"before %d" % i) for i in range(10)], partition)
    manifest = Manifest(str(tmp_path / "state"), f"{unique_name}-dr")
    spec = write_spec(manifest, MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.2))
    Mirror(manifest, stack.source, stack.target, spec, say=lambda _: None).round()
    keys = [(t, p) for t in (a, b) for p in (0, 1)]
    with ClusterAdmin(stack.target) as admin:
        dr_ends = admin.end_offsets(keys, retry=True)
    assert all(end == 10 for end in dr_ends.values()), dr_ends
    connector = f"{unique_name}-app"
    (tmp_path / "feed.txt").write_text("")
    stack.target_connect.create(connector, file_source_config(tmp_path / "feed.txt", f"{unique_name}.fed"))
    wait_until(lambda: stack.target_connect.state(connector) == "RUNNING", "the DR cluster's connector running", 60)
    manifest.write_once(Part.PROMOTED, {
        "at": "2026-12-06T00:00:00Z", "partitions": [{"topic": t, "partition": p, "dr_end": dr_ends[(t, p)]}
                                                     for t, p in keys],
        "connectors": {"states": [{"name": connector, "state": "RUNNING"}]}})
    for topic in (a, b):
        for partition in (0, 1):
            produce(stack.source, topic, [(b"k", b"lost %d" % i) for i in range(5)], partition)
    try:
        yield manifest, a, b, connector
    finally:
        delete_connectors([stack.target_connect], [connector])


def untouched(stack, topics: list[str], connector: str):
    """What a refused step must have left as it was: the topics on both clusters, and the connector
    running on the DR Connect cluster. Returns the check `refused` calls: what changed."""
    before = {(name, t): all_watermarks(c, t) for name, c in (("source", stack.source), ("target", stack.target))
              for t in topics}

    def changed() -> list[str]:
        found = [f"{name}: {t} gone" for (name, t) in before if t not in topics_on(getattr(stack, name))]
        found += [f"{name}: {t} changed" for (name, t), marks in before.items()
                  if t in topics_on(getattr(stack, name)) and all_watermarks(getattr(stack, name), t) != marks]
        if stack.target_connect.state(connector) != "RUNNING":
            found.append(f"connector {connector} {stack.target_connect.state(connector)}")
        return found
    return changed


def back_run(tmp_path, name: str, include: str) -> Manifest:
    back = Manifest(str(tmp_path / "state"), f"{tmp_path.name[:40]}-{name}")
    write_spec(back, MirrorSpec(include, interval_s=0.2))
    return back


def test_a_failback_whose_connections_were_not_swapped_deletes_and_stops_nothing(stack, failed_over, tmp_path,
                                                                                   unique_name):
    manifest, a, b, connector = failed_over
    back = back_run(tmp_path, "back", re.escape(unique_name) + r"\..*")
    # the operator set failback_of but left the connections as the mirror had them: the "original" is the
    # live DR cluster, whose ends lie past the promoted ones, so every partition there looks diverged
    exc = refused("failback with the mirror's connections (not swapped)",
                  lambda: prepare_failback(manifest, back, stack.source, stack.target, rebuild=True,
                                           original_connect=stack.target_connect, say=lambda _: None),
                  "swap the source and target connections", written=untouched(stack, [a, b], connector),
                  destructive=True)
    ids = manifest.read(identity.IDENTITY)
    assert isinstance(exc, WrongCluster) and ids["target"]["cluster_id"] in str(exc)
    assert ids["source"]["cluster_id"] in str(exc)
    assert back.read(DISCARDED) is None
    # the Connect connection of the DR cluster given as the original's: the moved connectors would be stopped
    refused("failback stopping connectors on the DR Connect cluster",
            lambda: prepare_failback(manifest, back, stack.target, stack.source, rebuild=True,
                                     original_connect=stack.target_connect, say=lambda _: None),
            "target Connect connection", "the DR cluster", written=untouched(stack, [a, b], connector),
            destructive=True)
    # the preflight's reading of the same: refused, with nothing read but ids
    refused("failback preflight with the mirror's connections",
            lambda: plan_failback(manifest, identity.observe(stack.source, stack.target), stack.target,
                                  re.escape(unique_name) + r"\..*"),
            "swap the source and target connections", written=untouched(stack, [a, b], connector), destructive=True)


def test_rebuild_diverged_deletes_the_topics_of_the_failbacks_own_selection_and_only_when_asked(
        stack, failed_over, tmp_path):
    manifest, a, b, connector = failed_over
    back = back_run(tmp_path, "back-a", re.escape(a))  # the failback moves `a` back only
    seen = identity.observe(stack.target, stack.source)
    plan = plan_failback(manifest, seen, stack.source, re.escape(a))  # the dry run: exactly what would go
    assert plan["delete_topics"] == [{"topic": a, "partitions": 2, "discarded_offsets": 10}]
    assert {r["topic"] for r in plan["diverged"]} == {a} and plan["stop_connectors"] == [connector]
    refused("failback of diverged topics without rebuild_diverged",
            lambda: prepare_failback(manifest, back, stack.target, stack.source, rebuild=False, say=lambda _: None),
            f"{a}[0] offsets 10-14", "rebuild_diverged", "nothing was deleted",
            written=untouched(stack, [a, b], connector), destructive=True)
    said: list[str] = []
    done = prepare_failback(manifest, back, stack.target, stack.source, rebuild=True, say=said.append)
    assert done["topics"] == [a] and {r["topic"] for r in done["partitions"]} == {a}
    wait_until(lambda: a not in topics_on(stack.source), "the selected diverged topic deleted on the original", 60)
    assert b in topics_on(stack.source) and all_watermarks(stack.source, b) == [(0, 15), (0, 15)]
    assert {a, b} <= topics_on(stack.target)  # the DR cluster: nothing deleted
    assert any(f"deleted on the original cluster, to be copied again whole from the DR cluster: {a}" in s for s in said)
    # the opt-in is read on each call: a retry without it deletes nothing, though `a` is recorded as
    # discarded and the mirror back has not created it yet (someone created a topic of that name meanwhile)
    create_topic(stack.source, a, 2)
    refused("failback retried without rebuild_diverged after one with it",
            lambda: prepare_failback(manifest, back, stack.target, stack.source, rebuild=False, say=lambda _: None),
            f"{a}[0] offsets 10-14", "rebuild_diverged", written=untouched(stack, [a, b], connector), destructive=True)


def test_a_failback_of_a_renamed_mirror_deletes_by_the_originals_names_and_only_what_it_selects(
        stack, unique_name, tmp_path):
    """A failed-over mirror that kept its topics on the DR cluster under a prefix (a consolidation's): its
    failback selects over the DR names and compares and deletes on the original by the original's
    names. The original also holds a topic that bears the DR name of one of them (another team's): never
    touched. A mirror back started without the names reversed is refused before anything is read."""
    a, b = f"{unique_name}.a", f"{unique_name}.b"
    renames = Renames(topic_prefix="dr.")
    for topic in (a, b):
        create_topic(stack.source, topic, 1)
        produce(stack.source, topic, [(b"k", b"v%d" % i) for i in range(10)], 0)
    decoy = f"dr.{b}"  # on the original: another team's topic named as b is on the DR cluster
    create_topic(stack.source, decoy, 1)
    produce(stack.source, decoy, [(b"theirs", b"x")] * 3, 0)
    manifest = Manifest(str(tmp_path / "state"), f"{unique_name}-dr")
    spec = write_spec(manifest, MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.2, renames=renames))
    Mirror(manifest, stack.source, stack.target, spec, say=lambda _: None).round()
    manifest.write_once(Part.PROMOTED, {"at": "2026-12-06T00:00:00Z", "partitions": [  # 5 offsets lost in each
        {"topic": t, "partition": 0, "dr_end": 10, "dr_topic": f"dr.{t}"} for t in (a, b)]})
    for topic in (a, b):
        produce(stack.source, topic, [(b"k", b"lost %d" % i) for i in range(5)], 0)
    decoy_marks = all_watermarks(stack.source, decoy)

    unnamed = back_run(tmp_path, "back-unnamed", re.escape(f"dr.{a}"))  # its spec without the names reversed
    refused("failback whose mirror back keeps the DR names", lambda: prepare_failback(
        manifest, unnamed, stack.target, stack.source, rebuild=True, say=lambda _: None),
        "must write the original's names", written=untouched_renamed(stack, [a, b, decoy]), destructive=True)
    assert unnamed.parts() == ["mirror-spec"]

    back = Manifest(str(tmp_path / "state"), f"{tmp_path.name[:40]}-back")
    write_spec(back, MirrorSpec(re.escape(f"dr.{a}"), interval_s=0.2, renames=back_names(manifest)))
    seen = identity.observe(stack.target, stack.source)
    assert plan_failback(manifest, seen, stack.source, re.escape(a),  # a selection of the original's names: none
                         renames=back_names(manifest))["delete_topics"] == []
    plan = plan_failback(manifest, seen, stack.source, re.escape(f"dr.{a}"), renames=back_names(manifest))
    assert plan["delete_topics"] == [{"topic": a, "partitions": 1, "discarded_offsets": 5}], plan
    done = prepare_failback(manifest, back, stack.target, stack.source, rebuild=True, say=lambda _: None)
    assert done["topics"] == [a]
    wait_until(lambda: a not in topics_on(stack.source), "the selected diverged topic deleted on the original", 60)
    assert b in topics_on(stack.source) and all_watermarks(stack.source, b) == [(0, 15)]
    assert all_watermarks(stack.source, decoy) == decoy_marks
    assert {f"dr.{a}", f"dr.{b}"} <= topics_on(stack.target)  # the DR cluster: nothing deleted


def untouched_renamed(stack, topics: list[str]):
    """The check `refused` calls: which of `topics` changed or went on the original (the stack's source)."""
    before = {t: all_watermarks(stack.source, t) for t in topics}
    return lambda: [f"{t} gone or changed" for t, marks in before.items()
                    if t not in topics_on(stack.source) or all_watermarks(stack.source, t) != marks]


def test_an_unplanned_failover_to_a_mistyped_source_is_refused_while_the_real_source_runs(stack, unique_name, tmp_path):
    topic = f"{unique_name}.live"
    create_topic(stack.source, topic, 1)
    produce(stack.source, topic, [(b"k", b"v%d" % i) for i in range(20)], 0)
    manifest = Manifest(str(tmp_path / "state"), f"{unique_name}-live")
    spec = write_spec(manifest, MirrorSpec(re.escape(topic), interval_s=0.2, term_s=30))
    mirror = Mirror(manifest, stack.source, stack.target, spec, say=lambda _: None)
    runner = threading.Thread(target=mirror.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: (mirror_status.read(manifest) or {}).get("behind_records") == 0
                   and (mirror_status.read(manifest) or {}).get("partitions"), "the mirror caught up", 60)
        port = int(stack.source.bootstrap_servers.rsplit(":", 1)[1])
        typo = ClusterConfig.from_bootstrap("source", f"localhost:{port + 7}")  # nothing listens there
        source_before = all_watermarks(stack.source, topic)

        def written() -> list[str]:
            status = mirror_status.read(manifest)
            return ([f"mirror stop requested: {manifest.read(STOP)}"] if manifest.exists(STOP) else []) + (
                ["the mirror stopped"] if status["stopped"] else []) + (
                ["the run was promoted"] if manifest.exists(Part.PROMOTED) else []) + (
                ["the source changed"] if all_watermarks(stack.source, topic) != source_before else [])
        exc = refused("unplanned failover to a mistyped source address",
                      lambda: unplanned_failover(manifest, typo, stack.target, say=lambda _: None),
                      "not the source the mirror", f"localhost:{port}", written=written, destructive=True)
        assert isinstance(exc, WrongCluster)
        refused("unplanned failover preflight to a mistyped source address",
                lambda: check_unplanned(manifest, typo, stack.target), "point the source connection",
                written=written, destructive=True)
        # the real source, which answers: the planned failover is the way (as before)
        refused("unplanned failover while the source answers",
                lambda: check_unplanned(manifest, stack.source, stack.target), "answers", "planned failover",
                written=written, destructive=True)
        beat = mirror_status.read(manifest)["heartbeat"]
        wait_until(lambda: mirror_status.read(manifest)["heartbeat"] != beat, "the mirror beating on", 30)
    finally:
        request_stop(manifest, "the test is done")
        runner.join(60)


def test_one_connect_cluster_as_both_sides_is_refused(stack, unique_name, tmp_path):
    topic = f"{unique_name}.c"
    create_topic(stack.source, topic, 1)
    connector = f"{unique_name}-src"
    (tmp_path / "in.txt").write_text("")
    stack.source_connect.create(connector, file_source_config(tmp_path / "in.txt", topic))
    try:
        wait_until(lambda: stack.source_connect.state(connector) == "RUNNING", "the source connector running", 60)

        def written() -> list[str]:
            state = stack.source_connect.state(connector)
            return ([] if state == "RUNNING" else [f"{connector} {state}"]) + (
                [f"{connector} on the target Connect cluster"] if connector in stack.target_connect.connectors() else [])
        selection = Selection(re.escape(topic), connectors=(connector,))
        refused("the source Connect cluster given as the target's",
                lambda: check_run(stack.source, stack.target, stack.source_connect, stack.source_connect, selection),
                "are one Connect cluster", "point the target Connect connection", written=written, destructive=True)
        # a second worker URL of the same Connect cluster is the same cluster: told by the Kafka cluster behind it
        from kmigrate.kafka.connect import ConnectClient
        other_url = ConnectClient(stack.source_connect.url.replace("localhost", "127.0.0.1"))
        refused("the source Connect cluster under another address as the target's",
                lambda: check_run(stack.source, stack.target, stack.source_connect, other_url, selection),
                "are one Connect cluster", written=written, destructive=True)
    finally:
        delete_connectors([stack.source_connect], [connector])


def claims_end(cluster: ClusterConfig) -> int | None:
    with ClusterAdmin(cluster) as admin:
        return admin.watermarks(CLAIMS_TOPIC, 0)[1] if CLAIMS_TOPIC in admin.list_topics() else None


def test_a_run_started_again_on_other_clusters_is_refused(stack, unique_name, tmp_path):
    topic = f"{unique_name}.r"
    create_topic(stack.source, topic, 1)
    create_topic(stack.target, topic, 1)  # a topic of that name on both: a swapped mirror would select it
    manifest = Manifest(str(tmp_path / "state"), f"{unique_name}-again")
    identity.record(manifest, identity.observe(stack.source, stack.target))
    # the same run, its connections swapped on a retry: each side is another cluster now
    refused("a run retried with its connections swapped",
            lambda: identity.record(manifest, identity.observe(stack.target, stack.source)),
            "began on cluster", "point the source connection back", destructive=True)
    # a mirror's driver started again on swapped connections claims and writes nothing on the original
    spec = write_spec(manifest, MirrorSpec(re.escape(topic)))
    claims_before = claims_end(stack.source)
    refused("a mirror driver started on swapped connections",
            lambda: Mirror(manifest, stack.target, stack.source, spec, say=lambda _: None).round(),
            "began on cluster",
            written=lambda: ([] if claims_end(stack.source) == claims_before else ["claims on the source"]) + (
                [] if all_watermarks(stack.source, topic) == [(0, 0)] else [f"{topic} on the source"]),
            destructive=True)


def test_a_swapped_source_and_target_are_refused_before_any_write(stack, dagbag, unique_name, tmp_path, capfd):
    topic = f"{unique_name}.s"
    create_topic(stack.source, topic, 1)
    create_topic(stack.target, topic, 1)  # (as the migration left it)
    produce(stack.source, topic, [(b"k", b"v")], 0)
    # what a migration from the source to the target records on the target's claims log as it begins
    first = f"{unique_name}-first"
    claim_topics(stack.target, first, [topic], dag="kafka_migration", deployment=f"kafka_migration@{tmp_path}",
                 source_id=identity.kafka_side(stack.source)["cluster_id"])
    release_topics(stack.target, first, deployment=f"kafka_migration@{tmp_path}")  # it finished
    claims_before, target_before = claims_end(stack.source), all_watermarks(stack.target, topic)

    def written() -> list[str]:
        return (["claims written on the source"] if claims_end(stack.source) != claims_before else []) + (
            [f"{topic} changed on the target"] if all_watermarks(stack.target, topic) != target_before else [])
    manifest = Manifest(str(tmp_path / "state"), f"{unique_name}-swapped")
    refused("a run with source and target swapped",
            lambda: identity.begin(manifest, stack.target, stack.source), "look swapped", "swap the source and target",
            written=lambda: written() + (["identity recorded"] if manifest.exists(identity.IDENTITY) else []),
            destructive=True)
    refused("a mirror started with source and target swapped",
            lambda: Mirror(manifest, stack.target, stack.source, write_spec(manifest, MirrorSpec(re.escape(topic))),
                           say=lambda _: None).round(), "look swapped", written=written, destructive=True)
    state = tmp_path / "dag-state"
    run = run_dag(dagbag, topics_include=re.escape(topic), state_location=str(state), run_name=f"{unique_name}-dag",
                  source_kafka_conn_id="kafka_target", target_kafka_conn_id="kafka_source")
    captured = capfd.readouterr()
    refused_by_dag("form: source and target connections swapped", run, captured.out + captured.err, "look swapped",
                   written=lambda: written() + nothing_at(state)(), destructive=True)


def test_a_rollback_with_its_connect_connections_swapped_stops_nothing(stack, dagbag, unique_name, tmp_path, capfd):
    """A migration recorded its Connect clusters; its rollback triggered with the two Connect connections
    swapped would stop the original connector on the source (taking it for the run's copy): refused by
    its first task, the original still running."""
    name = f"{unique_name}-orig"
    topic = f"{unique_name}.c"
    create_topic(stack.source, topic, 1)
    (tmp_path / "in.txt").write_text("")
    stack.source_connect.create(name, file_source_config(tmp_path / "in.txt", topic))
    try:
        wait_until(lambda: stack.source_connect.state(name) == "RUNNING", "the original connector running", 60)
        state = tmp_path / "state"
        manifest = Manifest(str(state), "m")
        manifest.write_once(Part.CONNECTOR_STATES, {"states": {name: "RUNNING"}})
        identity.record(manifest, identity.observe(stack.source, stack.target, stack.source_connect,
                                                   stack.target_connect))  # as the migration recorded them
        run = run_dag(dagbag, "kafka_migration_rollback", run_name="m", state_location=str(state),
                      source_connect_conn_id="connect_target", target_connect_conn_id="connect_source")
        captured = capfd.readouterr()
        refused_by_dag("rollback with the Connect connections swapped", run, captured.out + captured.err,
                       "target Connect connection of run m", "began on cluster", failed_task="stop_target_copies",
                       written=lambda: [] if stack.source_connect.state(name) == "RUNNING" else [f"{name} stopped"],
                       destructive=True)
    finally:
        delete_connectors([stack.source_connect], [name])
