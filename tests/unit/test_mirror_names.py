"""A run that moves a mirror's selection (a planned failover, a drill of a mirror) moves it under the
mirror's names, its renames read from the mirror's spec (kmigrate.run.mirror.spec.with_mirror_selection):
those renames are held to what the run selects now, an entry for a topic or group promoted, moved or
deleted since left out (`RunRequest.renames_for`, the snapshot's `mirrored`), where a migration's
own entry for a name it does not select is refused as a typo. From a run manifest alone."""
from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.run.mirror.spec import MirrorSpec, with_mirror_selection, write_spec

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
