"""What does not follow a mirror's renames yet refuses a mirror that renames (a consolidation's:
`orders` kept on the DR cluster as `a.orders`), before anything is read of the clusters or written:
a failback (kmigrate.run.mirror.failback: it would select, compare and delete on the original by
names that are not its own), and a failback whose own mirror back would rename. The clusters here
answer nothing: a step that reached them fails the test with another error."""
from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.checks import identity
from kmigrate.run.mirror import failback
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.spec import MirrorSpec, refuse_renames, shown, write_spec

ORIGINAL = ClusterConfig.from_bootstrap("source", "127.0.0.1:1")
DR = ClusterConfig.from_bootstrap("target", "127.0.0.1:2")
RENAMES = Renames(topic_prefix="a.", topics={"payments": "a.pay"}, group_prefix="a.")
REFUSED = "not supported yet for a mirror that renames"


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    def reached(*args, **kwargs):
        raise AssertionError("reached the clusters")
    monkeypatch.setattr(identity, "observe", reached)
    monkeypatch.setattr(identity, "check_failback", reached)


def mirror(tmp_path, name: str, renames: Renames) -> Manifest:
    """A mirror run of `orders` and `payments` with `renames`, one status round written, failed over."""
    manifest = Manifest(str(tmp_path), name)
    write_spec(manifest, MirrorSpec("orders|payments", groups="billing", renames=renames))
    mirror_status.write(manifest, {"round": 3, "term": 1, "heartbeat": "2026-12-07T01:00:00.000+00:00",
                                   "partitions": [{"topic": "orders", "partition": 0}], "promoted": []})
    manifest.write_once(Part.PROMOTED, {"at": "2026-12-07T01:01:00Z", "partitions": [
        {"topic": "orders", "partition": 0, "dr_end": 10}]})
    return manifest


def steps(tmp_path):
    """Each entry point, by name: a call on the mirror `m` (its failback's own mirror `back`)."""
    back = Manifest(str(tmp_path), "back")
    write_spec(back, MirrorSpec("orders|payments"))
    return {
        "failback": lambda m: failback.prepare_failback(m, back, DR, ORIGINAL, rebuild=True, say=print),
        "failback preflight": lambda m: failback.plan_failback(m, {}, ORIGINAL, "orders|payments"),
    }


STEPS = ["failback", "failback preflight"]


@pytest.mark.parametrize("step", STEPS)
def test_a_step_that_does_not_follow_renames_refuses_a_mirror_that_renames_before_anything_else(tmp_path, step):
    manifest = mirror(tmp_path, "consolidated", RENAMES)
    call = steps(tmp_path)[step]
    before = {part: manifest.read(part) for part in manifest.parts()}
    with pytest.raises(ConfigError, match=REFUSED) as refused:
        call(manifest)
    text = str(refused.value)
    assert "run consolidated" in text and "topic_prefix 'a.'" in text and "payments -> a.pay" in text
    assert text.startswith("a failback is") and "kafka_migration from the DR cluster" in text
    assert "topic_renames and group_renames map each DR name back" in text
    assert {part: manifest.read(part) for part in manifest.parts()} == before  # nothing recorded
    assert Manifest(str(tmp_path), "back").parts() == ["mirror-spec"]  # the failback's own: nor there


@pytest.mark.parametrize("step", STEPS)
def test_the_same_step_on_a_mirror_that_keeps_the_sources_names_goes_on_to_its_own_checks(tmp_path, step):
    manifest = mirror(tmp_path, "kept", Renames())
    with pytest.raises((AssertionError, ConfigError)) as went_on:  # the clusters reached, or its own refusal
        steps(tmp_path)[step](manifest)
    assert REFUSED not in str(went_on.value)


def test_the_refusal_names_the_run_its_renames_cut_short_and_the_way_out(tmp_path):
    many = Renames(topics={f"t{n}": f"x.t{n}" for n in range(7)}, group_prefix="a.", groups={"billing": "b2"})
    manifest = Manifest(str(tmp_path), "m")
    write_spec(manifest, MirrorSpec("t.*", renames=many))
    with pytest.raises(ConfigError) as refused:
        refuse_renames(manifest, "a drill of its lunch", "Eat elsewhere")
    assert str(refused.value) == (
        "a drill of its lunch is not supported yet for a mirror that renames (the mirror of run m keeps its topics and "
        "consumer groups on the DR cluster under other names: topic_renames t0 -> x.t0, t1 -> x.t1, t2 -> x.t2, "
        "t3 -> x.t3, t4 -> x.t4 and 2 more; group_prefix 'a.'; group_renames billing -> b2); refused before anything "
        "was read or changed. Eat elsewhere")
    assert shown(Renames(topic_prefix="p.")) == "topic_prefix 'p.'"
    # a mirror that keeps the source's names, and a run with no mirror spec (its step names that): not refused
    kept = Manifest(str(tmp_path), "kept")
    write_spec(kept, MirrorSpec("t.*"))
    refuse_renames(kept, "x", "y")
    refuse_renames(Manifest(str(tmp_path), "none"), "x", "y")


def test_a_failback_whose_mirror_back_would_rename_is_refused_before_anything_else(tmp_path):
    """The failback's own mirror back given renames (a kafka_dr_mirror run with failback_of and a prefix):
    what it deletes and rebuilds on the original is named by the original's names, which that mirror
    would not write; refused in the preflight and in the step, the failed-over mirror keeping its names."""
    failed_over = mirror(tmp_path, "kept", Renames())
    back = Manifest(str(tmp_path), "back-renamed")
    write_spec(back, MirrorSpec("orders|payments", renames=Renames(topic_prefix="x.")))
    for call in (lambda: failback.plan_failback(failed_over, {}, ORIGINAL, "orders|payments",
                                                renames=Renames(topic_prefix="x.")),
                 lambda: failback.prepare_failback(failed_over, back, DR, ORIGINAL, rebuild=True, say=print)):
        with pytest.raises(ConfigError, match="so its mirror back renames nothing") as refused:
            call()
        assert "topic_prefix 'x.'" in str(refused.value) and "without topic_prefix" in str(refused.value)
    assert back.parts() == ["mirror-spec"]
