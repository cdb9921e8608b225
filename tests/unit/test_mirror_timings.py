"""A mirror's timings (kmigrate.run.mirror.timings): each a number in its range, the refresh no
shorter than the interval, the follower's stale_after_s no shorter than a healthy mirror's longest
silence."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.run.mirror import timings
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.mirror.status import STATUS_TIMEOUT_S


def test_the_backoff_is_the_drivers():
    assert timings.BACKOFF_MAX_S == Mirror.BACKOFF_MAX_S


@pytest.mark.parametrize(("interval", "least"), [(0.01, STATUS_TIMEOUT_S + 4), (1.0, 14.0), (2.0, 14.0), (5.0, 20.0),
                                                 (60.0, 130.0)])
def test_the_shortest_stale_after_s(interval, least):
    assert timings.min_stale_after_s(interval) == least
    timings.check_timings(interval, max(interval, 10.0), stale_after_s=least)
    with pytest.raises(ConfigError, match="stale_after_s"):
        timings.check_timings(interval, max(interval, 10.0), stale_after_s=least - 0.5)


@pytest.mark.parametrize("spec", [MirrorSpec("x", interval_s="1"), MirrorSpec("x", interval_s=None),
                                  MirrorSpec("x", interval_s=True), MirrorSpec("x", interval_s=float("inf")),
                                  MirrorSpec("x", interval_s=0.001), MirrorSpec("x", interval_s=0),
                                  MirrorSpec("x", interval_s=3601), MirrorSpec("x", refresh_s=0.5),
                                  MirrorSpec("x", refresh_s=86401), MirrorSpec("x", term_s=0),
                                  MirrorSpec("x", verify_every_s="30")])
def test_specs_refused(spec):
    with pytest.raises(ConfigError, match="the mirror's"):
        spec.check()


def test_specs_accepted():
    for spec in (MirrorSpec("x"), MirrorSpec("x", interval_s=0.01, refresh_s=0.01), MirrorSpec("x", interval_s=2)):
        spec.check()


def test_a_failover_refuses_a_stopped_after_limit_a_running_mirror_reaches(tmp_path):
    from kmigrate.manifest import Manifest
    from kmigrate.run.mirror.failover import stop_mirror
    from kmigrate.run.mirror.spec import write_spec
    from kmigrate.run.mirror.term import STOP

    manifest = Manifest(str(tmp_path), "dr")
    write_spec(manifest, MirrorSpec("x", interval_s=5.0))  # a healthy heartbeat can be 20 s old
    with pytest.raises(ConfigError, match="at least 20 s"):
        stop_mirror(manifest, "planned failover", stale_after_s=15)
    assert not manifest.exists(STOP)  # the mirror was not asked to stop
    assert stop_mirror(manifest, "planned failover", stale_after_s=20) is None  # it never ran a round
