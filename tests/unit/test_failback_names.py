"""A failback of a mirror that renamed (a consolidation's: `orders` kept on the DR cluster as
`a.orders`) goes back under the names reversed (kmigrate.run.mirror.failback.back_names): each DR
name of what the failed-over run held to the original's; its selection, read over the DR names,
names what it compares and deletes on the original by the original's names; a failback under any
other names is refused before anything is read of the clusters or written (the clusters here answer
nothing: a step that reached them fails the test with another error)."""
from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.checks import identity
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.mirror import failback
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.spec import MirrorSpec, shown, write_spec

ORIGINAL = ClusterConfig.from_bootstrap("source", "127.0.0.1:1")
DR = ClusterConfig.from_bootstrap("target", "127.0.0.1:2")
RENAMES = Renames(topic_prefix="a.", topics={"payments": "a.pay"}, group_prefix="a.")
BACK = Renames(topics={"a.orders": "orders", "a.pay": "payments", "a.refunds": "refunds"},
               groups={"a.billing": "billing", "a.audit": "audit"})


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    def reached(*args, **kwargs):
        raise AssertionError("reached the clusters")
    monkeypatch.setattr(identity, "observe", reached)
    monkeypatch.setattr(identity, "check_failback", reached)


def failed_over(tmp_path, name: str, renames: Renames) -> Manifest:
    """A mirror run of orders, payments and refunds (promoted since: in the status's promoted rows
    only) with `renames`, its groups billing (synced) and audit (in the promotion only), failed over
    unplanned."""
    manifest = Manifest(str(tmp_path), name)
    write_spec(manifest, MirrorSpec("orders|payments|refunds", groups="billing|audit", renames=renames))
    dr = {"dr_topic": renames.topic("orders")} if renames else {}
    mirror_status.write(manifest, {"round": 3, "term": 1, "heartbeat": "2026-12-07T01:00:00.000+00:00",
                                   "partitions": [{"topic": "orders", "partition": 0, **dr},
                                                  {"topic": "payments", "partition": 0}],
                                   "promoted": [{"topic": "refunds"}], "groups": [{"group": "billing"}]})
    manifest.write_once(Part.PROMOTED, {"at": "2026-12-07T01:01:00Z", "groups": [{"group": "audit"}], "partitions": [
        {"topic": "orders", "partition": 0, "dr_end": 10, **dr},
        {"topic": "payments", "partition": 0, "dr_end": 4,
         **({"dr_topic": renames.topic("payments")} if renames else {})}]})
    return manifest


def test_the_names_back_are_the_failed_over_mirrors_reversed_over_what_it_held(tmp_path):
    assert failback.back_names(failed_over(tmp_path, "consolidated", RENAMES)) == BACK
    assert failback.back_names(failed_over(tmp_path, "kept", Renames())) == Renames()


def test_a_failbacks_selection_is_read_over_the_dr_names_and_names_the_originals(tmp_path):
    manifest = failed_over(tmp_path, "consolidated", RENAMES)
    assert failback.selected(manifest, r"a\..*") == {"orders", "payments"}
    assert failback.selected(manifest, r"a\.pay") == {"payments"}
    assert failback.selected(manifest, "orders|payments") == set()  # the original's names are not on the DR cluster
    kept = failed_over(tmp_path, "kept", Renames())
    assert failback.selected(kept, "orders|payments") == {"orders", "payments"}


def test_a_failbacks_request_takes_the_names_back_and_names_of_its_own_are_refused(tmp_path):
    failed_over(tmp_path, "consolidated", RENAMES)
    params = {"state_location": str(tmp_path), "topics_include": r"a\..*", "failback_of": "consolidated"}
    back = failback.with_failback_names(RunRequest.from_params(params, "back"))
    assert back.renames == BACK and back.mirror_selection == "consolidated"
    # held to what it selects (a failback of orders only): the other entries left out, not refused
    assert back.renames_for(["a.orders"], ["a.billing"]) == Renames(topics={"a.orders": "orders"},
                                                                    groups={"a.billing": "billing"})
    assert failback.with_failback_names(RunRequest.from_params(params | {"topic_renames": dict(BACK.topics),
                                                                         "group_renames": dict(BACK.groups)},
                                                               "back")).renames == BACK  # the same again: a retry
    with pytest.raises(ConfigError, match="takes no names of its own .*topic_prefix 'x.'"):
        failback.with_failback_names(RunRequest.from_params(params | {"topic_prefix": "x."}, "back"))
    failed_over(tmp_path, "kept", Renames())
    plain = RunRequest.from_params(params | {"failback_of": "kept"}, "back")
    assert failback.with_failback_names(plain) == plain
    migration = RunRequest.from_params({"topics_include": "orders"}, "m")
    assert failback.with_failback_names(migration) is migration


@pytest.mark.parametrize(("name", "back_names", "refused"), [
    ("consolidated", Renames(), "must write the original's names"),  # the failed-over mirror renamed
    ("consolidated", Renames(topic_prefix="x."), "takes no names of its own"),
    ("kept", Renames(topic_prefix="x."), "takes no names of its own"),
])
def test_a_failback_under_other_names_is_refused_before_anything_else(tmp_path, name, back_names, refused):
    manifest = failed_over(tmp_path, name, RENAMES if name == "consolidated" else Renames())
    back = Manifest(str(tmp_path), "back")
    write_spec(back, MirrorSpec(r"a\..*", renames=back_names))
    before = {part: manifest.read(part) for part in manifest.parts()}
    for call in (lambda: failback.plan_failback(manifest, {}, ORIGINAL, r"a\..*", renames=back_names),
                 lambda: failback.prepare_failback(manifest, back, DR, ORIGINAL, rebuild=True, say=print)):
        with pytest.raises(ConfigError, match=refused) as refusal:
            call()
        assert "refused before anything was read or changed" in str(refusal.value)
    assert {part: manifest.read(part) for part in manifest.parts()} == before
    assert back.parts() == ["mirror-spec"]  # nothing recorded for the failback either


@pytest.mark.parametrize("name", ["consolidated", "kept"])
def test_a_failback_under_the_names_back_goes_on_to_its_own_checks(tmp_path, name):
    manifest = failed_over(tmp_path, name, RENAMES if name == "consolidated" else Renames())
    back = Manifest(str(tmp_path), "back")
    write_spec(back, MirrorSpec(r"a\..*", renames=failback.back_names(manifest)))
    with pytest.raises(AssertionError, match="reached the clusters"):
        failback.prepare_failback(manifest, back, DR, ORIGINAL, rebuild=True, say=print)
    with pytest.raises(AssertionError, match="reached the clusters"):
        failback.plan_failback(manifest, {}, ORIGINAL, r"a\..*", renames=failback.back_names(manifest))


def test_the_names_are_shown_cut_short():
    many = Renames(topics={f"t{n}": f"x.t{n}" for n in range(7)}, group_prefix="a.", groups={"billing": "b2"})
    assert shown(many) == ("topic_renames t0 -> x.t0, t1 -> x.t1, t2 -> x.t2, t3 -> x.t3, t4 -> x.t4 and 2 more; "
                           "group_prefix 'a.'; group_renames billing -> b2")
    assert shown(Renames(topic_prefix="p.")) == "topic_prefix 'p.'"
