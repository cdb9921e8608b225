"""A run that moves a mirror's selection (a planned failover, a drill of a mirror) moves it under the
mirror's names, its renames read from the mirror's spec (kmigrate.run.mirror.spec.with_mirror_selection):
those renames are held to what the run selects now, an entry for a topic or group promoted, moved or
deleted since left out (`RunRequest.renames_for`, the snapshot's `mirrored`), where a migration's
own entry for a name it does not select is refused as a typo. A drill of a mirror reads the DR
cluster under those names (kmigrate.run.mirror.drill: the cut's ends, the groups' offsets, the
connectors it places dry). From a run manifest alone, the clusters faked."""
from __future__ import annotations

import contextlib
import time

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.group_admin import Committed
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames, from_target, partitions_there
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.run.mirror import drill
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import CONNECTORS
from kmigrate.run.mirror.spec import MirrorSpec, with_mirror_selection, write_spec
from kmigrate.run.records import timeline

NOWHERE = ClusterConfig.from_bootstrap("source", "127.0.0.1:1")  # the snapshot is read back: never reached
RENAMES = Renames(topic_prefix="a.", topics={"orders": "a.ord", "payments": "a.pay"}, groups={"billing": "a.bill"})


def request(tmp_path, **params) -> RunRequest:
    return RunRequest.from_params({"state_location": str(tmp_path), "topics_include": "own", **params}, "r")


def test_a_drill_and_a_planned_failover_of_a_mirror_name_it_and_hold_its_renames_to_what_they_select(tmp_path):
    write_spec(Manifest(str(tmp_path), "m"), MirrorSpec("orders|payments|refunds", groups="billing", renames=RENAMES))
    drill = with_mirror_selection(request(tmp_path, mirror_run="m"))
    failover = with_mirror_selection(request(tmp_path, run_name="m"), failover=True)
    for moved in (drill, failover):
        assert (moved.mirror_selection, moved.renames) == ("m", RENAMES)
        # payments promoted since, billing moved: the mirror's entries for them are none of this run's doing
        assert moved.renames_for(["orders", "refunds"]) == Renames("a.", {"orders": "a.ord"})
        assert moved.renames_for(["orders"]).check_topics(["orders", "refunds"]) == {"orders": "a.ord",
                                                                                   "refunds": "a.refunds"}
    # a migration's own renames, and an unplanned failover's run: as given, an entry not selected refused
    own = with_mirror_selection(request(tmp_path, topic_renames={"orders": "o", "typo": "t"}))
    unplanned = with_mirror_selection(request(tmp_path, run_name="m", unplanned=True), failover=True)
    for run in (own, unplanned):
        assert run.mirror_selection == "" and run.renames_for(["orders"]) == run.renames
    with pytest.raises(ConfigError, match=r"does not select \(typo\)"):
        own.renames_for(["orders"]).check_topics(["orders"])


def snapshot_of(manifest: Manifest, topics: list[str]) -> None:
    """The run's snapshot as taken, one partition of each topic, no group: `take_snapshot` reads it back."""
    manifest.write_once(Part.SNAPSHOT, {"taken_at": "2026-12-07T00:00:00+00:00", "source": "x", "groups": {},
                                        "connectors": {}, "versions": {}, "topics": {t: {
                                            "configs": {}, "partitions": [{"partition": 0, "log_start": 0, "end": 5}]}
                                            for t in topics}})


def test_the_snapshot_of_a_mirrors_selection_leaves_out_the_entries_of_topics_it_does_not_hold(tmp_path):
    failover = Manifest(str(tmp_path), "m")
    snapshot_of(failover, ["orders", "refunds"])  # payments promoted on the DR cluster before: not in it
    take_snapshot(failover, NOWHERE, topics_include=".*", renames=RENAMES, mirrored=True)
    units = {u["topic"]: u.get("target_topic") for u in failover.read(Part.PLAN)["units"]}
    assert units == {"orders": "a.ord", "refunds": "a.refunds"}
    # a migration's snapshot: its own entry for a topic it does not hold is a typo, refused before the plan
    migration = Manifest(str(tmp_path), "migration")
    snapshot_of(migration, ["orders", "refunds"])
    with pytest.raises(ConfigError, match=r"topic_renames names topics the run does not select \(payments\)"):
        take_snapshot(migration, NOWHERE, topics_include=".*", renames=RENAMES)
    assert not migration.exists(Part.PLAN)


class DrAdmin:
    """The DR cluster's admin client as the drill reads it: last stable offsets and committed offsets,
    by the names there; a partition or group asked by another name is not there."""

    def __init__(self, ends, groups):
        self.ends, self.groups, self.asked = ends, groups, []

    def stable_ends(self, keys, retry=False):
        self.asked += list(keys)
        return {k: self.ends.get(k, 0) for k in keys}

    def committed(self, group):
        self.asked.append(group)
        return {k: Committed(o, "") for k, o in self.groups.get(group, {}).items()}


def drill_of(tmp_path, renames: Renames) -> tuple[Manifest, Manifest]:
    """A running mirror of `orders` (2 partitions) and group `billing` with `renames`, and a drill's
    snapshot of it: the cut at 10 and 7, billing at 9 and 7 (its offset past the end stands at the end)."""
    mirror = Manifest(str(tmp_path), "m")
    write_spec(mirror, MirrorSpec("orders", groups="billing", renames=renames))
    mirror_status.write(mirror, {"heartbeat": timeline.iso(time.time()), "partitions": [
        {"topic": "orders", "partition": p, "behind_records": 1, "behind_s": 0.5} for p in (0, 1)]})
    run = Manifest(str(tmp_path), "drill")
    run.write_once(Part.SNAPSHOT, {"topics": {"orders": {"partitions": [{"partition": 0, "end": 10},
                                                                       {"partition": 1, "end": 7}]}},
                                   "groups": {"billing": {"offsets": [{"topic": "orders", "partition": 0, "offset": 9},
                                                                      {"topic": "orders", "partition": 1, "offset": 8}]}}})
    return run, mirror


CONSOLIDATED = Renames(topic_prefix="a.", group_prefix="a.")


@pytest.mark.parametrize("renames, orders, billing", [(Renames(), "orders", "billing"),
                                                      (CONSOLIDATED, "a.orders", "a.billing")])
def test_a_drill_of_a_mirror_reads_the_cut_and_the_groups_on_the_dr_cluster_under_the_mirrors_names(
        tmp_path, monkeypatch, renames, orders, billing):
    run, mirror = drill_of(tmp_path, renames)
    # on the DR cluster: the mirror's partitions and group under its names, and a topic bearing the source's
    # name that another application writes there (its group offsets are none of the drill's)
    stray = {} if orders == "orders" else {("orders", 0): 0}
    admin = DrAdmin({**stray, (orders, 0): 10, (orders, 1): 7},
                    {billing: {(orders, 0): 9, (orders, 1): 7, ("stray", 0): 1, **stray}})
    monkeypatch.setattr(drill, "shared_admin", lambda cluster: contextlib.nullcontext(admin))
    reached = drill.reach_cut(run, mirror, NOWHERE, timeout_s=1, say=lambda _: None)
    assert (reached["partitions"], reached["groups"], reached["rpo_records"]) == (2, 1, 2)
    assert set(admin.asked) == {(orders, 0), (orders, 1), billing}


def test_a_drill_short_of_the_cut_names_each_partition_and_group_with_its_name_on_the_dr_cluster(tmp_path, monkeypatch):
    run, mirror = drill_of(tmp_path, CONSOLIDATED)
    # the source's names on the DR cluster hold everything, the mirror's names less: the drill reads the latter
    admin = DrAdmin({("orders", 0): 10, ("orders", 1): 7, ("a.orders", 0): 10, ("a.orders", 1): 6},
                    {"billing": {("orders", 0): 9, ("orders", 1): 7}, "a.billing": {("a.orders", 0): 8}})
    monkeypatch.setattr(drill, "shared_admin", lambda cluster: contextlib.nullcontext(admin))
    monkeypatch.setattr(drill.time, "sleep", lambda s: None)
    with pytest.raises(ConfigError) as short:
        drill.reach_cut(run, mirror, NOWHERE, timeout_s=0, say=lambda _: None)
    assert str(short.value) == (
        "the DR cluster did not reach the drill's cut in 0s: orders (on the DR cluster a.orders)[1] at 6 of 7; "
        "group billing (on the DR cluster a.billing) orders (on the DR cluster a.orders)[0] at 8 of 9; "
        "group billing (on the DR cluster a.billing) orders (on the DR cluster a.orders)[1] at -1 of 7; "
        "check the mirror's status (mirror-status) and retry")
    assert not run.exists(drill.CUT)


def test_the_keys_of_the_cut_on_the_dr_cluster_and_a_groups_offsets_back_under_the_sources_names():
    names = {"orders": "a.orders", "refunds": "refunds"}
    assert partitions_there({("orders", 0): 5, ("refunds", 1): 2}, names) == {("a.orders", 0): ("orders", 0),
                                                                           ("refunds", 1): ("refunds", 1)}
    assert from_target({("a.orders", 0): 4, ("orders", 0): 9, ("refunds", 1): 2}, names) == {
        ("orders", 0): 4, ("refunds", 1): 2}


class DrConnect:
    """The DR Connect cluster the dry failover places on: what it was given, by connector."""

    url = "http://dr-connect"

    def __init__(self):
        self.placed, self.deleted = {}, []

    def connectors(self):
        return []

    def delete(self, name):
        self.deleted.append(name)


@pytest.mark.parametrize("renames, topic", [(Renames(), "orders"), (Renames(topics={"orders": "a.orders"}), "a.orders")])
def test_a_dry_failover_places_the_mirrors_connectors_under_its_names(tmp_path, monkeypatch, renames, topic):
    _, mirror = drill_of(tmp_path, renames)
    mirror.replace(CONNECTORS, {"read_at": "t", "safe_at": "t", "connectors": {
        "sink": {"type": "sink", "state": "RUNNING", "secret_keys": [],
                 "config": {"connector.class": "FileStreamSink", "topics": "orders,audit", "file": "/out"},
                 "offsets": [{"partition": {"kafka_topic": "orders", "kafka_partition": 0}, "offset": {"kafka_offset": 12}},
                             {"partition": {"kafka_topic": "audit", "kafka_partition": 0}, "offset": {"kafka_offset": 3}}]},
        "source": {"type": "source", "state": "RUNNING", "secret_keys": [],
                   "config": {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                              "topic": "orders", "file": "/in"},
                   "offsets": [{"partition": {"filename": "/in"}, "offset": {"position": 40}}]}}})
    connect = DrConnect()

    def place(dr_connect, name, kind, config, offsets, exists):
        connect.placed[name] = (config, offsets)
        return {"offsets": offsets}
    monkeypatch.setattr(drill, "place_stopped", place)
    out = drill.dry_connectors(mirror, connect, {("orders", 0): 10}, dr_bootstrap="dr:9092", say=lambda _: None)
    assert [c["name"] for c in out] == ["sink", "source"] and connect.deleted == ["sink", "source"]
    sink_config, sink_offsets = connect.placed["sink"]
    assert sink_config["topics"] == f"{topic},audit"  # audit: not the drill's, its name kept
    assert sink_offsets == [{"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 10}},
                            {"partition": {"kafka_topic": "audit", "kafka_partition": 0}, "offset": {"kafka_offset": 3}}]
    source_config, source_offsets = connect.placed["source"]
    assert source_config["topic"] == topic and source_offsets == [{"partition": {"filename": "/in"},
                                                                   "offset": {"position": 40}}]


def test_a_mirror_leaves_out_the_topics_whose_dr_names_the_renames_refuse_and_mirrors_the_others(tmp_path):
    """A topic created on the source later whose DR name is another's (a map entry onto a prefixed name),
    clashes with one once '.' is read as '_', or is no topic name: left out and said once; the topics
    mirrored already keep theirs; the check stays one pass over the selection (20,000 topics here)."""
    from kmigrate.run.mirror.driver import Mirror

    said: list[str] = []
    renames = Renames(topic_prefix="dr.", topics={"x": "dr.y", "long": "l" * 250})
    mirror = Mirror(Manifest(str(tmp_path), "m"), NOWHERE, NOWHERE, MirrorSpec(".*", renames=renames), say=said.append)
    many = {f"t{n:05d}": 1 for n in range(20_000)}
    began = time.monotonic()
    names = mirror.dr_names({**many, "x": 1, "y": 1, "a_b": 1, "a.b": 1, "long": 1})
    took = time.monotonic() - began
    assert names == {**{t: f"dr.{t}" for t in many}, "a.b": "dr.a.b", "x": "dr.y"} and took < 5, took
    assert sorted(mirror.refused) == ["a_b", "long", "y"]
    assert "its name on the DR cluster, dr.y, is dr.y's, x's there" in mirror.refused["y"]
    assert len(said) == 3 and all(line.startswith("not mirrored: ") for line in said)
    mirror.dr_names({"x": 1, "y": 1})
    assert len(said) == 3  # said once
    mirror.names = {"y": "dr.y"}  # mirrored already: it keeps its name, the newcomer is left out
    assert mirror.dr_names({"x": 1, "y": 1}) == {"y": "dr.y"} and list(mirror.refused) == ["x"]


def test_a_mirror_leaves_out_the_groups_whose_dr_ids_the_renames_refuse_and_syncs_the_others(tmp_path):
    """A group created on the source later whose DR id is another's: left out and said once, never
    synced under its own id; the groups synced already keep theirs; the status names both kinds."""
    from kmigrate.run.mirror.driver import Mirror

    said: list[str] = []
    renames = Renames(group_prefix="dr-", groups={"billing": "dr-audit"})
    mirror = Mirror(Manifest(str(tmp_path), "m"), NOWHERE, NOWHERE, MirrorSpec(".*", groups=".*", renames=renames),
                    say=said.append)
    assert mirror.dr_group_ids(["billing", "orders"]) == {"billing": "dr-audit", "orders": "dr-orders"}
    mirror.group_ids = {"billing": "dr-audit", "orders": "dr-orders"}
    ids = mirror.dr_group_ids(["audit", "billing", "orders"])  # audit came later: its id is billing's
    assert ids == {"billing": "dr-audit", "orders": "dr-orders"} and list(mirror.refused_groups) == ["audit"]
    assert said == ["not mirrored: consumer group audit (its id on the DR cluster, dr-audit, is billing's there)"]
    mirror.dr_group_ids(["audit", "billing", "orders"])
    assert len(said) == 1  # said once
    assert mirror.left_out() == {"topics": {}, "groups": {"audit": "its id on the DR cluster, dr-audit, is billing's there"}}
    assert Mirror(Manifest(str(tmp_path), "n"), NOWHERE, NOWHERE, MirrorSpec(".*", groups=".*")).dr_group_ids(["a"]) == {}


def test_a_group_the_mirror_leaves_out_is_refused_a_move_before_anything_is_read_or_written(tmp_path):
    """Its id on the DR cluster is refused (here another group's): a move would write its offsets into
    that group's, so it is refused naming why, before the clusters are even asked who they are."""
    from kmigrate.run.checks.identity import IDENTITY
    from kmigrate.run.mirror import status as mirror_status
    from kmigrate.run.mirror.moves import move_group
    from kmigrate.run.records.moves import MOVED

    manifest = Manifest(str(tmp_path), "m")
    write_spec(manifest, MirrorSpec(".*", groups=".*", renames=Renames(groups={"late": "billing"})))
    mirror_status.write(manifest, {"round": 3, "partitions": [], "groups": [],
                                   "not_mirrored": {"topics": {}, "groups": {"late": "its id ... is billing's there"}}})
    with pytest.raises(ConfigError, match=r"'late' is not mirrored by run 'm': its id on the DR cluster, 'billing', "
                                          r"is refused \(its id \.\.\. is billing's there\); nothing was changed"):
        move_group(manifest, NOWHERE, NOWHERE, "late")
    assert manifest.read(IDENTITY) is None and not [p for p in manifest.parts() if p.startswith(f"{MOVED}/")]
