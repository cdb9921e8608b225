"""A mirror that renames (a DR cluster that is a consolidation target, issue 67), on the real stack,
its terms run in this process: a seeded live source (transactions, a compacting topic, records
deleted) mirrored under a prefix and one explicit name, a consumer group under its prefixed id.
The DR cluster already holds a topic and a group under the source's own names (another team's):
the mirror never touches them. Once caught up, every partition is on the DR cluster at the source's
offsets under its new name only, the group's offsets are there under its new id and the topics' new
names, and every live verification was equal. A group created on the source later whose DR id is
the first one's (a map entry onto it) is left out, named in the status, and never synced, while the
first one's offsets go on being synced."""
from __future__ import annotations

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate.run.mirror.spec import MirrorSpec

from tests.support.kafka import commit_offsets, create_topic, produce, records_of
from tests.support.live_source import LiveSource, compare_with_model
from tests.support.mirror import mirrored, wait_caught_up, wait_for_round
from tests.support.waiting import wait_until


@pytest.mark.parametrize("seed", [67])
def test_a_renamed_mirror_keeps_every_record_and_group_offset_under_its_dr_names_only(stack, unique_name, tmp_path,
                                                                                      seed):
    live = LiveSource(stack.source, unique_name, seed)
    live.create()
    tx, mixed = f"{unique_name}.tx", f"{unique_name}.mixed"
    group, late = f"{unique_name}-billing", f"{unique_name}-late"
    renames = Renames(topic_prefix="dr.", topics={tx: f"consolidated-{unique_name}"}, group_prefix="dr-",
                      groups={late: f"dr-{group}"})  # late's entry counts once it exists: onto billing's id
    names = renames.topic_names(live.topics)
    # another team's topic and group on the DR cluster, under the source's own names
    create_topic(stack.target, mixed, 2)
    theirs = produce(stack.target, mixed, [(b"theirs", b"not the source's")] * 3)
    commit_offsets(stack.target, group, {(mixed, 0): 2})
    manifest = Manifest(str(tmp_path / "state"), "renamed")
    spec = MirrorSpec(live.pattern, groups=f"{unique_name}-.*", interval_s=0.5, verify_every_s=2.0, term_s=6.0,
                      renames=renames)
    with mirrored(stack, manifest, spec):
        try:
            wait_for_round(manifest, 1, timeout_s=120)
            live.start()
            wait_for_round(manifest, mirror_status.read(manifest)["round"] + 10, timeout_s=120)  # five seconds of writes
            live.stop()
            status = wait_caught_up(manifest, stack.source, live.topics, timeout_s=120)
        finally:
            live.stop_writing()
        with ClusterAdmin(stack.source) as admin:
            ends = admin.stable_ends([(mixed, 0), (mixed, 1), (tx, 2)], retry=True)
        committed = {(mixed, 0): ends[(mixed, 0)] - 1, (mixed, 1): ends[(mixed, 1)], (tx, 2): ends[(tx, 2)]}
        commit_offsets(stack.source, group, committed)
        on_dr = {(names[t], p): o for (t, p), o in committed.items()}
        with ClusterAdmin(stack.target) as admin:
            wait_until(lambda: {k: c.offset for k, c in admin.committed(f"dr-{group}").items()} == on_dr,
                       f"the group's offsets under dr-{group} on the DR cluster", 60)
        synced = mirror_status.read(manifest)["groups"]
        commit_offsets(stack.source, late, {(mixed, 0): 1})  # a later group whose DR id is billing's: left out
        wait_until(lambda: late in (mirror_status.read(manifest).get("not_mirrored") or {}).get("groups", {}),
                   f"{late} named as not mirrored in the status", 60)
        commit_offsets(stack.source, group, {**committed, (mixed, 0): ends[(mixed, 0)]})  # billing goes on
        with ClusterAdmin(stack.target) as admin:
            wait_until(lambda: admin.committed(f"dr-{group}")[(names[mixed], 0)].offset == ends[(mixed, 0)],
                       f"billing's next offset under dr-{group} on the DR cluster", 60)
            assert admin.committed(late) == {}  # never synced under its own id
        left_out = mirror_status.read(manifest)["not_mirrored"]
    assert all(p["error"] is None for p in status["partitions"])
    compared = compare_with_model(stack, live.topics, live.compacted, live.model, names)
    verified = manifest.read(VERIFIED)["rows"]
    assert verified and all(r["equal"] for r in verified), [r for r in verified if not r["equal"]]
    totals = mirror_status.read(manifest)["totals"]
    assert 0 < totals["in_step"] <= totals["records"], totals  # the streams' writes went under the DR names too
    assert any(r["group"] == group and r.get("dr_group") == f"dr-{group}" for r in synced), synced
    assert left_out == {"topics": {}, "groups": {late: f"its id on the DR cluster, dr-{group}, is {group}'s there"}}

    # the source's names on the DR cluster: another team's topic and group as they were, none created
    assert [(o, k, v) for o, k, v, *_ in records_of(stack.target, mixed, 0)] == [
        (o, b"theirs", b"not the source's") for o in theirs]
    with ClusterAdmin(stack.target) as admin:
        assert {k: c.offset for k, c in admin.committed(group).items()} == {(mixed, 0): 2}
        assert admin.partition_count(tx) is None and admin.partition_count(f"{unique_name}.compact") is None
        assert admin.partition_count(names[tx]) == 3
    print(f"seed {seed}: {compared} records compared under {sorted(names.values())}; group {group} as dr-{group}")
